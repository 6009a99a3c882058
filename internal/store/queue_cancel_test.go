package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// A queue's cancel asks each of its running jobs not yet asked to stop,
// and cancels its waiting ones only when asked to; other queues and
// finished jobs are not touched, and a request already made stands.
func TestQueueCancel(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		insert := func(endpoint, queue string, delay time.Duration) int64 {
			t.Helper()
			id, err := s.JobInsert(ctx, store.NewJob{Endpoint: endpoint, Method: "POST", MaxAttempts: 5, IdempotencyKey: "k",
				Queue: queue, Delay: delay})
			require.NoError(t, err)
			return id
		}
		get := func(id int64) store.Job {
			t.Helper()
			j, err := s.JobGet(ctx, id)
			require.NoError(t, err)
			return j
		}
		run1, run2, asked := insert("/r1", "reports", 0), insert("/r2", "reports", 0), insert("/r3", "reports", 0)
		backoff, done := insert("/backoff", "reports", 0), insert("/done", "reports", 0)
		otherRun := insert("/o1", "other", 0)
		cs, err := s.JobsClaim(ctx, "inc-a", "node-a", 10, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, cs, 6)
		token := map[int64]int64{}
		for _, c := range cs {
			token[c.ID] = c.Token
		}
		oks, err := s.JobsFinish(ctx, []store.Finish{
			{ID: done, Token: token[done], Outcome: store.Outcome{State: store.StateDone, Status: 200}},
			{ID: backoff, Token: token[backoff], Outcome: store.Outcome{State: store.StateReady, RetryAfter: time.Hour, Status: 503, Error: "unavailable"}},
		})
		require.NoError(t, err)
		require.Equal(t, []bool{true, true}, oks)
		r, err := s.JobCancel(ctx, asked, "first")
		require.NoError(t, err)
		require.Equal(t, store.CancelRequested, r)
		due, later := insert("/w1", "reports", 0), insert("/w2", "reports", time.Hour)
		otherWait := insert("/o2", "other", 0)

		// Running ones only.
		requested, cancelled, err := s.QueueCancel(ctx, "reports", "ops", false)
		require.NoError(t, err)
		require.EqualValues(t, 2, requested, "the two running jobs not asked yet")
		require.Zero(t, cancelled, "waiting jobs are cancelled only when asked")
		for _, id := range []int64{run1, run2} {
			j := get(id)
			require.Equal(t, store.StateRunning, j.State, "the call stays until its owner acts")
			require.Equal(t, "ops", j.CancelRequestedBy)
			require.NotNil(t, j.CancelRequestedAt)
			require.Equal(t, token[id], j.Token)
		}
		require.Equal(t, "first", get(asked).CancelRequestedBy, "the first request stands")
		require.Empty(t, get(otherRun).CancelRequestedBy, "another queue's job is not asked")
		require.Equal(t, store.StateRunning, get(otherRun).State)
		for _, id := range []int64{due, later, backoff, otherWait} {
			require.Equal(t, store.StateReady, get(id).State)
		}
		require.Equal(t, store.StateDone, get(done).State)

		// Its owner hears of each request at its next renewal.
		held, err := s.JobsRenewLeases(ctx, "inc-a", store.Lease(time.Minute))
		require.NoError(t, err)
		by := map[int64]string{}
		for _, h := range held {
			by[h.ID] = h.CancelBy
		}
		require.Equal(t, map[int64]string{run1: "ops", run2: "ops", asked: "first", otherRun: ""}, by)

		// With the waiting ones: cancelled at once, history line included.
		requested, cancelled, err = s.QueueCancel(ctx, "reports", "ops two", true)
		require.NoError(t, err)
		require.Zero(t, requested, "every running job was asked already")
		require.EqualValues(t, 3, cancelled, "ready, not yet due, and backing off")
		for _, id := range []int64{due, later, backoff} {
			j := get(id)
			require.Equal(t, store.StateCancelled, j.State)
			require.NotNil(t, j.Finished)
			require.Empty(t, j.CancelRequestedBy)
			require.NotEmpty(t, j.History)
			last := j.History[len(j.History)-1]
			require.Equal(t, store.StateCancelled, last.Outcome)
			require.Equal(t, "ops two", last.Node, "who cancelled it")
		}
		require.Equal(t, 1, get(backoff).Attempt)
		require.Equal(t, store.StateReady, get(otherWait).State, "another queue's waiting job stays")
		require.Equal(t, store.StateDone, get(done).State, "a finished job stays")
		require.Empty(t, get(done).CancelRequestedBy)
		require.Equal(t, "ops", get(run1).CancelRequestedBy, "asked again: the first request stands")

		// A queue with nothing to cancel, or that no job names: nothing.
		requested, cancelled, err = s.QueueCancel(ctx, "nobody", "ops", true)
		require.NoError(t, err)
		require.Zero(t, requested)
		require.Zero(t, cancelled)
	})
}
