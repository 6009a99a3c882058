package service

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/schema"
	"github.com/stretchr/testify/require"
)

// A node writes its config's queue settings at start, beside the routes:
// a queue with limits and no endpoints is managed, and a limit the
// database held that the config no longer says is gone.
func TestNodeWritesItsQueueSettingsAtStart(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "farm.db")
	cfg := fastNodeConfig(t, dsn, "n1", 1)
	cfg.Queues = []config.QueueConfig{
		{Name: "reports", Endpoints: []string{"/reports/"}, Priority: 5, Limit: 3, NodeLimit: 1, Rate: "10/1m"},
		{Name: "plain", Endpoints: []string{"/plain/"}},
	}
	require.NoError(t, cfg.Validate())
	ctx := context.Background()
	s, err := open.Store(ctx, "sqlite", dsn)
	require.NoError(t, err)
	defer s.Close()
	_, err = schema.Migrate(ctx, s)
	require.NoError(t, err)
	require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{{Name: "old", Limit: 1}}))

	logs := &programLog{}
	defer func() {
		if t.Failed() {
			t.Logf("node log:\n%s", logs.String())
		}
	}()
	nctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- NewNode(cfg, NewLogger(logs, config.LogConfig{Level: "info"}), nil).Run(nctx) }()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "queue limits from config written") },
		30*time.Second, 20*time.Millisecond)
	stop()
	require.NoError(t, <-done)
	require.Contains(t, logs.String(), "queues=1")

	type row struct {
		managed, priority int
		limit, nodeLimit  *int
		rate              *int
		period            *int64
	}
	read := func(name string) row {
		var r row
		require.NoError(t, s.DB().QueryRowContext(ctx, store.Expand(s.Dialect(),
			`SELECT managed, priority, max_running, max_per_node, rate_limit, rate_period_ms FROM {queues} WHERE name = ?`), name).
			Scan(&r.managed, &r.priority, &r.limit, &r.nodeLimit, &r.rate, &r.period))
		return r
	}
	r := read("reports")
	require.Equal(t, 1, r.managed)
	require.Equal(t, 5, r.priority)
	require.Equal(t, 3, *r.limit)
	require.Equal(t, 1, *r.nodeLimit)
	require.Equal(t, 10, *r.rate)
	require.Equal(t, int64(60000), *r.period)
	old := read("old")
	require.Equal(t, 0, old.managed)
	require.Nil(t, old.limit)

	// The changes are in the audit log, as the node's config's; an
	// unchanged queue is not.
	entries, err := s.AuditList(ctx, store.AuditFilter{Action: "queue.settings", Limit: 10})
	require.NoError(t, err)
	changed := map[string]string{}
	for _, e := range entries {
		changed[e.Target] = e.Detail
		require.Equal(t, "node n1 (its config)", e.Actor)
		require.Contains(t, e.Origin, "config of n1 on ")
	}
	require.Equal(t, map[string]string{
		"old":     "limit 1 -> none",
		"reports": "none -> priority 5, limit 3, node_limit 1, rate 10/1m0s",
	}, changed)
}
