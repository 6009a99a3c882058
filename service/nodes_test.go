package service

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/nodetest"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// Helpers of the tests that run real nodes; the configuration and the log
// are shared with admin's (internal/nodetest), the running node is not: a
// test of package service reaches into it.

// testConfig is a node with fast slots and heartbeats on db.
func testConfig(t testing.TB, db storetest.DB, name, baseURL string) config.Config {
	return nodetest.Config(t, db, name, baseURL)
}

// runningNode is a node running in the test.
type runningNode struct {
	n      *Node
	logs   *nodetest.Log
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func runNode(t *testing.T, cfg config.Config) *runningNode {
	t.Helper()
	logs := &nodetest.Log{}
	rn := &runningNode{n: NewNode(cfg, NewLogger(logs, config.LogConfig{Level: "debug", Format: "text"}), nil),
		logs: logs, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	rn.cancel = cancel
	go func() { rn.done <- rn.n.Run(ctx) }()
	t.Cleanup(func() {
		rn.stop(t)
		if t.Failed() {
			t.Logf("node log:\n%s", logs.String())
		}
	})
	return rn
}

// stop stops the node gracefully and checks that it stopped cleanly.
func (rn *runningNode) stop(t *testing.T) {
	t.Helper()
	rn.once.Do(func() {
		rn.cancel()
		select {
		case err := <-rn.done:
			require.NoError(t, err)
		case <-time.After(60 * time.Second):
			t.Fatal("the node did not stop")
		}
	})
}
