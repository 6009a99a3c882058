package service

import (
	"context"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// The default retry budget outlives an hour of the endpoint being down:
// the sum of the shortest delays Backoff can draw (jitter at its minimum)
// between the default number of attempts, computed with the code's own
// Backoff. Call time only adds to it.
func TestDefaultRetriesCoverAnHourOfDowntime(t *testing.T) {
	c := config.Default().Jobs
	var least, most time.Duration
	for attempt := 1; attempt < c.MaxAttempts; attempt++ { // no delay after the last attempt
		least += jobs.Backoff(attempt, time.Duration(c.Backoff), time.Duration(c.BackoffMax), func() float64 { return 0 })
		most += jobs.Backoff(attempt, time.Duration(c.Backoff), time.Duration(c.BackoffMax), func() float64 { return 1 })
	}
	require.GreaterOrEqual(t, least, time.Hour, "the default retries must cover an hour of downtime")
	// The figures docs/configuration.md and config.yaml state.
	require.Equal(t, 61*time.Minute+45500*time.Millisecond, least)
	require.Equal(t, 2*time.Hour+3*time.Minute+31*time.Second, most.Round(time.Second))
}

func TestRetentionDefaultsAndKeys(t *testing.T) {
	c := config.Default()
	require.Equal(t, map[string]time.Duration{"done": 24 * time.Hour, "failed": 168 * time.Hour, "dead": 168 * time.Hour,
		"cancelled": 168 * time.Hour, "missed": 168 * time.Hour}, c.Jobs.Retention())
	require.Equal(t, config.Duration(24*time.Hour), c.Checkin.Retention)

	cfg, err := config.Load("", false, []string{"SLOTPOLLER_JOBS_RETENTION_DONE=1h", "SLOTPOLLER_JOBS_RETENTION_DEAD=0s",
		"SLOTPOLLER_CHECKIN_RETENTION=0s", "SLOTPOLLER_NODE_NAME=n"})
	require.NoError(t, err)
	require.Equal(t, time.Hour, cfg.Jobs.Retention()["done"])
	require.Zero(t, cfg.Jobs.Retention()["dead"], "0 keeps dead jobs")
	require.Zero(t, cfg.Checkin.Retention)
	require.NoError(t, cfg.Validate())
}

// A running node, as slot owner, deletes finished jobs past their retention
// and nodes long gone, and keeps the rest.
func TestNodePrunesAsSlotOwner(t *testing.T) {
	s, db := storetest.OpenDB(t, "sqlite")
	ctx := context.Background()
	insert := store.Expand(s.Dialect(), `INSERT INTO {jobs} (endpoint, method, state, run_at, attempt, max_attempts, idem_key, created_at, finished_at)
VALUES ('/old', 'POST', ?, {now}, 1, 1, 'k', {now}, {now+?})`)
	for _, row := range []struct {
		state string
		ago   time.Duration
	}{{store.StateDone, 2 * time.Hour}, {store.StateDone, time.Minute}, {store.StateDead, 2 * time.Hour}, {store.StateFailed, 2 * time.Hour}} {
		_, err := s.DB().ExecContext(ctx, insert, row.state, -row.ago.Milliseconds())
		require.NoError(t, err)
	}
	require.NoError(t, s.NodeCheckIn(ctx, store.NodeState{Name: "gone", Incarnation: "inc-gone", Capacity: 1}, time.Second))
	_, err := s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {nodes} SET last_seen = {now+?}`), -(48 * time.Hour).Milliseconds())
	require.NoError(t, err)

	cfg := testConfig(t, db, "pruner", "http://127.0.0.1:1")
	cfg.Jobs.RetentionDone, cfg.Jobs.RetentionDead, cfg.Jobs.RetentionFailed = config.Duration(time.Hour), config.Duration(time.Hour), 0
	runNode(t, cfg)
	require.Eventually(t, func() bool {
		counts, err := s.JobCounts(ctx)
		return err == nil && counts[store.StateDead] == 0 && counts[store.StateDone] == 1
	}, 30*time.Second, 50*time.Millisecond, "the old done and dead jobs should be deleted")
	counts, err := s.JobCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{store.StateDone: 1, store.StateFailed: 1}, counts, "the young done job and the kept failed one stay")
	require.Eventually(t, func() bool {
		nodes, _, err := s.Nodes(ctx, time.Second)
		return err == nil && len(nodes) == 1 && nodes[0].Name == "pruner"
	}, 30*time.Second, 50*time.Millisecond, "the node not seen for two days should be deleted")
}
