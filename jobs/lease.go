package jobs

import (
	"context"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
)

// RenewLeases keeps the leases of running calls alive: every lease/3 it
// renews all of this node's leases in one statement. A call whose job is no
// longer held is cancelled at once, and so is one whose job an operator
// asked to cancel (cancel.go); a call whose lease goes unconfirmed is cut
// off by its watchdog while there is still time.
//
// The rounds keep their cadence from each one's send time, and a round
// that failed is tried again within a quarter of the interval: a round
// that timed out (it may take the whole interval) is followed at once, not
// an interval later, so that one slow statement does not leave a lease
// confirmed only two intervals back, which the watchdog would cut off at
// the next database blip.
func (r *Runner) RenewLeases(ctx context.Context) error {
	tick := r.opts.Lease / 3
	next := clock.Mono(r.opts.Clock).Add(tick)
	for {
		if err := clock.Sleep(ctx, r.opts.Clock, next.Sub(clock.Mono(r.opts.Clock))); err != nil {
			return err
		}
		sent := clock.Mono(r.opts.Clock)
		err := r.RenewOnce(ctx)
		next = sent.Add(tick)
		if err != nil {
			next = earliest(next, clock.Mono(r.opts.Clock).Add(tick/4))
		}
	}
}

func earliest(a, b clock.Instant) clock.Instant {
	if b.Before(a) {
		return b
	}
	return a
}

// raiseDoubtLocked notes that the node may hold jobs no call runs. Holds r.mu.
func (r *Runner) raiseDoubtLocked(now clock.Instant) {
	r.doubt, r.doubts, r.doubtUntil = true, r.doubts+1, now.Add(r.opts.Lease)
}

// RenewOnce is one round of RenewLeases; it returns the renewal's error.
// A node with no call in flight and no failed claim in doubt sends
// nothing.
func (r *Runner) RenewOnce(ctx context.Context) error {
	r.mu.Lock()
	idle, doubts := len(r.inflight) == 0 && !r.doubt, r.doubts
	r.mu.Unlock()
	if idle {
		return nil
	}
	sent := clock.Mono(r.opts.Clock)
	// A tick at most: a later answer could confirm nothing the next round
	// would not (the lease is counted from the send time, and each call's
	// watchdog cuts it off when its lease as last confirmed runs out).
	rctx, cancel := context.WithTimeout(ctx, r.opts.Lease/3)
	held, err := r.store.JobsRenewLeases(rctx, r.opts.Incarnation, r.hold())
	cancel()
	if err != nil {
		// Nothing is cancelled here: each call's watchdog cuts it off when
		// its lease as last confirmed is about to run out. A database blip
		// shorter than that must not cut off every call on the node.
		r.opts.Logger.Error("could not renew job leases; calls go on until their leases as last confirmed run out", "err", err)
		return err
	}
	now := clock.Mono(r.opts.Clock)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.renewals.Add(1)
	still := make(map[store.Held]bool, len(held))
	unknown := 0
	for _, h := range held {
		still[h.Claim()] = true
		if f := r.inflight[h.Claim()]; f != nil {
			if h.CancelBy != "" {
				r.cancelAskedLocked(f, h.CancelBy) // cancel.go
			}
			continue
		}
		// Held but not in flight: a claim whose answer was lost. Give it
		// back now rather than renew it for ever, unless a claim is under
		// way (the job may be its own); the next round decides then.
		unknown++
		if r.claiming == 0 {
			go r.releaseOrphan(h.Claim())
		}
	}
	switch {
	case unknown > 0:
		r.doubt = true // the next round checks that they are gone
	case r.claiming == 0 && r.doubts == doubts && !now.Before(r.doubtUntil):
		r.doubt = false
	}
	for key, f := range r.inflight {
		if !f.claimedAt.Before(sent) || f.ended {
			// Claimed after the renewal was sent, or its call is over and
			// its result on the way: not judged by this renewal.
			continue
		}
		if still[key] {
			if until := sent.Add(r.hold().For(f.claim.Timeout)); until.After(f.leaseUntil) {
				f.leaseUntil = until
			}
			r.arm(f, now)
			continue
		}
		r.opts.Logger.Warn("cancelling call: lease lost", "job", f.claim.ID, "token", f.claim.Token)
		r.cancelled.Add(1)
		f.cancel(errLeaseLost)
	}
	return nil
}

func (r *Runner) releaseOrphan(h store.Held) {
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.Lease/3)
	defer cancel()
	ok, err := r.store.JobReleaseIfRunning(ctx, h.ID, h.Token, "released: the claim's answer never reached node "+r.opts.Node)
	if err == nil && ok {
		r.released.Add(1)
		r.opts.Logger.Warn("released a job claimed but never started (its claim's answer was lost)", "job", h.ID, "token", h.Token)
	}
}
