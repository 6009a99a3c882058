//go:build unix

package e2e

import (
	"context"
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

// The Node.js example's endpoint (examples/node/endpoint.js) on node:http,
// called by a real node with signed calls: the job producer.js enqueues
// ends done once and its order is invoiced once. Then calls sent straight
// to it: a forged, missing or stale signature, a changed body or a
// repeated signed header is refused with 401, a replayed one with 409, an
// expired deadline with 503 and no work, a payload without an order with
// 400, an unknown order with 422, and a second call under the same
// Idempotency-Key answers 200 without working again. Its signature code
// meets docs/signed-calls.md's test vector first (node --test).
func TestNodeExampleEndpoint(t *testing.T) {
	t.Run("signature", func(t *testing.T) {
		requireNodeCommand(t) // node:test and node:crypto: no npm package
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", "--test", "test/")
		cmd.Dir = filepath.Join("..", "examples", "node")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "node --test examples/node/test:\n%s", out)
		require.Contains(t, string(out), "# fail 0")
		require.NotContains(t, string(out), "# pass 0")
	})
	for _, d := range nodeExampleDrivers {
		t.Run(d.driver, func(t *testing.T) {
			requireNodeJS(t, d.npm)
			requireDatabase(t, d.driver)
			t.Parallel()
			nodeEndpoint(t, d.driver)
		})
	}
}

// startNodeEndpoint runs endpoint.js on a free loopback port and returns
// its base URL once it answers.
func startNodeEndpoint(t *testing.T, driver string, appEnv []string) string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "examples", "node", "endpoint.js"))
	require.NoError(t, err)
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := exec.Command("node", script, addr)
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
		t.Logf("--- log of node endpoint.js %s ---\n%s", addr, log.String())
	})
	base := "http://" + addr
	// It creates its tables before it listens: on the T-SQL test server
	// that is a few new statements to compile.
	waitFor(t, exampleWait(driver), "endpoint.js to answer", func() bool {
		select {
		case <-exited:
			t.Fatalf("endpoint.js exited before it answered:\n%s", log.String())
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

func nodeEndpoint(t *testing.T, driver string) {
	start := time.Now()
	s, db := storetest.OpenDB(t, driver)
	key := []byte("node-endpoint-test-key-" + strconv.FormatInt(time.Now().UnixNano(), 36))
	appEnv := nodeAppEnv(t, db)
	base := startNodeEndpoint(t, driver, append(appEnv, "JOBPAGES_SIGNING_KEY="+string(key)))
	n := startNode(t, env(driver, db.DSN, "node-endpoint-node", base,
		append(db.ExtraEnv(), "SLOTPOLLER_JOBS_SIGNING_KEY="+string(key))...), "node-endpoint-node")
	waitSettled(t, s, 1)
	ep := exampleEndpoint{base: base, key: key, s: s, db: db, repeatedHeaders: true}

	// Through the node: the producer's order and job, the job's signed
	// call, done at the first attempt, the order invoiced once.
	out, _ := runNodeProducer(t, appEnv, 0, "commit")
	ep.calledOnce(t, out.Job, out.Order)
	n.stop(t)

	// Straight to the endpoint, as the contract says.
	ep.endpointContract(t, out.Order)
	t.Logf("%s: %v", driver, time.Since(start).Round(time.Millisecond))
}
