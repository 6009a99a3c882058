package jobs_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// gate is an endpoint whose calls each wait for one token from open; it
// records the most calls it ever had at once.
type gate struct {
	open chan struct{}

	mu         sync.Mutex
	now, most  int
	calls      int
	unblockAll chan struct{}
}

func newGate(t *testing.T) (*gate, *url.URL) {
	g := &gate{open: make(chan struct{}, 1000), unblockAll: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.now++
		g.calls++
		g.most = max(g.most, g.now)
		g.mu.Unlock()
		select {
		case <-g.open:
		case <-g.unblockAll:
		case <-r.Context().Done():
		}
		g.mu.Lock()
		g.now--
		g.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(g.unblockAll) })
	u, _ := url.Parse(srv.URL)
	return g, u
}

// release lets n calls end.
func (g *gate) release(n int) {
	for range n {
		g.open <- struct{}{}
	}
}

func (g *gate) stats() (calls, most int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls, g.most
}

// refilling runs r.Refill until the test ends; stop ends it and waits.
func refilling(t *testing.T, r *jobs.Runner) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Refill(ctx) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// claimedReaches waits until the runner has claimed n jobs in all. Only the
// wait is real time: what it waits for is decided by the fake clock.
func claimedReaches(t *testing.T, r *jobs.Runner, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return r.Stats().Claimed == n }, 10*time.Second, time.Millisecond,
		"claimed %d, want %d", r.Stats().Claimed, n)
}

// claimedReachesCooling is claimedReaches for a runner whose refill may
// wait out its cooldown on the way: the fake clock is moved on whenever it
// does (a timer pending beyond each call's lease watchdog).
func claimedReachesCooling(t *testing.T, r *jobs.Runner, c *clock.Fake, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		if c.Waiters() > r.Running() {
			c.Advance(jobs.DefaultRefillCooldown)
		}
		return r.Stats().Claimed == n
	}, 10*time.Second, time.Millisecond, "claimed %d, want %d", r.Stats().Claimed, n)
}

func countState(t *testing.T, s *store.Store, state string) int {
	counts, err := s.JobCounts(context.Background())
	require.NoError(t, err)
	return counts[state]
}

func TestRefillClaimsAgainAsCallsEndAndStopsWhenAClaimComesBackShort(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	g, base := newGate(t)
	c := clock.NewFake(t0)
	r := newRunner(t, s, base, c, 8)
	for range 30 {
		enqueue(t, s, "/gate", 1)
	}
	stop := refilling(t, r)
	res, err := r.Poll(ctx, alone(8))
	require.NoError(t, err)
	require.Equal(t, 8, res.Claimed)
	require.Equal(t, 22, res.Left)

	// A quarter of the capacity frees up: claimed for at once, in one
	// statement, without waiting for a turn.
	g.release(2)
	claimedReaches(t, r, 10)

	// One call ends: less than a quarter free, so the claim waits for the
	// cooldown, then takes the one free place.
	g.release(1)
	require.Eventually(t, func() bool { return r.Running() == 7 }, 10*time.Second, time.Millisecond)
	require.NoError(t, c.BlockUntil(ctx, 8)) // 7 call watchdogs and the cooldown
	require.Equal(t, int64(10), r.Stats().Claimed, "no claim before the cooldown")
	c.Advance(jobs.DefaultRefillCooldown)
	claimedReaches(t, r, 11)

	// Another node takes most of the rest: the next claim comes back
	// short, and the node goes back to waiting for its turn.
	other, err := s.JobsClaim(ctx, "inc-b", "node-b", 18, store.Lease(time.Minute))
	require.NoError(t, err)
	require.Len(t, other, 18)
	g.release(4)
	claimedReaches(t, r, 12) // asked for 2 or more, got the last one

	for range 5 {
		enqueue(t, s, "/gate", 1)
	}
	g.release(100)
	require.Eventually(t, func() bool { return r.Running() == 0 }, 10*time.Second, time.Millisecond)
	c.Advance(time.Second)
	stop()
	require.Equal(t, int64(12), r.Stats().Claimed, "a short claim ends refilling until a turn finds work")
	require.Equal(t, 5, countState(t, s, store.StateReady))
	_, most := g.stats()
	require.LessOrEqual(t, most, 8, "never more calls than the capacity")
}

func TestRefillNeverClaimsMoreThanFree(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	g, base := newGate(t)
	c := clock.NewFake(t0)
	r := newRunner(t, s, base, c, 8)
	for range 60 {
		enqueue(t, s, "/gate", 1)
	}
	refilling(t, r)
	_, err := r.Poll(ctx, alone(8))
	require.NoError(t, err)
	claimed := int64(8)
	for range 5 {
		// Three calls end: a quarter's worth is claimed for at once, the
		// third place after the cooldown (or with them, if all three end
		// before the claim).
		g.release(3)
		require.Eventually(t, func() bool { return r.Stats().Claimed >= claimed+2 }, 10*time.Second, time.Millisecond)
		if r.Stats().Claimed == claimed+2 {
			require.Eventually(t, func() bool { return r.Running() == 7 }, 10*time.Second, time.Millisecond)
			require.NoError(t, c.BlockUntil(ctx, 8))
			c.Advance(jobs.DefaultRefillCooldown)
		}
		claimed += 3
		claimedReaches(t, r, claimed)
		require.Equal(t, 8, countState(t, s, store.StateRunning), "held in the database: the capacity, no more")
	}
	_, most := g.stats()
	require.LessOrEqual(t, most, 8)
}

// spendShare polls a burst of 48 due jobs on a node of capacity 8 (a third
// of a farm of three) in turn, whose calls wait at the gate, and lets
// them end until the node has claimed its share, 16, and stopped claiming:
// the other nodes may not know of the burst yet, so its room stays empty.
func spendShare(t *testing.T, turn jobs.Turn) (*gate, *clock.Fake, *jobs.Runner) {
	s, _ := storetest.Open(t, "sqlite")
	g, c, r := burstOf48(t, s)
	res, err := r.Poll(context.Background(), turn)
	require.NoError(t, err)
	require.Equal(t, 8, res.Claimed)
	require.Equal(t, 40, res.Left)

	g.release(8)
	claimedReachesCooling(t, r, c, 16)
	g.release(8)
	require.Eventually(t, func() bool { return r.Running() == 0 && countState(t, s, store.StateDone) == 16 }, 10*time.Second, time.Millisecond)
	require.Equal(t, int64(16), r.Stats().Claimed, "no more than its share of the whole farm before the farm knows")
	return g, c, r
}

// burstOf48 is a refilling node of capacity 8 on s, a third of a farm of
// three, whose backlog spreads in a second of its fake clock, and 48 due
// jobs whose calls wait at its gate.
func burstOf48(t *testing.T, s *store.Store) (*gate, *clock.Fake, *jobs.Runner) {
	g, base := newGate(t)
	c := clock.NewFake(t0)
	r := jobs.NewRunner(s, &jobs.Invoker{Base: base}, jobs.Options{Node: "node-a", Incarnation: "inc-a", Capacity: 8,
		Lease: 3 * time.Second, Timeout: 5 * time.Second, Clock: c, BacklogSpread: time.Second})
	for range 48 {
		enqueue(t, s, "/gate", 1)
	}
	refilling(t, r)
	return g, c, r
}

func TestRefillKeepsToItsShareUntilTheFarmKnows(t *testing.T) {
	// The next node polls soon, so no job is urgent: this node's share is a
	// third of the 48, 16.
	g, c, r := spendShare(t, jobs.Turn{FarmCapacity: 24, NextPoll: time.Second, StartWindow: 2 * time.Second})

	// The farm's backlog flag rises: once every node has had time to read
	// it, this node claims as its room allows.
	r.FarmBacklog(true)
	require.NoError(t, c.BlockUntil(context.Background(), 1))
	require.Equal(t, int64(16), r.Stats().Claimed)
	c.Advance(time.Second)
	claimedReaches(t, r, 24)
	g.release(8)
	claimedReachesCooling(t, r, c, 32)
	g.release(100)
}

// Where the other nodes hear of a backlog only at their next reading, the
// widened turn a poll left its work to may not come. Once it is overdue
// (Turn.NextPoll after the turn), the node takes of what is left one round
// of its calls more, before the work waits a slot, whether or not the
// farm knows.
func TestRefillTakesWhatItLeftOnceTheNextPollIsOverdue(t *testing.T) {
	g, c, r := spendShare(t, jobs.Turn{FarmCapacity: 24, NextPoll: time.Second, StartWindow: 2 * time.Second})
	// The turn was at the fake clock's origin; spending the share moved it
	// on by a few cooldowns.
	require.Less(t, c.Monotonic(), time.Second)
	c.Advance(time.Second - time.Millisecond - c.Monotonic())
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, int64(16), r.Stats().Claimed, "the next poll is not due yet")
	c.Advance(time.Millisecond)
	// One round of its calls (8) of the 40 the turn left; then it waits
	// for the farm to hear of the backlog.
	claimedReaches(t, r, 24)
	g.release(8)
	require.Eventually(t, func() bool { return r.Running() == 0 }, 10*time.Second, time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, int64(24), r.Stats().Claimed, "the overdue poll's work is taken once, not the whole backlog")
	g.release(100)
}

// Jobs that would start late if left to the next poll are the floor of a
// turn's claim; those it could not take for want of room it claims as its
// calls end (one round of its calls more), without waiting for the farm
// to hear of the backlog.
func TestRefillTakesTheUrgentWorkItHadNoRoomFor(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	g, base := newGate(t)
	c := clock.NewFake(t0)
	r := jobs.NewRunner(s, &jobs.Invoker{Base: base}, jobs.Options{Node: "node-a", Incarnation: "inc-a", Capacity: 8,
		Lease: 3 * time.Second, Timeout: 5 * time.Second, Clock: c, BacklogSpread: time.Hour})
	ctx := context.Background()
	now, err := s.Now(ctx)
	require.NoError(t, err)
	late := now.Add(-2 * time.Second) // due two slots ago: urgent
	for range 20 {
		_, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/gate", MaxAttempts: 1, RunAt: &late})
		require.NoError(t, err)
	}
	refilling(t, r)
	// Its share of a farm of three is 7 of the 20; all 20 are urgent.
	res, err := r.Poll(ctx, jobs.Turn{FarmCapacity: 24, NextPoll: time.Hour, StartWindow: time.Second})
	require.NoError(t, err)
	require.Equal(t, 8, res.Claimed, "all its room")
	g.release(8)
	claimedReachesCooling(t, r, c, 16)
	// One more round of its calls at most, so that a burst still spreads:
	// the rest waits for the farm.
	g.release(8)
	require.Eventually(t, func() bool { return r.Running() == 0 }, 10*time.Second, time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, int64(16), r.Stats().Claimed)
	g.release(100)
}

// A widened turn's poller claims now an even part of what it shares with
// the pollers after it in the slot, but what it goes on claiming as its
// calls end, before the farm knows of the backlog, is its share of the
// whole farm: the poller before it still refills its own share, and an
// early poller that drains fast must not take the later pollers' part of
// a burst (in a 300-job burst one node ran 46).
func TestWidenedPollerRefillsOnlyItsShareOfTheWholeFarm(t *testing.T) {
	// The second of the slot's three pollers: it and the last share the
	// 48 (24 each, as far as its room goes); its share of the farm is 16.
	g, _, _ := spendShare(t, jobs.Turn{FarmCapacity: 24, AheadCapacity: 16, NextPoll: time.Second, StartWindow: 2 * time.Second})
	g.release(100)
}

func TestResultsOfCallsEndingTogetherAreWrittenInOneStatement(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		g, base := newGate(t)
		c := clock.NewFake(t0)
		r := jobs.NewRunner(s, &jobs.Invoker{Base: base}, jobs.Options{Node: "node-a", Incarnation: "inc-a", Capacity: 16,
			Lease: 10 * time.Second, Timeout: 5 * time.Second, Clock: c, FinishWindow: 5 * time.Millisecond,
			StatementTimeout: 15 * time.Second})
		var ids []int64
		for range 10 {
			ids = append(ids, enqueue(t, s, "/gate", 3))
		}
		res, err := r.Poll(ctx, alone(16))
		require.NoError(t, err)
		require.Equal(t, 10, res.Claimed)
		require.Eventually(t, func() bool { calls, _ := g.stats(); return calls == 10 }, 30*time.Second, time.Millisecond)
		// One job's lease ran out and another node holds it now: its call
		// still ends here, and its result must not be written.
		storetest.TakeOver(t, s, ids[3])

		g.release(10)
		// The first result starts the window; the others come in within it.
		require.Eventually(t, func() bool { return r.Pending() == 10 }, 30*time.Second, time.Millisecond)
		require.Zero(t, r.Stats().Finishes)
		c.Advance(5 * time.Millisecond)
		r.Wait()
		st := r.Stats()
		require.Equal(t, int64(1), st.Finishes, "ten results, one statement")
		require.Equal(t, int64(9), st.Succeeded)
		require.Equal(t, int64(1), st.LeasesLost, "the stale row is reported as not written")
		require.Equal(t, 9, countState(t, s, store.StateDone))
		j := get(t, s, ids[3])
		require.Equal(t, store.StateRunning, j.State)
		require.Equal(t, "node-b", j.OwnerNode)
	})
}
