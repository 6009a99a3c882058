package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

func TestStartNowInsertsTheJobClaimedAndCallsItAtOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		g, base := newGate(t)
		r := newRunner(t, s, base, clock.NewFake(t0), 2)

		id, taken, err := r.StartNow(ctx, store.NewJob{Endpoint: "/gate", MaxAttempts: 3, UniqueKey: "only-once"})
		require.NoError(t, err)
		require.True(t, taken)
		require.Equal(t, 1, r.Running(), "called with no poll")
		require.Eventually(t, func() bool { calls, _ := g.stats(); return calls == 1 }, 30*time.Second, time.Millisecond)
		j := get(t, s, id)
		require.Equal(t, store.StateRunning, j.State)
		require.Equal(t, "node-a", j.OwnerNode)
		require.Equal(t, "inc-a", j.Owner)
		require.EqualValues(t, 1, j.Token)
		require.Equal(t, 1, j.Attempt)
		require.NotNil(t, j.LeaseUntil)
		require.NotNil(t, j.Started)
		require.NotEmpty(t, j.IdempotencyKey, "filled in as any enqueue's")

		// Fenced like any claim: the lease renewal knows it.
		held, err := s.JobsRenewLeases(ctx, "inc-a", store.Lease(time.Minute))
		require.NoError(t, err)
		require.Equal(t, []store.Held{{ID: id, Token: 1}}, held)

		// A second job with the same unique key: the usual duplicate.
		dup, taken, err := r.StartNow(ctx, store.NewJob{Endpoint: "/gate", MaxAttempts: 3, UniqueKey: "only-once"})
		require.ErrorIs(t, err, store.ErrDuplicate)
		require.True(t, taken)
		require.Equal(t, id, dup)
		require.Equal(t, 1, r.Running())

		// Due later: not for the fast path.
		_, taken, err = r.StartNow(ctx, store.NewJob{Endpoint: "/gate", MaxAttempts: 3, Delay: time.Minute})
		require.NoError(t, err)
		require.False(t, taken)

		_, taken, err = r.StartNow(ctx, store.NewJob{Endpoint: "/gate", MaxAttempts: 3})
		require.NoError(t, err)
		require.True(t, taken)
		// The node is full now: the next one is left to the queue, unwritten.
		_, taken, err = r.StartNow(ctx, store.NewJob{Endpoint: "/gate", MaxAttempts: 3})
		require.NoError(t, err)
		require.False(t, taken)
		require.Equal(t, 2, countState(t, s, store.StateRunning))
		require.Zero(t, countState(t, s, store.StateReady))

		g.release(2)
		r.Wait()
		require.Equal(t, store.StateDone, get(t, s, id).State)
		require.Equal(t, int64(2), r.Stats().Succeeded)
	})
}

func TestStartNowRefusesABadJob(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	_, base := newGate(t)
	r := newRunner(t, s, base, clock.NewFake(t0), 2)
	_, _, err := r.StartNow(context.Background(), store.NewJob{Endpoint: "http://elsewhere/x", MaxAttempts: 3})
	var fe *jobs.FieldError
	require.ErrorAs(t, err, &fe)
	require.Zero(t, countState(t, s, store.StateRunning))
}
