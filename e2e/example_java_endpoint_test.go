//go:build unix

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/callproto"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// The Java example's endpoint (examples/java/EndpointServer.java) on the
// JDK's HTTP server, called by a real node with signed calls: the job the
// Producer enqueues ends done once and its order is invoiced once. Then
// calls sent straight to it: a forged, missing or stale signature is
// refused with 401, a replayed one with 409, an expired deadline with 503
// and no work, a payload without an order with 400, and a second call
// under the same Idempotency-Key answers 200 without working again.
func TestJavaExampleEndpoint(t *testing.T) {
	for _, driver := range []string{"postgres", "mysql", "sqlserver", "sqlite"} {
		t.Run(driver, func(t *testing.T) {
			requireJavaDatabase(t, driver)
			t.Parallel()
			javaEndpoint(t, driver)
		})
	}
}

// The signature code of the example against docs/signed-calls.md's test
// vector, and against callproto's for a call with a signed header absent
// and one present but empty.
func TestJavaExampleSignature(t *testing.T) {
	requireJava(t, "")
	sign := func(key, method, uri string, ts int64, body string, headers ...string) string {
		t.Helper()
		out, err := exec.Command("java", append([]string{"-cp", javaBuild.dir, "slotpoller.Signature", key, method, uri,
			strconv.FormatInt(ts, 10), body}, headers...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.TrimSpace(string(out))
	}
	require.Equal(t, "v2=1fc092da394486e4ac2d15c51f1149b3c07ec6cc2e3484250590f5e816b51bc8",
		sign("0123456789abcdef-test-key", "POST", "/app/jobs/report?day=2024-05-01&x=%20y", 1714572000, `{"id":42}`,
			"Idempotency-Key=slotpoller-job-42", "X-Slotpoller-Attempt=1", "X-Slotpoller-Deadline=2024-05-01T12:00:30.000Z",
			"X-Slotpoller-Job=42", "X-Slotpoller-Node=web-01", "X-Slotpoller-Timeout-Ms=30000", "X-Slotpoller-Token=7"),
		"docs/signed-calls.md's test vector")
	h := http.Header{}
	h.Set(callproto.HeaderIdempotencyKey, "k é")
	h[callproto.HeaderTask] = []string{""}
	require.Equal(t, callproto.Sign("PUT", "/t?a=%2F", 1700000000, h, []byte("body\n"), []byte("another key")),
		sign("another key", "PUT", "/t?a=%2F", 1700000000, "body\n", "idempotency-key=k é", "x-slotpoller-task="),
		"a non-ASCII header value and an empty one")
}

// startJavaEndpoint runs EndpointServer on a free loopback port and returns
// its base URL once it answers.
func startJavaEndpoint(t *testing.T, appEnv []string) string {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := exec.Command("java", "-cp", javaClasspath(), "EndpointServer", addr)
	cmd.Env = append(os.Environ(), appEnv...)
	cmd.Dir = t.TempDir()
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
			t.Logf("--- log of java EndpointServer %s ---\n%s", addr, log.String())
		}
	})
	base := "http://" + addr
	// The JVM's start and the tables' creation: seconds on the T-SQL
	// test server.
	waitFor(t, 60*time.Second, "java EndpointServer to answer", func() bool {
		select {
		case <-exited:
			t.Fatalf("java EndpointServer exited: %s", log.String())
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

func javaEndpoint(t *testing.T, driver string) {
	start := time.Now()
	s, db := storetest.OpenDB(t, driver)
	ctx := context.Background()
	key := []byte("java-endpoint-test-key-" + strconv.FormatInt(time.Now().UnixNano(), 36))
	appEnv := javaEnv(t, db)
	base := startJavaEndpoint(t, append(appEnv, "JOBPAGES_SIGNING_KEY="+string(key)))
	n := startNode(t, env(driver, db.DSN, "java-endpoint-node", base,
		append(db.ExtraEnv(), "SLOTPOLLER_JOBS_SIGNING_KEY="+string(key))...), "java-endpoint-node")
	waitSettled(t, s, 1)
	orders, done := javaTable(db, "example_orders"), javaTable(db, "example_done")

	invoices := func(order int64) int {
		t.Helper()
		var count int
		require.NoError(t, s.DB().QueryRowContext(ctx, store.Expand(s.Dialect(), "SELECT invoices FROM "+orders+" WHERE id = ?"), order).Scan(&count))
		return count
	}
	doneKeys := func(idem string) int {
		t.Helper()
		var count int
		require.NoError(t, s.DB().QueryRowContext(ctx, store.Expand(s.Dialect(), "SELECT COUNT(*) FROM "+done+" WHERE idem_key = ?"), idem).Scan(&count))
		return count
	}

	// Through the node: the producer's order and job, the job's signed
	// call, done at the first attempt, the order invoiced once.
	out, _ := runJavaProducer(t, appEnv, 0, "commit")
	waitFor(t, javaWait(driver), "the committed job to be done", func() bool {
		j, err := s.JobGet(ctx, out.Job)
		require.NoError(t, err)
		require.NotContains(t, []string{store.StateFailed, store.StateDead}, j.State, "job %d: %d %s", out.Job, j.LastStatus, j.LastError)
		return j.State == store.StateDone
	})
	javaHeardFor(t, s, time.Second) // a second call would come at one of the next slots
	j, err := s.JobGet(ctx, out.Job)
	require.NoError(t, err)
	require.Equal(t, store.StateDone, j.State)
	require.Equal(t, 1, j.Attempt, "attempts of job %d (last answer %d %s)", out.Job, j.LastStatus, j.LastError)
	require.Equal(t, 200, j.LastStatus)
	require.Equal(t, 1, invoices(out.Order), "invoices of order %d after its job", out.Order)
	require.Equal(t, 1, doneKeys(j.IdempotencyKey), "the job's Idempotency-Key %q recorded", j.IdempotencyKey)
	n.stop(t)

	// Straight to the endpoint: a second order, never enqueued.
	var order int64
	switch driver {
	case "postgres", "sqlite":
		require.NoError(t, s.DB().QueryRowContext(ctx, "INSERT INTO "+orders+" (item) VALUES ('pen') RETURNING id").Scan(&order))
	case "sqlserver":
		require.NoError(t, s.DB().QueryRowContext(ctx, "INSERT INTO "+orders+" (item) OUTPUT INSERTED.id VALUES ('pen')").Scan(&order))
	default:
		res, err := s.DB().ExecContext(ctx, "INSERT INTO "+orders+" (item) VALUES ('pen')")
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
	repeated := signedCall(t, key, time.Now(), uri, "repeated", 1, later(), body)
	repeated.header.Add(callproto.HeaderAttempt, "2")
	expect(repeated, http.StatusUnauthorized, "a signed header sent twice")
	require.Zero(t, invoices(order), "invoices after refused signatures")

	// Expired deadline, validly signed: 503 (retried), nothing done, the
	// key not recorded.
	expect(signedCall(t, key, time.Now(), uri, "expired", 1, time.Now().Add(-time.Second), body),
		http.StatusServiceUnavailable, "a deadline already passed")
	expect(signedCall(t, key, time.Now(), uri, "too-near", 1, time.Now().Add(200*time.Millisecond), body),
		http.StatusServiceUnavailable, "a deadline nearer than the work needs")
	require.Zero(t, invoices(order), "invoices after expired deadlines")
	require.Zero(t, doneKeys("expired"), "the key of a call past its deadline")

	// No order in the payload, or not an integer: 400, which fails the
	// job; an order that does not exist: 422.
	expect(signedCall(t, key, time.Now(), uri, "no-order", 1, later(), `{"item":"pen"}`),
		http.StatusBadRequest, "a payload without an order")
	expect(signedCall(t, key, time.Now(), uri, "float-order", 1, later(), fmt.Sprintf(`{"order":%d.0}`, order)),
		http.StatusBadRequest, "an order that is not an integer")
	expect(signedCall(t, key, time.Now(), uri, "unknown-order", 1, later(), `{"order":999999}`),
		http.StatusUnprocessableEntity, "an order that does not exist")
	require.Zero(t, doneKeys("unknown-order"), "the key of a call that did no work")

	// A valid call works once; the same request again is a replay: 409.
	first := signedCall(t, key, time.Now(), uri, "invoice-pen", 1, later(), body)
	require.Contains(t, expect(first, http.StatusOK, "a valid call"), `"invoiced"`)
	require.Equal(t, 1, invoices(order), "invoices after a valid call")
	expect(first, http.StatusConflict, "the same signed request again")

	// The same Idempotency-Key, a new attempt signed afresh: 200, no work.
	require.Contains(t, expect(signedCall(t, key, time.Now(), uri, "invoice-pen", 2, later(), body), http.StatusOK,
		"a retry of work already done"), `"already done"`)
	require.Equal(t, 1, invoices(order), "invoices after a retry under the same key")
	require.Equal(t, 1, doneKeys("invoice-pen"))
	require.Equal(t, 1, invoices(out.Order), "invoices of the node's order")

	// The answers decode as JSON.
	var answer map[string]any
	_, raw := signedCall(t, key, time.Now(), uri, "invoice-pen", 3, later(), body).send(t, base)
	require.NoError(t, json.Unmarshal([]byte(raw), &answer), "%q", raw)
	t.Logf("%s: %v", driver, time.Since(start).Round(time.Millisecond))
}
