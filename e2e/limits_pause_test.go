//go:build unix

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// TestPauseStopsALimitedQueueWithinASlot: a queue with a limit (whose
// jobs only the managed claim takes, under the queue's lock) is paused
// with `slotpoller queue pause` while 2 node processes drain its backlog.
// TestFarmPausesAndResumesAQueue pauses a queue without limits before
// its jobs come; this one pauses the managed claim mid-backlog.
//
// What is asserted: one slot after the pause command returned (the pause
// committed), the queue's waiting jobs stay as many for the next 8 slots:
// no claim takes any. On SQLite and PostgreSQL, on the database clock, no
// job of the queue started later than a slot after the pause's paused_at.
// Not on SQL Server nor MySQL: there a statement reads the clock once,
// when it starts (SYSUTCDATETIME() is a runtime constant; MySQL's
// UTC_TIMESTAMP() is the statement's start), and the pause's statement
// may then wait for a claim that holds the queue's row: its paused_at is
// earlier than that claim's starts (329 ms seen on MariaDB in CI).
func TestPauseStopsALimitedQueueWithinASlot(t *testing.T) {
	t.Parallel()
	eachDatabaseParallel(t, pauseStopsALimitedQueueWithinASlot)
}

func pauseStopsALimitedQueueWithinASlot(t *testing.T, driver string) {
	const total, slot = 150, 250 * time.Millisecond // env's slot
	began := time.Now()
	s, db := storetest.OpenDB(t, driver)
	ctx := context.Background()
	// Calls of 250 ms at the limit of 3: the backlog lasts 12 s, past a
	// pause command started on a loaded machine (at 100 ms calls, a CLI
	// that took 5 s to start found the backlog drained).
	rec := newSpanRecorder(func(int64) time.Duration { return 250 * time.Millisecond })
	srv := httptest.NewServer(http.HandlerFunc(rec.handler))
	defer srv.Close()

	dir := configDir(t, `queues:
  - name: reports
    endpoints: ["/jobs/reports/"]
    limit: 3
`)
	var nodes []*node
	for _, name := range []string{"node-a", "node-b"} {
		environ := append(env(driver, db.DSN, name, srv.URL, db.ExtraEnv()...), "SLOTPOLLER_NODE_CAPACITY=4")
		nodes = append(nodes, startNodeIn(t, environ, name, dir))
	}
	waitSettled(t, s, 2)
	requireSettings(t, s, store.QueueSettings{Name: "reports", Limit: 3})
	ids := make([]int64, 0, total)
	for i := range total {
		id, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: fmt.Sprintf("/jobs/reports/r%d", i), MaxAttempts: 3})
		require.NoError(t, err)
		ids = append(ids, id)
	}
	waitFor(t, 2*time.Minute, "the backlog to be under way", func() bool { return len(rec.snapshot()) >= 10 })

	environ := env(driver, db.DSN, "cli", srv.URL, db.ExtraEnv()...)
	require.Contains(t, cliCommand(t, environ, dir, "queue", "pause", "-name", "reports"), "paused")
	// A claim under way when the pause committed may still take its rows.
	time.Sleep(slot)
	waiting := func() int {
		qs, err := s.Queues(ctx)
		require.NoError(t, err)
		for _, q := range qs {
			if q.Name == "reports" {
				return q.Waiting
			}
		}
		return 0
	}
	left := waiting()
	time.Sleep(8 * slot)
	require.Equal(t, left, waiting(), "jobs of the paused queue were claimed more than a slot after the pause")
	require.Positive(t, left, "the pause left a backlog waiting")

	paused, err := s.QueuesPaused(ctx)
	require.NoError(t, err)
	require.Len(t, paused, 1)
	pausedAt := *paused[0].PausedAt
	var last time.Time
	for _, id := range ids {
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		if j.Started != nil && j.Started.After(last) {
			last = *j.Started
		}
	}
	after := last.Sub(pausedAt)
	t.Logf("%s: %d of %d jobs left waiting; the last start was %v after the pause's paused_at (database clock); took %v",
		driver, left, total, after.Round(time.Millisecond), time.Since(began).Round(100*time.Millisecond))
	if driver != "sqlserver" && driver != "mysql" {
		require.LessOrEqual(t, after, slot, "a job of the paused queue started more than a slot after the pause")
	}
	for _, n := range nodes {
		n.stop(t)
	}
}
