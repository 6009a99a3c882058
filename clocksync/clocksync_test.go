package clocksync

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/clock"
)

var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestMeasureSymmetricDelay(t *testing.T) {
	skew := 3 * time.Second
	t0 := start
	// 5ms out, 5ms back: the reference reads at local t0+5ms.
	ts := t0.Add(5 * time.Millisecond).Add(skew)
	t1 := t0.Add(10 * time.Millisecond)

	s := Measure(t0, ts, t1)
	require.Equal(t, skew, s.Offset)
	require.Equal(t, 10*time.Millisecond, s.RTT)
	require.Equal(t, 5*time.Millisecond, s.Error())
	require.Equal(t, t1, s.Received)
}

func TestMeasureAsymmetricDelayIsWithinErrorBound(t *testing.T) {
	skew := 3200 * time.Millisecond
	for _, tc := range []struct {
		name      string
		out, back time.Duration
	}{
		{"all outbound", 20 * time.Millisecond, 0},
		{"all return", 0, 20 * time.Millisecond},
		{"mostly outbound", 17 * time.Millisecond, 3 * time.Millisecond},
		{"odd nanoseconds", 2 * time.Nanosecond, 1 * time.Nanosecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := start
			ts := t0.Add(tc.out).Add(skew)
			t1 := t0.Add(tc.out + tc.back)

			s := Measure(t0, ts, t1)
			require.NotEqual(t, skew, s.Offset, "asymmetry must bias the estimate")
			require.LessOrEqual(t, (s.Offset - skew).Abs(), s.Error())
		})
	}
}

func TestMeasureNegativeOffset(t *testing.T) {
	skew := -5 * time.Second
	t0 := start
	ts := t0.Add(2 * time.Millisecond).Add(skew)
	t1 := t0.Add(4 * time.Millisecond)

	s := Measure(t0, ts, t1)
	require.Equal(t, skew, s.Offset)
	require.Equal(t, 2*time.Millisecond, s.Error())
}

func TestEstimateConversions(t *testing.T) {
	e := Estimate{Offset: -90 * time.Minute}
	local := start
	db := e.DBTime(local)
	require.Equal(t, start.Add(-90*time.Minute), db)
	require.Equal(t, local, e.LocalTime(db))
}

// delay is one round trip's outbound and return delay.
type delay struct{ out, back time.Duration }

// fakeSource is a reference clock running skew ahead of a fake local clock.
// Each Now advances the fake clock by the call's delays itself, so the test
// needs no sleeps.
type fakeSource struct {
	clk  *clock.Fake
	skew time.Duration

	mu       sync.Mutex
	delays   []delay // per call; the last one repeats
	fail     func(call int) error
	calls    int
	received []time.Time // local receipt time of each call
}

func (s *fakeSource) Now(ctx context.Context) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	call := s.calls
	s.calls++
	d := delay{time.Millisecond, time.Millisecond}
	if len(s.delays) > 0 {
		d = s.delays[min(call, len(s.delays)-1)]
	}
	s.clk.Advance(d.out)
	ts := s.clk.Now().Add(s.skew)
	s.clk.Advance(d.back)
	s.received = append(s.received, s.clk.Now())
	if s.fail != nil {
		if err := s.fail(call); err != nil {
			return time.Time{}, err
		}
	}
	return ts, nil
}

func (s *fakeSource) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// noGap turns off the pause between samples so Sync never waits on a timer.
var noGap = Options{Gap: -1}

func TestSyncKeepsMinRTTSample(t *testing.T) {
	for _, skew := range []time.Duration{
		3200 * time.Millisecond,
		-5 * time.Second,
		7*time.Hour + 13*time.Minute + 123456789*time.Nanosecond,
		-11 * time.Hour,
	} {
		t.Run(skew.String(), func(t *testing.T) {
			clk := clock.NewFake(start)
			src := &fakeSource{clk: clk, skew: skew, delays: []delay{
				{40 * time.Millisecond, 2 * time.Millisecond},
				{3 * time.Millisecond, 9 * time.Millisecond},
				{900 * time.Millisecond, 5 * time.Millisecond}, // a stall
				{1 * time.Millisecond, 3 * time.Millisecond},   // the quickest
				{2 * time.Millisecond, 20 * time.Millisecond},
			}}
			e := New(src, clk, Options{Burst: 5, Gap: -1})

			_, ok := e.Current()
			require.False(t, ok)
			_, _, ok = e.Now()
			require.False(t, ok)

			est, err := e.Sync(context.Background())
			require.NoError(t, err)
			require.Equal(t, 5, est.Samples)
			// Sample 3: 1ms out, 3ms back.
			require.Equal(t, src.received[3], est.Measured)
			require.Equal(t, 2*time.Millisecond, est.Error)
			require.Equal(t, skew-time.Millisecond, est.Offset)
			require.LessOrEqual(t, (est.Offset - skew).Abs(), est.Error)

			cur, ok := e.Current()
			require.True(t, ok)
			require.Equal(t, est, cur)

			db, bound, ok := e.Now()
			require.True(t, ok)
			require.Equal(t, est.Error, bound)
			require.LessOrEqual(t, db.Sub(clk.Now().Add(skew)).Abs(), bound)
		})
	}
}

func TestSyncGapWaitsOnClock(t *testing.T) {
	clk := clock.NewFake(start)
	src := &fakeSource{clk: clk, skew: time.Hour}
	e := New(src, clk, Options{Burst: 3, Gap: 50 * time.Millisecond})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := e.Sync(ctx)
		done <- err
	}()
	for want := 1; want < 3; want++ {
		require.NoError(t, clk.BlockUntil(ctx, 1))
		require.Equal(t, want, src.Calls(), "sample taken before the gap elapsed")
		clk.Advance(50 * time.Millisecond)
	}
	require.NoError(t, <-done)
	require.Equal(t, 3, src.Calls())
	est, ok := e.Current()
	require.True(t, ok)
	require.Equal(t, time.Hour, est.Offset)
}

func TestSyncToleratesSomeFailures(t *testing.T) {
	clk := clock.NewFake(start)
	skew := -5 * time.Second
	src := &fakeSource{clk: clk, skew: skew, fail: func(call int) error {
		if call%2 == 0 {
			return errors.New("deadlock victim")
		}
		return nil
	}}
	e := New(src, clk, Options{Burst: 6, Gap: -1})

	est, err := e.Sync(context.Background())
	require.NoError(t, err)
	require.Equal(t, 3, est.Samples)
	require.Equal(t, skew, est.Offset)
}

func TestSyncAllFailKeepsPreviousEstimate(t *testing.T) {
	clk := clock.NewFake(start)
	skew := 3200 * time.Millisecond
	down := false
	src := &fakeSource{clk: clk, skew: skew}
	src.fail = func(int) error {
		if down {
			return errors.New("connection refused")
		}
		return nil
	}
	e := New(src, clk, Options{Burst: 4, Gap: -1})

	// Before any success there is no estimate, and a failure says so.
	down = true
	_, err := e.Sync(context.Background())
	require.ErrorContains(t, err, "measure database clock: connection refused")
	_, ok := e.Current()
	require.False(t, ok)

	down = false
	first, err := e.Sync(context.Background())
	require.NoError(t, err)

	down = true
	src.skew = time.Hour // would change the estimate if any sample got through
	_, err = e.Sync(context.Background())
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "measure database clock: "))
	cur, ok := e.Current()
	require.True(t, ok)
	require.Equal(t, first, cur)
}

func TestSyncWrapsLastError(t *testing.T) {
	clk := clock.NewFake(start)
	last := errors.New("last")
	src := &fakeSource{clk: clk, fail: func(call int) error {
		if call == 2 {
			return last
		}
		return errors.New("earlier")
	}}
	e := New(src, clk, Options{Burst: 3, Gap: -1})
	_, err := e.Sync(context.Background())
	require.ErrorIs(t, err, last)
}

// backwardsSource steps the local wall clock back while the query is in
// flight, after a millisecond out; the reference is the fake's monotonic
// time plus base.
type backwardsSource struct {
	clk  *clock.Fake
	base time.Time
}

func (s backwardsSource) Now(context.Context) (time.Time, error) {
	s.clk.Advance(time.Millisecond)
	s.clk.StepWall(-time.Second)
	ts := s.base.Add(s.clk.Monotonic())
	s.clk.Advance(time.Millisecond)
	return ts, nil
}

func TestWallStepDuringASampleIsHarmless(t *testing.T) {
	clk := clock.NewFake(start)
	base := start.Add(time.Minute)
	e := New(backwardsSource{clk, base}, clk, Options{Burst: 1, Gap: -1})
	est, err := e.Sync(context.Background())
	require.NoError(t, err, "the round trip is timed on the monotonic clock, which no wall step moves")
	require.Equal(t, time.Millisecond, est.Error)
	// The offset is to the wall clock as it reads after the step.
	require.Equal(t, time.Minute+time.Second, est.Offset)
	db, _, ok := e.Now()
	require.True(t, ok)
	require.Equal(t, base.Add(clk.Monotonic()), db)
}

// monoSource is a reference clock that runs with the fake's monotonic
// time, as a real database's clock runs with real time whatever the node's
// wall clock does; each query takes 1ms out and 1ms back.
type monoSource struct {
	clk  *clock.Fake
	base time.Time
}

func (s monoSource) Now(context.Context) (time.Time, error) {
	s.clk.Advance(time.Millisecond)
	ts := s.base.Add(s.clk.Monotonic())
	s.clk.Advance(time.Millisecond)
	return ts, nil
}

func (s monoSource) truth() time.Time { return s.base.Add(s.clk.Monotonic()) }

// TestWallStepDoesNotMoveDatabaseTime steps the node's wall clock (an NTP
// step after boot, a VM resume) both ways: the database time the estimator
// reports carries on from its measurement, before the next resync and
// after it; the resync only finds the new offset.
func TestWallStepDoesNotMoveDatabaseTime(t *testing.T) {
	for _, step := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(step.String(), func(t *testing.T) {
			clk := clock.NewFake(start)
			src := monoSource{clk, start.Add(42 * time.Second)}
			e := New(src, clk, Options{Burst: 1, Gap: -1})
			first, err := e.Sync(context.Background())
			require.NoError(t, err)
			require.Equal(t, 42*time.Second, first.Offset)

			clk.Advance(time.Second)
			clk.StepWall(step)
			clk.Advance(time.Second)
			db, bound, ok := e.Now()
			require.True(t, ok)
			require.LessOrEqual(t, db.Sub(src.truth()).Abs(), bound, "a wall step moved the database time by %v", db.Sub(src.truth()))

			second, err := e.Sync(context.Background())
			require.NoError(t, err)
			require.Equal(t, 42*time.Second-step, second.Offset, "the resync measures the stepped wall clock")
			cur, ok := e.Current()
			require.True(t, ok)
			require.Equal(t, second, cur, "the fresher estimate wins, whatever the wall clock says")
			db, bound, _ = e.Now()
			require.LessOrEqual(t, db.Sub(src.truth()).Abs(), bound)
			require.Equal(t, second.DBTime(clk.Now()), db, "after the resync offset and database time agree again")
		})
	}
}

func TestSyncStopsWhenContextDone(t *testing.T) {
	clk := clock.NewFake(start)
	ctx, cancel := context.WithCancel(context.Background())
	src := &fakeSource{clk: clk, fail: func(int) error {
		cancel()
		return context.Canceled
	}}
	e := New(src, clk, Options{Burst: 8, Gap: -1})
	_, err := e.Sync(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, src.Calls())
}

func TestRunSyncsEveryInterval(t *testing.T) {
	clk := clock.NewFake(start)
	src := &fakeSource{clk: clk, skew: 42 * time.Second}
	e := New(src, clk, Options{Burst: 1, Interval: 30 * time.Second, Gap: -1})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()

	// First sync is immediate; then Run sleeps for Interval.
	require.NoError(t, clk.BlockUntil(ctx, 1))
	require.Equal(t, 1, src.Calls())
	est, ok := e.Current()
	require.True(t, ok)
	require.Equal(t, 42*time.Second, est.Offset)

	clk.Advance(30*time.Second - time.Nanosecond)
	require.Equal(t, 1, clk.Waiters(), "woke before Interval")
	require.Equal(t, 1, src.Calls())

	clk.Advance(time.Nanosecond)
	// The timer fired and was removed; the next pending timer is Run
	// sleeping again after its second sync.
	require.NoError(t, clk.BlockUntil(ctx, 1))
	require.Equal(t, 2, src.Calls())

	stop()
	require.ErrorIs(t, <-done, context.Canceled)
}

func TestRunBacksOffOnFailure(t *testing.T) {
	clk := clock.NewFake(start)
	var mu sync.Mutex
	failing := true
	src := &fakeSource{clk: clk, fail: func(int) error {
		mu.Lock()
		defer mu.Unlock()
		if failing {
			return errors.New("database unavailable")
		}
		return nil
	}}
	var logs bytes.Buffer
	e := New(src, clk, Options{
		Burst:    1,
		Interval: 5 * time.Second,
		Gap:      -1,
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()

	// Retries after 1s, 2s, 4s, then Interval (5s) at most.
	calls := 1
	for _, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		require.NoError(t, clk.BlockUntil(ctx, 1))
		require.Equal(t, calls, src.Calls())
		clk.Advance(wait - time.Nanosecond)
		require.Equal(t, calls, src.Calls(), "retried before %v", wait)
		clk.Advance(time.Nanosecond)
		calls++
	}

	// Recovery: the next sync succeeds and Run goes back to Interval.
	require.NoError(t, clk.BlockUntil(ctx, 1))
	require.Equal(t, calls, src.Calls())
	mu.Lock()
	failing = false
	mu.Unlock()
	clk.Advance(5 * time.Second)
	calls++
	require.NoError(t, clk.BlockUntil(ctx, 1))
	require.Equal(t, calls, src.Calls())
	_, ok := e.Current()
	require.True(t, ok)

	// A later failure starts the backoff from 1s again.
	mu.Lock()
	failing = true
	mu.Unlock()
	clk.Advance(5 * time.Second)
	calls++
	require.NoError(t, clk.BlockUntil(ctx, 1))
	require.Equal(t, calls, src.Calls())
	clk.Advance(time.Second)
	calls++
	require.NoError(t, clk.BlockUntil(ctx, 1))
	require.Equal(t, calls, src.Calls())

	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Contains(t, logs.String(), "clock sync failed")
	require.Contains(t, logs.String(), "database unavailable")
}

func TestRunReturnsWhenCancelledBeforeStart(t *testing.T) {
	clk := clock.NewFake(start)
	src := &fakeSource{clk: clk, fail: func(int) error { return context.Canceled }}
	e := New(src, clk, noGap)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, e.Run(ctx), context.Canceled)
}

func TestConcurrentUse(t *testing.T) {
	clk := clock.NewFake(start)
	src := &fakeSource{clk: clk, skew: time.Minute}
	e := New(src, clk, Options{Burst: 3, Gap: -1})
	errs := make(chan error, 4*50)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				_, err := e.Sync(context.Background())
				errs <- err
				e.Current()
				e.Now()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// Interleaved round trips stretch each other's RTT, so the offset need
	// not be exact, but the bound must still hold.
	est, ok := e.Current()
	require.True(t, ok)
	require.LessOrEqual(t, (est.Offset - time.Minute).Abs(), est.Error)
}

func TestCheckNTPUnreachable(t *testing.T) {
	// Loopback only: nothing listens on UDP port 1, so the query fails
	// (refused, or timed out at the deadline) without touching the network.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	res, err := CheckNTP(ctx, "127.0.0.1:1", time.Second)
	require.ErrorContains(t, err, "ntp health check against 127.0.0.1:1: ")
	require.Equal(t, NTPResult{}, res)
}

func TestCheckNTPCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := CheckNTP(ctx, "127.0.0.1:1", time.Second)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "ntp health check against 127.0.0.1:1")
}

// coarseSource truncates its readings to a millisecond, as SQLite does.
type coarseSource struct {
	c    *clock.Fake
	skew time.Duration
}

func (s coarseSource) Now(context.Context) (time.Time, error) {
	s.c.Advance(100 * time.Microsecond)
	t := s.c.Now().Add(s.skew).Truncate(time.Millisecond)
	s.c.Advance(100 * time.Microsecond)
	return t, nil
}

func (coarseSource) Resolution() time.Duration { return time.Millisecond }

func TestCoarseSourceWidensTheBound(t *testing.T) {
	c := clock.NewFake(time.Date(2026, 11, 20, 12, 0, 0, 123_456_789, time.UTC))
	skew := 2*time.Second + 700*time.Microsecond
	e := New(coarseSource{c, skew}, c, Options{Burst: 4, Gap: -1})
	est, err := e.Sync(context.Background())
	require.NoError(t, err)
	require.GreaterOrEqual(t, est.Error, 500*time.Microsecond, "half a tick of the coarse clock is part of the bound")
	diff := est.Offset - skew
	if diff < 0 {
		diff = -diff
	}
	require.LessOrEqual(t, diff, est.Error, "offset %v, true %v, bound %v", est.Offset, skew, est.Error)
}

// reading is a turn's read through another query: it takes out and back on
// the fake clock and reports the reference time skew ahead of it.
func reading(clk *clock.Fake, skew, out, back time.Duration) func(context.Context) (time.Time, error) {
	return func(context.Context) (time.Time, error) {
		clk.Advance(out)
		ts := clk.Now().Add(skew)
		clk.Advance(back)
		return ts, nil
	}
}

func TestObserveKeepsASampleOnlyWhenItBeatsTheAgedEstimate(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(start)
	src := &fakeSource{clk: clk, skew: 42 * time.Second} // 1 ms each way: error 1 ms
	e := New(src, clk, Options{Burst: 1, Gap: -1})
	_, err := e.Sync(ctx)
	require.NoError(t, err)

	// A turn's reading with a 10 ms round trip a second later: error 5 ms,
	// off by less than a step,
	// worse than 1 ms + 100 µs of drift. Kept out.
	clk.Advance(time.Second)
	require.NoError(t, e.Observe(ctx, reading(clk, 42*time.Second+100*time.Millisecond, 5*time.Millisecond, 5*time.Millisecond)))
	est, _ := e.Current()
	require.Equal(t, 42*time.Second, est.Offset, "a worse sample must not replace a fresh better one")

	// A minute later the burst's estimate has aged to 1 ms + 6 ms: the same
	// reading now wins.
	clk.Advance(time.Minute)
	require.NoError(t, e.Observe(ctx, reading(clk, 42*time.Second+200*time.Millisecond, 5*time.Millisecond, 5*time.Millisecond)))
	est, _ = e.Current()
	require.Equal(t, 42*time.Second+200*time.Millisecond, est.Offset)
	require.Equal(t, 5*time.Millisecond, est.Error)

	// A better sample wins at once; a failed reading changes nothing.
	require.NoError(t, e.Observe(ctx, reading(clk, 42*time.Second+300*time.Millisecond, 100*time.Microsecond, 100*time.Microsecond)))
	est, _ = e.Current()
	require.Equal(t, 42*time.Second+300*time.Millisecond, est.Offset)
	boom := errors.New("database gone")
	require.ErrorIs(t, e.Observe(ctx, func(context.Context) (time.Time, error) { return time.Time{}, boom }), boom)
	est, _ = e.Current()
	require.Equal(t, 42*time.Second+300*time.Millisecond, est.Offset)
}

func TestRunSkipsItsBurstWhileObservedSamplesKeepTheEstimateFresh(t *testing.T) {
	clk := clock.NewFake(start)
	src := &fakeSource{clk: clk, skew: 42 * time.Second}
	e := New(src, clk, Options{Burst: 1, Interval: 30 * time.Second, Gap: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()
	require.NoError(t, clk.BlockUntil(ctx, 1))
	require.Equal(t, 1, src.Calls(), "the first sync is at once")

	// Every 20 s a turn's reading (as good as a burst's) renews the
	// estimate: for two minutes Run sends nothing.
	for range 6 {
		clk.Advance(20 * time.Second)
		require.NoError(t, e.Observe(ctx, reading(clk, 42*time.Second, time.Millisecond, time.Millisecond)))
		require.NoError(t, clk.BlockUntil(ctx, 1))
	}
	require.Equal(t, 1, src.Calls(), "no burst while observed samples keep the estimate fresh")

	// The readings stop: a burst comes once the estimate is Interval old.
	clk.Advance(30 * time.Second)
	require.NoError(t, clk.BlockUntil(ctx, 1))
	require.Eventually(t, func() bool { return src.Calls() == 2 }, 5*time.Second, time.Millisecond)
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
}

// A step of the database's clock (its host stepped by NTP, a failover to a
// host whose clock reads otherwise) is a sample that disagrees with the
// estimate carried forward on the monotonic clock by more than both error
// bounds, the drift and MinStep. It is recorded, either way, and replaces
// the estimate whatever its error bound; jitter within the bounds is not a
// step.
func TestAStepOfTheDatabaseClockIsSeen(t *testing.T) {
	for _, step := range []time.Duration{time.Hour, -time.Hour, 30 * time.Second, -2 * time.Second} {
		t.Run(step.String(), func(t *testing.T) {
			ctx := context.Background()
			clk := clock.NewFake(start)
			src := &fakeSource{clk: clk, skew: 42 * time.Second}
			e := New(src, clk, Options{Burst: 1, Gap: -1})
			_, err := e.Sync(ctx)
			require.NoError(t, err)
			for range 5 { // turns' readings with jitter: no step
				clk.Advance(time.Second)
				require.NoError(t, e.Observe(ctx, reading(clk, 42*time.Second+20*time.Millisecond, 5*time.Millisecond, 15*time.Millisecond)))
			}
			_, _, _, ok := e.LastStep()
			require.False(t, ok, "jitter within the error bounds is no step")
			require.False(t, e.SteppedWithin(time.Hour))

			clk.Advance(time.Second)
			// A worse round trip than the estimate's: kept all the same.
			require.NoError(t, e.Observe(ctx, reading(clk, 42*time.Second+step, 20*time.Millisecond, 20*time.Millisecond)))
			got, ago, n, ok := e.LastStep()
			require.True(t, ok)
			require.Equal(t, 1, n)
			require.Zero(t, ago)
			require.InDelta(t, step.Seconds(), got.Size.Seconds(), 0.05)
			est, _ := e.Current()
			require.Equal(t, 42*time.Second+step, est.Offset, "the stepped sample replaces the estimate")
			db, _, _ := e.Now()
			require.WithinDuration(t, clk.Now().Add(42*time.Second+step), db, 50*time.Millisecond)

			clk.Advance(10 * time.Second)
			require.True(t, e.SteppedWithin(10*time.Second))
			require.False(t, e.SteppedWithin(9*time.Second))
			// A wall step of the node's own clock is no step of the database's.
			clk.StepWall(-time.Hour)
			require.NoError(t, e.Observe(ctx, reading(clk, 42*time.Second+step+time.Hour, 5*time.Millisecond, 5*time.Millisecond)))
			_, _, n, _ = e.LastStep()
			require.Equal(t, 1, n, "the node's wall step is not the database's")
		})
	}
}
