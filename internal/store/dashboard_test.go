package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// finishedJob inserts a job that finished ago before the database's now in
// state, having started delay after it was due.
func finishedJob(t *testing.T, s *store.Store, state string, ago, delay time.Duration) {
	t.Helper()
	q := store.Expand(s.Dialect(), `INSERT INTO {jobs} (endpoint, method, state, run_at, started_at, finished_at, attempt, max_attempts, idem_key, created_at)
VALUES ('/t', 'POST', ?, {now+?}, {now+?}, {now+?}, 1, 3, 'k', {now})`)
	end := -ago.Milliseconds()
	_, err := s.DB().ExecContext(context.Background(), q, state, end-100-delay.Milliseconds(), end-100, end)
	require.NoError(t, err)
}

// The throughput read counts done and failed/dead jobs by the minute they
// finished in, with their start delays, leaves out what is older than the
// window or not finished, and says when its row limit cut it short.
func TestJobThroughputCountsPerMinute(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		finishedJob(t, s, store.StateDone, 10*time.Second, 200*time.Millisecond)
		finishedJob(t, s, store.StateDone, 20*time.Second, 1500*time.Millisecond)
		finishedJob(t, s, store.StateFailed, 30*time.Second, 0)
		finishedJob(t, s, store.StateDone, 5*time.Minute+10*time.Second, 50*time.Millisecond)
		finishedJob(t, s, store.StateDead, 5*time.Minute+20*time.Second, 0)
		finishedJob(t, s, store.StateDone, 2*time.Hour, 0)        // outside the window
		finishedJob(t, s, store.StateCancelled, 1*time.Minute, 0) // not a throughput state

		tp, err := s.JobThroughput(ctx, time.Hour, 1000)
		require.NoError(t, err)
		require.False(t, tp.Capped)
		require.Equal(t, 5, tp.Rows)
		require.Len(t, tp.Minutes, 2, "%+v", tp.Minutes)
		last, five := tp.Minutes[0], tp.Minutes[1]
		require.Equal(t, 0, last.Ago)
		require.Equal(t, 2, last.Done)
		require.Equal(t, 1, last.Failed)
		require.InDelta(t, 1700, last.DelaySumMS, 5)
		require.InDelta(t, 1500, last.DelayMaxMS, 5)
		require.Equal(t, 5, five.Ago)
		require.Equal(t, 1, five.Done)
		require.Equal(t, 1, five.Failed)

		capped, err := s.JobThroughput(ctx, time.Hour, 3)
		require.NoError(t, err)
		require.True(t, capped.Capped)
		require.Equal(t, 3, capped.Rows, "the newest three")
		require.Len(t, capped.Minutes, 1)
	})
}

// The heartbeat writes the node's recent turns on its row and the registry
// read hands them back.
func TestNodeHeartbeatWritesTurns(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		n := store.NodeState{Name: "web1", Incarnation: "i1", Capacity: 4, Free: 4}
		require.NoError(t, s.NodeCheckIn(ctx, n, time.Minute))
		n.Turns = "1780000123,3,3"
		ok, err := s.NodeHeartbeat(ctx, n)
		require.NoError(t, err)
		require.True(t, ok)
		nodes, _, err := s.Nodes(ctx, time.Minute)
		require.NoError(t, err)
		require.Len(t, nodes, 1)
		require.Equal(t, "1780000123,3,3", nodes[0].Turns)
	})
}
