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

// A job of a paused queue is not started now: the fast path writes it
// ready, where it waits for the queue's resume.
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
			id, taken, err := r.StartNow(ctx, j)
			require.NoError(t, err)
			require.True(t, taken, "written: the caller must not enqueue it again")
			require.Equal(t, store.StateReady, get(t, s, id).State, "%+v", j)
		}
		require.Zero(t, r.Running())
		require.Zero(t, countState(t, s, store.StateRunning))
	})
}

// A job of a limited queue enqueued for now starts at once while its
// limit allows, and waits when it does not.
func TestStartNowStartsALimitedQueuesJobWithinItsLimit(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		g, base := newGate(t)
		opts := jobs.Options{Node: "node-a", Incarnation: "inc-a", Capacity: 4, Lease: 3 * time.Second, Timeout: 5 * time.Second,
			Clock: clock.NewFake(t0), Rand: func() float64 { return 0 }}
		if driver == "sqlserver" {
			// The T-SQL test server compiles each statement afresh on each
			// new connection, seconds apiece on a busy machine, and the
			// managed claim's transaction is five of them under one deadline.
			opts.StatementTimeout = time.Minute
		}
		r := jobs.NewRunner(s, &jobs.Invoker{Base: base}, opts)
		require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{{Name: "reports", Limit: 1}}))

		first, taken, err := r.StartNow(ctx, store.NewJob{Endpoint: "/gate", MaxAttempts: 3, Queue: "reports"})
		require.NoError(t, err)
		require.True(t, taken)
		require.Equal(t, store.StateRunning, get(t, s, first).State, "started at once")
		second, taken, err := r.StartNow(ctx, store.NewJob{Endpoint: "/gate", MaxAttempts: 3, Queue: "reports"})
		require.NoError(t, err)
		require.True(t, taken)
		require.Equal(t, store.StateReady, get(t, s, second).State, "the limit is reached: it waits")
		require.Equal(t, 1, r.Running())
		g.release(10)
	})
}
