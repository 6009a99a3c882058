//go:build unix

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/callproto"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// exampleEndpoint is an example's job endpoint, running, and the
// application's tables it works on: every example's endpoint keeps
// example_orders (id, item, invoices), whose invoices its work counts up,
// and example_done (idem_key), the Idempotency-Keys whose work is done.
// One contract (endpointContract) is held against each of them, so that
// the languages' endpoints answer alike.
type exampleEndpoint struct {
	base string // the endpoint's base URL
	key  []byte // the farm's signing key
	s    *store.Store
	db   storetest.DB
	// repeatedHeaders: the endpoint can tell a signed header sent twice
	// with the same value (Mono's HttpListener keeps only the last one,
	// which the signature then covers: safe, but not told).
	repeatedHeaders bool
}

func (e exampleEndpoint) count(t *testing.T, query string, arg any) int {
	t.Helper()
	var n int
	require.NoError(t, e.s.DB().QueryRowContext(context.Background(), store.Expand(e.s.Dialect(), query), arg).Scan(&n))
	return n
}

// invoices is how many times the work ran for the order.
func (e exampleEndpoint) invoices(t *testing.T, order int64) int {
	t.Helper()
	return e.count(t, "SELECT invoices FROM "+exampleTable(e.db, "example_orders")+" WHERE id = ?", order)
}

// done is whether the work under the Idempotency-Key is recorded (0 or 1).
func (e exampleEndpoint) done(t *testing.T, idem string) int {
	t.Helper()
	return e.count(t, "SELECT COUNT(*) FROM "+exampleTable(e.db, "example_done")+" WHERE idem_key = ?", idem)
}

// newOrder writes an order no job names, for calls sent straight to the
// endpoint.
func (e exampleEndpoint) newOrder(t *testing.T, item string) int64 {
	t.Helper()
	ctx := context.Background()
	orders := exampleTable(e.db, "example_orders")
	var id int64
	switch e.db.Driver {
	case "postgres", "sqlite":
		require.NoError(t, e.s.DB().QueryRowContext(ctx, store.Expand(e.s.Dialect(), "INSERT INTO "+orders+" (item) VALUES (?) RETURNING id"), item).Scan(&id))
	case "sqlserver":
		require.NoError(t, e.s.DB().QueryRowContext(ctx, store.Expand(e.s.Dialect(), "INSERT INTO "+orders+" (item) OUTPUT INSERTED.id VALUES (?)"), item).Scan(&id))
	default:
		res, err := e.s.DB().ExecContext(ctx, store.Expand(e.s.Dialect(), "INSERT INTO "+orders+" (item) VALUES (?)"), item)
		require.NoError(t, err)
		id, err = res.LastInsertId()
		require.NoError(t, err)
	}
	return id
}

// calledOnce waits for the job the example's producer enqueued for order
// to be done, through the node, and requires it done at its first attempt
// with 200, the order invoiced once and the job's key recorded; a second
// call would have come within the second the node is then heard for.
func (e exampleEndpoint) calledOnce(t *testing.T, job, order int64) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, exampleWait(e.db.Driver), "the committed job to be done", func() bool {
		j, err := e.s.JobGet(ctx, job)
		require.NoError(t, err)
		require.NotContains(t, []string{store.StateFailed, store.StateDead}, j.State, "job %d: %d %s", job, j.LastStatus, j.LastError)
		return j.State == store.StateDone
	})
	heardFor(t, e.s, time.Second)
	j, err := e.s.JobGet(ctx, job)
	require.NoError(t, err)
	require.Equal(t, store.StateDone, j.State)
	require.Equal(t, 1, j.Attempt, "attempts of job %d (last answer %d %s)", job, j.LastStatus, j.LastError)
	require.Equal(t, 200, j.LastStatus)
	require.Equal(t, 1, e.invoices(t, order), "invoices of order %d after its job", order)
	require.Equal(t, 1, e.done(t, j.IdempotencyKey), "the job's Idempotency-Key %q recorded", j.IdempotencyKey)
}

// endpointContract sends signed calls straight to the endpoint, as a node
// would and as an attacker or a stale retry would, and requires the
// answers docs/endpoints.md and docs/signed-calls.md give:
//
//   - a forged, missing or stale signature, one over another body, or (where
//     the endpoint can tell) a signed header sent twice: 401, no work;
//   - a deadline passed or too near for the work: 503 (retried), no work,
//     the key not recorded;
//   - a payload without an order: 400; an order there is not: 422 (both
//     fail the job, recording nothing);
//   - a valid call: 200 "invoiced", once; the same request again: 409;
//   - the same Idempotency-Key in a new attempt: 200 "already done", no
//     second invoice; two attempts under one key at once: one invoice;
//   - every answer a JSON object.
//
// nodeOrder is the order the node's call invoiced: it must stay at one.
func (e exampleEndpoint) endpointContract(t *testing.T, nodeOrder int64) {
	t.Helper()
	order := e.newOrder(t, "pen")
	body := fmt.Sprintf(`{"order":%d}`, order)
	// A query with percent-encoding: the signature covers the raw target.
	uri := "/jobs/send-invoice?from=test&note=a%20b"
	later := func() time.Time { return time.Now().Add(30 * time.Second) }
	call := func(key []byte, idem string, attempt int, deadline time.Time, body string) phpCall {
		return signedCall(t, key, time.Now(), uri, idem, attempt, deadline, body)
	}
	expect := func(c phpCall, status int, what string) string {
		t.Helper()
		got, answer := c.send(t, e.base)
		require.Equal(t, status, got, "%s: answered %s", what, answer)
		var object map[string]any
		require.NoError(t, json.Unmarshal([]byte(answer), &object), "%s: the answer is no JSON object: %q", what, answer)
		return answer
	}

	expect(call([]byte("not-the-key-of-the-farm"), "forged", 1, later(), body), http.StatusUnauthorized, "a signature made with another key")
	unsigned := call(e.key, "unsigned", 1, later(), body)
	unsigned.header.Del(callproto.HeaderSignature)
	expect(unsigned, http.StatusUnauthorized, "no signature")
	expect(signedCall(t, e.key, time.Now().Add(-6*time.Minute), uri, "stale", 1, later(), body),
		http.StatusUnauthorized, "a timestamp 6 minutes old")
	tampered := call(e.key, "tampered", 1, later(), body)
	tampered.body = []byte(fmt.Sprintf(`{"order":%d}`, nodeOrder))
	expect(tampered, http.StatusUnauthorized, "a body changed after signing")
	if e.repeatedHeaders {
		repeated := call(e.key, "repeated", 1, later(), body)
		repeated.header.Add(callproto.HeaderAttempt, "1")
		expect(repeated, http.StatusUnauthorized, "a signed header sent twice")
	}
	require.Zero(t, e.invoices(t, order), "invoices after refused signatures")

	expect(call(e.key, "expired", 1, time.Now().Add(-time.Second), body), http.StatusServiceUnavailable, "a deadline already passed")
	expect(call(e.key, "too-near", 1, time.Now().Add(200*time.Millisecond), body), http.StatusServiceUnavailable,
		"a deadline nearer than the work needs")
	require.Zero(t, e.invoices(t, order), "invoices after expired deadlines")
	require.Zero(t, e.done(t, "expired"), "the key of a call past its deadline")

	expect(call(e.key, "no-order", 1, later(), `{"item":"pen"}`), http.StatusBadRequest, "a payload without an order")
	expect(call(e.key, "unknown-order", 1, later(), fmt.Sprintf(`{"order":%d}`, order+1000)), http.StatusUnprocessableEntity,
		"an order there is not")
	require.Zero(t, e.done(t, "unknown-order"), "the key of a call whose work was refused")

	first := call(e.key, "invoice-pen", 1, later(), body)
	require.Contains(t, expect(first, http.StatusOK, "a valid call"), `"invoiced"`)
	require.Equal(t, 1, e.invoices(t, order), "invoices after a valid call")
	expect(first, http.StatusConflict, "the same signed request again")

	require.Contains(t, expect(call(e.key, "invoice-pen", 2, later(), body), http.StatusOK, "a retry of work already done"), `"already done"`)
	require.Equal(t, 1, e.invoices(t, order), "invoices after a retry under the same key")
	require.Equal(t, 1, e.done(t, "invoice-pen"))
	require.Equal(t, 1, e.invoices(t, nodeOrder), "invoices of the node's order")

	// Two attempts of one run at once (a node that gave a slow call up and
	// another that took the job): the key's row and the work share a
	// transaction, so one of them works and the other finds it done, or
	// is told to come again (a 5xx the node retries). One invoice.
	other := e.newOrder(t, "ink")
	both := [2]phpCall{}
	for i := range both {
		both[i] = call(e.key, "invoice-ink", i+1, later(), fmt.Sprintf(`{"order":%d}`, other))
	}
	var wg sync.WaitGroup
	statuses, answers, errs := [2]int{}, [2]string{}, [2]error{}
	for i, c := range both {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Not phpCall.send: FailNow belongs to the test's goroutine.
			statuses[i], answers[i], errs[i] = sendRaw(e.base, c)
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs[:]...))
	outcomes := []string{}
	for i := range both {
		switch {
		case statuses[i] == http.StatusOK && strings.Contains(answers[i], `"invoiced"`):
			outcomes = append(outcomes, "invoiced")
		case statuses[i] == http.StatusOK && strings.Contains(answers[i], `"already done"`):
			outcomes = append(outcomes, "already done")
		case statuses[i] >= 500:
			outcomes = append(outcomes, "retry")
		default:
			outcomes = append(outcomes, strconv.Itoa(statuses[i])+" "+answers[i])
		}
	}
	sort.Strings(outcomes)
	require.Contains(t, [][]string{{"already done", "invoiced"}, {"invoiced", "retry"}}, outcomes,
		"two attempts at once under one key: %q", answers)
	require.Equal(t, 1, e.invoices(t, other), "invoices after two attempts at once under one key")
	require.Equal(t, 1, e.done(t, "invoice-ink"))
}

// sendRaw sends c to base and returns the answer's status and body.
func sendRaw(base string, c phpCall) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, base+c.uri, bytes.NewReader(c.body))
	if err != nil {
		return 0, "", err
	}
	req.Header = c.header.Clone()
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

// endpointTest runs an example's endpoint (start, given the application's
// environment with the farm's signing key) behind a real node signing its
// calls: the job the example's producer enqueues is called once
// (calledOnce); then, the node stopped, it holds the endpoint to the
// contract (endpointContract). It returns the endpoint for a language's
// own checks.
func endpointTest(t *testing.T, driver, name string, p exampleProducer, repeatedHeaders bool,
	start func(t *testing.T, appEnv []string) string) exampleEndpoint {
	t.Helper()
	began := time.Now()
	s, db := storetest.OpenDB(t, driver)
	key := []byte(name + "-key-" + strconv.FormatInt(time.Now().UnixNano(), 36))
	appEnv := p.env(t, db)
	base := start(t, append(appEnv, "JOBPAGES_SIGNING_KEY="+string(key)))
	n := startNode(t, env(driver, db.DSN, name, base, append(db.ExtraEnv(), "SLOTPOLLER_JOBS_SIGNING_KEY="+string(key))...), name)
	waitSettled(t, s, 1)
	ep := exampleEndpoint{base: base, key: key, s: s, db: db, repeatedHeaders: repeatedHeaders}

	out, _ := p.run(t, appEnv, 0, "commit")
	ep.calledOnce(t, out.Job, out.Order)
	n.stop(t)

	ep.endpointContract(t, out.Order)
	t.Logf("%s: %v", driver, time.Since(began).Round(time.Millisecond))
	return ep
}

// startExampleServer starts an example's endpoint, argv (given the
// loopback address it is to listen on), in dir with appEnv added to the
// test's environment, and returns its base URL once it answers. Its log
// is shown if the test fails.
func startExampleServer(t *testing.T, driver, dir string, appEnv []string, argv func(addr string) []string) string {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	args := argv(addr)
	what := strings.Join(args, " ")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), appEnv...)
	cmd.Dir = dir
	cmd.SysProcAttr = dieWithTheTest()
	log := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("--- log of %s ---\n%s", what, log.String())
		}
	})
	base := "http://" + addr
	// A runtime's start and the example's tables: seconds on the T-SQL
	// test server, which compiles a new connection's statements afresh.
	waitFor(t, exampleWait(driver), what+" to answer", func() bool {
		select {
		case <-exited:
			t.Fatalf("%s exited before it answered:\n%s", what, log.String())
		default:
		}
		resp, err := http.Get(base + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
	return base
}
