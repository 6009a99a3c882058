package jobs_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// A poll that leaves due work behind tells the farm while it claims, not
// after it has started its calls: the claim statement here waits for the
// signal, which a signal sent after the claim would never give it.
func TestPollSignalsABacklogAlongsideItsClaim(t *testing.T) {
	s, f := openFaulty(t)
	ctx := context.Background()
	rec := &seen{}
	r := newRunner(t, s, endpoint(t, rec), clock.NewFake(t0), 4)
	for range 10 {
		enqueue(t, s, "/ok", 1)
	}
	heard := make(chan int, 1)
	var claimWaitedInVain atomic.Bool
	f.set(func(ctx context.Context, query string) fault {
		if isClaim(query) {
			select {
			case left := <-heard:
				heard <- left
			case <-time.After(5 * time.Second):
				claimWaitedInVain.Store(true)
			}
		}
		return fault{}
	})
	errRegistry := errors.New("registry away")
	turn := alone(4)
	turn.Backlog = func(ctx context.Context, left int) error {
		heard <- left
		return errRegistry
	}
	res, err := r.Poll(ctx, turn)
	require.NoError(t, err, "a failed signal does not fail the poll")
	require.False(t, claimWaitedInVain.Load(), "the backlog was signalled only after the claim")
	require.Equal(t, 4, res.Claimed)
	require.Equal(t, 6, res.Left)
	require.Equal(t, 6, <-heard, "the signal says how much the poll leaves")
	require.True(t, res.Signalled)
	require.ErrorIs(t, res.BacklogErr, errRegistry)
	r.Wait()
	f.set(nil)

	// A poll that takes all that is due (the other 6) signals nothing.
	big := newRunner(t, s, endpoint(t, rec), clock.NewFake(t0), 16)
	turn = alone(16)
	turn.Backlog = func(context.Context, int) error {
		t.Error("signalled a backlog with nothing left behind")
		return nil
	}
	res, err = big.Poll(ctx, turn)
	require.NoError(t, err)
	require.Equal(t, 6, res.Claimed)
	require.Equal(t, 0, res.Left)
	require.False(t, res.Signalled)
	big.Wait()
}

// A widened turn leaves expired leases to the slot owner's turn, which
// reclaims them once a slot: a node woken by a backlog claims a round trip
// sooner.
func TestOnlyTheOwnersTurnReclaimsExpiredLeases(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	rec := &seen{}
	r := newRunner(t, s, endpoint(t, rec), clock.NewFake(t0), 4)
	id := enqueue(t, s, "/ok", 3)
	cs, err := s.JobsClaim(ctx, "inc-b", "node-b", 1, store.Lease(time.Minute))
	require.NoError(t, err)
	require.Len(t, cs, 1)
	_, err = s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {jobs} SET lease_until = {now+?} WHERE id = ?`), -1000, id)
	require.NoError(t, err)

	widened := alone(4)
	widened.Widened = true
	res, err := r.Poll(ctx, widened)
	require.NoError(t, err)
	require.Zero(t, res.Reclaimed)
	require.Equal(t, store.StateRunning, get(t, s, id).State, "a widened turn reclaimed an expired lease")

	res, err = r.Poll(ctx, alone(4))
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Reclaimed)
	require.Equal(t, 1, res.Claimed, "the owner's turn reclaims the job and claims it")
	r.Wait()
}

// A node with no room leaves all that is due, and says so: the poll is
// the one place that tells the farm of a backlog.
func TestAFullNodesPollSignalsTheBacklogItLeaves(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	rec := &seen{}
	r := newRunner(t, s, endpoint(t, rec), clock.NewFake(t0), 1)
	enqueue(t, s, "/block", 1)
	res, err := r.Poll(ctx, alone(1))
	require.NoError(t, err)
	require.Equal(t, 1, res.Claimed)
	enqueue(t, s, "/ok", 1)
	enqueue(t, s, "/ok", 1)
	var left []int
	turn := alone(1)
	turn.Backlog = func(_ context.Context, n int) error { left = append(left, n); return nil }
	res, err = r.Poll(ctx, turn)
	require.NoError(t, err)
	require.Equal(t, 0, res.Claimed)
	require.Equal(t, 2, res.Left)
	require.True(t, res.Signalled)
	require.Equal(t, []int{2}, left)
	r.Drain(0)
}

// A widened turn exists to tell nodes of a backlog. A node that already
// takes it as its calls end, the whole farm having heard of it, would
// only count what it knows: its widened turns send nothing (at 100,000
// jobs on four nodes their counts took a sixth of the database's CPU).
// Before the farm has heard, and at the slot owner's turn, it counts.
func TestAWidenedTurnOfANodeDrainingTheBacklogSendsNothing(t *testing.T) {
	s, f := openFaulty(t)
	ctx := context.Background()
	g, c, r := burstOf48(t, s)
	owners := jobs.Turn{FarmCapacity: 24, NextPoll: time.Second, StartWindow: 2 * time.Second}
	res, err := r.Poll(ctx, owners)
	require.NoError(t, err)
	require.Equal(t, 8, res.Claimed)
	require.Equal(t, 40, res.Left)

	var sent atomic.Int64
	f.set(func(context.Context, string) fault { sent.Add(1); return fault{} })
	widened := owners
	widened.Widened = true
	r.FarmBacklog(true)
	res, err = r.Poll(ctx, widened)
	require.NoError(t, err)
	require.False(t, res.Skipped, "the farm may not have heard of the backlog yet")
	require.Positive(t, sent.Load(), "the turn counted")

	c.Advance(time.Second)
	sent.Store(0)
	res, err = r.Poll(ctx, widened)
	require.NoError(t, err)
	require.True(t, res.Skipped)
	require.Zero(t, sent.Load(), "a widened turn of a node that drains the backlog sent a statement")

	res, err = r.Poll(ctx, owners)
	require.NoError(t, err)
	require.False(t, res.Skipped, "the slot owner's turn reclaims and counts")
	require.Equal(t, 40, res.Due)
	require.Positive(t, sent.Load())
	g.release(100)
}
