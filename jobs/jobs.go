// Package jobs is slotpoller's queue at work on one node: in the node's
// slot it reclaims expired leases, claims its fair share of due jobs with a
// conditional UPDATE, calls each job's endpoint on the node's own base URL,
// keeps the leases of running calls alive in one statement per interval, and
// records each result fenced by the claim's token.
//
// Safety rests on the claim and the token, never on timing: a node that
// lost its lease (froze, lost the database) can no longer write the job.
// Each call also has a watchdog on the node's monotonic clock that cuts it
// off shortly before its lease, as last confirmed, would run out: a failed
// renewal cancels nothing by itself, and no claim or database stall can
// keep a call running past its lease. A claim that failed may have
// committed unseen; the next renewal round gives such jobs back unrun.
package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
)

// Reasons a call is cancelled, read back with context.Cause.
var (
	errLeaseLost        = errors.New("lease lost: the farm reclaimed the job")
	errLeaseUnconfirmed = errors.New("lease could not be confirmed with the database before it ran out")
	errDraining         = errors.New("node is stopping")
)

// Options configure a Runner. Zero durations are not defaults: the service
// fills them from validated config.
type Options struct {
	Node        string // node name, sent as X-Slotpoller-Node
	Incarnation string // owner id of this process's claims
	Capacity    int    // concurrent calls
	Lease       time.Duration
	Timeout     time.Duration // call deadline when the job has none
	Backoff     time.Duration
	BackoffMax  time.Duration
	Clock       clock.Clock
	Logger      *slog.Logger
	Rand        func() float64 // jitter source; nil: math/rand
	// StatementTimeout bounds each statement of a poll or a claim; zero
	// means the lease (at least 100 ms). Nothing waits on these statements
	// (renewals do not), so the bound only keeps a stalled one from hanging
	// for ever; a tight one would cut off a slow but working database.
	StatementTimeout time.Duration
	// RefillCooldown is how long a node with room waits for more room
	// before it claims again between turns (see Refill), unless a quarter
	// of its capacity is free already: calls that end within it are
	// claimed for together. Zero means DefaultRefillCooldown.
	RefillCooldown time.Duration
	// BacklogSpread is how long after this node first sees the farm's
	// backlog flag every other live node has heard of it too and taken its
	// turn (a note and a poll away where notes reach every node, a
	// widened slot where nodes hear at their turns). Until then the node
	// refills only up to its capacity share of what its turn saw; the
	// shares miss the jobs done between the turns, so the last few jobs of
	// a burst wait for the spread to run out.
	BacklogSpread time.Duration
	// FinishWindow is how long the completer collects results before it
	// writes a batch; zero writes at once whatever has come in while the
	// previous batch was written.
	FinishWindow time.Duration
	// OnCall, when set, is called after every job call returns, with its
	// verdict and how long it took (for the node's metrics). It runs on
	// the call's goroutine and must not block.
	OnCall func(verdict Verdict, d time.Duration)
}

// Stats are the runner's counters since start.
type Stats struct {
	Polls, Claimed, Succeeded, Retried, Failed, Dead, Released, LeasesLost, Renewals int64
	// Finishes counts the statements that recorded results (each one a
	// batch).
	Finishes int64
	// Cancelled counts calls cut off because their lease was lost or could
	// not be confirmed in time.
	Cancelled int64
}

// Runner runs the jobs of one node.
type Runner struct {
	store *store.Store
	inv   *Invoker
	opts  Options

	base   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	inflight map[store.Held]*inflight // by job id and token: a re-claim is a new entry
	// claiming counts claim statements under way. A job the database says
	// this node holds but that is not in flight is an orphan only while no
	// claim is under way: otherwise it may be that claim's, its answer not
	// yet registered.
	claiming int
	// doubt is set when a claim statement failed: it may have committed
	// with its answer lost, leaving jobs held that no call runs. Renewals
	// go on, even on an idle node, until a round finds nothing unknown.
	// doubts counts the times it was set, so that a round does not clear a
	// doubt raised while it was under way. doubtUntil keeps it for a lease
	// after it was raised: a statement the node gave up on may still
	// commit in the database after a clean round.
	doubt      bool
	doubts     int
	doubtUntil time.Time // local monotonic

	// Refill state. more is set while the node knows of due work it left
	// for lack of room or share: Refill then claims again as calls end. A
	// claim that comes back short (the queue ran dry) clears it. budget is
	// what is left of the capacity share the node's last turn gave it:
	// all Refill may take until the whole farm has heard of the backlog
	// (backlogSince + BacklogSpread), so that a node that drains fast
	// does not take a burst from nodes that do not know of it yet.
	more         bool
	budget       int
	backlogSince time.Time     // local monotonic, when the farm's backlog flag was seen rising; zero while it is down
	wake         chan struct{} // room was made, or there is news of work: Refill looks again
	// claimMu makes a node's claims one at a time: each is sized by the
	// room left after the one before.
	claimMu sync.Mutex

	// draining is set when the drain begins: nothing new starts then.
	draining atomic.Bool

	// The completer's queue (complete.go).
	fmu        sync.Mutex
	pending    []*finishing
	completing bool // a completeLoop runs

	polls, claimed, succeeded, retried, failed, dead, released, leasesLost, renewals, cancelled, finishes atomic.Int64
}

type inflight struct {
	claim     store.Claim
	ctx       context.Context // the call's, cancelled with a cause
	cancel    context.CancelCauseFunc
	claimedAt time.Time // local, after the claim statement returned
	// Guarded by Runner.mu:
	leaseUntil time.Time // local, conservative: send time of the last confirmation + lease
	calling    bool      // the endpoint call is under way
	// ended is set once the call is over (or was never made): its result
	// is then the judge of the lease, not a renewal, which may read the
	// leases after the result's commit and before its answer.
	ended    bool
	watchdog clock.Timer // fires when leaseUntil is a margin away
	armed    int         // counts arm calls: a watchdog that fires after a rearm is stale
}

// NewRunner returns a runner; Drain stops it.
func NewRunner(s *store.Store, inv *Invoker, opts Options) *Runner {
	if opts.Clock == nil {
		opts.Clock = clock.Real()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	base, cancel := context.WithCancel(context.Background())
	if opts.RefillCooldown <= 0 {
		opts.RefillCooldown = DefaultRefillCooldown
	}
	return &Runner{store: s, inv: inv, opts: opts, base: base, cancel: cancel, inflight: map[store.Held]*inflight{},
		wake: make(chan struct{}, 1)}
}

// Store is the runner's store.
func (r *Runner) Store() *store.Store { return r.store }

// Running returns how many calls are in flight.
func (r *Runner) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inflight)
}

// Free returns how many more calls the node can take.
func (r *Runner) Free() int { return max(0, r.opts.Capacity-r.Running()) }

// Stats returns the counters.
func (r *Runner) Stats() Stats {
	return Stats{Polls: r.polls.Load(), Claimed: r.claimed.Load(), Succeeded: r.succeeded.Load(), Retried: r.retried.Load(),
		Failed: r.failed.Load(), Dead: r.dead.Load(), Released: r.released.Load(), LeasesLost: r.leasesLost.Load(), Renewals: r.renewals.Load(), Cancelled: r.cancelled.Load(),
		Finishes: r.finishes.Load()}
}

// FairShare is how many of the due jobs a poller takes: its capacity's
// share of all outstanding work (due plus running anywhere), less what it
// already runs — but at least every urgent job, one that would miss its
// start window if left to the next poller — never more than it has free or
// than is due. Counting running work means that in a burst the pollers of a
// widened rotation each get their part; the urgent floor means fairness
// never costs a job its start.
func FairShare(load store.QueueLoad, mine, capacity, farmCapacity, free int) int {
	return max(0, min(max(capacityShare(load, mine, capacity, farmCapacity), load.Urgent), free, load.Due))
}

// capacityShare is the node's capacity's share of the outstanding work,
// less what it runs, at most what is due: what it may take of the due work
// in one turn, now or as its calls end (Refill), without the urgent floor,
// which is for jobs that can start now.
func capacityShare(load store.QueueLoad, mine, capacity, farmCapacity int) int {
	if farmCapacity < capacity || farmCapacity <= 0 {
		farmCapacity = capacity
	}
	if capacity <= 0 {
		return 0
	}
	outstanding := load.Due + load.Running
	target := (outstanding*capacity+farmCapacity-1)/farmCapacity - mine
	return max(0, min(target, load.Due))
}

// LoadLimit is the most due jobs a turn counts (store.JobsLoad), so that a
// turn costs the same whatever the depth of the queue. At the limit every
// node's capacity share is four times its capacity: FairShare is then all
// it has free, as it would be for any deeper queue, and what it may refill
// before the whole farm has heard of the backlog is three rounds of its
// calls more (an exact count of a deeper queue gave more: a node whose
// calls end faster than the backlog spreads may wait out the spread once
// per backlog, BacklogSpread, slot/8 on PostgreSQL). A burst of up to
// MinLoadCount jobs is still counted, and so spread, exactly.
func LoadLimit(farmCapacity, capacity int) int {
	return max(MinLoadCount, 4*max(farmCapacity, capacity))
}

// MinLoadCount is the least LoadLimit: counting ten thousand rows of an
// index is a few milliseconds of the database's time in a turn.
const MinLoadCount = 10_000

// PollResult says what one poll did.
type PollResult struct {
	Reclaimed int64
	Due       int // due when counted, at most LoadLimit
	Claimed   int
	Left      int // due jobs this poll left to others
	// Signalled: Turn.Backlog was called (with BacklogErr its answer).
	Signalled  bool
	BacklogErr error
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
	r.polls.Add(1)
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
	load, err := bounded(ctx, r.statementTimeout(), func(ctx context.Context) (store.QueueLoad, error) {
		return r.store.JobsLoad(ctx, turn.NextPoll, turn.StartWindow, LoadLimit(turn.FarmCapacity, r.opts.Capacity))
	})
	if err != nil {
		return res, err
	}
	res.Due = load.Due
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
	if want == 0 {
		res.Left = load.Due
		if turn.Backlog != nil && load.Due > 0 {
			res.BacklogErr, res.Signalled = turn.Backlog(ctx, load.Due), true
		}
		r.learned(load.Due > 0, share)
		return res, nil
	}
	var signalled chan error
	if turn.Backlog != nil && load.Due > want {
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
	res.Claimed = len(started)
	// Fewer rows than asked for means the claimable ones ran out (another
	// node took them, or they wait behind a running occurrence): nothing
	// was left behind. Only a share smaller than the due work leaves some.
	if len(started) == want {
		res.Left = max(0, load.Due-len(started))
	}
	r.learned(res.Left > 0, share-len(started))
	for _, f := range started {
		r.start(f)
	}
	return res, nil
}

// claim claims up to want due jobs and registers them as in flight; the
// caller starts them. r.claimMu is held.
func (r *Runner) claim(ctx context.Context, want int) ([]*inflight, error) {
	return r.claimWith(ctx, func(ctx context.Context) ([]store.Claim, error) {
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
	sent := r.opts.Clock.Now()
	claims, err := bounded(ctx, r.statementTimeout(), stmt)
	now := r.opts.Clock.Now()
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

// learned records what a turn found: whether it left due work behind, and
// what is left of this node's share of it for Refill.
func (r *Runner) learned(more bool, budget int) {
	r.mu.Lock()
	r.more, r.budget = more, max(0, budget)
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
	r.learned(false, 0)
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
		r.backlogSince = r.opts.Clock.Now()
		r.more = true
	case !up:
		r.backlogSince = time.Time{}
	}
	r.mu.Unlock()
	r.nudge()
}

// DefaultRefillCooldown is Options.RefillCooldown's default.
const DefaultRefillCooldown = 10 * time.Millisecond

// nextRefill says how many jobs Refill claims now, or, when none, how long
// until it looks again on its own (0: when woken). roomSince is when the
// room it waits to grow was first seen (zero: none yet). r.claimMu is held.
func (r *Runner) nextRefill(now time.Time, roomSince *time.Time) (want int, after time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.more {
		return 0, 0
	}
	free := r.opts.Capacity - len(r.inflight)
	limit := free
	knows := !r.backlogSince.IsZero() && !now.Before(r.backlogSince.Add(r.opts.BacklogSpread))
	if !knows {
		limit = min(free, r.budget)
	}
	if limit <= 0 {
		if !knows && !r.backlogSince.IsZero() && free > 0 {
			return 0, r.backlogSince.Add(r.opts.BacklogSpread).Sub(now)
		}
		return 0, 0
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

// Refill claims again as calls end while the node knows of due work
// (Poll left some behind, or the farm's backlog flag rose). Turns are for
// finding work when the queue looked empty; while a node knows there is
// more, it takes it as soon as it has room, batched, with only the claim
// statement, so a burst drains at the speed of the endpoints, not at one
// claim per turn. A claim that comes back short means the queue ran dry:
// the node goes back to its turns.
func (r *Runner) Refill(ctx context.Context) error {
	var roomSince time.Time
	for {
		r.claimMu.Lock()
		want, after := r.nextRefill(r.opts.Clock.Now(), &roomSince)
		if want > 0 {
			roomSince = time.Time{}
			started, err := r.claim(ctx, want)
			r.mu.Lock()
			r.budget = max(0, r.budget-len(started))
			r.more = r.more && err == nil && len(started) == want
			if !r.more {
				r.budget = 0 // a share is for the burst its turn saw
			}
			r.mu.Unlock()
			r.claimMu.Unlock()
			if err != nil && ctx.Err() == nil {
				r.opts.Logger.Warn("claiming again as calls ended failed; waiting for the next turn", "err", err)
			}
			r.opts.Logger.Debug("claimed again as calls ended", "asked", want, "claimed", len(started))
			for _, f := range started {
				r.start(f)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		r.claimMu.Unlock()
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

// bounded runs one statement with a deadline.
func bounded[T any](ctx context.Context, d time.Duration, stmt func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return stmt(ctx)
}

// statementTimeout bounds each statement of a poll or a claim (see
// Options.StatementTimeout). The floor keeps a lease shorter than any
// config allows (tests) from failing every statement.
func (r *Runner) statementTimeout() time.Duration {
	if r.opts.StatementTimeout > 0 {
		return r.opts.StatementTimeout
	}
	return max(r.opts.Lease, 100*time.Millisecond)
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
func (r *Runner) track(c store.Claim, claimedAt, leaseUntil time.Time) *inflight {
	ctx, cancel := context.WithCancelCause(r.base)
	f := &inflight{claim: c, ctx: ctx, cancel: cancel, claimedAt: claimedAt, leaseUntil: leaseUntil}
	r.inflight[store.Held{ID: c.ID, Token: c.Token}] = f
	r.arm(f, claimedAt)
	return f
}

// arm (re)sets f's watchdog to fire when f's lease, as last confirmed, has
// only the margin left. r.mu is held.
func (r *Runner) arm(f *inflight, now time.Time) {
	if f.watchdog != nil {
		f.watchdog.Stop()
	}
	f.armed++
	armed := f.armed
	f.watchdog = r.opts.Clock.AfterFunc(f.leaseUntil.Add(-r.margin()).Sub(now), func() { r.expire(f, armed) })
}

func (r *Runner) start(f *inflight) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer f.cancel(nil)
		r.run(f.ctx, f)
		r.mu.Lock()
		f.watchdog.Stop()
		delete(r.inflight, store.Held{ID: f.claim.ID, Token: f.claim.Token})
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
	left := f.leaseUntil.Sub(r.opts.Clock.Now())
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
	calling := r.opts.Clock.Now().Add(r.margin()).Before(f.leaseUntil)
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
		headers = map[string]string{HeaderScheduledFor: c.ScheduledFor.UTC().Format(time.RFC3339Nano)}
	}
	// The call ends a margin before the hold confirmed when it starts:
	// the deadline the endpoint is told lies before any moment another
	// node could start the job again, however long this node then
	// freezes.
	r.mu.Lock()
	end := f.leaseUntil.Add(-r.margin())
	r.mu.Unlock()
	res := r.inv.Invoke(ctx, Call{JobID: c.ID, Node: r.opts.Node, Token: c.Token, Attempt: c.Attempt,
		IdempotencyKey: c.IdempotencyKey, Method: c.Method, Endpoint: c.Endpoint, Payload: c.Payload, Timeout: timeout,
		Budget: func() time.Duration { return end.Sub(r.opts.Clock.Now()) }, Headers: headers})
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
	ok, err := r.finish(c, o, r.opts.Lease)
	switch {
	case err != nil:
		// The job stays held with no call: renewals find it unknown and
		// give it back (run again, at least once), idle node or not.
		log().Error("could not record job result; the job runs again", "err", err, "result", o.State)
		r.mu.Lock()
		r.raiseDoubtLocked(r.opts.Clock.Now())
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
	default:
		r.retried.Add(1)
		log().Info("job will be retried", "status", res.Status, "error", res.Err, "after", o.RetryAfter)
	}
}

// RenewLeases keeps the leases of running calls alive: every lease/3 it
// renews all of this node's leases in one statement. A call whose job is no
// longer held is cancelled at once; a call whose lease goes unconfirmed is
// cut off by its watchdog while there is still time.
//
// The rounds keep their cadence from each one's send time, and a round
// that failed is tried again within a quarter of the interval: a round
// that timed out (it may take the whole interval) is followed at once, not
// an interval later, so that one slow statement does not leave a lease
// confirmed only two intervals back, which the watchdog would cut off at
// the next database blip.
func (r *Runner) RenewLeases(ctx context.Context) error {
	tick := r.opts.Lease / 3
	next := r.opts.Clock.Now().Add(tick)
	for {
		if err := clock.Sleep(ctx, r.opts.Clock, next.Sub(r.opts.Clock.Now())); err != nil {
			return err
		}
		sent := r.opts.Clock.Now()
		err := r.RenewOnce(ctx)
		next = sent.Add(tick)
		if err != nil {
			next = earliest(next, r.opts.Clock.Now().Add(tick/4))
		}
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// raiseDoubtLocked notes that the node may hold jobs no call runs. Holds r.mu.
func (r *Runner) raiseDoubtLocked(now time.Time) {
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
	sent := r.opts.Clock.Now()
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
	now := r.opts.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.renewals.Add(1)
	still := make(map[store.Held]bool, len(held))
	unknown := 0
	for _, h := range held {
		still[h] = true
		if r.inflight[h] != nil {
			continue
		}
		// Held but not in flight: a claim whose answer was lost. Give it
		// back now rather than renew it for ever, unless a claim is under
		// way (the job may be its own); the next round decides then.
		unknown++
		if r.claiming == 0 {
			go r.releaseOrphan(h)
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

// Wait blocks until every call in flight has ended and been recorded.
func (r *Runner) Wait() { r.wg.Wait() }

// Drain waits up to timeout for the calls in flight to finish, then
// cancels the rest and gives their jobs back to the queue unrun.
func (r *Runner) Drain(timeout time.Duration) { r.DrainContext(context.Background(), timeout) }

// DrainContext is Drain cut short when ctx ends (the operator asked for a
// stop at once): the calls still in flight are then cancelled at once.
func (r *Runner) DrainContext(ctx context.Context, timeout time.Duration) {
	r.draining.Store(true)
	r.claimMu.Lock() // a fast-path start under way is in flight once this returns
	r.claimMu.Unlock()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	t := r.opts.Clock.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C():
	case <-ctx.Done():
	}
	r.mu.Lock()
	for _, f := range r.inflight { // none when the calls all finished
		f.cancel(errDraining)
	}
	r.mu.Unlock()
	<-done
	r.cancel()
	// No call is left: whatever this node still holds is an orphaned claim.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := r.store.JobsReleaseOwned(ctx, r.opts.Incarnation, "released unrun: node "+r.opts.Node+" stopped")
	if err != nil {
		r.opts.Logger.Error("could not release jobs at stop; they run again when their leases expire", "err", err)
	}
	r.released.Add(n)
}

// NewIdempotencyKey returns a key for a new job: random, so that it stays
// the same for every attempt of the job and differs from every other job.
func NewIdempotencyKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "slotpoller-" + hex.EncodeToString(b)
}

// StartNow is the local fast path of an enqueue: a job due now that this
// node has room for is inserted already claimed by it, in the one INSERT,
// and its call starts at once, with no poll in between. It reports
// taken false, having written nothing, when the job is not due now (it
// has a run time or a delay), when the node is full or stopping: the
// caller then enqueues it as usual. The claim is fenced like any other:
// token 1 under this node's lease, renewed and recorded as any claim's.
// An error with taken true may have left the job written: the caller must
// not enqueue it again.
func (r *Runner) StartNow(ctx context.Context, j store.NewJob) (id int64, taken bool, err error) {
	if j.RunAt != nil || j.Delay != 0 {
		return 0, false, nil
	}
	if err := CheckNewJob(&j); err != nil {
		return 0, false, fmt.Errorf("enqueue: %w", err)
	}
	// A claim under way would otherwise not count in the room.
	r.claimMu.Lock()
	defer r.claimMu.Unlock()
	if r.Free() == 0 || r.draining.Load() {
		return 0, false, nil
	}
	var dup error
	claimed, err := r.claimWith(ctx, func(ctx context.Context) ([]store.Claim, error) {
		c, err := r.store.JobInsertClaimed(ctx, j, r.opts.Incarnation, r.opts.Node, r.hold())
		if errors.Is(err, store.ErrDuplicate) {
			id, dup = c.ID, err // nothing was written: no doubt to raise
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return []store.Claim{c}, nil
	})
	if dup != nil {
		return id, true, dup
	}
	if err != nil {
		return 0, true, err
	}
	r.start(claimed[0])
	return claimed[0].claim.ID, true, nil
}

// Enqueue validates and inserts a job. The endpoint must stay on the node's
// base URL; the method must be one the invoker sends.
func Enqueue(ctx context.Context, s *store.Store, j store.NewJob) (int64, error) {
	if err := CheckNewJob(&j); err != nil {
		return 0, fmt.Errorf("enqueue: %w", err)
	}
	return s.JobInsert(ctx, j)
}
