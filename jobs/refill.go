package jobs

import (
	"context"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
)

// DefaultRefillCooldown is Options.RefillCooldown's default.
const DefaultRefillCooldown = 10 * time.Millisecond

// nextRefill says how many jobs Refill claims now, or, when none, how long
// until it looks again on its own (0: when woken). roomSince is when the
// room it waits to grow was first seen (zero: none yet). r.claimMu is held.
func (r *Runner) nextRefill(now clock.Instant, roomSince *clock.Instant) (want int, after time.Duration) {
	return r.nextRefillFreeing(now, roomSince, 0)
}

// nextRefillFreeing is nextRefill for a claim sent with the results of
// freeing calls, whose room the claim may take (finishAndClaim).
func (r *Runner) nextRefillFreeing(now clock.Instant, roomSince *clock.Instant, freeing int) (want int, after time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	free := r.opts.Capacity - len(r.inflight) + freeing
	// A note of jobs enqueued due now (Due) is answered first; while it
	// waits out its cooldown, Refill looks again when that ends.
	pushWant, pushAfter := r.nextPush(now, free)
	if pushWant > 0 {
		return pushWant, 0
	}
	want, after = r.nextRefillLocked(now, roomSince, free)
	if want == 0 && pushAfter > 0 && (after == 0 || pushAfter < after) {
		after = pushAfter
	}
	return want, after
}

// nextRefillLocked is nextRefill for what the turns and the backlog flag
// told the node. r.mu is held.
func (r *Runner) nextRefillLocked(now clock.Instant, roomSince *clock.Instant, free int) (want int, after time.Duration) {
	if !r.more {
		if r.heldBack && r.heldRetry && free > 0 {
			r.heldRetry = false
			return free, 0
		}
		return 0, 0
	}
	limit := free
	knows := r.farmKnowsLocked(now)
	// The poll the last turn left its work to is past: had it come, the
	// work would be gone (a claim then comes back short and costs one
	// statement); if not, the work is taken now, before it waits a slot.
	if !r.leftUntil.IsZero() && !now.Before(r.leftUntil) {
		r.budget = max(r.budget, r.leftOver)
		r.leftUntil, r.leftOver = clock.Instant{}, 0
	}
	if !knows {
		limit = min(free, r.budget)
	}
	if limit <= 0 {
		if knows || free <= 0 {
			return 0, 0
		}
		// Both ends lie ahead (an overdue poll was handled above); 0,
		// neither known, waits to be woken.
		var wait time.Duration
		if !r.backlogSince.IsZero() {
			wait = r.backlogSince.Add(r.opts.BacklogSpread).Sub(now)
		}
		if left := r.leftUntil.Sub(now); !r.leftUntil.IsZero() && (wait == 0 || left < wait) {
			wait = left
		}
		return 0, wait
	}
	// Batched: one claim for the calls that end within a cooldown, unless
	// a quarter of the capacity is free already, or all the share left.
	if limit < max(1, r.opts.Capacity/4) && (knows || limit < r.budget) {
		if roomSince.IsZero() {
			*roomSince = now
		}
		if wait := roomSince.Add(r.opts.RefillCooldown).Sub(now); wait > 0 {
			return 0, wait
		}
	}
	return limit, 0
}

// farmKnowsLocked reports whether every node has had time to hear of the
// farm's backlog (Options.BacklogSpread since this node saw the flag
// rise): Refill then claims all the room it has, with no budget. r.mu is
// held.
func (r *Runner) farmKnowsLocked(now clock.Instant) bool {
	return !r.backlogSince.IsZero() && !now.Before(r.backlogSince.Add(r.opts.BacklogSpread))
}

// refilled records how a claim of Refill's (want jobs) went: the share it
// used, whether the queue may hold more, a note it answered. r.claimMu is
// held.
func (r *Runner) refilled(want int, started []*inflight, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	full := err == nil && len(started) == want
	r.budget = max(0, r.budget-len(started))
	r.more = r.more && full
	if r.push.claiming {
		r.pushClaimed(full)
	}
	r.heldBack = r.managed.Load() && err == nil && len(started) < want
	if !r.more {
		r.budget = 0 // a share is for the burst its turn saw
	}
}

// Refill claims again as calls end while the node knows of due work
// (Poll left some behind, or the farm's backlog flag rose). Turns are for
// finding work when the queue looked empty; while a node knows there is
// more, it takes it as soon as it has room, batched, with only the claim
// statement, so a burst drains at the speed of the endpoints, not at one
// claim per turn. A claim that comes back short means the queue ran dry:
// the node goes back to its turns.
func (r *Runner) Refill(ctx context.Context) error {
	r.refilling.Store(true)
	defer r.refilling.Store(false)
	var roomSince clock.Instant
	for {
		r.claimMu.Lock()
		want, after := r.nextRefill(clock.Mono(r.opts.Clock), &roomSince)
		if want > 0 {
			roomSince = clock.Instant{}
			var batch []*finishing
			var fs []store.Finish
			if r.fusesResults() {
				batch, fs = r.takePending()
			}
			var started []*inflight
			var err error
			if len(batch) > 0 {
				started, err = r.claimWithResults(batch, fs, want)
			} else {
				started, err = r.refillClaim(ctx, want)
			}
			r.refilled(want, started, err)
			r.claimMu.Unlock()
			if err != nil && ctx.Err() == nil {
				r.opts.Logger.Warn("claiming again as calls ended failed; waiting for the next turn", "err", err)
			}
			r.opts.Logger.Debug("claimed again as calls ended", "asked", want, "claimed", len(started))
			for _, f := range started {
				r.start(f)
			}
			r.deliver(batch)
			r.pushBacklog(ctx)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		r.claimMu.Unlock()
		r.pushBacklog(ctx)
		var timer clock.Timer
		var timeout <-chan time.Time
		if after > 0 {
			timer = r.opts.Clock.NewTimer(after)
			timeout = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-r.wake:
		case <-timeout:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
