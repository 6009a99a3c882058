package service

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/slotpoller/slotpoller/internal/tracing"

	"github.com/slotpoller/slotpoller/checkin"
	"github.com/slotpoller/slotpoller/clocksync"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/rotation"
)

// A loop is one of a running node's long-lived parts. It runs until its
// context ends; an error it returns stops the whole node.
type loop struct {
	name string
	run  func(ctx context.Context) error
}

// wiring is one node's parts, built once the database answers and its
// clock is measured. Everything a loop needs is built here, before any
// loop starts, so no callback reads a part assigned after it.
type wiring struct {
	n      *Node
	log    *slog.Logger
	store  *store.Store
	est    *clocksync.Estimator
	reg    *checkin.Registry
	runner *jobs.Runner
	keeper *jobs.Keeper
	pruner *jobs.Pruner
	waiter *rotation.Waiter
	turner *turner
	client *http.Client // calls the endpoints, for the jobs and the tasks

	nudge      chan struct{} // wakes the turns' waiter to re-read the membership
	renewTasks chan struct{} // renews task leases now: a task was just given to this node
}

// wire builds the node's parts and publishes them to the admin endpoint.
func (n *Node) wire(s *store.Store, est *clocksync.Estimator, log *slog.Logger, tracer tracing.Tracer) *wiring {
	cfg := n.cfg
	w := &wiring{n: n, log: log, store: s, est: est,
		nudge: make(chan struct{}, 1), renewTasks: make(chan struct{}, 1)}
	incarnation := checkin.NewIncarnation()
	base, _ := url.Parse(cfg.Jobs.BaseURL)
	// Calls are signed with the real wall clock (Invoker.Now nil), never the
	// skewed one: endpoints judge the timestamp by their own clocks.
	var signingKey []byte
	if cfg.Jobs.SigningKey != "" {
		signingKey = []byte(cfg.Jobs.SigningKey)
	}
	// One client for the jobs and the tasks, keeping a connection per call.
	client := jobs.NewClient(cfg.Node.Capacity)
	w.client = client
	w.runner = jobs.NewRunner(s, &jobs.Invoker{Base: base, Client: client, SigningKey: signingKey}, jobs.Options{
		Node: cfg.Node.Name, Incarnation: incarnation, Capacity: cfg.Node.Capacity,
		Lease: time.Duration(cfg.Jobs.Lease), Timeout: time.Duration(cfg.Jobs.Timeout),
		Backoff: time.Duration(cfg.Jobs.Backoff), BackoffMax: time.Duration(cfg.Jobs.BackoffMax),
		Clock: n.clock, Logger: log, OnCall: n.metrics.observeCall, OnStart: n.metrics.onStart(est),
		BacklogSpread: backlogSpread(cfg, s.HearsWakes()),
		FinishWindow:  jobs.DefaultFinishWindow,
		// A job enqueued due now (a note, PostgreSQL) is claimed by the
		// slot's owner alone, at once; if it has no room, it widens the
		// rotation as a poll that left work behind does.
		SlotOwner:   w.ownsSlot,
		PushBacklog: func(ctx context.Context) error { return w.reg.SignalBacklog(ctx, w.turner.hold) },
		PushManaged: managedQueues(cfg),
		Tracer:      tracer,
	})
	heartbeat, ttl := time.Duration(cfg.Checkin.Heartbeat), time.Duration(cfg.Checkin.TTL)
	w.keeper = jobs.NewKeeper(s, &jobs.Invoker{Base: base, Client: client, SigningKey: signingKey}, jobs.TaskOptions{
		Node: cfg.Node.Name, Incarnation: incarnation,
		// A task's lease is the TTL less a quarter heartbeat: a dead
		// owner's task is given away when its lease ends and called by its
		// new owner a few milliseconds later, so within the TTL of the dead
		// owner's last renewal, the promise checkin.ttl makes.
		Lease: ttl - heartbeat/4, Heartbeat: heartbeat, Margin: heartbeat / 2,
		Timeout: time.Duration(cfg.Jobs.Timeout), BackoffMax: time.Duration(cfg.Jobs.BackoffMax),
		MinHold: 10 * heartbeat, Clock: n.clock, Logger: log,
		// Nodes that hear no notes between their turns (SQL Server,
		// SQLite, and MySQL, whose nodes hold session locks but get no
		// notes) would find a task given to them a rotation later.
		TakeOverOrphans: !s.HearsNotes(),
		Tracer:          tracer,
	})
	w.reg = checkin.New(s, checkin.Options{
		Name: cfg.Node.Name, Capacity: cfg.Node.Capacity, Incarnation: incarnation,
		Heartbeat: heartbeat, TTL: ttl, Clock: n.clock, Logger: log,
		Slot:  time.Duration(cfg.Rotation.Slot),
		Timed: est.Observe, // a turn's reading is a clock sample too
		// A note (PostgreSQL) says another node gave this one a task.
		TaskGiven: func() { signal(w.renewTasks) },
		Due:       func() { w.runner.Due() },
		Status:    w.status,
		Changed:   w.membershipChanged,
	})
	w.waiter = &rotation.Waiter{
		Clock: n.clock, DB: est, Slot: time.Duration(cfg.Rotation.Slot), Me: cfg.Node.Name,
		Members: func() []string { return w.reg.Membership().Names() },
		Widen:   func() bool { return w.reg.Membership().Backlog() },
		Nudge:   w.nudge,
	}
	w.pruner = jobs.NewPruner(s, jobs.PruneOptions{
		Jobs: cfg.Jobs.Retention(), Nodes: time.Duration(cfg.Checkin.Retention), Audit: time.Duration(cfg.Jobs.RetentionAudit),
		// A turn's deleting stays a fraction of the slot: the slot owner's
		// next turn is due a slot later.
		Budget: min(jobs.DefaultPruneBudget, time.Duration(cfg.Rotation.Slot)/5),
		Clock:  n.clock, Logger: log,
	})
	w.turner = newTurner(w)
	n.mu.Lock()
	n.reg, n.runner, n.keeper = w.reg, w.runner, w.keeper
	n.mu.Unlock()
	return w
}

// ownsSlot reports whether this node owns the rotation's current slot by
// its estimate of the database clock and the membership it last read: the
// rotation's own arithmetic, so that one node answers each due note. Near
// a slot's edge two nodes may both answer (the claim keeps that safe) or
// neither (the next turn finds the job).
func (w *wiring) ownsSlot() bool {
	db, _, ok := w.est.Now()
	if !ok {
		return false
	}
	k := rotation.Slot(db, time.Duration(w.n.cfg.Rotation.Slot))
	return rotation.Owner(k, w.reg.Membership().Names()) == w.n.cfg.Node.Name
}

// managedQueues reports whether the config has queues with limits, rates
// or priorities (every node is meant to carry the same queues section).
func managedQueues(cfg config.Config) bool {
	for _, q := range cfg.QueueSettings() {
		if q.Managed() {
			return true
		}
	}
	return false
}

// backlogSpread is how long after a node hears of a backlog every node
// has heard of it and taken its turn, so that a node may then claim as
// fast as its calls end rather than only its share. Where nodes hear notes
// (PostgreSQL's pg_notify) or wakes (MySQL's KILL QUERY of the statement a
// node's lock connection waits in), a note reaches every node within a round trip
// and each takes its turn of the slot then: an eighth of a slot covers
// that. (A node that read the registry within the last slot reads it again
// only a slot after that read, so it may come later; it then takes its
// share of what is left, which costs it part of its share, never a job.)
// Elsewhere a node hears at its turn of the widened slot, within a slot
// (or at its next registry read, a heartbeat). Until then a node takes
// only its share of the burst its turn counted; the shares counted by
// later turns miss the jobs done in between, so the last few jobs of a
// burst wait for this spread (they waited a second on PostgreSQL before
// the spread shortened there).
func backlogSpread(cfg config.Config, hearsWakes bool) time.Duration {
	slot := time.Duration(cfg.Rotation.Slot)
	if hearsWakes {
		return slot / 8
	}
	return max(slot, time.Duration(cfg.Checkin.Heartbeat))
}

// loops are the node's long-lived parts, in the order they start; they
// stop in the reverse order, so the turns stop claiming before anything
// they rely on (the registry, the clock) stops.
func (w *wiring) loops() []loop {
	cfg := w.n.cfg
	heartbeat := time.Duration(cfg.Checkin.Heartbeat)
	ls := []loop{
		{"database clock", w.est.Run},
		{"registry liveness", w.reg.Run},
		{"database file watch", func(ctx context.Context) error { return watchFile(ctx, w.n.clock, w.store, heartbeat) }},
		{"task leases", func(ctx context.Context) error { w.taskLoop(ctx); return nil }},
	}
	if cfg.Clock.NTPServer != "" {
		ls = append(ls, loop{"NTP health check", func(ctx context.Context) error { w.n.checkNTP(ctx, w.log); return nil }})
	}
	// Refills claim between turns while the node knows of due work; they
	// stop after the turns, before the registry they learn the backlog from.
	ls = append(ls, loop{"refill claims", w.runner.Refill})
	return append(ls, loop{"turns", w.turner.run})
}

// runLoops starts the loops in order and runs them until ctx ends or one
// fails; then it calls stopping, stops them in reverse order (each one
// ended before the one before it is told to end) and returns why work
// ended.
func runLoops(ctx context.Context, log *slog.Logger, ls []loop, stopping func()) error {
	work, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	type running struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	rs := make([]running, len(ls))
	for i, l := range ls {
		lctx, cancel := context.WithCancel(work)
		rs[i] = running{cancel, make(chan struct{})}
		go func() {
			defer close(rs[i].done)
			if err := l.run(lctx); err != nil && lctx.Err() == nil {
				log.Debug("node part failed", "part", l.name, "err", err)
				stop(err)
			}
		}()
	}
	<-work.Done()
	cause := context.Cause(work)
	stopping()
	for i := len(rs) - 1; i >= 0; i-- {
		rs[i].cancel()
		<-rs[i].done
	}
	return cause
}

// gracefulStop runs once the loops ended. Leave first, so that no node
// gives this one work any more and the rotation closes over it; then hand
// the tasks back (the next slot owner re-assigns them); then finish or give
// back the jobs in flight, their leases still renewed by the caller.
func (w *wiring) gracefulStop(hurry context.Context) {
	cfg, log := w.n.cfg, w.log
	lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.reg.Leave(lctx); err != nil {
		log.Error("could not leave the node registry; the others will count this node out after the TTL", "err", err)
	}
	// The task release has a budget of its own: it first waits for the task
	// calls in flight, each bounded by its lease (the TTL).
	rctx, rcancel := context.WithTimeout(context.Background(), time.Duration(cfg.Checkin.TTL)+5*time.Second)
	defer rcancel()
	if released, err := w.keeper.Release(rctx); err != nil {
		log.Error("could not release tasks; they move when their leases end", "err", err)
	} else if released > 0 {
		log.Info("released tasks", "count", released)
	}
	log.Info("stopping: draining calls in flight", "running", w.runner.Running(), "drain_timeout", cfg.Jobs.DrainTimeout)
	w.runner.DrainContext(hurry, time.Duration(cfg.Jobs.DrainTimeout))
	// The client keeps a connection per call slot open to the endpoints,
	// each with two goroutines, until the transport's idle timeout (90 s):
	// a node stopped in a process that goes on (a program that embeds it,
	// the bench, a test) would otherwise leave up to its capacity of them
	// behind, and the application's server as many idle connections.
	w.client.CloseIdleConnections()
}

// status is what the node reports about itself in its registry row.
func (w *wiring) status() checkin.Status {
	st := checkin.Status{Free: w.runner.Free()}
	if e, ok := w.est.Current(); ok {
		st.Offset, st.OffsetError = e.Offset, e.Error
	}
	st.Turns = w.n.turns.Encode()
	return st
}

// membershipChanged nudges the turns' waiter to re-read the membership, and
// renews task leases at once when the reading counts more tasks for this
// node than it works: one was just given to it.
func (w *wiring) membershipChanged(m checkin.Membership) {
	w.runner.FarmBacklog(m.Backlog())
	signal(w.nudge)
	if m.TasksOf(w.reg.Incarnation()) > w.keeper.Stats().Held {
		signal(w.renewTasks)
	}
}

// taskExpiryGuard is waited past a task lease's end before the task is
// given away: the lease's end was read as database time, and the waiting
// is on this node's clock.
const taskExpiryGuard = 20 * time.Millisecond

// signal wakes whoever waits on c, without blocking.
func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// taskLoop renews the node's task leases at every heartbeat (one
// statement), and at once when a task was just given to this node (by its
// own turn's balancing, or as the membership read shows). A node that works no
// task and holds none by the last membership read sends nothing (a note,
// on PostgreSQL, or its next turn's reading elsewhere, tells it of a
// task given to it). The first renewal falls a phase into the heartbeat,
// so that nodes started together do not renew in step.
func (w *wiring) taskLoop(ctx context.Context) {
	heartbeat := time.Duration(w.n.cfg.Checkin.Heartbeat)
	k, reg, log, clk := w.keeper, w.reg, w.log, w.n.clock
	renewals := logs(slog.LevelError, "could not renew task leases; tasks stop before their leases end", "task leases renewed again")
	wait := reg.Phase(heartbeat)
	for {
		t := clk.NewTimer(wait)
		wait = heartbeat
		nudged := false
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-w.renewTasks:
			t.Stop()
			nudged = true
		}
		m := reg.Membership()
		// A task being handed off or deleted is still held: its lease is
		// renewed until its call in flight ended and it was given up.
		if st := k.Stats(); !nudged && m.OK && st.Held+st.Stopping == 0 && m.TasksOf(reg.Incarnation()) == 0 {
			continue
		}
		err := k.Renew(ctx)
		if err != nil && ctx.Err() != nil {
			return
		}
		renewals.report(log, err)
	}
}
