package rotation

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/stretchr/testify/require"
)

const L = time.Second

func TestSlotArithmetic(t *testing.T) {
	base := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	k := Slot(base, L)
	require.Equal(t, base.Unix(), k)
	require.Equal(t, k, Slot(base.Add(999*time.Millisecond), L))
	require.Equal(t, k+1, Slot(base.Add(L), L))
	require.True(t, Start(k, L).Equal(base))
	// Before the epoch the floor still rounds down.
	require.Equal(t, int64(-1), Slot(time.Unix(0, -1), L))
	require.Equal(t, int64(-2), Slot(time.Unix(-1, -1), L))

	members := []string{"a", "b", "c"}
	require.Equal(t, "a", Owner(3, members))
	require.Equal(t, "b", Owner(4, members))
	require.Equal(t, "c", Owner(-1, members))
	require.Equal(t, "", Owner(7, nil))
	require.Equal(t, 0, Rank(4, "b", members))
	require.Equal(t, 1, Rank(4, "c", members))
	require.Equal(t, 2, Rank(4, "a", members))
	require.Equal(t, -1, Rank(4, "z", members))
}

// fakeDB is a node's estimate of the database clock: the true database time
// (the fake clock) plus an estimation error that stays inside its bound.
type fakeDB struct {
	c        *clock.Fake
	estError time.Duration
	bound    time.Duration
}

func (f fakeDB) Now() (time.Time, time.Duration, bool) {
	return f.c.Now().Add(f.estError), f.bound, true
}

type poll struct {
	node string
	turn Turn
	at   time.Time // true database time of the poll
}

type farm struct {
	t       *testing.T
	c       *clock.Fake
	mu      sync.Mutex
	members []string
	widen   bool
	polls   []poll
	running map[string]context.CancelFunc
	nudges  []chan struct{}
	wg      sync.WaitGroup
}

// setWiden switches backlog mode and nudges every node, as a membership
// reading that saw the backlog flag does.
func (f *farm) setWiden(on bool) {
	f.mu.Lock()
	f.widen = on
	nudges := f.nudges
	f.mu.Unlock()
	for _, n := range nudges {
		select {
		case n <- struct{}{}:
		default:
		}
	}
}

func newFarm(t *testing.T, members ...string) *farm {
	start := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	return &farm{t: t, c: clock.NewFake(start), members: members, running: map[string]context.CancelFunc{}}
}

func (f *farm) Members() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.members...)
}

func (f *farm) setMembers(m ...string) {
	f.mu.Lock()
	f.members = m
	f.mu.Unlock()
}

// start runs a node's poll loop; estError is how wrong its offset estimate
// is (inside bound).
func (f *farm) start(name string, estError, bound time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	f.running[name] = cancel
	nudge := make(chan struct{}, 1)
	f.mu.Lock()
	f.nudges = append(f.nudges, nudge)
	f.mu.Unlock()
	w := &Waiter{Clock: f.c, DB: fakeDB{f.c, estError, bound}, Slot: L, Me: name, Members: f.Members,
		Widen: func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.widen }, Nudge: nudge}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			turn, err := w.Wait(ctx)
			if err != nil {
				return
			}
			f.mu.Lock()
			f.polls = append(f.polls, poll{name, turn, f.c.Now()})
			f.mu.Unlock()
		}
	}()
}

func (f *farm) stop(name string) {
	f.running[name]()
	delete(f.running, name)
}

// run advances fake time in steps, each only once every node is asleep.
func (f *farm) run(d, step time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for elapsed := time.Duration(0); elapsed < d; elapsed += step {
		require.NoError(f.t, f.c.BlockUntil(ctx, len(f.running)), "nodes did not go to sleep")
		f.c.Advance(step)
	}
	require.NoError(f.t, f.c.BlockUntil(ctx, len(f.running)))
}

func (f *farm) close() {
	for n := range f.running {
		f.stop(n)
	}
	f.wg.Wait()
}

func (f *farm) snapshot() []poll {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]poll(nil), f.polls...)
}

func TestOnePollerPerSlot(t *testing.T) {
	f := newFarm(t, "a", "b", "c")
	// Estimates off by up to ±2ms, within their 3ms bounds.
	f.start("a", 2*time.Millisecond, 3*time.Millisecond)
	f.start("b", -2*time.Millisecond, 3*time.Millisecond)
	f.start("c", 0, time.Millisecond)
	f.run(30*L, 5*time.Millisecond)
	f.close()

	polls := f.snapshot()
	bySlot := map[int64]string{}
	perNode := map[string]int{}
	for _, p := range polls {
		prev, dup := bySlot[p.turn.Slot]
		require.False(t, dup, "slot %d polled by %s and %s", p.turn.Slot, prev, p.node)
		bySlot[p.turn.Slot] = p.node
		perNode[p.node]++
		require.Equal(t, Owner(p.turn.Slot, []string{"a", "b", "c"}), p.node)
		// The guard band: never before the slot starts on the true clock,
		// and well inside it.
		require.False(t, p.at.Before(Start(p.turn.Slot, L)), "%s polled slot %d early at %v", p.node, p.turn.Slot, p.at)
		require.Less(t, p.at.Sub(Start(p.turn.Slot, L)), 20*time.Millisecond)
	}
	require.GreaterOrEqual(t, len(polls), 29, "the farm polls once per slot")
	for _, n := range []string{"a", "b", "c"} {
		require.InDelta(t, 10, perNode[n], 1, "node %s got %d slots", n, perNode[n])
	}
}

func TestJoinAndLeaveAbsorbedWithinOneRotation(t *testing.T) {
	f := newFarm(t, "a", "b", "c")
	for _, n := range []string{"a", "b", "c"} {
		f.start(n, 0, time.Millisecond)
	}
	f.run(6*L, 10*time.Millisecond)

	// d joins.
	joinedAt := Slot(f.c.Now(), L)
	f.setMembers("a", "b", "c", "d")
	f.start("d", 0, time.Millisecond)
	f.run(8*L, 10*time.Millisecond)

	// c leaves.
	leftAt := Slot(f.c.Now(), L)
	f.stop("c")
	f.setMembers("a", "b", "d")
	f.run(6*L, 10*time.Millisecond)
	f.close()

	polls := f.snapshot()
	seen := map[int64]string{}
	firstD := int64(-1)
	for _, p := range polls {
		prev, dup := seen[p.turn.Slot]
		require.False(t, dup, "slot %d polled by %s and %s", p.turn.Slot, prev, p.node)
		seen[p.turn.Slot] = p.node
		if p.node == "d" && firstD < 0 {
			firstD = p.turn.Slot
		}
		if p.node == "c" {
			require.LessOrEqual(t, p.turn.Slot, leftAt, "c polled after leaving")
		}
	}
	require.GreaterOrEqual(t, firstD, joinedAt)
	require.LessOrEqual(t, firstD-joinedAt, int64(4), "d must get a slot within one rotation of joining")
	// After the leave every slot still has its poller: none is orphaned.
	last := Slot(f.c.Now(), L)
	for k := leftAt + 1; k < last; k++ {
		_, ok := seen[k]
		require.True(t, ok, "slot %d after c left was polled by nobody", k)
	}
}

func TestWidenedRotationGivesEveryNodeATurnPerSlot(t *testing.T) {
	f := newFarm(t, "a", "b", "c", "d")
	f.widen = true
	for _, n := range []string{"a", "b", "c", "d"} {
		f.start(n, 0, time.Millisecond)
	}
	f.run(5*L, 5*time.Millisecond)
	f.close()

	members := []string{"a", "b", "c", "d"}
	perSlot := map[int64]map[string]Turn{}
	for _, p := range f.snapshot() {
		if perSlot[p.turn.Slot] == nil {
			perSlot[p.turn.Slot] = map[string]Turn{}
		}
		_, dup := perSlot[p.turn.Slot][p.node]
		require.False(t, dup, "%s polled slot %d twice", p.node, p.turn.Slot)
		perSlot[p.turn.Slot][p.node] = p.turn
		require.Equal(t, Rank(p.turn.Slot, p.node, members), p.turn.Rank)
		// Turns come in rank order, WidenedGap apart.
		want := Start(p.turn.Slot, L).Add(time.Duration(p.turn.Rank) * WidenedGap(L, 4))
		require.False(t, p.at.Before(want))
		require.Less(t, p.at.Sub(want), 20*time.Millisecond)
	}
	full := 0
	for _, nodes := range perSlot {
		if len(nodes) == 4 {
			full++
		}
	}
	require.GreaterOrEqual(t, full, 4, "each whole slot has a turn for every node")
}

func TestClockJumpSkipsPassedSlots(t *testing.T) {
	c := clock.NewFake(time.Date(2026, 11, 20, 12, 0, 0, 500_000_000, time.UTC))
	w := &Waiter{Clock: c, DB: fakeDB{c, 0, 0}, Slot: L, Me: "a", Members: func() []string { return []string{"a"} }}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := w.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, Slot(c.Now(), L), first.Slot, "the current slot is taken at once")
	got := make(chan Turn, 1)
	go func() { turn, _ := w.Wait(ctx); got <- turn }()
	require.NoError(t, c.BlockUntil(ctx, 1))
	// The node's sleep overruns by 5 slots (a pause, a VM migration).
	c.Advance(5*L + 500*time.Millisecond)
	turn := <-got
	require.Equal(t, Slot(c.Now(), L), turn.Slot, "the missed slots are skipped, the current one is taken")
}

func TestNoEstimateNoPoll(t *testing.T) {
	c := clock.NewFake(time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC))
	w := &Waiter{Clock: c, DB: noEstimate{}, Slot: L, Me: "a", Members: func() []string { return []string{"a"} }}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	done := make(chan error, 1)
	go func() { _, err := w.Wait(ctx); done <- err }()
	for range 5 {
		require.NoError(t, c.BlockUntil(ctx, 1))
		c.Advance(L)
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled, "a node that does not know the database time must not poll")
}

type noEstimate struct{}

func (noEstimate) Now() (time.Time, time.Duration, bool) { return time.Time{}, 0, false }

func TestHugeOffsetErrorStillPolls(t *testing.T) {
	start := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	c := clock.NewFake(start)
	// An error bound larger than the slot (a far database, a tiny slot).
	w := &Waiter{Clock: c, DB: fakeDB{c, 0, 3 * L}, Slot: L, Me: "a", Members: func() []string { return []string{"a", "b"} }}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	advancing, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for c.BlockUntil(advancing, 1) == nil && c.Now().Sub(start) < 20*L {
			c.Advance(50 * time.Millisecond)
		}
	}()
	turn, err := w.Wait(ctx)
	require.NoError(t, err, "a node with a large offset error never got a turn")
	require.Equal(t, "a", Owner(turn.Slot, []string{"a", "b"}))
}

func TestNextPollFollowsTheWidenedRanksThenTheNextSlot(t *testing.T) {
	k := int64(100)
	start := Start(k, L)
	require.Equal(t, L/4, WidenedGap(L, 4))
	for _, tc := range []struct {
		rank    int
		widened bool
		want    time.Time
	}{
		{0, false, Start(k+1, L)},
		{0, true, start.Add(WidenedGap(L, 4))},
		{2, true, start.Add(3 * WidenedGap(L, 4))},
		{3, true, Start(k+1, L)}, // the last rank: the next slot's owner polls next
	} {
		turn := Turn{Slot: k, Rank: tc.rank, Start: start.Add(time.Duration(tc.rank) * WidenedGap(L, 4))}
		require.Equal(t, tc.want, NextPoll(turn, L, 4, tc.widened), "rank %d widened %v", tc.rank, tc.widened)
	}
}

// A node that hears of a backlog mid-slot takes its turn of that slot at
// once, not at its rank's place in it (up to a slot later); the slots after
// are spread by rank again, so that work arriving during the backlog waits
// a fraction of a slot.
func TestANodeThatHearsOfABacklogTakesItsTurnAtOnce(t *testing.T) {
	members := []string{"a", "b", "c", "d"}
	f := newFarm(t, members...)
	for _, n := range members {
		f.start(n, 0, time.Millisecond)
	}
	f.run(L, 5*time.Millisecond) // settle: each polls only its own slots
	k := Slot(f.c.Now(), L)
	f.run(300*time.Millisecond, 5*time.Millisecond)
	heard := f.c.Now()
	require.Equal(t, k, Slot(heard, L))
	f.setWiden(true)
	// The turns are due at once: they come with the clock standing still
	// (advancing it here would race the nudged nodes, whose old timers
	// still count as sleeping until they wake).
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := 0
		for _, p := range f.snapshot() {
			if p.turn.Slot == k && p.turn.Rank > 0 {
				n++
			}
		}
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 3 nodes took a turn in the slot they heard of the backlog in, the clock standing still", n)
		}
		time.Sleep(time.Millisecond)
	}
	f.run(2*L, 5*time.Millisecond)
	f.close()

	// In slot k every node but the owner takes a turn at once; one whose
	// place in the widened slot is still ahead takes its turn there too,
	// so that the farm goes on polling through the slot (nodes that hear
	// at once would otherwise all poll at the same moment, and then none
	// until the next slot).
	atOnce, atPlace := map[string]int{}, map[string]int{}
	for _, p := range f.snapshot() {
		switch {
		case p.turn.Slot == k && p.turn.Rank > 0:
			require.False(t, p.at.Before(heard), "%s took a widened turn before the backlog", p.node)
			place := Start(k, L).Add(time.Duration(p.turn.Rank) * WidenedGap(L, 4))
			switch {
			case p.at.Sub(heard) < 20*time.Millisecond:
				atOnce[p.node]++
			case place.After(heard) && !p.at.Before(place) && p.at.Sub(place) < 20*time.Millisecond:
				atPlace[p.node]++
			default:
				t.Fatalf("%s rank %d took a turn %v after hearing of the backlog, neither at once nor at its place", p.node, p.turn.Rank, p.at.Sub(heard))
			}
		case p.turn.Slot == k+1:
			want := Start(k+1, L).Add(time.Duration(p.turn.Rank) * WidenedGap(L, 4))
			require.False(t, p.at.Before(want), "%s rank %d in the next slot", p.node, p.turn.Rank)
			require.Less(t, p.at.Sub(want), 20*time.Millisecond, "%s rank %d in the next slot", p.node, p.turn.Rank)
		}
	}
	require.Len(t, atOnce, 3, "every node but the slot's owner takes a turn in the slot it heard of the backlog: %v", atOnce)
	require.Len(t, atPlace, 2, "ranks 2 and 3, whose places come after the backlog was heard (300 ms in), take them too: %v", atPlace)
	for n, c := range atOnce {
		require.Equal(t, 1, c, "%s: one turn at once", n)
	}
	for n, c := range atPlace {
		require.Equal(t, 1, c, "%s: one turn at its place", n)
	}
}
