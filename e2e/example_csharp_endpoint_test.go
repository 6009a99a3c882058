//go:build unix

package e2e

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/callproto"
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
	csharpSignsTheVectors(t)
	endpointTest(t, "sqlserver", "csharp-endpoint-node", csharpProducer(bin), false, func(t *testing.T, appEnv []string) string {
		return startCSharpEndpoint(t, bin, appEnv)
	})
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
// (HttpListener takes a URL prefix) and returns its base URL once it
// answers.
func startCSharpEndpoint(t *testing.T, bin csharpBuild, appEnv []string) string {
	t.Helper()
	return startExampleServer(t, "sqlserver", bin.dir, appEnv, func(addr string) []string {
		return []string{"mono", filepath.Join(bin.dir, "endpoint.exe"), "http://" + addr + "/"}
	})
}
