package jobs

import (
	"context"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
)

// PollResult says what one poll did.
type PollResult struct {
	Reclaimed int64
	Due       int // due when counted, at most LoadLimit
	Claimed   int
	Left      int // due jobs this poll left to others
	// Signalled: Turn.Backlog was called (with BacklogErr its answer).
	Signalled  bool
	BacklogErr error
	// Skipped: a widened turn of a node already draining the farm's
	// backlog (drainsBacklog) sent no statement.
	Skipped bool
}

// Turn describes the poll a node is about to make.
type Turn struct {
	// FarmCapacity is the sum of the live nodes' capacities.
	FarmCapacity int
	// AheadCapacity, in a widened slot, is the capacity of this poller and
	// of those whose turns in the slot are still to come: the claim now
	// takes an even part of what they share. Zero means FarmCapacity.
	// What the node may go on claiming as its calls end (Refill), until
	// the whole farm has heard of the backlog, is measured against the
	// whole farm: a poller early in the slot refills as it drains, and
	// an even part of what is left for the pollers ahead would take from
	// the later ones their share of the burst.
	AheadCapacity int
	// NextPoll is how long until the farm's next poll after this one (the
	// next slot, or the next widened turn) on the database clock.
	NextPoll time.Duration
	// StartWindow is how late after its run time a job may start. A job
	// that the next poll would reach later than that is taken now, whatever
	// the fair share says.
	StartWindow time.Duration
	// Widened is a turn other than the slot owner's, in a slot widened by a
	// backlog. It does not reclaim expired leases: the owner's turn did,
	// this slot, and a node woken by the backlog starts its calls a round
	// trip sooner.
	Widened bool
	// ClockStepped: the database clock was seen to step lately. Leases
	// and start windows written before the step may look run out though
	// their holders live (a step ahead) until every holder has renewed on
	// the clock as it now reads: this poll reclaims nothing and marks no
	// occurrence missed. Claims go on.
	ClockStepped bool
	// DBClock, if set, is the node's estimate of the database's now and
	// how far the database's clock may read past it before that is a step
	// (clocksync's error bound and MinStep). The reclaim changes nothing
	// if the database's clock reads later than that, with room for the
	// statement's deadline: a step ahead that lands between the turn's
	// sample of the clock and the reclaim.
	DBClock func() (now time.Time, errBound time.Duration, ok bool)
	// Backlog, if set, tells the farm that this poll leaves due work
	// behind; the poll reports its answer in PollResult.BacklogErr. It is
	// called as soon as the count shows it, alongside the
	// claim rather than after it: the other nodes then hear of the
	// backlog while this one claims, not after it has started its calls
	// (1,000 call goroutines starting delayed the note by 100 ms). A claim
	// that then comes back short (another node took the rows) made it a
	// false alarm: the farm widens for a while for nothing, which costs a
	// few polls, never a job.
	Backlog func(ctx context.Context, left int) error
}

// Poll is the node's work in its turn: reclaim, count, claim, start calls.
// Each statement has a deadline: a poll stuck on a stalled connection
// would hold up the node's turns and leave the claim's fate unknown.
func (r *Runner) Poll(ctx context.Context, turn Turn) (PollResult, error) {
	if turn.Widened && r.drainsBacklog() {
		return PollResult{Skipped: true}, nil
	}
	r.polls.Add(1)
	nextPoll := clock.Mono(r.opts.Clock).Add(turn.NextPoll)
	var res PollResult
	if !turn.Widened && !turn.ClockStepped {
		var notAfter time.Time
		if turn.DBClock != nil {
			if now, bound, ok := turn.DBClock(); ok {
				notAfter = now.Add(bound + r.statementTimeout())
			}
		}
		n, err := bounded(ctx, r.statementTimeout(), func(ctx context.Context) (int64, error) {
			return r.store.JobsReclaimExpired(ctx, notAfter)
		})
		if err != nil {
			return res, err
		}
		res.Reclaimed = n
		if n > 0 {
			r.opts.Logger.Info("reclaimed jobs whose lease expired", "count", n)
		}
	}
	loadLimit := LoadLimit(turn.FarmCapacity, r.opts.Capacity)
	load, err := bounded(ctx, r.statementTimeout(), func(ctx context.Context) (store.QueueLoad, error) {
		return r.store.JobsLoad(ctx, turn.NextPoll, turn.StartWindow, loadLimit)
	})
	if err != nil {
		return res, err
	}
	res.Due = load.Due
	r.managed.Store(load.Managed > 0)
	r.others.Store(load.Due > load.Managed || load.Due >= loadLimit)
	// One claim at a time: a refill under way would otherwise be counted
	// neither in what this node runs nor in what it has free.
	r.claimMu.Lock()
	defer r.claimMu.Unlock()
	mine := r.Running()
	ahead := turn.AheadCapacity
	if ahead <= 0 {
		ahead = turn.FarmCapacity
	}
	want := FairShare(load, mine, r.opts.Capacity, ahead, r.opts.Capacity-mine)
	share := capacityShare(load, mine, r.opts.Capacity, turn.FarmCapacity)
	// The due jobs of managed queues may be held back by their limits: a
	// backlog that only a limit holds must not widen the rotation for as
	// long as it lasts (every node polling every slot, for nothing). So
	// they count as a backlog only once a claim showed them claimable: it
	// came back full.
	if want == 0 {
		res.Left = load.Due
		if turn.Backlog != nil && load.Due > load.Managed {
			res.BacklogErr, res.Signalled = turn.Backlog(ctx, load.Due), true
		}
		r.learned(load.Due > 0, max(share, r.urgentRound(load, 0)), nextPoll, load.Due)
		return res, nil
	}
	var signalled chan error
	if turn.Backlog != nil && load.Due > want && load.Managed == 0 {
		signalled = make(chan error, 1)
		go func() { signalled <- turn.Backlog(ctx, load.Due-want) }()
	}
	started, err := r.claim(ctx, want)
	if signalled != nil {
		res.BacklogErr = <-signalled
		res.Signalled = true
	}
	if err != nil {
		return res, err
	}
	if turn.Backlog != nil && load.Managed > 0 && load.Due > want && len(started) == want {
		res.BacklogErr, res.Signalled = turn.Backlog(ctx, load.Due-want), true
	}
	res.Claimed = len(started)
	r.mu.Lock()
	r.heldBack = load.Managed > 0 && len(started) < want
	r.mu.Unlock()
	// Fewer rows than asked for means the claimable ones ran out (another
	// node took them, or they wait behind a running occurrence): nothing
	// was left behind. Only a share smaller than the due work leaves some.
	if len(started) == want {
		res.Left = max(0, load.Due-len(started))
	}
	r.learned(res.Left > 0, max(share-len(started), r.urgentRound(load, len(started))), nextPoll, res.Left)
	for _, f := range started {
		r.start(f)
	}
	return res, nil
}

// drainsBacklog reports whether the node takes the farm's backlog as its
// calls end with nothing to learn from a count: Refill runs, the whole
// farm has heard of the backlog (farmKnowsLocked) and no claim has come
// back short since. A widened turn exists to tell nodes of a backlog;
// such a node's would count what it knows, and at 100,000 jobs on 4
// nodes of 1,000 calls the widened turns' counts took a sixth of the
// database's CPU. The slot owner's turn still counts, once a slot: it
// reclaims, keeps the farm's backlog flag up, and sees jobs of managed
// queues come. While the last count found such jobs the node counts at
// every turn: its claims follow the counts (managed).
func (r *Runner) drainsBacklog() bool {
	if r.managed.Load() || !r.refilling.Load() {
		return false
	}
	now := clock.Mono(r.opts.Clock)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.more && !r.heldBack && r.farmKnowsLocked(now)
}

// claim claims up to want due jobs and registers them as in flight; the
// caller starts them. r.claimMu is held. While the last count found due
// jobs of managed queues, the claim is the managed one: one transaction
// that takes them within their limits, and the rest, in priority order.
func (r *Runner) claim(ctx context.Context, want int) ([]*inflight, error) {
	managed, others := r.managed.Load(), r.others.Load()
	return r.claimWith(ctx, func(ctx context.Context) ([]store.Claim, error) {
		if managed {
			return r.store.JobsClaimManaged(ctx, r.opts.Incarnation, r.opts.Node, want, r.hold(), others)
		}
		return r.store.JobsClaim(ctx, r.opts.Incarnation, r.opts.Node, want, r.hold())
	})
}

// claimWith runs a statement that makes this node the holder of jobs (a
// claim, or an insert already claimed) and registers them as in flight.
// While it runs, a renewal that finds jobs held but unknown leaves them be;
// if it fails, it may have committed unseen, and the renewals look for
// what it left held.
func (r *Runner) claimWith(ctx context.Context, stmt func(context.Context) ([]store.Claim, error)) ([]*inflight, error) {
	r.mu.Lock()
	r.claiming++
	r.mu.Unlock()
	sent := clock.Mono(r.opts.Clock)
	ctx, span := r.claimSpan(ctx)
	claims, err := bounded(ctx, r.statementTimeout(), stmt)
	endClaimSpan(span, claims, err)
	now := clock.Mono(r.opts.Clock)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.claiming--
	if err != nil {
		r.raiseDoubtLocked(now)
		return nil, err
	}
	// Registered in the same critical section that ends the claim, so that
	// a renewal never sees the claim over and its jobs unknown.
	started := make([]*inflight, len(claims))
	for i, c := range claims {
		started[i] = r.track(c, now, sent.Add(r.hold().For(c.Timeout)))
	}
	r.claimed.Add(int64(len(claims)))
	return started, nil
}

// urgentRound is what Refill may take, before the farm has heard of the
// backlog, of the due jobs a turn counted that would start late if left to
// the farm's next poll (claimed: what the turn took of them). In Poll they
// are the floor of the claim; those the claim could not take for want of
// room the node claims as its calls end, one more round of its calls at
// most, so that a burst still spreads. The farm hears of the backlog at
// its next reading, a heartbeat away where no note reaches the nodes: a
// trickle of more jobs a slot than a node's capacity otherwise left part
// of every turn's work to wait past a slot.
func (r *Runner) urgentRound(load store.QueueLoad, claimed int) int {
	return min(min(load.Urgent, load.Due)-claimed, r.opts.Capacity)
}

// learned records what a turn found: whether it left due work behind,
// what is left of this node's share of it for Refill, and when the farm's
// next poll, which the turn left the rest (left jobs) to, was due.
func (r *Runner) learned(more bool, budget int, nextPoll clock.Instant, left int) {
	r.mu.Lock()
	r.more, r.budget, r.leftUntil, r.leftOver = more, max(0, budget), clock.Instant{}, 0
	if more {
		r.leftUntil, r.leftOver = nextPoll, min(left, r.opts.Capacity)
	}
	r.mu.Unlock()
	r.nudge()
}

// Idle is a turn whose reading found no due job: the runner learns that
// nothing is left to refill, as a poll that found the queue empty would
// have told it, without the poll's statements.
func (r *Runner) Idle() {
	r.polls.Add(1) // the turn's reading looked at the queue: a poll, in one statement shared with the registry
	r.claimMu.Lock()
	defer r.claimMu.Unlock()
	r.learned(false, 0, clock.Instant{}, 0)
}

// nudge wakes Refill to look again.
func (r *Runner) nudge() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// FarmBacklog tells the runner whether the farm's backlog flag is up (some
// node left due work behind), as the membership read it. When it rises the
// node knows of due work: Refill claims as it has room, first within its
// share, and once every node has heard of the backlog (after
// Options.BacklogSpread) as fast as its calls end, which spreads the work
// by capacity.
func (r *Runner) FarmBacklog(up bool) {
	r.mu.Lock()
	switch {
	case up && r.backlogSince.IsZero():
		r.backlogSince = clock.Mono(r.opts.Clock)
		r.more = true
	case !up:
		r.backlogSince = clock.Instant{}
	}
	r.mu.Unlock()
	r.nudge()
}
