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

// A node that found more due work than it had room for claims again as its
// calls end, without waiting for its next turn; it stops once a claim finds
// the queue dry, and then sends nothing until a turn finds work again.
func TestRefillClaimsAgainAsCallsEnd(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rec := &seen{}
		c := clock.NewFake(t0)
		r := newRunner(t, s, endpoint(t, rec), c, 4)
		var ids []int64
		for range 20 {
			ids = append(ids, enqueue(t, s, "/ok", 1))
		}
		refilled := make(chan error, 1)
		go func() { refilled <- r.Refill(ctx) }()

		res, err := r.Poll(ctx, alone(4))
		require.NoError(t, err)
		require.Equal(t, 4, res.Claimed, "the turn takes what the node has room for")
		require.Equal(t, 16, res.Left)

		// Calls end at once; each refill waits out the cooldown on the
		// node's clock, so time is moved on until every job is done.
		done := func() bool {
			for _, id := range ids {
				if get(t, s, id).State != store.StateDone {
					return false
				}
			}
			return true
		}
		require.Eventually(t, func() bool {
			c.Advance(jobs.RefillCooldown)
			return done()
		}, time.Minute, time.Millisecond, "the node claims the rest as its calls end")
		require.Equal(t, int64(1), r.Stats().Polls, "one turn found the work; the rest was claimed between turns")
		require.Equal(t, int64(20), r.Stats().Claimed)
		require.Len(t, rec.all(), 20)

		// The queue is dry: a last claim finds fewer rows than it asks for
		// (it may take one more, when the last batch filled the room
		// exactly), and the node goes quiet until its next turn.
		r.Wait()
		idle := func() bool { return c.Waiters() == 0 } // no cooldown pending, no call
		quiet := 0
		for round := 0; quiet < 3; round++ {
			require.Less(t, round, 50, "the node kept claiming after the queue ran dry")
			sent := s.Statements()
			c.Advance(jobs.RefillCooldown)
			require.Eventually(t, idle, 5*time.Second, time.Millisecond)
			if s.Statements() == sent {
				quiet++
			} else {
				quiet = 0
			}
		}
		cancel()
		require.ErrorIs(t, <-refilled, context.Canceled)
	})
}

// Between turns a node takes no more than the share its last turn gave it:
// the rest of a burst is left to the nodes whose turns come next, so a node
// that drains fast cannot take the whole burst.
func TestRefillStopsAtTheTurnsShare(t *testing.T) {
	for name, turn := range map[string]jobs.Turn{
		// None of them urgent: the next poll comes well within their window.
		"none urgent": {FarmCapacity: 16, NextPoll: 100 * time.Millisecond, StartWindow: time.Hour},
		// All of them urgent (the next poll comes after their window): the
		// node starts what it has room for now, and the urgent ones it
		// cannot start are no reason to take more than its share later.
		"all urgent": {FarmCapacity: 16, NextPoll: time.Second, StartWindow: time.Second},
	} {
		t.Run(name, func(t *testing.T) { refillStopsAtTheTurnsShare(t, turn) })
	}
}

func refillStopsAtTheTurnsShare(t *testing.T, turn jobs.Turn) {
	s, _ := storetest.Open(t, "sqlite")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &seen{}
	c := clock.NewFake(t0)
	r := newRunner(t, s, endpoint(t, rec), c, 4)
	for range 20 {
		enqueue(t, s, "/ok", 1)
	}
	go func() { _ = r.Refill(ctx) }()

	// A farm of four such nodes: this node's share of 20 is 5.
	res, err := r.Poll(ctx, turn)
	require.NoError(t, err)
	require.Equal(t, 4, res.Claimed)
	require.Eventually(t, func() bool {
		c.Advance(jobs.RefillCooldown)
		return len(rec.all()) == 5 && c.Waiters() == 0
	}, 5*time.Second, time.Millisecond, "one more job, then the share is used up")
	for range 10 {
		c.Advance(jobs.RefillCooldown)
	}
	r.Wait()
	require.Equal(t, int64(5), r.Stats().Claimed, "the other 15 wait for the other nodes' turns")
}
