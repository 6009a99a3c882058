package jobs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// OnStart hears of every job the runner starts, by a poll's claim and by
// start-now, with the claim (its queue and run time): the node's start
// delay histogram is fed from it.
func TestOnStartHearsOfEveryStartedJob(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	var mu sync.Mutex
	var started []store.Claim
	opts := jobs.Options{Node: "node-a", Incarnation: "inc-a", Capacity: 10, Lease: 3 * time.Second, Timeout: 5 * time.Second,
		Clock: clock.NewFake(t0), Rand: func() float64 { return 0 },
		OnStart: func(c store.Claim) { mu.Lock(); started = append(started, c); mu.Unlock() }}
	r := jobs.NewRunner(s, &jobs.Invoker{Base: endpoint(t, &seen{})}, opts)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	late := now.Add(-2 * time.Second)
	polled, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/ok", MaxAttempts: 1, RunAt: &late, Queue: "reports"})
	require.NoError(t, err)
	res, err := r.Poll(ctx, jobs.Turn{FarmCapacity: 10, NextPoll: time.Second, StartWindow: time.Second})
	require.NoError(t, err)
	require.Equal(t, 1, res.Claimed)
	id, taken, err := r.StartNow(ctx, store.NewJob{Endpoint: "/ok", MaxAttempts: 1})
	require.NoError(t, err)
	require.True(t, taken)
	r.Wait()

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, started, 2)
	require.Equal(t, polled, started[0].ID)
	require.Equal(t, "reports", started[0].Queue)
	require.WithinDuration(t, late, started[0].RunAt, time.Millisecond)
	require.Equal(t, id, started[1].ID)
	require.Equal(t, store.DefaultQueue, started[1].Queue)
}
