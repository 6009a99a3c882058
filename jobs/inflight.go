package jobs

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/slotpoller/slotpoller/internal/jobspec"
	"github.com/slotpoller/slotpoller/internal/tracing"
	"go.opentelemetry.io/otel/attribute"

	"github.com/slotpoller/slotpoller/callproto"
	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
)

type inflight struct {
	claim     store.Claim
	ctx       context.Context // the call's, cancelled with a cause
	cancel    context.CancelCauseFunc
	claimedAt clock.Instant // after the claim statement returned
	// Guarded by Runner.mu:
	leaseUntil clock.Instant // conservative: send time of the last confirmation + lease
	calling    bool          // the endpoint call is under way
	// ended is set once the call is over (or was never made): its result
	// is then the judge of the lease, not a renewal, which may read the
	// leases after the result's commit and before its answer.
	ended bool
	// cancelAsked is set once a renewal reported an operator's cancel and
	// the call was cut off for it (cancel.go).
	cancelAsked bool
	watchdog    clock.Timer // fires when leaseUntil is a margin away
	armed       int         // counts arm calls: a watchdog that fires after a rearm is stale
}

// margin is how long before its lease runs out a call is cut off (or not
// started): time for the cancellation to reach the endpoint.
func (r *Runner) margin() time.Duration { return r.opts.Lease / 12 }

// hold is how long this node's claims and renewals keep a job from the
// rest of the farm: the lease, or the job's call timeout and the margin
// when that is longer. The endpoint is told its call's deadline, and a
// node that froze cannot cut its call off: no other node may start the
// job again before that deadline has passed at the endpoint.
func (r *Runner) hold() store.Hold {
	return store.Hold{Lease: r.opts.Lease, Calls: true, DefaultTimeout: r.opts.Timeout, Margin: r.margin()}
}

// track registers a claimed job as in flight and arms its lease watchdog.
// r.mu is held.
func (r *Runner) track(c store.Claim, claimedAt, leaseUntil clock.Instant) *inflight {
	ctx, cancel := context.WithCancelCause(r.base)
	f := &inflight{claim: c, ctx: ctx, cancel: cancel, claimedAt: claimedAt, leaseUntil: leaseUntil}
	r.inflight[store.Held{ID: c.ID, Token: c.Token}] = f
	r.arm(f, claimedAt)
	return f
}

// arm (re)sets f's watchdog to fire when f's lease, as last confirmed, has
// only the margin left. r.mu is held.
func (r *Runner) arm(f *inflight, now clock.Instant) {
	if f.watchdog != nil {
		f.watchdog.Stop()
	}
	f.armed++
	armed := f.armed
	f.watchdog = r.opts.Clock.AfterFunc(f.leaseUntil.Add(-r.margin()).Sub(now), func() { r.expire(f, armed) })
}

func (r *Runner) start(f *inflight) {
	if r.opts.OnStart != nil {
		r.opts.OnStart(f.claim)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer f.cancel(nil)
		r.run(f.ctx, f)
		r.mu.Lock()
		f.watchdog.Stop()
		delete(r.inflight, store.Held{ID: f.claim.ID, Token: f.claim.Token})
		// Its end is recorded: room under its queue's limit, if any.
		r.heldRetry = r.heldBack
		r.mu.Unlock()
		r.nudge() // room for Refill
	}()
}

// expire cuts f's call off when its watchdog fires: a call must never run
// on a lease this node could not confirm, whatever holds up the renewals
// (a stalled database, a busy pool) and however long the job's timeout.
// The lease is measured on the local monotonic clock from the send time of
// the last confirmation, never against a database time. armed is the arm
// that set the watchdog: one replaced by a renewal since is stale.
func (r *Runner) expire(f *inflight, armed int) {
	r.mu.Lock()
	// Before and after the call there is nothing to cut off (run checks
	// the lease itself before calling).
	due := f.armed == armed && f.calling
	left := f.leaseUntil.Sub(clock.Mono(r.opts.Clock))
	r.mu.Unlock()
	if due {
		r.opts.Logger.Warn("cancelling call: its lease could not be confirmed in time", "job", f.claim.ID, "token", f.claim.Token, "lease_left", left)
		r.cancelled.Add(1)
		f.cancel(errLeaseUnconfirmed)
	}
}

func (r *Runner) run(ctx context.Context, f *inflight) {
	c := f.claim
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = r.opts.Timeout
	}
	// Built only when there is something to say: most calls log nothing,
	// and at thousands of calls a second the attributes cost CPU.
	log := func() *slog.Logger {
		return r.opts.Logger.With("job", c.ID, "endpoint", c.Endpoint, "attempt", c.Attempt, "token", c.Token)
	}
	// A node frozen between its claim and the call (or one whose claim's
	// answer came back late) must not call on a lease that may have run out:
	// the farm may already have given the job to another node.
	r.mu.Lock()
	calling := clock.Mono(r.opts.Clock).Add(r.margin()).Before(f.leaseUntil)
	f.calling, f.ended = calling, !calling
	r.mu.Unlock()
	if !calling {
		wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer wcancel()
		if ok, err := r.store.JobReleaseIfRunning(wctx, c.ID, c.Token, "released unrun: its lease ran out before the call"); err == nil && ok {
			r.released.Add(1)
		}
		log().Warn("not calling: the claim's lease ran out before the call could start")
		return
	}
	var headers map[string]string
	if c.ScheduledFor != nil {
		headers = map[string]string{callproto.HeaderScheduledFor: c.ScheduledFor.UTC().Format(time.RFC3339Nano)}
	}
	// The call ends a margin before the hold confirmed when it starts:
	// the deadline the endpoint is told lies before any moment another
	// node could start the job again, however long this node then
	// freezes.
	r.mu.Lock()
	end := f.leaseUntil.Add(-r.margin())
	r.mu.Unlock()
	var attrs []attribute.KeyValue // built only for a span that records them
	if r.opts.Tracer != nil {
		attrs = []attribute.KeyValue{attribute.Int64("slotpoller.job.id", c.ID), attribute.Int("slotpoller.job.attempt", c.Attempt),
			attribute.String("slotpoller.queue", c.Queue), attribute.String("slotpoller.node", r.opts.Node),
			attribute.String("http.request.method", c.Method), attribute.String("url.path", c.Endpoint)}
	}
	callCtx, tc := tracing.StartCall(ctx, r.opts.Tracer, traceOf(c), "slotpoller job", attrs...)
	res := r.inv.Invoke(callCtx, Call{JobID: c.ID, Node: r.opts.Node, Token: c.Token, Attempt: c.Attempt,
		IdempotencyKey: c.IdempotencyKey, Method: c.Method, Endpoint: c.Endpoint, Payload: c.Payload, Timeout: timeout,
		Budget: func() time.Duration { return end.Sub(clock.Mono(r.opts.Clock)) }, Headers: headers, Traceparent: tc.Traceparent})
	tc.End(res.Status, res.Err)
	r.mu.Lock()
	f.calling, f.ended = false, true
	r.mu.Unlock()
	if r.opts.OnCall != nil {
		r.opts.OnCall(res.Verdict, res.Duration)
	}

	// Results are written on a context of their own (the poll that claimed
	// the job is long over, and a stop must still record what happened). A
	// stop that cut the call off gives the job back unrun; a response that
	// arrived (even as the stop came) is recorded as usual.
	if cause := context.Cause(ctx); errors.Is(cause, errDraining) && res.Status == 0 && res.Verdict != Succeeded {
		wctx, wcancel := context.WithTimeout(context.Background(), r.opts.Lease)
		defer wcancel()
		ok, err := r.store.JobReleaseIfRunning(wctx, c.ID, c.Token, "released unfinished: node "+r.opts.Node+" stopped")
		if err != nil {
			log().Error("could not release job on stop; it runs again when its lease expires", "err", err)
		} else if ok {
			r.released.Add(1)
			log().Info("released unfinished job on stop")
		}
		return
	}
	o := store.Outcome{Status: res.Status, Error: res.Err}
	switch res.Verdict {
	case Succeeded:
		o.State = store.StateDone
	case Fail:
		o.State = store.StateFailed
	default:
		if c.Attempt >= c.MaxAttempts {
			o.State = store.StateDead
		} else {
			o.State = store.StateReady
			o.RetryAfter = Backoff(c.Attempt, r.opts.Backoff, r.opts.BackoffMax, r.opts.Rand)
		}
	}
	if asked, ok := cancelledOutcome(ctx, res); ok {
		o = asked
	}
	ok, err := r.finish(c, o, r.opts.Lease)
	switch {
	case err != nil:
		// The job stays held with no call: renewals find it unknown and
		// give it back (run again, at least once), idle node or not.
		log().Error("could not record job result; the job runs again", "err", err, "result", o.State)
		r.mu.Lock()
		r.raiseDoubtLocked(clock.Mono(r.opts.Clock))
		r.mu.Unlock()
		return
	case !ok:
		r.leasesLost.Add(1)
		log().Warn("job result not recorded: the claim was no longer this node's (lease lost)", "result", o.State)
		return
	}
	switch o.State {
	case store.StateDone:
		r.succeeded.Add(1)
		if r.opts.Logger.Enabled(ctx, slog.LevelDebug) {
			log().Debug("job done", "status", res.Status, "duration", res.Duration)
		}
	case store.StateFailed:
		r.failed.Add(1)
		log().Warn("job failed", "status", res.Status, "error", res.Err)
	case store.StateDead:
		r.dead.Add(1)
		log().Warn("job dead after its last attempt", "status", res.Status, "error", res.Err)
	case store.StateCancelled:
		log().Info("job cancelled while running", "reason", o.Error)
	default:
		r.retried.Add(1)
		log().Info("job will be retried", "status", res.Status, "error", res.Err, "after", o.RetryAfter)
	}
}

// traceOf is the trace a job's call belongs to: the one it was enqueued
// in, else (none given, or a row holding what is not a traceparent) the
// job's own (jobspec.JobTrace), the same on every attempt.
func traceOf(c store.Claim) jobspec.Trace {
	if c.Traceparent != "" {
		if t, err := jobspec.ParseTraceparent(c.Traceparent); err == nil {
			return t
		}
	}
	return jobspec.JobTrace(c.ID, c.IdempotencyKey)
}
