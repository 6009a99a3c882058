// Package clock is the seam between slotpoller and the passage of time.
//
// Every timer, ticker, timeout, backoff and lease check in slotpoller reads
// time through a Clock, so tests drive time with a Fake instead of sleeping.
// A Clock tells local time only: the farm's time is the database's, which
// clocksync measures against a Clock.
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock is the local clock: wall time plus timers.
type Clock interface {
	// Now returns the local time (with a monotonic reading where the
	// implementation has one).
	Now() time.Time
	// Monotonic returns the time elapsed on a clock that only counts
	// forward, since an origin of the Clock's choosing: a step of the wall
	// clock (an NTP step, an operator, a VM resume) does not move it, so
	// the difference of two readings is the time that really passed. Only
	// differences between readings of one Clock mean anything.
	Monotonic() time.Duration
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
	// AfterFunc returns a timer that calls f in a goroutine of its own
	// once d has passed, unless stopped first; its C is nil. It costs no
	// goroutine while it waits, which a node with thousands of calls in
	// flight, each with a watchdog, notices.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the part of time.Timer that slotpoller uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// Real returns the operating system's clock.
func Real() Clock { return realClock{origin: time.Now()} }

type realClock struct {
	origin time.Time // carries the monotonic reading Monotonic counts from
}

func (realClock) Now() time.Time { return time.Now() }

// Monotonic relies on time.Since subtracting monotonic readings, which Go
// does when both times carry one, as time.Now's do.
func (c realClock) Monotonic() time.Duration { return time.Since(c.origin) }
func (realClock) NewTimer(d time.Duration) Timer {
	return realTimer{time.NewTimer(d)}
}

func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{time.AfterFunc(d, f)}
}

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }

// Skewed returns c read as if it were off by skew. It exists so that an
// operator (config key clock.skew) or a test can show that a node's local
// wall clock does not matter: only durations and the measured offset to the
// database clock do. Timers and Monotonic are durations and are not affected.
func Skewed(c Clock, skew time.Duration) Clock {
	if skew == 0 {
		return c
	}
	return skewed{c, skew}
}

type skewed struct {
	Clock
	skew time.Duration
}

func (s skewed) Now() time.Time { return s.Clock.Now().Add(s.skew) }

// Sleep waits for d on c, or until ctx is done, whichever is first.
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// Fake is a Clock that moves only when told to. It is safe for concurrent use.
//
// It keeps two times, as an operating system does: the wall time Now reads,
// and the monotonic time Monotonic reads and timers wait on. Advance moves
// both (time passes); StepWall and Set move only the wall time (the clock is
// stepped), so a test can show what a stepped wall clock does.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	mono    time.Duration
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever a timer is added
}

// NewFake returns a fake clock set to start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now returns the fake wall time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Monotonic returns the time Advance has moved the clock by since NewFake.
func (f *Fake) Monotonic() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mono
}

// NewTimer returns a timer that fires once the clock has advanced by d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	return f.add(&fakeTimer{f: f, c: make(chan time.Time, 1)}, d)
}

// AfterFunc returns a timer that calls f, in a goroutine of its own, once
// the clock has advanced by d. It counts among the Waiters until then.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	return f.add(&fakeTimer{f: f, fn: fn}, d)
}

// add arms t to fire once the clock has advanced by d: at once when d is
// not positive, otherwise as one of the Waiters.
func (f *Fake) add(t *fakeTimer, d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t.when = f.mono + d
	if d <= 0 {
		t.fire(f.now)
		return t
	}
	f.timers = append(f.timers, t)
	close(f.changed)
	f.changed = make(chan struct{})
	return t
}

// Advance lets d pass: it moves the wall and the monotonic time forward by d
// and fires every timer that falls due. A fired timer reports the wall time
// of its deadline. Time cannot pass backwards: a negative d panics (StepWall
// steps the wall clock back).
func (f *Fake) Advance(d time.Duration) {
	if d < 0 {
		panic("clock: Fake.Advance with a negative duration; use StepWall to step the wall clock back")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.mono += d
	kept := f.timers[:0]
	for _, t := range f.timers {
		if t.when <= f.mono {
			t.fire(f.now.Add(t.when - f.mono))
			continue
		}
		kept = append(kept, t)
	}
	f.timers = kept
}

// StepWall steps the wall time by d, forward or back, as an NTP step or an
// operator would: no time passes, so Monotonic and the timers do not move.
func (f *Fake) StepWall(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// Set steps the wall time to t, forward or back (see StepWall).
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
}

// Waiters returns how many timers are pending.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// BlockUntil waits until at least n timers are pending, so a test can
// advance time only once the code under test has gone to sleep.
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		have, ch := len(f.timers), f.changed
		f.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

type fakeTimer struct {
	f     *Fake
	when  time.Duration  // on the monotonic time
	c     chan time.Time // nil for AfterFunc's
	fn    func()         // AfterFunc's
	fired bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

// fire delivers the timer's deadline, at, on its channel, or calls its
// function. f.mu is held.
func (t *fakeTimer) fire(at time.Time) {
	t.fired = true
	if t.fn != nil {
		go t.fn()
		return
	}
	t.c <- at
}

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	if t.fired {
		return false
	}
	for i, o := range t.f.timers {
		if o == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			break
		}
	}
	t.fired = true
	return true
}
