//go:build unix

package e2e

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	key := []byte("python-endpoint-test-key-" + strconv.FormatInt(time.Now().UnixNano(), 36))
	appEnv := pythonEnv(t, db)
	base := startPythonEndpoint(t, python, append(appEnv, "JOBPAGES_SIGNING_KEY="+string(key)))
	n := startNode(t, env(driver, db.DSN, "python-endpoint-node", base,
		append(db.ExtraEnv(), "SLOTPOLLER_JOBS_SIGNING_KEY="+string(key))...), "python-endpoint-node")
	waitSettled(t, s, 1)
	ep := exampleEndpoint{base: base, key: key, s: s, db: db, repeatedHeaders: true}

	// Through the node: the producer's order and job, the job's signed
	// call, done at the first attempt, the order invoiced once.
	out, _ := runPythonProducer(t, python, appEnv, 0, "commit")
	ep.calledOnce(t, out.Job, out.Order)
	n.stop(t)

	// Straight to the endpoint, as the contract says.
	ep.endpointContract(t, out.Order)
	t.Logf("%s: %v", driver, time.Since(start).Round(time.Millisecond))
}
