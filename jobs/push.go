package jobs

import (
	"context"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
)

// DefaultPushCooldown is Options.PushCooldown's default.
const DefaultPushCooldown = 30 * time.Millisecond

// pushState is what a node heard of jobs enqueued due now (Due), between
// its turns. r.mu guards it.
type pushState struct {
	// pending: a note came that no claim has answered yet. Notes that come
	// while one waits are one wake-up: one claim answers them all.
	pending bool
	// claiming: the claim under way answers a note.
	claiming bool
	// last is when the last claim that answered a note began (local
	// monotonic): the next one waits a cooldown after it, so that a
	// steady stream of enqueues is claimed in batches.
	last clock.Instant
	// noRoom: a note waits while the node has no room, or a note's claim
	// filled the node; signalled is when the backlog was last signalled
	// for it.
	noRoom    bool
	signalled clock.Instant
}

// Due is a note that an enqueue committed a job due now (store.NoteDue).
// Every listening node hears it; only the slot's owner acts on it (by its
// own estimate of the database clock, the rotation's arithmetic), so one
// node claims per wake-up, not every node. The others do nothing: hearing
// a note costs no statement. The owner claims up to its free room at once,
// or after PushCooldown since its last such claim; a note heard while a
// claim runs makes one more claim after it. With no room, it claims when a
// call ends, and tells the farm of the backlog (Options.PushBacklog) so
// that nodes with room poll. A note that never comes (the listener's
// connection broke, the channel was full) costs a turn's wait: the next
// turn finds the job.
func (r *Runner) Due() {
	if r.opts.SlotOwner != nil && !r.opts.SlotOwner() {
		return
	}
	r.mu.Lock()
	r.push.pending = true
	r.mu.Unlock()
	r.nudge()
}

// nextPush is nextRefill for a pending note: how many jobs to claim for it
// now, or how long until it may (0: when room is made, or no note waits).
// r.mu is held.
func (r *Runner) nextPush(now clock.Instant, free int) (want int, after time.Duration) {
	if !r.push.pending {
		return 0, 0
	}
	if free <= 0 {
		r.push.noRoom = true
		return 0, 0
	}
	if !r.push.last.IsZero() {
		if wait := r.push.last.Add(r.opts.PushCooldown).Sub(now); wait > 0 {
			return 0, wait
		}
	}
	r.push.pending, r.push.claiming, r.push.last = false, true, now
	return free, 0
}

// pushClaimed records how a claim that answered a note went. A full one
// may have left due work behind: the node goes on claiming as its calls
// end, as after a turn that left work, and if it has no room left it
// tells the farm. A short one found the queue dry. r.mu is held.
func (r *Runner) pushClaimed(full bool) {
	r.push.claiming = false
	if !full {
		return
	}
	r.more = true
	r.budget = max(r.budget, r.opts.Capacity)
	if len(r.inflight) >= r.opts.Capacity {
		r.push.noRoom = true
	}
}

// pushBacklog tells the farm of due work the owner has no room for, unless
// the farm knows of a backlog already or it was told within the backlog's
// spread.
func (r *Runner) pushBacklog(ctx context.Context) {
	r.mu.Lock()
	now := clock.Mono(r.opts.Clock)
	tell := r.push.noRoom && r.opts.PushBacklog != nil && r.backlogSince.IsZero() &&
		(r.push.signalled.IsZero() || now.Sub(r.push.signalled) >= r.opts.BacklogSpread)
	r.push.noRoom = false
	if tell {
		r.push.signalled = now
	}
	r.mu.Unlock()
	if !tell {
		return
	}
	if err := r.opts.PushBacklog(ctx); err != nil && ctx.Err() == nil {
		r.opts.Logger.Warn("could not signal backlog for jobs enqueued while this node was full; the next turn finds them", "err", err)
	}
}

// refillClaim is Refill's claim. A note's claim on a farm with managed
// queues is the managed claim, looking at the other queues too: the note
// may be of a managed queue's job, and the node's last count, which picks
// the claim otherwise, is older than the job.
func (r *Runner) refillClaim(ctx context.Context, want int) ([]*inflight, error) {
	r.mu.Lock()
	push := r.push.claiming
	r.mu.Unlock()
	if !push || !r.opts.PushManaged || r.managed.Load() {
		return r.claim(ctx, want)
	}
	return r.claimWith(ctx, func(ctx context.Context) ([]store.Claim, error) {
		return r.store.JobsClaimManaged(ctx, r.opts.Incarnation, r.opts.Node, want, r.hold(), true)
	})
}
