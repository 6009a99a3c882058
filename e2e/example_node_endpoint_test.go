//go:build unix

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
	return startExampleServer(t, driver, filepath.Dir(script), appEnv, func(addr string) []string {
		return []string{"node", script, addr}
	})
}

func nodeEndpoint(t *testing.T, driver string) {
	endpointTest(t, driver, "node-endpoint-node", nodeProducer(driver), true, func(t *testing.T, appEnv []string) string {
		return startNodeEndpoint(t, driver, appEnv)
	})
}
