//go:build unix

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/callproto"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// The PHP example's endpoint (examples/php/endpoint.php) under PHP's
// built-in server, called by a real node with signed calls: the job
// producer.php enqueues ends done once and its order is invoiced once.
// Then calls sent straight to it: a forged, missing or stale signature is
// refused with 401, a replayed one with 409, an expired deadline with 503
// and no work, a payload without an order with 400, and a second call
// under the same Idempotency-Key answers 200 without working again.
func TestPHPExampleEndpoint(t *testing.T) {
	for _, d := range phpDrivers {
		t.Run(d.driver, func(t *testing.T) {
			requirePHPFor(t, d)
			t.Parallel()
			phpEndpoint(t, d.driver)
		})
	}
}

// lockedBuffer is the PHP server's log, written by its process.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startPHPEndpoint runs php -S on a free loopback port with endpoint.php as
// its router and returns its base URL once it answers.
func startPHPEndpoint(t *testing.T, appEnv []string) string {
	t.Helper()
	router, err := filepath.Abs(filepath.Join("..", "examples", "php", "endpoint.php"))
	require.NoError(t, err)
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := exec.Command("php", "-S", addr, router)
	cmd.Env = append(os.Environ(), appEnv...)
	cmd.Dir = filepath.Dir(router)
	cmd.SysProcAttr = dieWithTheTest()
	log := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if !t.Failed() {
			return
		}
		t.Logf("--- log of php -S %s endpoint.php ---\n%s", addr, log.String())
	})
	base := "http://" + addr
	waitFor(t, 30*time.Second, "php -S to answer", func() bool {
		resp, err := http.Get(base + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
	return base
}

// phpCall is one request sent straight to the endpoint.
type phpCall struct {
	uri    string // request target: path and query
	header http.Header
	body   []byte
}

// send sends c as it is, signature headers included, and returns the
// status and body of the answer.
func (c phpCall) send(t *testing.T, base string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+c.uri, bytes.NewReader(c.body))
	require.NoError(t, err)
	req.Header = c.header.Clone()
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// signedCall is a job call as a node makes it, signed with key at now.
func signedCall(t *testing.T, key []byte, now time.Time, uri, idem string, attempt int, deadline time.Time, body string) phpCall {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://endpoint"+uri, nil)
	require.NoError(t, err)
	req.Header.Set(callproto.HeaderIdempotencyKey, idem)
	req.Header.Set(callproto.HeaderJob, "9999")
	req.Header.Set(callproto.HeaderNode, "test")
	req.Header.Set(callproto.HeaderToken, "1")
	req.Header.Set(callproto.HeaderAttempt, strconv.Itoa(attempt))
	req.Header.Set(callproto.HeaderDeadline, deadline.UTC().Format(callproto.DeadlineFormat))
	req.Header.Set(callproto.HeaderTimeoutMs, strconv.FormatInt(time.Until(deadline).Milliseconds(), 10))
	callproto.SignRequest(req, []byte(body), key, now)
	return phpCall{uri: uri, header: req.Header, body: []byte(body)}
}

func phpEndpoint(t *testing.T, driver string) {
	start := time.Now()
	s, db := storetest.OpenDB(t, driver)
	ctx := context.Background()
	key := []byte("php-endpoint-test-key-" + strconv.FormatInt(time.Now().UnixNano(), 36))
	appEnv := phpDBEnv(t, db)
	base := startPHPEndpoint(t, append(appEnv, "JOBPAGES_SIGNING_KEY="+string(key)))
	n := startNode(t, env(driver, db.DSN, "php-endpoint-node", base,
		append(db.ExtraEnv(), "SLOTPOLLER_JOBS_SIGNING_KEY="+string(key))...), "php-endpoint-node")
	waitSettled(t, s, 1)

	invoices := func(order int64) int {
		t.Helper()
		var count int
		require.NoError(t, s.DB().QueryRowContext(ctx, store.Expand(s.Dialect(), "SELECT invoices FROM "+exampleTable(db, "example_orders")+" WHERE id = ?"), order).Scan(&count))
		return count
	}
	done := func(idem string) int {
		t.Helper()
		var count int
		require.NoError(t, s.DB().QueryRowContext(ctx, store.Expand(s.Dialect(), "SELECT COUNT(*) FROM "+exampleTable(db, "example_done")+" WHERE idem_key = ?"), idem).Scan(&count))
		return count
	}

	// Through the node: the producer's order and job, the job's signed
	// call, done at the first attempt, the order invoiced once.
	out, _ := runProducer(t, appEnv, 0, "commit")
	waitFor(t, 60*time.Second, "the committed job to be done", func() bool {
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
		// go-mssqldb has no LastInsertId: the id comes back as a row.
		require.NoError(t, s.DB().QueryRowContext(ctx, "INSERT INTO "+exampleTable(db, "example_orders")+" (item) OUTPUT INSERTED.id VALUES (N'pen')").Scan(&order))
	default:
		res, err := s.DB().ExecContext(ctx, "INSERT INTO example_orders (item) VALUES ('pen')")
		require.NoError(t, err)
		order, err = res.LastInsertId()
		require.NoError(t, err)
	}
	body := fmt.Sprintf(`{"order":%d}`, order)
	// A query with percent-encoding: the signature covers the raw target.
	uri := "/jobs/send-invoice?from=test&note=a%20b"
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
	require.Zero(t, invoices(order), "invoices after refused signatures")

	// Expired deadline, validly signed: 503 (retried), nothing done, the
	// key not recorded.
	expect(signedCall(t, key, time.Now(), uri, "expired", 1, time.Now().Add(-time.Second), body),
		http.StatusServiceUnavailable, "a deadline already passed")
	expect(signedCall(t, key, time.Now(), uri, "too-near", 1, time.Now().Add(200*time.Millisecond), body),
		http.StatusServiceUnavailable, "a deadline nearer than the work needs")
	require.Zero(t, invoices(order), "invoices after expired deadlines")
	require.Zero(t, done("expired"), "the key of a call past its deadline")

	// No order in the payload: 400, which fails the job.
	expect(signedCall(t, key, time.Now(), uri, "no-order", 1, later(), `{"item":"pen"}`),
		http.StatusBadRequest, "a payload without an order")

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
