//go:build unix

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
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
			pythonEndpoint(t, python, d.driver, d.refusal)
		})
	}
}

// startPythonEndpoint runs endpoint.py on a free loopback port and
// returns its base URL once it answers.
func startPythonEndpoint(t *testing.T, python, driver string, appEnv []string) string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "examples", "python", "endpoint.py"))
	require.NoError(t, err)
	return startExampleServer(t, driver, filepath.Dir(script), appEnv, func(addr string) []string {
		return []string{python, script, addr}
	})
}

func pythonEndpoint(t *testing.T, python, driver, refusal string) {
	endpointTest(t, driver, "python-endpoint-node", pythonProducer(python, refusal), true, func(t *testing.T, appEnv []string) string {
		return startPythonEndpoint(t, python, driver, appEnv)
	})
}
