//go:build unix

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/callproto"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// The Python example's endpoint (examples/python/endpoint.py) on the
// standard library's HTTP server, called by a real node with signed
// calls: the job producer.py enqueues ends done once and its order is
// invoiced once. Then calls sent straight to it: a forged, missing or
// stale signature is refused with 401, a replayed one with 409, an
// expired deadline with 503 and no work, a payload without an order with
// 400, and a second call under the same Idempotency-Key answers 200
// without working again. The "signature" subtest runs the example's
// unit tests: docs/signed-calls.md's test vector and verify()'s refusals.
func TestPythonExampleEndpoint(t *testing.T) {
	t.Run("signature", func(t *testing.T) {
		python := requirePython(t, "hmac", "python3")
		cmd := exec.Command(python, "-m", "unittest", "-v", "test_slotpoller")
		cmd.Dir = filepath.Join("..", "examples", "python")
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "python3 -m unittest test_slotpoller:\n%s", out)
		require.Contains(t, string(out), "test_vector", "the unit tests ran:\n%s", out)
	})
	for _, d := range pythonDrivers {
		t.Run(d.driver, func(t *testing.T) {
			python := requirePython(t, d.module, d.debian)
			requireDatabase(t, d.driver)
			t.Parallel()
			pythonEndpoint(t, python, d.driver)
		})
	}
}

// startPythonEndpoint runs endpoint.py on a free loopback port and
// returns its base URL once it answers.
func startPythonEndpoint(t *testing.T, python string, appEnv []string) string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "examples", "python", "endpoint.py"))
	require.NoError(t, err)
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := exec.Command(python, script, addr)
	cmd.Env = append(os.Environ(), appEnv...)
	cmd.Dir = filepath.Dir(script)
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
		if !t.Failed() {
			return
		}
		t.Logf("--- log of endpoint.py %s ---\n%s", addr, log.String())
	})
	base := "http://" + addr
	// It creates its tables before it listens: slow on the T-SQL server.
	waitFor(t, 60*time.Second, "endpoint.py to answer", func() bool {
		select {
		case <-exited:
			t.Fatalf("endpoint.py exited: %s", log.String())
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

func pythonEndpoint(t *testing.T, python, driver string) {
	start := time.Now()
	s, db := storetest.OpenDB(t, driver)
	ctx := context.Background()
	key := []byte("python-endpoint-test-key-" + strconv.FormatInt(time.Now().UnixNano(), 36))
	appEnv := pythonEnv(t, db)
	base := startPythonEndpoint(t, python, append(appEnv, "JOBPAGES_SIGNING_KEY="+string(key)))
	n := startNode(t, env(driver, db.DSN, "python-endpoint-node", base,
		append(db.ExtraEnv(), "SLOTPOLLER_JOBS_SIGNING_KEY="+string(key))...), "python-endpoint-node")
	waitSettled(t, s, 1)
	orders, doneTable := exampleTable(db, "example_orders"), exampleTable(db, "example_done")

	invoices := func(order int64) int {
		t.Helper()
		var count int
		require.NoError(t, s.DB().QueryRowContext(ctx, store.Expand(s.Dialect(), "SELECT invoices FROM "+orders+" WHERE id = ?"), order).Scan(&count))
		return count
	}
	done := func(idem string) int {
		t.Helper()
		var count int
		require.NoError(t, s.DB().QueryRowContext(ctx, store.Expand(s.Dialect(), "SELECT COUNT(*) FROM "+doneTable+" WHERE idem_key = ?"), idem).Scan(&count))
		return count
	}

	// Through the node: the producer's order and job, the job's signed
	// call, done at the first attempt, the order invoiced once.
	out, _ := runPythonProducer(t, python, appEnv, 0, "commit")
	waitFor(t, pythonWait(driver), "the committed job to be done", func() bool {
		j, err := s.JobGet(ctx, out.Job)
		require.NoError(t, err)
		require.NotContains(t, []string{store.StateFailed, store.StateDead}, j.State, "job %d: %d %s", out.Job, j.LastStatus, j.LastError)
		return j.State == store.StateDone
	})
	heardFor(t, s, time.Second) // a second call would come at one of the next slots
	j, err := s.JobGet(ctx, out.Job)
	require.NoError(t, err)
	require.Equal(t, store.StateDone, j.State)
	require.Equal(t, 1, j.Attempt, "attempts of job %d (last answer %d %s)", out.Job, j.LastStatus, j.LastError)
	require.Equal(t, 200, j.LastStatus)
	require.Equal(t, 1, invoices(out.Order), "invoices of order %d after its job", out.Order)
	require.Equal(t, 1, done(j.IdempotencyKey), "the job's Idempotency-Key %q recorded", j.IdempotencyKey)
	n.stop(t)

	// Straight to the endpoint: a second order, never enqueued.
	var order int64
	switch driver {
	case "postgres":
		require.NoError(t, s.DB().QueryRowContext(ctx, "INSERT INTO example_orders (item) VALUES ('pen') RETURNING id").Scan(&order))
	case "sqlserver":
		require.NoError(t, s.DB().QueryRowContext(ctx, "INSERT INTO "+orders+" (item) OUTPUT INSERTED.id VALUES (N'pen')").Scan(&order))
	default:
		res, err := s.DB().ExecContext(ctx, "INSERT INTO example_orders (item) VALUES ('pen')")
		require.NoError(t, err)
		order, err = res.LastInsertId()
		require.NoError(t, err)
	}
	body := fmt.Sprintf(`{"order":%d}`, order)
	// A query with percent-encoding: the signature covers the raw target.
	uri := "/jobs/send-invoice?from=test&note=a%20b"
	// The T-SQL test server takes seconds for a call's statements on a new
	// connection: a deadline 30 s away stays far enough.
	later := func() time.Time { return time.Now().Add(30 * time.Second) }
	expect := func(c phpCall, status int, what string) string {
		t.Helper()
		got, answer := c.send(t, base)
		require.Equal(t, status, got, "%s: answered %s", what, answer)
		return answer
	}

	// Forged (another key), missing, stale, or covering another body: 401.
	expect(signedCall(t, []byte("not-the-key-of-the-farm"), time.Now(), uri, "forged", 1, later(), body),
		http.StatusUnauthorized, "a signature made with another key")
	unsigned := signedCall(t, key, time.Now(), uri, "unsigned", 1, later(), body)
	unsigned.header.Del(callproto.HeaderSignature)
	expect(unsigned, http.StatusUnauthorized, "no signature")
	expect(signedCall(t, key, time.Now().Add(-6*time.Minute), uri, "stale", 1, later(), body),
		http.StatusUnauthorized, "a timestamp 6 minutes old")
	tampered := signedCall(t, key, time.Now(), uri, "tampered", 1, later(), body)
	tampered.body = []byte(fmt.Sprintf(`{"order":%d}`, out.Order))
	expect(tampered, http.StatusUnauthorized, "a body changed after signing")
	// A signed header sent twice is refused by name, not joined.
	twice := signedCall(t, key, time.Now(), uri, "twice", 1, later(), body)
	twice.header.Add(callproto.HeaderJob, twice.header.Get(callproto.HeaderJob))
	expect(twice, http.StatusUnauthorized, "a signed header sent twice")
	require.Zero(t, invoices(order), "invoices after refused signatures")

	// Expired deadline, validly signed: 503 (retried), nothing done, the
	// key not recorded.
	expect(signedCall(t, key, time.Now(), uri, "expired", 1, time.Now().Add(-time.Second), body),
		http.StatusServiceUnavailable, "a deadline already passed")
	expect(signedCall(t, key, time.Now(), uri, "too-near", 1, time.Now().Add(200*time.Millisecond), body),
		http.StatusServiceUnavailable, "a deadline nearer than the work needs")
	require.Zero(t, invoices(order), "invoices after expired deadlines")
	require.Zero(t, done("expired"), "the key of a call past its deadline")
	require.Zero(t, done("too-near"), "the key of a call too near its deadline")

	// No order in the payload: 400, which fails the job; an order that
	// does not exist: 422, with the key not recorded.
	expect(signedCall(t, key, time.Now(), uri, "no-order", 1, later(), `{"item":"pen"}`),
		http.StatusBadRequest, "a payload without an order")
	expect(signedCall(t, key, time.Now(), uri, "no-such-order", 1, later(), fmt.Sprintf(`{"order":%d}`, order+1000)),
		http.StatusUnprocessableEntity, "a payload naming no order")
	require.Zero(t, done("no-such-order"), "the key of a call that did nothing")

	// A valid call works once; the same request again is a replay: 409.
	first := signedCall(t, key, time.Now(), uri, "invoice-pen", 1, later(), body)
	require.Contains(t, expect(first, http.StatusOK, "a valid call"), `"invoiced"`)
	require.Equal(t, 1, invoices(order), "invoices after a valid call")
	expect(first, http.StatusConflict, "the same signed request again")

	// The same Idempotency-Key, a new attempt signed afresh: 200, no work.
	require.Contains(t, expect(signedCall(t, key, time.Now(), uri, "invoice-pen", 2, later(), body), http.StatusOK,
		"a retry of work already done"), `"already done"`)
	require.Equal(t, 1, invoices(order), "invoices after a retry under the same key")
	require.Equal(t, 1, done("invoice-pen"))
	require.Equal(t, 1, invoices(out.Order), "invoices of the node's order")

	// The answers decode as JSON.
	var answer map[string]any
	_, raw := signedCall(t, key, time.Now(), uri, "invoice-pen", 3, later(), body).send(t, base)
	require.NoError(t, json.Unmarshal([]byte(raw), &answer), "%q", raw)
	t.Logf("%s: %v", driver, time.Since(start).Round(time.Millisecond))
}
