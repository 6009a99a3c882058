// Package clocksync estimates the offset between this node's local clock and
// the reference clock, which for slotpoller is the database's clock.
//
// The farm has one clock, the database's; local wall clocks are never
// compared with each other. Each node therefore measures
//
//	offset = dbClock - localClock
//
// from round trips to the reference: t0 is the local time the query is sent,
// ts the reference time it reports, t1 the local time the answer arrives. The
// reference read ts at some local instant between t0 and t1, so
//
//	offset = ts - (t0+t1)/2
//
// is wrong by at most (t1-t0)/2, half the round trip, whatever the split
// between the outbound and return delays. That half round trip is the error
// bound the node carries with its estimate.
//
// A sync takes a short burst of samples and keeps the one with the smallest
// round trip (the NTP clock filter): a sample delayed by a stalled network or
// a busy database has a large round trip and hence a large error bound, so
// the quickest sample is the most trustworthy. The estimate is refreshed
// periodically by Run, because local clocks drift and may be stepped.
//
// Between measurements the database time is carried forward on the local
// monotonic clock (clock.Clock's Monotonic), not read off the wall clock
// through the offset: a step of the node's wall clock (an NTP step after
// boot, a VM resume) leaves the database time where it was, and the next
// resync finds a new offset but no jump in database time.
//
// The error bound covers network and scheduling delay only; a reference that
// reports time coarsely (SQLite's now has millisecond resolution) adds its own
// resolution on top, which the Source is in the best position to know.
//
// An NTP query (CheckNTP) is only a health check of the local clock, so that
// an operator hears about a badly wrong system clock. It is never the
// reference: the database is.
//
// All local time is read through a clock.Clock, so tests drive time with
// clock.Fake instead of sleeping.
package clocksync

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
)

// Source is the reference clock: for slotpoller, the database's current time.
type Source interface {
	Now(ctx context.Context) (time.Time, error)
}

// Sample is one round trip.
type Sample struct {
	// Offset is reference time minus local time, measured at the midpoint
	// of the round trip.
	Offset time.Duration
	// RTT is the local round-trip time t1 - t0.
	RTT time.Duration
	// Received is the local time t1 at which the answer arrived.
	Received time.Time
	// Resolution is the reference clock's tick (see Coarse); zero for a
	// fine clock.
	Resolution time.Duration

	mono time.Duration // the local monotonic reading at Received
}

// Coarse is implemented by a Source whose readings are truncated to a
// coarse tick (SQLite's now has millisecond resolution). The estimator
// reads such a clock as the middle of its tick and widens the error bound
// by half a tick.
type Coarse interface {
	Resolution() time.Duration
}

// Error is the sample's error bound, RTT/2. It is rounded up so that it still
// covers the true offset when RTT is an odd number of nanoseconds and Measure
// had to truncate the midpoint.
func (s Sample) Error() time.Duration {
	return (s.RTT+1)/2 + (s.Resolution+1)/2
}

// Measure is the pure offset formula: t0 is the local send time, ts the
// reference time reported, t1 the local receive time. It does not reject a
// negative RTT; Estimator does.
func Measure(t0, ts, t1 time.Time) Sample {
	rtt := t1.Sub(t0)
	// t0 + rtt/2 rather than (t0+t1)/2: time.Time cannot be added, and this
	// keeps t0's monotonic reading.
	mid := t0.Add(rtt / 2)
	return Sample{Offset: ts.Sub(mid), RTT: rtt, Received: t1}
}

// Estimate is the node's current belief about the reference clock.
type Estimate struct {
	// Offset is reference time minus local wall time, as measured.
	Offset time.Duration
	// Error bounds |true offset - Offset| at the time of measurement.
	Error time.Duration
	// Measured is the local time at which the chosen sample was received.
	Measured time.Time
	// Samples is how many samples of the burst succeeded.
	Samples int

	mono time.Duration // the local monotonic reading at Measured
}

// DBTime converts a local time to reference time: local + Offset. It holds
// only while the local wall clock has not been stepped since Measured;
// Estimator.Now does not depend on that.
func (e Estimate) DBTime(local time.Time) time.Time {
	return local.Add(e.Offset)
}

// LocalTime converts a reference time to local time: db - Offset. Like
// DBTime, it assumes no wall step since Measured.
func (e Estimate) LocalTime(db time.Time) time.Time {
	return db.Add(-e.Offset)
}

// Defaults for Options.
const (
	DefaultBurst    = 8
	DefaultInterval = 30 * time.Second
	DefaultGap      = 10 * time.Millisecond
)

// Options tune an Estimator. The zero value gives the defaults.
type Options struct {
	// Burst is the number of samples per sync; zero means DefaultBurst.
	Burst int
	// Interval is the time between syncs in Run; zero means DefaultInterval.
	Interval time.Duration
	// Gap is the pause between samples of a burst, so one passing hiccup
	// does not spoil every sample; zero means DefaultGap and a negative
	// value means no pause. The pause waits on the Estimator's Clock.
	Gap time.Duration
	// Logger receives Run's reports of failed syncs; nil discards them.
	Logger *slog.Logger
}

// Estimator measures the reference clock against the local clock and holds
// the latest Estimate. It is safe for concurrent use.
type Estimator struct {
	src      Source
	clk      clock.Clock
	burst    int
	interval time.Duration
	gap      time.Duration
	log      *slog.Logger

	mu  sync.Mutex
	est Estimate
	ok  bool
	// The last step of the reference clock seen: a sample that disagreed
	// with the estimate carried forward by more than both error bounds
	// and MinStep.
	step  Step
	steps int
}

// Step is a jump of the reference clock that the local monotonic clock did
// not see: the database host's clock was stepped (an NTP step, a failover
// to a host whose clock reads otherwise).
type Step struct {
	// Size is how far the reference jumped: positive ahead, negative back.
	Size time.Duration
	// At is the local monotonic reading when the step was seen.
	At time.Duration
}

// MinStep is the least disagreement, beyond both samples' error bounds and
// the drift allowed, that counts as a step of the reference clock: less is
// within what a lease's margin absorbs.
const MinStep = 250 * time.Millisecond

// New returns an Estimator that reads the reference from src and local time
// from clk. It holds no estimate until the first successful Sync.
func New(src Source, clk clock.Clock, opts Options) *Estimator {
	e := &Estimator{
		src:      src,
		clk:      clk,
		burst:    opts.Burst,
		interval: opts.Interval,
		gap:      opts.Gap,
		log:      opts.Logger,
	}
	if e.burst <= 0 {
		e.burst = DefaultBurst
	}
	if e.interval <= 0 {
		e.interval = DefaultInterval
	}
	if e.gap == 0 {
		e.gap = DefaultGap
	}
	if e.log == nil {
		// Not slog.Default(): a library should not write to the process's
		// log unless asked to.
		e.log = slog.New(slog.DiscardHandler)
	}
	return e
}

// Sync takes one burst of samples and keeps the one with the smallest round
// trip. Failed samples are tolerated as long as one succeeds; if none does,
// Sync returns an error wrapping the last failure and the previous estimate
// stays in place.
func (e *Estimator) Sync(ctx context.Context) (Estimate, error) {
	var (
		best    Sample
		good    int
		lastErr error
	)
	for i := 0; i < e.burst; i++ {
		if i > 0 && e.gap > 0 {
			if err := clock.Sleep(ctx, e.clk, e.gap); err != nil {
				lastErr = err
				break
			}
		}
		s, err := e.sample(ctx)
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				// The rest of the burst would fail the same way.
				break
			}
			continue
		}
		if good == 0 || s.RTT < best.RTT {
			best = s
		}
		good++
	}
	if good == 0 {
		return Estimate{}, fmt.Errorf("measure database clock: %w", lastErr)
	}

	est := Estimate{Offset: best.Offset, Error: best.Error(), Measured: best.Received, Samples: good, mono: best.mono}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.judgeLocked(best)
	// Two overlapping Syncs may finish out of order; the fresher
	// measurement wins because clocks drift. Fresher on the monotonic
	// clock: after a wall step back every new measurement would look older.
	if !e.ok || est.mono >= e.est.mono {
		e.est, e.ok = est, true
	}
	return est, nil
}

// sample takes one round trip.
func (e *Estimator) sample(ctx context.Context) (Sample, error) {
	return e.timed(ctx, e.src.Now)
}

// timed takes one round trip through read, which returns the reference
// time.
func (e *Estimator) timed(ctx context.Context, read func(context.Context) (time.Time, error)) (Sample, error) {
	m0 := e.clk.Monotonic()
	ts, err := read(ctx)
	t1, m1 := e.clk.Now(), e.clk.Monotonic()
	if err != nil {
		return Sample{}, err
	}
	var res time.Duration
	if c, ok := e.src.(Coarse); ok {
		res = c.Resolution()
		ts = ts.Add(res / 2)
	}
	// The round trip is timed on the monotonic clock and the send time
	// read back from the receipt, so a wall step during the query neither
	// spoils the sample nor bends it: the offset is to the wall clock as
	// it reads at the receipt.
	s := Measure(t1.Add(-(m1 - m0)), ts, t1)
	s.Resolution, s.mono = res, m1
	return s, nil
}

// MaxDrift bounds how fast the local clock may drift from the reference
// (100 ppm, ten times a typical crystal's): an estimate's error grows by it
// with age when a fresh sample is weighed against it.
const MaxDrift = 100e-6

// Observe runs read, a query that returns the reference time as part of
// other work (a node's turn reads the database clock anyway), and keeps it
// as the estimate when its error bound is smaller than the current
// estimate's grown by MaxDrift over its age. The samples that work brings
// keep the estimate fresh, so Run's bursts, which cost statements of their
// own, are only needed when they stop. It returns read's error.
func (e *Estimator) Observe(ctx context.Context, read func(context.Context) (time.Time, error)) error {
	s, err := e.timed(ctx, read)
	if err != nil {
		return err
	}
	if s.RTT < 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ok && !e.judgeLocked(s) {
		if s.mono < e.est.mono {
			return nil
		}
		aged := e.est.Error + time.Duration(float64(s.mono-e.est.mono)*MaxDrift)
		if s.Error() > aged {
			return nil
		}
	}
	e.est, e.ok = Estimate{Offset: s.Offset, Error: s.Error(), Measured: s.Received, Samples: 1, mono: s.mono}, true
	return nil
}

// judgeLocked compares a new sample with the estimate carried forward to
// the sample's monotonic reading and records a step when they disagree by
// more than both error bounds, the drift allowed and MinStep. It reports
// whether the sample shows a step: such a sample replaces the estimate
// whatever its error bound, as the old one no longer describes the
// reference. Holds e.mu.
func (e *Estimator) judgeLocked(s Sample) bool {
	if !e.ok || s.mono < e.est.mono {
		return false
	}
	age := s.mono - e.est.mono
	carried := e.est.Measured.Add(e.est.Offset).Add(age)
	measured := s.Received.Add(s.Offset)
	jump := measured.Sub(carried)
	allowed := e.est.Error + s.Error() + time.Duration(float64(age)*MaxDrift) + MinStep
	if jump.Abs() <= allowed {
		return false
	}
	e.step, e.steps = Step{Size: jump, At: s.mono}, e.steps+1
	e.log.Warn("the database clock stepped: leases and due times written before it are not trusted for a while",
		"step", jump, "allowed", allowed)
	return true
}

// LastStep returns the last step of the reference clock seen, how long ago
// on the local monotonic clock, and how many were seen; ok is false when
// none was.
func (e *Estimator) LastStep() (step Step, ago time.Duration, count int, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.steps == 0 {
		return Step{}, 0, 0, false
	}
	return e.step, e.clk.Monotonic() - e.step.At, e.steps, true
}

// SteppedWithin reports whether the reference clock was seen to step
// within the last d of local monotonic time.
func (e *Estimator) SteppedWithin(d time.Duration) bool {
	_, ago, _, ok := e.LastStep()
	return ok && ago <= d
}

// Current returns the latest estimate and whether one exists yet.
func (e *Estimator) Current() (Estimate, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.est, e.ok
}

// Now returns the reference time now and its error bound; ok is false
// before the first successful Sync. The reference time is the one measured
// (at Measured) plus the monotonic time elapsed since, so a step of the
// local wall clock does not move it.
func (e *Estimator) Now() (db time.Time, errBound time.Duration, ok bool) {
	est, ok := e.Current()
	if !ok {
		return time.Time{}, 0, false
	}
	return est.DBTime(est.Measured).Add(e.clk.Monotonic() - est.mono), est.Error, true
}

// Run syncs at once unless an estimate younger than Interval exists, and
// then whenever the estimate is Interval old, waiting
// on the Estimator's Clock: samples that Observe kept push the next burst
// back. A failed sync is logged and retried sooner, after 1s doubling up to
// Interval, so a node that has no estimate yet gets one as soon as the
// database answers. Run returns ctx.Err().
func (e *Estimator) Run(ctx context.Context) error {
	const firstRetry = time.Second
	retry := min(firstRetry, e.interval)
	for {
		wait := e.interval
		if est, ok := e.Current(); ok {
			if age := e.clk.Monotonic() - est.mono; age < e.interval {
				// Observed since: sleep until this estimate is Interval old.
				if err := clock.Sleep(ctx, e.clk, e.interval-age); err != nil {
					return err
				}
				continue
			}
		}
		if _, err := e.Sync(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			wait = retry
			retry = min(retry*2, e.interval)
			e.log.WarnContext(ctx, "clock sync failed", "err", err, "retry_in", wait)
		} else {
			retry = min(firstRetry, e.interval)
		}
		if err := clock.Sleep(ctx, e.clk, wait); err != nil {
			return err
		}
	}
}
