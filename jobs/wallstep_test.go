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

// A node judges the leases it holds on its monotonic clock (the task
// keeper's tests run under wallSteps too). A step of its wall clock back
// between a claim and its call must not let the call start on a hold that
// ran out: the farm may have given the job to another node.
func TestAWallClockStepBackDoesNotLetAJobCallOnALeaseThatRanOut(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	rec := &seen{}
	c := clock.NewFake(t0)
	// Between the claim and the call, the wall clock steps back an hour
	// and the node freezes past the claim's hold (the 5 s timeout and the
	// margin).
	opts := jobs.Options{Node: "node-a", Incarnation: "inc-a", Capacity: 4, Lease: 3 * time.Second, Timeout: 5 * time.Second,
		Clock: c, Rand: func() float64 { return 0 },
		OnStart: func(store.Claim) { c.StepWall(-time.Hour); c.Advance(10 * time.Second) }}
	r := jobs.NewRunner(s, &jobs.Invoker{Base: endpoint(t, rec)}, opts)
	id := enqueue(t, s, "/ok", 3)
	res, err := r.Poll(ctx, alone(4))
	require.NoError(t, err)
	require.Equal(t, 1, res.Claimed)
	r.Wait()

	rec.mu.Lock()
	require.Empty(t, rec.paths, "no call on a lease that ran out on the monotonic clock")
	rec.mu.Unlock()
	j := get(t, s, id)
	require.Equal(t, store.StateReady, j.State, "given back unrun")
	require.Contains(t, j.LastError, "lease ran out before the call")
}
