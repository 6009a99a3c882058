//go:build unix

package e2e

import (
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
	key := []byte("java-endpoint-test-key-" + strconv.FormatInt(time.Now().UnixNano(), 36))
	appEnv := javaEnv(t, db)
	base := startJavaEndpoint(t, append(appEnv, "JOBPAGES_SIGNING_KEY="+string(key)))
	n := startNode(t, env(driver, db.DSN, "java-endpoint-node", base,
		append(db.ExtraEnv(), "SLOTPOLLER_JOBS_SIGNING_KEY="+string(key))...), "java-endpoint-node")
	waitSettled(t, s, 1)
	ep := exampleEndpoint{base: base, key: key, s: s, db: db, repeatedHeaders: true}

	// Through the node: the producer's order and job, the job's signed
	// call, done at the first attempt, the order invoiced once.
	out, _ := runJavaProducer(t, appEnv, 0, "commit")
	ep.calledOnce(t, out.Job, out.Order)
	n.stop(t)

	// Straight to the endpoint, as the contract says.
	ep.endpointContract(t, out.Order)
	// Java's own: an order that is not an integer is no order (400).
	order := ep.newOrder(t, "nib")
	got, answer := signedCall(t, key, time.Now(), "/jobs/send-invoice", "float-order", 1, time.Now().Add(30*time.Second),
		fmt.Sprintf(`{"order":%d.0}`, order)).send(t, base)
	require.Equal(t, http.StatusBadRequest, got, "an order that is not an integer: answered %s", answer)
	require.Zero(t, ep.invoices(t, order))

	t.Logf("%s: %v", driver, time.Since(start).Round(time.Millisecond))
}
