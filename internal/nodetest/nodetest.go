// Package nodetest holds what the tests that run real nodes in process
// share (service's and admin's): a node's configuration on a test database,
// fast enough for a test, and a log the test reads while the node writes it.
package nodetest

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// Config is a node named name on db with fast slots and heartbeats, whose
// jobs are called on baseURL; it is valid.
func Config(t testing.TB, db storetest.DB, name, baseURL string) config.Config {
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

// Log is a log (or a process's output) written while the test reads it.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
