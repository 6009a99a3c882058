package jobs_test

import (
	"context"
	"testing"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// A job of a paused queue is not started now: the fast path writes
// nothing and leaves it to the caller's ordinary enqueue, where it waits.
func TestStartNowLeavesAPausedQueuesJobToTheQueue(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		_, base := newGate(t)
		r := newRunner(t, s, base, clock.NewFake(t0), 2)
		require.NoError(t, s.QueuePause(ctx, "reports", "test", true))
		require.NoError(t, s.QueueRoutesPut(ctx, []store.QueueRoute{{Prefix: "/gate/reports", Queue: "reports"}}))

		for _, j := range []store.NewJob{
			{Endpoint: "/gate", MaxAttempts: 3, Queue: "reports"}, // named
			{Endpoint: "/gate/reports/daily", MaxAttempts: 3},     // routed
		} {
			_, taken, err := r.StartNow(ctx, j)
			require.NoError(t, err)
			require.False(t, taken, "%+v", j)
		}
		require.Zero(t, r.Running())
		require.Zero(t, countState(t, s, store.StateRunning))
		require.Zero(t, countState(t, s, store.StateReady), "nothing written: the caller enqueues it")
	})
}
