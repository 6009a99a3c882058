package service

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/checkin"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/stretchr/testify/require"
)

// fastNodeConfig is a valid config of a node on a SQLite file whose slots,
// heartbeats and TTL are short enough for a test.
func fastNodeConfig(t *testing.T, dsn, name string, capacity int) Config {
	cfg := DefaultConfig()
	cfg.Database.DSN = dsn
	cfg.Node = NodeConfig{Name: name, Capacity: capacity}
	cfg.Jobs.DrainTimeout = Duration(time.Second)
	cfg.Rotation.Slot = Duration(100 * time.Millisecond)
	cfg.Checkin.Heartbeat = Duration(100 * time.Millisecond)
	cfg.Checkin.TTL = Duration(time.Second)
	require.NoError(t, cfg.Validate())
	return cfg
}

func liveIncarnation(s *store.Store, name string) string {
	nodes, _, err := s.Nodes(context.Background(), time.Second)
	if err != nil {
		return "" // not migrated yet
	}
	for _, n := range nodes {
		if n.Name == name && n.Live {
			return n.Incarnation
		}
	}
	return ""
}

// A second node started under a live node's name gives up with an error
// that names the problem, and the first keeps its name.
func TestSecondNodeUnderALiveNodesNameRefusesToStart(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "farm.db")
	cfg := fastNodeConfig(t, dsn, "twin", 1)
	logs := &programLog{}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	first := make(chan error, 1)
	go func() { first <- NewNode(cfg, NewLogger(logs, LogConfig{Level: "info"}), nil).Run(ctx) }()
	defer func() {
		if t.Failed() {
			t.Logf("node log:\n%s", logs.String())
		}
	}()
	s, err := store.Open(context.Background(), "sqlite", dsn)
	require.NoError(t, err)
	defer s.Close()
	require.Eventually(t, func() bool { return liveIncarnation(s, "twin") != "" }, 30*time.Second, 20*time.Millisecond)
	holder := liveIncarnation(s, "twin")

	secondCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = NewNode(cfg, NewLogger(logs, LogConfig{Level: "info"}), nil).Run(secondCtx)
	require.ErrorIs(t, err, checkin.ErrNameInUse)
	require.ErrorContains(t, err, "node.name")
	require.NoError(t, secondCtx.Err(), "it gave up by itself, within about the TTL")
	require.Equal(t, holder, liveIncarnation(s, "twin"), "the first node keeps its name")

	stop()
	require.NoError(t, <-first)
}

// A node restarted after a crash finds its old row still live; it waits
// for the old heartbeat to pass the TTL and starts.
func TestNodeRestartedAfterACrashStartsAfterTheTTL(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "farm.db")
	cfg := fastNodeConfig(t, dsn, "twin", 1)
	logs := &programLog{}
	defer func() {
		if t.Failed() {
			t.Logf("node log:\n%s", logs.String())
		}
	}()
	// The crashed incarnation: checked in, then never heard from again.
	crashed := func() {
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- NewNode(cfg, NewLogger(logs, LogConfig{Level: "info"}), nil).Run(ctx) }()
		s, err := store.Open(context.Background(), "sqlite", dsn)
		require.NoError(t, err)
		defer s.Close()
		require.Eventually(t, func() bool { return liveIncarnation(s, "twin") != "" }, 30*time.Second, 20*time.Millisecond)
		// kill -9: no leave. Put the row back as live as the crash left it.
		inc := liveIncarnation(s, "twin")
		stop()
		require.NoError(t, <-done)
		_, err = s.DB().ExecContext(context.Background(), store.Expand(s.Dialect(),
			`UPDATE {nodes} SET state = 'up', incarnation = ?, last_seen = {now} WHERE name = ?`), inc, "twin")
		require.NoError(t, err)
	}
	crashed()

	logs = &programLog{}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	begin := time.Now()
	done := make(chan error, 1)
	go func() { done <- NewNode(cfg, NewLogger(logs, LogConfig{Level: "info"}), nil).Run(ctx) }()
	s, err := store.Open(context.Background(), "sqlite", dsn)
	require.NoError(t, err)
	defer s.Close()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "checked in") }, 30*time.Second, 20*time.Millisecond)
	require.Less(t, time.Since(begin), 10*time.Second)
	require.Contains(t, logs.String(), "node name is held by another process")
	stop()
	require.NoError(t, <-done)
}
