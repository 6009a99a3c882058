package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
)

// Retention defaults: rows per delete statement, the time a slot owner's
// turn may spend deleting, and the pause between checks when the last turn
// left nothing behind.
const (
	// DefaultPruneBatch keeps each delete's locks few and short: on SQL
	// Server 500 rows stay far below the 5,000 locks that escalate a
	// statement to a table lock.
	DefaultPruneBatch = 500
	// DefaultPruneBudget bounds a turn's deleting; a statement started
	// before it ends runs to its end.
	DefaultPruneBudget = 200 * time.Millisecond
	// DefaultPruneIdle is how long a node waits, after a turn that deleted
	// everything due, before it looks again: an idle farm sends a handful
	// of statements a minute for retention.
	DefaultPruneIdle = time.Minute
	// maxPruneStatements bounds a turn whatever the budget.
	maxPruneStatements = 100
)

// PruneStore is the part of the store retention uses.
type PruneStore interface {
	JobsPrune(ctx context.Context, state string, age time.Duration, limit int) (int64, error)
	NodesPrune(ctx context.Context, age time.Duration) (int64, error)
	AuditPrune(ctx context.Context, age time.Duration, limit int) (int64, error)
	JobsSetAsideUnreachable(ctx context.Context, beyond time.Duration, limit int) (int64, error)
}

// Unreachable is how far ahead a ready job's run time lies when no door
// wrote it (MaxLeadTime, and a day for a database clock stepped back): the
// pruner's look sets such jobs aside, dead, with the reason.
const Unreachable = MaxLeadTime + 24*time.Hour

// PruneOptions say what a node deletes and how fast.
type PruneOptions struct {
	// Jobs is the retention per finished state (store.FinishedStates): a
	// job is deleted once it has been finished that long on the database
	// clock. A state absent or at 0 keeps its jobs.
	Jobs map[string]time.Duration
	// Nodes deletes registry rows not seen for this long; 0 keeps them.
	Nodes time.Duration
	// Audit deletes audit log entries older than this; 0 keeps them.
	// One statement of Batch entries a look: an operators' log grows by
	// far less than Batch an Idle.
	Audit time.Duration
	// Batch is the most rows one delete statement takes; default 500.
	Batch int
	// Budget is how long one turn may keep deleting while there is more;
	// default 200ms.
	Budget time.Duration
	// Idle is the pause between checks after a turn that caught up;
	// default 1m.
	Idle   time.Duration
	Clock  clock.Clock
	Logger *slog.Logger
}

// Pruner deletes finished jobs and departed nodes past their retention, in
// the slot owner's turns: one statement of at most Batch rows at a time, as
// many as the turn's budget allows while there is more, so that no
// statement holds many locks for long and a backlog drains over turns.
type Pruner struct {
	s      PruneStore
	opts   PruneOptions
	states []string // finished states with a retention, in visit order

	next   time.Duration // monotonic time of the next check while caught up
	behind bool          // the last turn stopped with rows still due
	looked bool          // TurnInSlot looked once already
	cursor int           // the state the last turn stopped at
}

// PruneResult is what one turn did.
type PruneResult struct {
	Jobs, Nodes, Audit int64 // rows deleted
	SetAside           int64 // ready jobs due beyond Unreachable, set aside dead
	Statements         int
	Behind             bool // stopped by the budget with rows still due
	Skipped            bool // caught up, and the idle pause is not over
}

// NewPruner returns a pruner over s.
func NewPruner(s PruneStore, opts PruneOptions) *Pruner {
	if opts.Batch <= 0 {
		opts.Batch = DefaultPruneBatch
	}
	if opts.Budget <= 0 {
		opts.Budget = DefaultPruneBudget
	}
	if opts.Idle <= 0 {
		opts.Idle = DefaultPruneIdle
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Pruner{s: s, opts: opts}
	for _, st := range store.FinishedStates {
		if opts.Jobs[st] > 0 {
			p.states = append(p.states, st)
		}
	}
	return p
}

// Enabled reports whether the pruner deletes anything at all. It looks for
// unreachable jobs whether or not.
func (p *Pruner) Enabled() bool { return len(p.states) > 0 || p.opts.Nodes > 0 || p.opts.Audit > 0 }

// Turn runs retention for one of the node's turns as slot owner. While
// caught up it looks once per Idle; while behind, at every turn.
func (p *Pruner) Turn(ctx context.Context) (PruneResult, error) {
	var res PruneResult
	now := p.opts.Clock.Monotonic()
	if !p.behind && now < p.next {
		res.Skipped = true
		return res, nil
	}
	deadline := now + p.opts.Budget
	if !p.behind {
		n, err := p.s.JobsSetAsideUnreachable(ctx, Unreachable, p.opts.Batch)
		res.Statements++
		res.SetAside = n
		if err != nil {
			return res, err
		}
		if n > 0 {
			p.opts.Logger.Warn("set aside ready jobs due further ahead than any door accepts; see their last_error", "count", n)
		}
	}
	if !p.behind && p.opts.Nodes > 0 {
		n, err := p.s.NodesPrune(ctx, p.opts.Nodes)
		res.Statements++
		res.Nodes = n
		if err != nil {
			return res, err
		}
	}
	if !p.behind && p.opts.Audit > 0 {
		n, err := p.s.AuditPrune(ctx, p.opts.Audit, p.opts.Batch)
		res.Statements++
		res.Audit = n
		if err != nil {
			return res, err
		}
	}
	// Each state is looked at once per turn (one statement when it has
	// nothing due); the budget stops a state that keeps filling batches,
	// and the next turn starts there.
	p.behind = false
	for i := 0; i < len(p.states) && !res.Behind; i++ {
		k := (p.cursor + i) % len(p.states)
		st := p.states[k]
		for {
			n, err := p.s.JobsPrune(ctx, st, p.opts.Jobs[st], p.opts.Batch)
			res.Statements++
			res.Jobs += n
			if err != nil {
				p.behind, p.cursor = true, k // try again next turn, where it failed
				return res, err
			}
			if n < int64(p.opts.Batch) {
				break // this state caught up
			}
			if p.opts.Clock.Monotonic() >= deadline || res.Statements >= maxPruneStatements {
				res.Behind, p.cursor = true, k
				break
			}
		}
	}
	p.behind = res.Behind
	if !res.Behind {
		p.cursor, p.next = 0, p.opts.Clock.Monotonic()+p.opts.Idle
	}
	if res.Jobs > 0 || res.Nodes > 0 || res.Audit > 0 {
		p.opts.Logger.Debug("retention deleted", "jobs", res.Jobs, "nodes", res.Nodes, "audit_entries", res.Audit, "statements", res.Statements, "behind", res.Behind)
	}
	return res, nil
}

// TurnInSlot runs retention in the turn of slot k (of length l) as its
// owner. It looks at its first turn (a node just started, once); then,
// while caught up, only in the first slot of each Idle of database time, so
// that the farm looks once per Idle whatever its size, where each node
// pacing itself on its own clock would look N times as often; while
// behind, it goes on at every one of this node's turns.
func (p *Pruner) TurnInSlot(ctx context.Context, k int64, l time.Duration) (PruneResult, error) {
	every := max(1, int64(p.opts.Idle/max(l, 1)))
	if p.looked && !p.behind && (k%every+every)%every != 0 {
		return PruneResult{Skipped: true}, nil
	}
	p.looked = true
	p.next = 0 // the database time decides, not this node's pause
	return p.Turn(ctx)
}

var _ PruneStore = (*store.Store)(nil)
