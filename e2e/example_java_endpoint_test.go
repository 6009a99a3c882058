//go:build unix

package e2e

import (
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/callproto"
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
func startJavaEndpoint(t *testing.T, driver string, appEnv []string) string {
	t.Helper()
	return startExampleServer(t, driver, t.TempDir(), appEnv, func(addr string) []string {
		return []string{"java", "-cp", javaClasspath(), "EndpointServer", addr}
	})
}

func javaEndpoint(t *testing.T, driver string) {
	ep := endpointTest(t, driver, "java-endpoint-node", javaProducer(), true, func(t *testing.T, appEnv []string) string {
		return startJavaEndpoint(t, driver, appEnv)
	})
	// Java's own: an order that is not an integer is no order (400).
	order := ep.newOrder(t, "nib")
	got, answer := signedCall(t, ep.key, time.Now(), "/jobs/send-invoice", "float-order", 1, time.Now().Add(30*time.Second),
		fmt.Sprintf(`{"order":%d.0}`, order)).send(t, ep.base)
	require.Equal(t, http.StatusBadRequest, got, "an order that is not an integer: answered %s", answer)
	require.Zero(t, ep.invoices(t, order))
}
