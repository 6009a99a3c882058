package clock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

func TestFakeFiresTimersWhenDue(t *testing.T) {
	f := NewFake(t0)
	a := f.NewTimer(2 * time.Second)
	b := f.NewTimer(time.Second)
	stopped := f.NewTimer(time.Second)
	require.Equal(t, 3, f.Waiters())
	require.True(t, stopped.Stop())
	require.False(t, stopped.Stop(), "a stopped timer stops once")

	f.Advance(999 * time.Millisecond)
	select {
	case <-b.C():
		t.Fatal("fired early")
	default:
	}
	f.Advance(time.Millisecond)
	require.Equal(t, t0.Add(time.Second), <-b.C())
	require.Equal(t, 1, f.Waiters())
	f.Advance(time.Hour)
	require.Equal(t, t0.Add(2*time.Second), <-a.C())
	require.False(t, a.Stop(), "a fired timer cannot be stopped")
	require.Equal(t, t0.Add(time.Hour+time.Second), f.Now())

	zero := f.NewTimer(0)
	<-zero.C()
}

// AfterFunc's timers wait among the others, call their function once
// when due (never when stopped first), and cost no goroutine meanwhile.
func TestAfterFuncCallsOnceWhenDue(t *testing.T) {
	for name, c := range map[string]Clock{"fake": NewFake(t0), "real": Real()} {
		t.Run(name, func(t *testing.T) {
			called := make(chan string, 3)
			due := c.AfterFunc(time.Millisecond, func() { called <- "due" })
			stopped := c.AfterFunc(time.Millisecond, func() { called <- "stopped" })
			require.True(t, stopped.Stop())
			require.Nil(t, due.C())
			if f, ok := c.(*Fake); ok {
				require.Equal(t, 1, f.Waiters())
				select {
				case got := <-called:
					t.Fatalf("%s called before the clock moved", got)
				default:
				}
				f.Advance(time.Millisecond)
				require.Zero(t, f.Waiters())
			}
			require.Equal(t, "due", <-called)
			require.False(t, due.Stop(), "a timer that fired cannot be stopped")
			c.AfterFunc(0, func() { called <- "now" })
			require.Equal(t, "now", <-called)
			require.Empty(t, called, "the stopped timer's function is never called")
		})
	}
}

func TestBlockUntilAndSleep(t *testing.T) {
	f := NewFake(t0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Sleep(ctx, f, time.Minute) }()
	require.NoError(t, f.BlockUntil(ctx, 1))
	f.Advance(time.Minute)
	require.NoError(t, <-done)

	cctx, ccancel := context.WithCancel(ctx)
	go func() { done <- Sleep(cctx, f, time.Minute) }()
	require.NoError(t, f.BlockUntil(ctx, 1))
	ccancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

func TestSkewedShiftsNowNotTimers(t *testing.T) {
	f := NewFake(t0)
	s := Skewed(f, -3*time.Second)
	require.Equal(t, t0.Add(-3*time.Second), s.Now())
	tm := s.NewTimer(time.Second)
	f.Advance(time.Second)
	<-tm.C()
	require.Equal(t, f, Skewed(f, 0), "no skew is the clock itself")
}

func TestStepWallMovesNowNotTimersOrMonotonic(t *testing.T) {
	f := NewFake(t0)
	tm := f.NewTimer(time.Second)
	f.Advance(300 * time.Millisecond)
	require.Equal(t, 300*time.Millisecond, f.Monotonic())

	f.StepWall(time.Hour)
	require.Equal(t, t0.Add(time.Hour+300*time.Millisecond), f.Now())
	require.Equal(t, 300*time.Millisecond, f.Monotonic(), "a wall step is not time passing")
	require.Equal(t, 1, f.Waiters(), "a wall step fires no timer")

	f.StepWall(-2 * time.Hour)
	f.Advance(700 * time.Millisecond)
	require.Equal(t, t0.Add(-time.Hour+time.Second), <-tm.C(), "the timer fires after its duration, at the stepped wall time")
	require.Equal(t, time.Second, f.Monotonic())

	f.Set(t0)
	require.Equal(t, t0, f.Now())
	require.Equal(t, time.Second, f.Monotonic())
	require.Panics(t, func() { f.Advance(-time.Nanosecond) }, "time does not pass backwards")

	s := Skewed(f, 5*time.Second)
	require.Equal(t, f.Monotonic(), s.Monotonic(), "a skew shifts the wall time only")
}

func TestRealMonotonicCountsForward(t *testing.T) {
	c := Real()
	a := c.Monotonic()
	b := c.Monotonic()
	require.GreaterOrEqual(t, a, time.Duration(0))
	require.GreaterOrEqual(t, b, a)
}

func TestInstantsIgnoreWallStepsAndTheZeroIsNone(t *testing.T) {
	f := NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	before := Mono(f)
	require.False(t, before.IsZero(), "a reading at the clock's origin is not the zero Instant")
	require.True(t, Instant{}.IsZero())
	f.StepWall(-time.Hour)
	f.Advance(2 * time.Second)
	after := Mono(f)
	require.Equal(t, 2*time.Second, after.Sub(before), "a wall step does not move Instants")
	require.True(t, before.Before(after))
	require.True(t, after.After(before))
	require.Equal(t, after, before.Add(2*time.Second))
}
