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
	"path/filepath"
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

// The C# example's endpoint (examples/csharp/EndpointServer.cs) on
// HttpListener under Mono, called by a real node on SQL Server with signed
// calls: the job producer.exe enqueues ends done once and its order is
// invoiced once. Then calls sent straight to it: a forged, missing or
// stale signature is refused with 401, a replayed one with 409, an expired
// deadline with 503 and no work, a payload without an order with 400, an
// unknown order with 422, and a second call under the same
// Idempotency-Key, after the first or at the same time, answers 200
// without working again. Its signing code
// first reproduces docs/signed-calls.md's test vectors.
func TestCSharpExampleEndpoint(t *testing.T) {
	storetest.RequireSQLServer(t)
	bin := buildCSharpExample(t)
	t.Parallel()
	start := time.Now()
	csharpSignsTheVectors(t)

	s, db := storetest.OpenDB(t, "sqlserver")
	ctx := context.Background()
	key := []byte("csharp-endpoint-test-key-" + strconv.FormatInt(time.Now().UnixNano(), 36))
	appEnv := csharpEnv(t, db)
	// OpenDB migrated the schema the example's tables go in.
	base := startCSharpEndpoint(t, bin, append(appEnv, "JOBPAGES_SIGNING_KEY="+string(key)))
	n := startNode(t, env("sqlserver", db.DSN, "csharp-endpoint-node", base,
		append(db.ExtraEnv(), "SLOTPOLLER_JOBS_SIGNING_KEY="+string(key))...), "csharp-endpoint-node")
	waitSettled(t, s, 1)

	tables := "[" + db.Schema + "]."
	invoices := func(order int64) int {
		t.Helper()
		var count int
		require.NoError(t, s.DB().QueryRowContext(ctx, "SELECT invoices FROM "+tables+"[example_orders] WHERE id = @p1", order).Scan(&count))
		return count
	}
	done := func(idem string) int {
		t.Helper()
		var count int
		require.NoError(t, s.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tables+"[example_done] WHERE idem_key = @p1", idem).Scan(&count))
		return count
	}

	// Through the node: the producer's order and job, the job's signed
	// call, done at the first attempt, the order invoiced once.
	out, _ := runCSharpProducer(t, bin, appEnv, 0, "commit")
	// The T-SQL test server is slow, not wrong: a generous wait.
	waitFor(t, time.Minute, "the committed job to be done", func() bool {
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
	require.NoError(t, s.DB().QueryRowContext(ctx, "INSERT INTO "+tables+"[example_orders] (item) OUTPUT INSERTED.id VALUES ('pen')").Scan(&order))
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

	// No order in the payload: 400; an order that does not exist: 422.
	// Both fail the job, and record nothing under the key.
	expect(signedCall(t, key, time.Now(), uri, "no-order", 1, later(), `{"item":"pen"}`),
		http.StatusBadRequest, "a payload without an order")
	expect(signedCall(t, key, time.Now(), uri, "unknown-order", 1, later(), fmt.Sprintf(`{"order":%d}`, order+1000)),
		http.StatusUnprocessableEntity, "a payload naming no order there is")
	require.Zero(t, done("unknown-order"), "the key of a call whose work was refused")

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

	// Two attempts of one run at once, on another order: the key's row
	// makes the second wait for the first's transaction, then find the
	// work done. One invoice, whichever came first.
	var other int64
	require.NoError(t, s.DB().QueryRowContext(ctx, "INSERT INTO "+tables+"[example_orders] (item) OUTPUT INSERTED.id VALUES ('ink')").Scan(&other))
	both := [2]phpCall{}
	for i := range both {
		both[i] = signedCall(t, key, time.Now(), uri, "invoice-ink", i+1, later(), fmt.Sprintf(`{"order":%d}`, other))
	}
	var wg sync.WaitGroup
	answers, errs := [2]string{}, [2]error{}
	for i, c := range both {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Not phpCall.send: FailNow belongs to the test's goroutine.
			req, err := http.NewRequest(http.MethodPost, base+c.uri, bytes.NewReader(c.body))
			if err != nil {
				errs[i] = err
				return
			}
			req.Header = c.header.Clone()
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			answers[i], errs[i] = strconv.Itoa(resp.StatusCode)+" "+strings.TrimSpace(string(b)), err
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs[:]...))
	outcomes := []string{answers[0], answers[1]}
	sort.Strings(outcomes)
	require.Equal(t, []string{
		fmt.Sprintf(`200 {"outcome":"already done","order":%d}`, other),
		fmt.Sprintf(`200 {"outcome":"invoiced","order":%d}`, other),
	}, outcomes, "two attempts at once under one key")
	require.Equal(t, 1, invoices(other), "invoices after two attempts at once under one key")
	require.Equal(t, 1, done("invoice-ink"))

	// The answers decode as JSON.
	var answer map[string]any
	_, raw := signedCall(t, key, time.Now(), uri, "invoice-pen", 3, later(), body).send(t, base)
	require.NoError(t, json.Unmarshal([]byte(raw), &answer), "%q", raw)
	t.Logf("sqlserver: %v", time.Since(start).Round(time.Millisecond))
}

// csharpSignsTheVectors runs the example's SlotpollerSigning.SignV2 on
// docs/signed-calls.md's test vectors (TestSignKnownAnswer's): a job call
// and a task call with an empty X-Slotpoller-Node, and requires the
// signatures the docs and callproto give.
func csharpSignsTheVectors(t *testing.T) {
	t.Helper()
	const harness = `using System; using System.Collections.Generic; using System.Text; using JobPages;
static class Vectors {
    static void Sign(string method, string target, Dictionary<string, string> h, string body) {
        Console.WriteLine(SlotpollerSigning.SignV2(Encoding.UTF8.GetBytes("0123456789abcdef-test-key"), method, target,
            "1714572000", name => h.ContainsKey(name) ? h[name] : null, Encoding.UTF8.GetBytes(body)));
    }
    static void Main() {
        Sign("POST", "/app/jobs/report?day=2024-05-01&x=%20y", new Dictionary<string, string> {
            {"idempotency-key", "slotpoller-job-42"}, {"x-slotpoller-attempt", "1"},
            {"x-slotpoller-deadline", "2024-05-01T12:00:30.000Z"}, {"x-slotpoller-job", "42"},
            {"x-slotpoller-node", "web-01"}, {"x-slotpoller-timeout-ms", "30000"}, {"x-slotpoller-token", "7"},
        }, "{\"id\":42}");
        Sign("GET", "/jobs/ping", new Dictionary<string, string> {
            {"idempotency-key", "slotpoller-task-mailer-7-3"}, {"x-slotpoller-attempt", "2"},
            {"x-slotpoller-deadline", "2024-05-01T12:00:10.000Z"}, {"x-slotpoller-node", ""},
            {"x-slotpoller-task", "mailer"}, {"x-slotpoller-timeout-ms", "10000"}, {"x-slotpoller-token", "7"},
        }, "");
    }
}
`
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Vectors.cs"), []byte(harness), 0o644))
	src, err := filepath.Abs(filepath.Join("..", "examples", "csharp", "src"))
	require.NoError(t, err)
	exe := filepath.Join(dir, "vectors.exe")
	out, err := exec.Command("mcs", "-r:System.Data.dll", "-out:"+exe, filepath.Join(dir, "Vectors.cs"),
		filepath.Join(src, "Endpoint.cs"), filepath.Join(src, "Slotpoller.cs")).CombinedOutput()
	require.NoError(t, err, "mcs vectors.exe: %s", out)
	out, err = exec.Command("mono", exe).CombinedOutput()
	require.NoError(t, err, "mono vectors.exe: %s", out)

	key := []byte("0123456789abcdef-test-key")
	job := http.Header{}
	job.Set("Idempotency-Key", "slotpoller-job-42")
	job.Set(callproto.HeaderAttempt, "1")
	job.Set(callproto.HeaderDeadline, "2024-05-01T12:00:30.000Z")
	job.Set(callproto.HeaderJob, "42")
	job.Set(callproto.HeaderNode, "web-01")
	job.Set(callproto.HeaderTimeoutMs, "30000")
	job.Set(callproto.HeaderToken, "7")
	task := http.Header{}
	task.Set("Idempotency-Key", "slotpoller-task-mailer-7-3")
	task.Set(callproto.HeaderAttempt, "2")
	task.Set(callproto.HeaderDeadline, "2024-05-01T12:00:10.000Z")
	task.Set(callproto.HeaderNode, "")
	task.Set(callproto.HeaderTask, "mailer")
	task.Set(callproto.HeaderTimeoutMs, "10000")
	task.Set(callproto.HeaderToken, "7")
	want := []string{
		"v2=1fc092da394486e4ac2d15c51f1149b3c07ec6cc2e3484250590f5e816b51bc8",
		"v2=b683d1f72cac779ad7f1b7f1e2f7947dbd07bb70a2f6dc7acd62676dfa81e5ef",
	}
	// The pinned values are callproto's too: the vectors are the node's.
	require.Equal(t, want[0], callproto.Sign("POST", "/app/jobs/report?day=2024-05-01&x=%20y", 1714572000, job, []byte(`{"id":42}`), key))
	require.Equal(t, want[1], callproto.Sign("GET", "/jobs/ping", 1714572000, task, nil, key))
	require.Equal(t, want, strings.Fields(string(out)), "the C# signatures of the test vectors")
}

// startCSharpEndpoint runs endpoint.exe under Mono on a free loopback port
// and returns its base URL once it answers.
func startCSharpEndpoint(t *testing.T, bin csharpBuild, appEnv []string) string {
	t.Helper()
	base := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := exec.Command("mono", filepath.Join(bin.dir, "endpoint.exe"), base+"/")
	cmd.Env = append(os.Environ(), appEnv...)
	cmd.SysProcAttr = dieWithTheTest()
	log := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if !t.Failed() {
			return
		}
		t.Logf("--- log of mono endpoint.exe %s ---\n%s", base, log.String())
	})
	// It creates its tables on the T-SQL server before it listens.
	waitFor(t, time.Minute, "endpoint.exe to answer", func() bool {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("endpoint.exe exited before it answered: %v\n%s", err, log.String())
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
