package service

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// Helpers of the tests that run real nodes (package admin's tests have
// their own: a test file cannot be shared across packages).

// syncBuffer is a log the node writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testConfig is a node with fast slots and heartbeats on db.
func testConfig(t testing.TB, db storetest.DB, name, baseURL string) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Database = config.DatabaseConfig{Driver: db.Driver, DSN: db.DSN, Schema: db.Schema, Migrate: true}
	if cfg.Database.Schema == "" {
		cfg.Database.Schema = store.DefaultSQLServerSchema
	}
	cfg.Node = config.NodeConfig{Name: name, Capacity: 4}
	cfg.Jobs.BaseURL = baseURL
	cfg.Jobs.Lease = config.Duration(time.Second)
	if db.Driver == "sqlserver" {
		// The T-SQL test server (Babelfish) parses a statement afresh on
		// each new connection, up to seconds on a busy machine: a 1 s
		// lease would run out before the first call, and its statement
		// deadlines (a renewal: lease/3; a poll: the lease) are shorter
		// than that parse.
		cfg.Jobs.Lease = config.Duration(6 * time.Second)
	}
	cfg.Jobs.Timeout = config.Duration(10 * time.Second)
	cfg.Jobs.DrainTimeout = config.Duration(2 * time.Second)
	cfg.Rotation.Slot = config.Duration(100 * time.Millisecond)
	cfg.Checkin.Heartbeat = config.Duration(200 * time.Millisecond)
	cfg.Checkin.TTL = config.Duration(time.Second)
	require.NoError(t, cfg.Validate())
	return cfg
}

// runningNode is a node running in the test.
type runningNode struct {
	n      *Node
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func runNode(t *testing.T, cfg config.Config) *runningNode {
	t.Helper()
	logs := &syncBuffer{}
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
