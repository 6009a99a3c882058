package rotation

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/clocksync"
	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/stretchr/testify/require"
)

// stepDB is the database clock: it runs with the node's monotonic time,
// shift ahead of where it started, and answers at once.
type stepDB struct {
	c    *clock.Fake
	base time.Time

	mu    sync.Mutex
	shift time.Duration
}

func (s *stepDB) Now(context.Context) (time.Time, error) { return s.now(), nil }

func (s *stepDB) now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.base.Add(s.c.Monotonic() + s.shift)
}

func (s *stepDB) step(d time.Duration) {
	s.mu.Lock()
	s.shift += d
	s.mu.Unlock()
}

type steppedTurn struct {
	turn Turn
	mono time.Duration // local elapsed time of the turn
	db   time.Time     // true database time of the turn
}

const (
	stepRun    = 30 * L
	stepAt     = 5 * L
	stepResync = 10 * L // the estimator resyncs at 0, 10 and 20 slots
	stepTick   = 10 * time.Millisecond
)

// runStepped runs node a of the farm {a, b}, with a real Estimator
// resyncing every stepResync against db, for stepRun; at stepAt it calls
// step. It returns a's turns.
func runStepped(t *testing.T, step func(c *clock.Fake, db *stepDB)) []steppedTurn {
	t.Helper()
	c := clock.NewFake(time.Date(2026, 11, 20, 12, 0, 0, 250_000_000, time.UTC))
	// The database runs 3.4s ahead of the node, so slots and local
	// seconds do not line up.
	db := &stepDB{c: c, base: c.Now().Add(3400 * time.Millisecond)}
	est := clocksync.New(db, c, clocksync.Options{Burst: 1, Interval: stepResync, Gap: -1})
	w := &Waiter{Clock: c, DB: est, Slot: L, Me: "a", Members: func() []string { return []string{"a", "b"} }}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		turns []steppedTurn
	)
	wg.Go(func() { _ = est.Run(runCtx) })
	wg.Go(func() {
		for {
			turn, err := w.Wait(runCtx)
			if err != nil {
				return
			}
			mu.Lock()
			turns = append(turns, steppedTurn{turn, c.Monotonic(), db.now()})
			mu.Unlock()
		}
	})
	for elapsed := time.Duration(0); elapsed < stepRun; elapsed += stepTick {
		// Both the estimator and the waiter asleep: all that is due has
		// happened.
		require.NoError(t, c.BlockUntil(ctx, 2), "the estimator or the waiter did not go to sleep")
		if elapsed == stepAt {
			step(c, db)
		}
		c.Advance(stepTick)
	}
	require.NoError(t, c.BlockUntil(ctx, 2))
	stop()
	wg.Wait()
	return turns
}

// TestClockStepsDoNotSilenceTheNode steps the node's wall clock, or the
// database's clock, by an hour either way in the middle of a run: the node
// must keep taking the turns it owns, losing at most one around the step.
func TestClockStepsDoNotSilenceTheNode(t *testing.T) {
	baseline := runStepped(t, func(*clock.Fake, *stepDB) {})
	require.InDelta(t, int(stepRun/L)/2, len(baseline), 1, "a owns every other slot")

	for _, tc := range []struct {
		name string
		node bool // the node's wall clock steps, not the database's
		d    time.Duration
	}{
		{"node wall +1h", true, time.Hour},
		{"node wall -1h", true, -time.Hour},
		{"database -1h", false, -time.Hour},
		{"database +1h", false, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			turns := runStepped(t, func(c *clock.Fake, db *stepDB) {
				if tc.node {
					c.StepWall(tc.d)
				} else {
					db.step(tc.d)
				}
			})
			t.Logf("%d turns in %v (%d without a step)", len(turns), stepRun, len(baseline))
			require.GreaterOrEqual(t, len(turns), len(baseline)-1, "turns lost to the step")

			var prev time.Duration
			resumed := false
			for i, st := range turns {
				require.Equal(t, "a", Owner(st.turn.Slot, []string{"a", "b"}), "turn %d in another node's slot", i)
				// Until the next resync the node cannot know that the
				// database clock stepped; from then on, and throughout
				// for a step of its own wall clock, it must be in the
				// database's slot.
				stale := !tc.node && st.mono > stepAt && st.mono <= stepResync
				if !stale {
					require.Equal(t, Slot(st.db, L), st.turn.Slot, "turn %d at %v: not the database's current slot", i, st.mono)
				}
				if !tc.node && !resumed && st.mono > stepResync {
					resumed = true
					require.LessOrEqual(t, st.mono-stepResync, 2*L, "turns resumed %v after the resync", st.mono-stepResync)
				}
				if i > 0 && (tc.node || st.mono > stepResync) {
					require.LessOrEqual(t, st.mono-prev, 2*L+stepTick, "%v without a turn before turn %d", st.mono-prev, i)
				}
				prev = st.mono
			}
		})
	}
}

// shiftedDB is the fake clock read with an estimation error that a test
// changes as it goes.
type shiftedDB struct {
	c  *clock.Fake
	mu sync.Mutex
	by time.Duration
}

func (s *shiftedDB) Now() (time.Time, time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.Now().Add(s.by), 0, true
}

func (s *shiftedDB) shift(d time.Duration) {
	s.mu.Lock()
	s.by += d
	s.mu.Unlock()
}

func TestDatabaseTimeBackBySlotsForgetsTheLastTurn(t *testing.T) {
	c := clock.NewFake(time.Date(2026, 11, 20, 12, 0, 0, 500_000_000, time.UTC))
	db := &shiftedDB{c: c}
	w := &Waiter{Clock: c, DB: db, Slot: L, Me: "a", Members: func() []string { return []string{"a"} }}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := w.Wait(ctx)
	require.NoError(t, err)

	// An estimate nudged back by less than a slot (a resync finding a
	// slightly different offset) must not repeat the slot just polled.
	db.shift(-600 * time.Millisecond)
	got := make(chan Turn, 1)
	go func() { turn, _ := w.Wait(ctx); got <- turn }()
	require.NoError(t, c.BlockUntil(ctx, 1))
	select {
	case turn := <-got:
		t.Fatalf("slot %d polled again after the estimate moved back 0.6 slot", turn.Slot)
	default:
	}
	c.Advance(600*time.Millisecond + L)
	require.Equal(t, first.Slot+1, (<-got).Slot)

	// Back by an hour: the next turn is the current slot, at once, with no
	// fake time passing (the deadline only ends a failing test sooner).
	db.shift(-time.Hour)
	soon, cancelSoon := context.WithTimeout(ctx, time.Second)
	defer cancelSoon()
	turn, err := w.Wait(soon)
	require.NoError(t, err, "the node waits for its old turn, an hour ahead")
	now, _, _ := db.Now()
	require.Equal(t, Slot(now, L), turn.Slot)
}
