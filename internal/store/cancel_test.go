package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// A cancel of a running job is a request on its row: the claim stays its
// owner's, the next renewal reports who asked, and the owner's fenced
// result ends it cancelled with its history line.
func TestJobCancelRunningIsRequested(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		id, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/long", Method: "POST", MaxAttempts: 5, IdempotencyKey: "k"})
		require.NoError(t, err)
		other := enqueue(t, s, "/other", time.Hour)
		cs, err := s.JobsClaim(ctx, "inc-a", "node-a", 1, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, cs, 1)
		c := cs[0]

		held, err := s.JobsRenewLeases(ctx, "inc-a", store.Lease(time.Minute))
		require.NoError(t, err)
		require.Equal(t, []store.Held{{ID: id, Token: c.Token}}, held, "nobody asked yet")

		r, err := s.JobCancel(ctx, id, "operator ann")
		require.NoError(t, err)
		require.Equal(t, store.CancelRequested, r)
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.StateRunning, j.State, "the call stays until its owner acts")
		require.Equal(t, "operator ann", j.CancelRequestedBy)
		require.NotNil(t, j.CancelRequestedAt)
		require.Equal(t, c.Token, j.Token)

		r, err = s.JobCancel(ctx, id, "operator bob")
		require.NoError(t, err)
		require.Equal(t, store.CancelRequested, r, "asked twice: still requested")
		j, err = s.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "operator ann", j.CancelRequestedBy, "the first request stands")

		held, err = s.JobsRenewLeases(ctx, "inc-a", store.Lease(time.Minute))
		require.NoError(t, err)
		require.Equal(t, []store.Held{{ID: id, Token: c.Token, CancelBy: "operator ann"}}, held)
		require.Equal(t, store.Held{ID: id, Token: c.Token}, held[0].Claim())

		// The owner's result, fenced by its token: a stale one is refused.
		o := store.Outcome{State: store.StateCancelled, Error: store.CancelledWhileRunning("operator ann")}
		oks, err := s.JobsFinish(ctx, []store.Finish{{ID: id, Token: c.Token + 1, Outcome: o}})
		require.NoError(t, err)
		require.Equal(t, []bool{false}, oks)
		oks, err = s.JobsFinish(ctx, []store.Finish{{ID: id, Token: c.Token, Outcome: o}})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, oks)
		j, err = s.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.StateCancelled, j.State)
		require.Equal(t, "cancelled by operator ann while running", j.LastError)
		require.NotNil(t, j.Finished)
		require.Empty(t, j.Owner)
		require.Equal(t, 1, j.Attempt, "one attempt, no retry")
		require.NotEmpty(t, j.History)
		last := j.History[len(j.History)-1]
		require.Equal(t, store.StateCancelled, last.Outcome)
		require.Equal(t, "node-a", last.Node)
		require.Equal(t, "cancelled by operator ann while running", last.Error)

		r, err = s.JobCancel(ctx, id, "operator ann")
		require.NoError(t, err)
		require.Equal(t, store.CancelFinished, r)
		r, err = s.JobCancel(ctx, 999999999, "operator ann")
		require.NoError(t, err)
		require.Equal(t, store.CancelNotFound, r)

		// A waiting job is cancelled at once, as before.
		r, err = s.JobCancel(ctx, other, "operator ann")
		require.NoError(t, err)
		require.Equal(t, store.CancelledWaiting, r)
		j, err = s.JobGet(ctx, other)
		require.NoError(t, err)
		require.Equal(t, store.StateCancelled, j.State)
		require.Empty(t, j.CancelRequestedBy)
	})
}

// A call that fails after the request but before its node heard of it
// ends cancelled, not retried, in the batch and the single-row finish
// alike; one that succeeded first ends done.
func TestJobCancelRequestedStopsRetry(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		retry := store.Outcome{State: store.StateReady, RetryAfter: time.Millisecond, Status: 503, Error: "unavailable"}
		for _, batch := range []bool{true, false} {
			id, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/flaky", Method: "POST", MaxAttempts: 5, IdempotencyKey: "k"})
			require.NoError(t, err)
			cs, err := s.JobsClaim(ctx, "inc-a", "node-a", 1, store.Lease(time.Minute))
			require.NoError(t, err)
			require.Len(t, cs, 1)
			r, err := s.JobCancel(ctx, id, "ops")
			require.NoError(t, err)
			require.Equal(t, store.CancelRequested, r)
			if batch {
				oks, err := s.JobsFinish(ctx, []store.Finish{{ID: id, Token: cs[0].Token, Outcome: retry}})
				require.NoError(t, err)
				require.Equal(t, []bool{true}, oks)
			} else {
				ok, err := s.JobFinishIfRunning(ctx, id, cs[0].Token, retry)
				require.NoError(t, err)
				require.True(t, ok)
			}
			j, err := s.JobGet(ctx, id)
			require.NoError(t, err)
			require.Equal(t, store.StateCancelled, j.State, "batch %v", batch)
			require.Equal(t, "cancelled by ops while running", j.LastError)
			require.Equal(t, 503, j.LastStatus)
			require.NotNil(t, j.Finished)
			time.Sleep(5 * time.Millisecond)
			again, err := s.JobsClaim(ctx, "inc-a", "node-a", 1, store.Lease(time.Minute))
			require.NoError(t, err)
			require.Empty(t, again, "no further attempt")
		}

		// Done before the cancel was heard: done.
		id, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/quick", Method: "POST", MaxAttempts: 5, IdempotencyKey: "k"})
		require.NoError(t, err)
		cs, err := s.JobsClaim(ctx, "inc-a", "node-a", 1, store.Lease(time.Minute))
		require.NoError(t, err)
		_, err = s.JobCancel(ctx, id, "ops")
		require.NoError(t, err)
		oks, err := s.JobsFinish(ctx, []store.Finish{{ID: id, Token: cs[0].Token, Outcome: store.Outcome{State: store.StateDone, Status: 200}}})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, oks)
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.StateDone, j.State)
		require.Empty(t, j.LastError)
	})
}

// A reclaim of an expired lease ends a cancel-requested job cancelled,
// whatever attempts it has left; other expired jobs go back to ready.
func TestReclaimOfCancelRequestedIsCancelled(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		asked, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/asked", Method: "POST", MaxAttempts: 5, IdempotencyKey: "k1"})
		require.NoError(t, err)
		plain, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/plain", Method: "POST", MaxAttempts: 5, IdempotencyKey: "k2"})
		require.NoError(t, err)
		cs, err := s.JobsClaim(ctx, "inc-a", "node-a", 2, store.Lease(-time.Second))
		require.NoError(t, err)
		require.Len(t, cs, 2)
		r, err := s.JobCancel(ctx, asked, "ops\tteam")
		require.NoError(t, err)
		require.Equal(t, store.CancelRequested, r)

		n, err := s.JobsReclaimExpired(ctx, time.Time{})
		require.NoError(t, err)
		require.Equal(t, int64(2), n)

		j, err := s.JobGet(ctx, asked)
		require.NoError(t, err)
		require.Equal(t, store.StateCancelled, j.State)
		require.Equal(t, "cancelled by ops team while running", j.LastError)
		require.NotNil(t, j.Finished)
		require.Empty(t, j.Owner)
		require.NotEmpty(t, j.History)
		last := j.History[len(j.History)-1]
		require.Equal(t, store.StateCancelled, last.Outcome)
		require.Equal(t, "cancelled by ops team while running", last.Error)

		j, err = s.JobGet(ctx, plain)
		require.NoError(t, err)
		require.Equal(t, store.StateReady, j.State)
		require.Contains(t, j.LastError, "lease expired")
		require.Nil(t, j.Finished)
	})
}

// A release (a stopping node, a claim it could not start) of a
// cancel-requested job ends it cancelled rather than ready; other jobs go
// back unrun as before.
func TestReleaseOfCancelRequestedIsCancelled(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		one, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/one", Method: "POST", MaxAttempts: 5, IdempotencyKey: "k1"})
		require.NoError(t, err)
		owned, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/owned", Method: "POST", MaxAttempts: 5, IdempotencyKey: "k2"})
		require.NoError(t, err)
		plain, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/plain", Method: "POST", MaxAttempts: 5, IdempotencyKey: "k3"})
		require.NoError(t, err)
		cs, err := s.JobsClaim(ctx, "inc-a", "node-a", 3, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, cs, 3)
		for _, id := range []int64{one, owned} {
			r, err := s.JobCancel(ctx, id, "ops")
			require.NoError(t, err)
			require.Equal(t, store.CancelRequested, r)
		}

		ok, err := s.JobReleaseIfRunning(ctx, one, cs[0].Token, "released unfinished: node node-a stopped")
		require.NoError(t, err)
		require.True(t, ok)
		n, err := s.JobsReleaseOwned(ctx, "inc-a", "released unrun: node node-a stopped")
		require.NoError(t, err)
		require.Equal(t, int64(2), n)

		for _, id := range []int64{one, owned} {
			j, err := s.JobGet(ctx, id)
			require.NoError(t, err)
			require.Equal(t, store.StateCancelled, j.State, "job %d", id)
			require.Equal(t, "cancelled by ops while running", j.LastError)
			require.Equal(t, 1, j.Attempt, "the attempt it was stopped in counts")
			require.NotNil(t, j.Finished)
			last := j.History[len(j.History)-1]
			require.Equal(t, store.StateCancelled, last.Outcome)
			require.Equal(t, "cancelled by ops while running", last.Error)
		}
		j, err := s.JobGet(ctx, plain)
		require.NoError(t, err)
		require.Equal(t, store.StateReady, j.State)
		require.Equal(t, 0, j.Attempt)
		require.Equal(t, "released unrun: node node-a stopped", j.LastError)
		require.Equal(t, store.OutcomeReleased, j.History[len(j.History)-1].Outcome)
	})
}

// An operator's retry of a job cancelled while running is a fresh run:
// the old request does not cancel it again.
func TestRetryClearsTheCancelRequest(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		id, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/again", Method: "POST", MaxAttempts: 5, IdempotencyKey: "k"})
		require.NoError(t, err)
		cs, err := s.JobsClaim(ctx, "inc-a", "node-a", 1, store.Lease(time.Minute))
		require.NoError(t, err)
		_, err = s.JobCancel(ctx, id, "ops")
		require.NoError(t, err)
		o := store.Outcome{State: store.StateCancelled, Error: store.CancelledWhileRunning("ops")}
		oks, err := s.JobsFinish(ctx, []store.Finish{{ID: id, Token: cs[0].Token, Outcome: o}})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, oks)

		n, err := s.JobsRetry(ctx, store.JobFilter{ID: id, Limit: 1}, "ops")
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		require.Empty(t, j.CancelRequestedBy)
		require.Nil(t, j.CancelRequestedAt)
		cs, err = s.JobsClaim(ctx, "inc-a", "node-a", 1, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, cs, 1)
		held, err := s.JobsRenewLeases(ctx, "inc-a", store.Lease(time.Minute))
		require.NoError(t, err)
		require.Equal(t, []store.Held{{ID: id, Token: cs[0].Token}}, held)
	})
}
