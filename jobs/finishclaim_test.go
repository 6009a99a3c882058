package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
)

// On PostgreSQL a batch of results carries the claim for the room its
// calls make while the node knows of due work: one statement per round
// of the node's calls where Refill would send a second. A batch too small
// for Refill to claim at once goes alone, and the claim follows Refill's
// cooldown as before.
func TestResultsCarryTheClaimOfTheirRoom(t *testing.T) {
	storetest.RequirePostgres(t)
	s, _ := storetest.Open(t, "postgres")
	require.True(t, s.FusesFinishAndClaim())
	ctx := context.Background()
	g, base := newGate(t)
	c := clock.NewFake(t0)
	r := jobs.NewRunner(s, &jobs.Invoker{Base: base}, jobs.Options{Node: "node-a", Incarnation: "inc-a", Capacity: 8,
		Lease: 3 * time.Second, Timeout: 5 * time.Second, Clock: c, FinishWindow: 5 * time.Millisecond})
	for range 30 {
		enqueue(t, s, "/gate", 1)
	}
	refilling(t, r)
	res, err := r.Poll(ctx, alone(8))
	require.NoError(t, err)
	require.Equal(t, 8, res.Claimed)

	// All eight calls end within the completer's window: their results and
	// eight new claims, one statement.
	before := s.Statements()
	g.release(8)
	require.Eventually(t, func() bool { return r.Pending() == 8 }, 10*time.Second, time.Millisecond)
	c.Advance(5 * time.Millisecond)
	claimedReaches(t, r, 16)
	require.Equal(t, int64(1), s.Statements()-before, "the results and the claim in one statement")
	require.Equal(t, int64(1), r.Stats().Finishes)
	require.Equal(t, 8, countState(t, s, store.StateDone))

	// One call ends: too little room to claim at once, so its result goes
	// alone and Refill claims its place after the cooldown.
	before = s.Statements()
	g.release(1)
	require.Eventually(t, func() bool { return r.Pending() == 1 }, 10*time.Second, time.Millisecond)
	c.Advance(5 * time.Millisecond)
	require.Eventually(t, func() bool { return r.Running() == 7 }, 10*time.Second, time.Millisecond)
	require.Equal(t, int64(16), r.Stats().Claimed, "no claim with a lone result")
	require.Equal(t, int64(2), r.Stats().Finishes)
	claimedReachesCooling(t, r, c, 17)
	require.Equal(t, int64(2), s.Statements()-before, "the result, then Refill's claim")

	g.release(100)
	require.Eventually(t, func() bool {
		c.Advance(5 * time.Millisecond)
		return countState(t, s, store.StateDone) == 30
	}, 10*time.Second, time.Millisecond)
	_, most := g.stats()
	require.LessOrEqual(t, most, 8, "never more calls than the capacity")
}
