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

// A limited queue's backlog runs at its limit, call after call: when a
// call ends, the node claims again without waiting for a turn, and never
// more than the limit run at once. Only the first start comes from a poll.
func TestALimitedQueueRunsCallAfterCallWithoutTurns(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{{Name: "one", Limit: 1}}))
	g, base := newGate(t)
	c := clock.NewFake(t0)
	r := newRunner(t, s, base, c, 8)
	for range 4 {
		_, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/gate", MaxAttempts: 1, Queue: "one"})
		require.NoError(t, err)
	}
	refilling(t, r)
	res, err := r.Poll(ctx, alone(8))
	require.NoError(t, err)
	require.Equal(t, 1, res.Claimed, "the limit")
	require.Equal(t, 4, res.Due)
	for n := int64(2); n <= 4; n++ {
		g.release(1)
		claimedReaches(t, r, n)
	}
	g.release(1)
	require.Eventually(t, func() bool { return countState(t, s, store.StateDone) == 4 }, 10*time.Second, time.Millisecond)
	calls, most := g.stats()
	require.Equal(t, 4, calls)
	require.Equal(t, 1, most, "never more than the limit at once")
	require.Equal(t, int64(1), r.Stats().Polls, "one poll; the rest started as calls ended")
}

// A backlog that only a limit holds does not widen the rotation: the poll
// signals a backlog only when its managed claim came back full.
func TestALimitedBacklogIsNoFarmBacklog(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{{Name: "one", Limit: 1}, {Name: "first", Priority: 5}}))
	g, base := newGate(t)
	r := newRunner(t, s, base, clock.NewFake(t0), 4)
	for range 10 {
		_, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/gate", MaxAttempts: 1, Queue: "one"})
		require.NoError(t, err)
	}
	signals := 0
	turn := alone(4)
	turn.Backlog = func(context.Context, int) error { signals++; return nil }
	res, err := r.Poll(ctx, turn)
	require.NoError(t, err)
	require.Equal(t, 1, res.Claimed)
	require.Zero(t, signals, "ten due, one may run: no backlog for the farm")

	// A managed queue that is not held (a priority alone) and has more
	// due than the claim took is a backlog.
	for range 10 {
		_, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/gate", MaxAttempts: 1, Queue: "first"})
		require.NoError(t, err)
	}
	res, err = r.Poll(ctx, turn)
	require.NoError(t, err)
	require.Equal(t, 3, res.Claimed, "the room left")
	require.Equal(t, 1, signals)
	g.release(100)
}
