package jobs

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slotpoller/slotpoller/internal/tracing"

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
	// PushCooldown is how long after a claim that answered a note (Due)
	// the next such claim waits: notes that come meanwhile are claimed
	// for together. Zero means DefaultPushCooldown.
	PushCooldown time.Duration
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
	// Tracer, when set, records a span for every job call and claim
	// (tracing.Recorder); nil records none. Either way every call carries
	// a traceparent.
	Tracer tracing.Tracer
	// OnCall, when set, is called after every job call returns, with its
	// verdict and how long it took (for the node's metrics). It runs on
	// the call's goroutine and must not block.
	OnCall func(verdict Verdict, d time.Duration)
	// OnStart, when set, is called as the runner starts each claimed job,
	// right after its claim (for the node's metrics: how late it started).
	// It runs on the claiming goroutine and must not block.
	OnStart func(c store.Claim)
	// SlotOwner, when set, says whether this node owns the rotation's
	// current slot by its estimate of the database clock: only the owner
	// claims on a due note (Due). Nil: the node acts on every note.
	SlotOwner func() bool
	// PushBacklog, when set, tells the farm that the owner heard of due
	// work it has no room for (Due), so that the rotation widens.
	PushBacklog func(ctx context.Context) error
	// PushManaged: the farm has managed queues (limits, rates,
	// priorities), whose jobs the plain claim leaves alone. A note's
	// claim then goes through the managed claim, so that a managed
	// queue's job starts at its note too, within its limits.
	PushManaged bool
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
	doubtUntil clock.Instant // local monotonic

	// Refill state. more is set while the node knows of due work it left
	// for lack of room or share: Refill then claims again as calls end. A
	// claim that comes back short (the queue ran dry) clears it. budget is
	// what is left of the capacity share the node's last turn gave it:
	// all Refill may take until the whole farm has heard of the backlog
	// (backlogSince + BacklogSpread), so that a node that drains fast
	// does not take a burst from nodes that do not know of it yet.
	more         bool
	budget       int
	backlogSince clock.Instant // local monotonic, when the farm's backlog flag was seen rising; zero while it is down
	// leftUntil is when the farm's next poll was due, as the last turn
	// that left work counted it (the turn's start and Turn.NextPoll): the
	// work it left was not urgent only because that poll would take it.
	// Past it, Refill may take leftOver (what the turn left, one round of
	// its calls at most) beyond its budget, once: where the other nodes
	// hear of a backlog only at their next reading, the widened turn the
	// count counted on may not have come. Zero: none.
	leftUntil clock.Instant
	leftOver  int
	wake      chan struct{} // room was made, or there is news of work: Refill looks again
	// claimMu makes a node's claims one at a time: each is sized by the
	// room left after the one before.
	claimMu sync.Mutex
	// managed is set while the node's last count of due work found jobs
	// of managed queues (queues with limits or a priority): its claims
	// then go through the managed claim, which takes them within their
	// limits, and the rest in priority order.
	managed atomic.Bool
	// others is set while that count found due jobs of other queues too,
	// or could not tell (it reached its limit): only then does a managed
	// claim look at them, a look that steps over every due job of a
	// managed queue.
	others atomic.Bool
	// heldBack is set (under mu) while the node's last managed claim came
	// back short with jobs of managed queues due: a limit, not an empty
	// queue, may have held them back. Room under a limit is made when a
	// call of the queue ends, which no turn hears of: heldRetry is then
	// set, and Refill claims once more. So a limited queue's backlog runs
	// at its limit, call after call, not at one start per turn; the cost is
	// at most one claim per call that ends.
	heldBack, heldRetry bool
	// push is what the node heard of due jobs enqueued (Due), under mu.
	push pushState
	// refilling is set while Refill runs: only then may the completer
	// send Refill's claim with a batch of results (finishAndClaim).
	refilling atomic.Bool
	// carried counts the claims that took results waiting for the
	// completer (takePending).
	carried atomic.Int64

	// draining is set when the drain begins: nothing new starts then.
	draining atomic.Bool

	// The completer's queue (complete.go).
	fmu        sync.Mutex
	pending    []*finishing
	completing bool // a completeLoop runs

	polls, claimed, succeeded, retried, failed, dead, released, leasesLost, renewals, cancelled, finishes atomic.Int64
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
	if opts.PushCooldown <= 0 {
		opts.PushCooldown = DefaultPushCooldown
	}
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
