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
// of the node's calls where Refill would send a second. Once the node
// knows of no more due work, results go alone.
func TestResultsCarryTheClaimOfTheirRoom(t *testing.T) {
	s, g, c, r, _ := joiningRunner(t, 30, 8)
	ctx := context.Background()

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

	// One call ends: its result carries the claim of its place, with no
	// cooldown (Refill waits one only to gather claims into a statement).
	before = s.Statements()
	g.release(1)
	require.Eventually(t, func() bool { return r.Pending() == 1 }, 10*time.Second, time.Millisecond)
	c.Advance(5 * time.Millisecond)
	claimedReaches(t, r, 17)
	require.Equal(t, int64(1), s.Statements()-before)
	require.Equal(t, int64(2), r.Stats().Finishes)

	// Another node takes the rest: the next claim comes back short, and
	// the node knows of no more work; a result then goes alone.
	other, err := s.JobsClaim(ctx, "inc-b", "node-b", 13, store.Lease(time.Minute))
	require.NoError(t, err)
	require.Len(t, other, 13)
	g.release(1)
	require.Eventually(t, func() bool { return r.Pending() == 1 }, 10*time.Second, time.Millisecond)
	c.Advance(5 * time.Millisecond)
	require.Eventually(t, func() bool { return r.Stats().Finishes == 3 }, 10*time.Second, time.Millisecond)
	require.Equal(t, int64(17), r.Stats().Claimed, "the claim came back empty")
	before = s.Statements()
	g.release(1)
	require.Eventually(t, func() bool { return r.Pending() == 1 }, 10*time.Second, time.Millisecond)
	c.Advance(5 * time.Millisecond)
	require.Eventually(t, func() bool { return r.Stats().Finishes == 4 }, 10*time.Second, time.Millisecond)
	require.Equal(t, int64(1), s.Statements()-before, "the result alone, no claim")
	require.Equal(t, int64(17), r.Stats().Claimed)

	g.release(100)
	require.Eventually(t, func() bool {
		c.Advance(5 * time.Millisecond)
		return countState(t, s, store.StateDone) == 17
	}, 10*time.Second, time.Millisecond)
	_, most := g.stats()
	require.LessOrEqual(t, most, 8, "never more calls than the capacity")
}

// A claim of Refill's (here one answering a note of new jobs) carries the
// results waiting for the completer's window: one statement, not two.
func TestAClaimCarriesTheResultsWaiting(t *testing.T) {
	s, g, c, r, _ := joiningRunner(t, 4, 4)

	g.release(1)
	require.Eventually(t, func() bool { return r.Pending() == 1 }, 10*time.Second, time.Millisecond)
	enqueue(t, s, "/gate", 1)
	enqueue(t, s, "/gate", 1)
	before := s.Statements()
	r.Due() // the enqueues' note
	claimedReaches(t, r, 6)
	require.Equal(t, int64(1), s.Statements()-before, "the claim and the waiting result in one statement")
	require.Equal(t, int64(1), r.Stats().Finishes)
	require.Equal(t, 0, r.Pending())
	require.Equal(t, 1, countState(t, s, store.StateDone))

	c.Advance(5 * time.Millisecond) // the completer's window ends: nothing left to write
	g.release(100)
	require.Eventually(t, func() bool {
		c.Advance(5 * time.Millisecond)
		return countState(t, s, store.StateDone) == 6
	}, 10*time.Second, time.Millisecond)
}

// Under a steady stream of enqueues a node's calls end between two notes'
// claims. Their results wait for the next note's claim, at most the rest
// of its cooldown, and ride on it: one statement per round of calls, not
// a batch of results and then a claim. When no note comes within the
// cooldown, the results go alone once it is over.
func TestResultsBetweenTwoNotesRideOnTheNextNotesClaim(t *testing.T) {
	s, g, c, r, _ := joiningRunner(t, 0, 0)

	enqueue(t, s, "/gate", 1)
	enqueue(t, s, "/gate", 1)
	r.Due()
	claimedReaches(t, r, 2)
	g.release(2)
	require.Eventually(t, func() bool { return r.Pending() == 2 }, 10*time.Second, time.Millisecond)
	before := s.Statements()
	c.Advance(5 * time.Millisecond) // the completer's window ends within the note's cooldown
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, before, s.Statements(), "the results wait for the next note's claim")
	require.Equal(t, 2, r.Pending())

	enqueue(t, s, "/gate", 1)
	enqueue(t, s, "/gate", 1)
	r.Due() // the next note, within the cooldown
	before = s.Statements()
	c.Advance(jobs.DefaultPushCooldown - 5*time.Millisecond)
	claimedReaches(t, r, 4)
	require.Equal(t, int64(1), s.Statements()-before, "the note's claim and the results in one statement")
	require.Equal(t, 0, r.Pending())
	require.Equal(t, 2, countState(t, s, store.StateDone))

	// No note comes: the results wait out the cooldown, then go alone.
	g.release(2)
	require.Eventually(t, func() bool { return r.Pending() == 2 }, 10*time.Second, time.Millisecond)
	before = s.Statements()
	finishes := r.Stats().Finishes
	c.Advance(5 * time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, before, s.Statements(), "within the cooldown the results wait")
	require.Eventually(t, func() bool {
		c.Advance(5 * time.Millisecond)
		return r.Pending() == 0 && r.Running() == 0
	}, 10*time.Second, time.Millisecond)
	require.Equal(t, int64(1), s.Statements()-before, "the results alone, no claim")
	require.Equal(t, finishes+1, r.Stats().Finishes)
	require.Equal(t, int64(4), r.Stats().Claimed)
	require.Equal(t, 4, countState(t, s, store.StateDone))
}

// Results that come while a claim is under way wait for it, then carry
// the next claim, for the room they make: one statement, where writing
// them at once cost one of their own and that claim another (at 1,000
// calls a node a third of the results went alone so).
func TestResultsWaitForAClaimUnderWayAndCarryTheNext(t *testing.T) {
	s, g, c, r, _ := joiningRunner(t, 6, 6)
	ctx := context.Background()
	for range 10 {
		enqueue(t, s, "/gate", 1)
	}
	// Another session holds the jobs table: the next claim waits in the
	// database, under way, until it lets go.
	tx, err := s.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, "LOCK TABLE slotpoller_jobs IN EXCLUSIVE MODE")
	require.NoError(t, err)

	before := s.Statements()
	r.Due() // a note: Refill claims the room of 2 and waits in the database
	require.Eventually(t, func() bool { return s.Statements() > before }, 10*time.Second, time.Millisecond)
	g.release(6)
	require.Eventually(t, func() bool { return r.Pending() == 6 }, 10*time.Second, time.Millisecond)
	c.Advance(jobs.DefaultPushCooldown) // the completer's window, and its wait for a note's claim
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, tx.Rollback())
	claimedReaches(t, r, 14)
	require.Eventually(t, func() bool { return r.Pending() == 0 && r.Stats().Finishes == 1 }, 10*time.Second, time.Millisecond)
	require.Equal(t, int64(2), s.Statements()-before, "the note's claim, then the results with the claim of their room")
	require.Equal(t, 6, countState(t, s, store.StateDone))
	g.release(100)
	require.Eventually(t, func() bool {
		c.Advance(5 * time.Millisecond)
		return countState(t, s, store.StateDone) == 16
	}, 10*time.Second, time.Millisecond)
}

// A node whose Refill has ended (it is stopping: its loops are over, it
// left the farm) records its results alone and claims nothing more, though
// it knew of due work.
func TestResultsClaimNothingOnceRefillEnds(t *testing.T) {
	s, g, c, r, stop := joiningRunner(t, 30, 8)
	stop()

	g.release(8)
	require.Eventually(t, func() bool { return r.Pending() == 8 }, 10*time.Second, time.Millisecond)
	c.Advance(5 * time.Millisecond)
	require.Eventually(t, func() bool { return r.Running() == 0 }, 10*time.Second, time.Millisecond)
	require.Equal(t, int64(8), r.Stats().Claimed, "no claim once Refill has ended")
	require.Equal(t, 8, countState(t, s, store.StateDone))
	require.Equal(t, 22, countState(t, s, store.StateReady))
}

// joiningRunner is a runner of capacity 8 on PostgreSQL, where results
// and claims join, with a completer's window of 5 ms on a fake clock,
// calling a gate, whose Refill runs (stop ends it): queued jobs were
// enqueued and a turn claimed the first claimed of them.
func joiningRunner(t *testing.T, queued, claimed int) (*store.Store, *gate, *clock.Fake, *jobs.Runner, func()) {
	storetest.RequirePostgres(t)
	s, _ := storetest.Open(t, "postgres")
	require.True(t, s.FusesFinishAndClaim())
	g, base := newGate(t)
	c := clock.NewFake(t0)
	r := jobs.NewRunner(s, &jobs.Invoker{Base: base}, jobs.Options{Node: "node-a", Incarnation: "inc-a", Capacity: 8,
		Lease: 3 * time.Second, Timeout: 5 * time.Second, Clock: c, FinishWindow: 5 * time.Millisecond})
	for range queued {
		enqueue(t, s, "/gate", 1)
	}
	stop := refilling(t, r)
	res, err := r.Poll(context.Background(), alone(8))
	require.NoError(t, err)
	require.Equal(t, claimed, res.Claimed)
	return s, g, c, r, stop
}
