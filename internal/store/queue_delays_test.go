package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// The queues' settings and their rate windows as the operator reads them,
// and their start delays, on every database.

func queueNamed(t *testing.T, qs []store.QueueState, name string) store.QueueState {
	t.Helper()
	for _, q := range qs {
		if q.Name == name {
			return q
		}
	}
	t.Fatalf("queue %q not listed in %+v", name, qs)
	return store.QueueState{}
}

func TestQueuesShowTheirSettings(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{
			{Name: "reports", Priority: 5, Limit: 2, NodeLimit: 1, Rate: 3, RatePeriod: time.Hour},
			{Name: "mail", Priority: -2},
			{Name: "plain"}, // nothing set: not written
		}))
		require.NoError(t, s.QueuePause(ctx, "held", "alice", true))
		enqueueTo(t, s, "reports", 4)
		enqueueTo(t, s, "other", 1)
		got := claimManaged(t, s, "node-a", 10)
		require.Len(t, got, 2, "one of reports (its node limit), one of other")

		qs, err := s.Queues(ctx)
		require.NoError(t, err)
		r := queueNamed(t, qs, "reports")
		require.Equal(t, store.QueueState{Name: "reports", Waiting: 3, Running: 1, Priority: 5, Limit: 2, NodeLimit: 1,
			Rate: 3, RatePeriod: time.Hour, RateUsed: 1}, r)
		require.True(t, r.Limited())
		require.Equal(t, store.QueueState{Name: "mail", Priority: -2}, queueNamed(t, qs, "mail"))
		require.False(t, queueNamed(t, qs, "mail").Limited())
		require.Equal(t, store.QueueState{Name: "other", Running: 1}, queueNamed(t, qs, "other"))

		held, err := s.QueuesHeld(ctx)
		require.NoError(t, err)
		require.Len(t, held, 3)
		require.Equal(t, []string{"held", "mail", "reports"}, []string{held[0].Name, held[1].Name, held[2].Name})
		require.True(t, held[0].Paused)
		require.Equal(t, "alice", held[0].PausedBy)
		require.NotNil(t, held[0].PausedAt)
		require.Equal(t, store.QueueState{Name: "mail", Priority: -2}, held[1])
		require.Equal(t, store.QueueState{Name: "reports", Priority: 5, Limit: 2, NodeLimit: 1,
			Rate: 3, RatePeriod: time.Hour, RateUsed: 1}, held[2], "the settings without the work")

		// A count of an earlier window is no start of this one.
		_, err = s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {queues} SET rate_window = rate_window - 1 WHERE name = 'reports'`))
		require.NoError(t, err)
		qs, err = s.Queues(ctx)
		require.NoError(t, err)
		require.Equal(t, 0, queueNamed(t, qs, "reports").RateUsed)
		held, err = s.QueuesHeld(ctx)
		require.NoError(t, err)
		require.Equal(t, 0, held[2].RateUsed)

		// Settings taken away: the queue shows none, though its row keeps
		// the count it had.
		_, err = s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {queues} SET rate_window = rate_window + 1 WHERE name = 'reports'`))
		require.NoError(t, err)
		require.NoError(t, s.QueueSettingsPut(ctx, nil))
		qs, err = s.Queues(ctx)
		require.NoError(t, err)
		require.Equal(t, store.QueueState{Name: "reports", Waiting: 3, Running: 1}, queueNamed(t, qs, "reports"))
		held, err = s.QueuesHeld(ctx)
		require.NoError(t, err)
		require.Len(t, held, 1, "only the paused queue")
	})
}

// insertDue writes a job of queue due ago before the database's now.
func insertDue(t *testing.T, s *store.Store, queue string, ago time.Duration) int64 {
	t.Helper()
	now, err := s.Now(context.Background())
	require.NoError(t, err)
	at := now.Add(-ago)
	id, err := s.JobInsert(context.Background(), store.NewJob{Endpoint: fmt.Sprintf("/d/%s/%s", queue, ago), Method: "POST",
		MaxAttempts: 3, IdempotencyKey: "k", Queue: queue, RunAt: &at})
	require.NoError(t, err)
	return id
}

func TestQueueStartDelays(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		hold := store.Lease(time.Minute)
		finish := func(c store.Claim, state string) {
			t.Helper()
			ok, err := s.JobFinishIfRunning(ctx, c.ID, c.Token, store.Outcome{State: state, Status: 500})
			require.NoError(t, err)
			require.True(t, ok)
		}
		// slow: three jobs started 10 s, 20 s and 30 s late; two finish
		// (done, dead), one runs.
		for _, ago := range []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second} {
			insertDue(t, s, "slow", ago)
		}
		claims, err := s.JobsClaim(ctx, "inc-a", "node-a", 10, hold)
		require.NoError(t, err)
		require.Len(t, claims, 3)
		slices.SortFunc(claims, func(a, b store.Claim) int { return a.RunAt.Compare(b.RunAt) })
		finish(claims[0], store.StateDone) // oldest run time first: 30 s
		finish(claims[1], store.StateDead) // 20 s
		// fast: started at once, done; and one started 40 s late that
		// finished long ago, out of the window; and one cancelled unstarted.
		insertDue(t, s, "fast", 0)
		fast, err := s.JobsClaim(ctx, "inc-a", "node-a", 10, hold)
		require.NoError(t, err)
		require.Len(t, fast, 1)
		finish(fast[0], store.StateDone)
		insertDue(t, s, "fast", 40*time.Second)
		old, err := s.JobsClaim(ctx, "inc-a", "node-a", 10, hold)
		require.NoError(t, err)
		require.Len(t, old, 1)
		finish(old[0], store.StateFailed)
		_, err = s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {jobs} SET finished_at = {now+?} WHERE id = ?`), -int64(time.Hour/time.Millisecond), old[0].ID)
		require.NoError(t, err)
		cancelled := insertDue(t, s, "gone", 50*time.Second)
		_, err = s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {jobs} SET state = 'cancelled', finished_at = {now} WHERE id = ?`), cancelled)
		require.NoError(t, err)

		within := func(d, lo time.Duration) {
			t.Helper()
			require.GreaterOrEqual(t, d, lo)
			require.Less(t, d, lo+10*time.Second)
		}
		ds, err := s.QueueStartDelays(ctx, 10*time.Minute, 100)
		require.NoError(t, err)
		require.Len(t, ds, 2, "slow and fast; the cancelled job never started: %+v", ds)
		slow := ds["slow"]
		require.Equal(t, 3, slow.Jobs)
		within(slow.P50, 20*time.Second)
		within(slow.P99, 30*time.Second)
		require.Equal(t, slow.P99, slow.Max)
		require.Equal(t, 1, ds["fast"].Jobs, "the job finished an hour ago is out of the window")
		within(ds["fast"].P50, 0)

		// Bounded: one row per finished state and one running.
		ds, err = s.QueueStartDelays(ctx, 10*time.Minute, 1)
		require.NoError(t, err)
		total := 0
		for _, d := range ds {
			total += d.Jobs
		}
		require.Equal(t, 3, total, "the newest done (fast), the dead (slow) and the running (slow): %+v", ds)
		require.Equal(t, 2, ds["slow"].Jobs)
		within(ds["slow"].P50, 10*time.Second)
		within(ds["slow"].P99, 20*time.Second)
	})
}
