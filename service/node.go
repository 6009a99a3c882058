// Package service wires one slotpoller node together: it loads the node's
// configuration, connects to the farm's database (retrying while it is
// away), measures the offset to the database clock, checks in, and then
// polls in the node's rotation slots until it is told to stop, when it
// drains its calls, gives back what it could not finish and leaves.
package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/slotpoller/slotpoller/checkin"
	"github.com/slotpoller/slotpoller/clocksync"
	"github.com/slotpoller/slotpoller/install"
	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/rotation"
)

// NewLogger builds the node's logger from its log settings.
func NewLogger(w io.Writer, c LogConfig) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Node is one slotpoller node.
type Node struct {
	cfg   Config
	log   *slog.Logger
	clock clock.Clock

	metrics *metrics
	dbCheck dbCheck // the cached database check of /readyz

	// hurry ends when the operator asks for a stop at once (StopNow).
	hurry   context.Context
	stopNow context.CancelFunc

	mu        sync.Mutex
	store     *store.Store
	est       *clocksync.Estimator
	reg       checkin.Registry
	runner    *jobs.Runner
	keeper    *jobs.Keeper
	stopping  bool   // work has ended: leaving, releasing, draining
	adminAddr string // where the admin endpoint listens; "" when it does not
}

// NewNode returns a node for a validated configuration. clk is the local
// clock; nil means the real one. The configured clock.skew is applied on
// top of it.
func NewNode(cfg Config, logger *slog.Logger, clk clock.Clock) *Node {
	if clk == nil {
		clk = clock.Real()
	}
	n := &Node{cfg: cfg, log: logger, clock: clock.Skewed(clk, time.Duration(cfg.Clock.Skew))}
	n.metrics = newMetrics(n)
	n.hurry, n.stopNow = context.WithCancel(context.Background())
	return n
}

// StopNow cuts a graceful stop short: the drain ends at once, the calls
// still in flight are cancelled and their jobs given back unrun. Leaving
// the registry and handing the tasks back still happen. Called before the
// stop, it takes effect when the stop comes.
func (n *Node) StopNow() { n.stopNow() }

// dbSource reads the database clock for clocksync.
type dbSource struct{ s *store.Store }

func (d dbSource) Now(ctx context.Context) (time.Time, error) { return d.s.Now(ctx) }

// Resolution makes a coarse database clock (SQLite's milliseconds) count in
// the offset's error bound.
func (d dbSource) Resolution() time.Duration { return d.s.Dialect().ClockResolution() }

// Run runs the node until ctx ends, then stops gracefully. It returns nil
// after a graceful stop, or the error that made the node give up (a schema
// newer than this binary, another process using the node's name).
//
// With admin.listen set, the admin endpoint (/healthz, /readyz, /metrics,
// /status) serves from the start, while the database may still be away,
// until the drain is over.
func (n *Node) Run(ctx context.Context) error {
	cfg := n.cfg
	log := n.log.With("node", cfg.Node.Name)
	log.Info("starting", "driver", cfg.Database.Driver, "dsn", MaskDSN(cfg.Database.DSN), "slot", cfg.Rotation.Slot,
		"heartbeat", cfg.Checkin.Heartbeat, "ttl", cfg.Checkin.TTL, "capacity", cfg.Node.Capacity, "base_url", cfg.Jobs.BaseURL)
	if cfg.Clock.Skew != 0 {
		log.Warn("clock.skew is set: this node reads its local clock as off by it", "skew", cfg.Clock.Skew)
	}

	admin := n.startAdmin(log)
	defer admin.stop() // on an early return; stop may be called again

	s, err := n.connect(ctx, log)
	if err != nil {
		if ctx.Err() != nil {
			return nil // told to stop while the database was away
		}
		return err
	}
	defer func() { admin.stop(); s.Close() }() // the endpoint reads the store: stop it first

	est := clocksync.New(dbSource{s}, n.clock, clocksync.Options{Interval: time.Duration(cfg.Clock.Resync), Logger: log})
	n.mu.Lock()
	n.store, n.est = s, est
	n.mu.Unlock()
	if err := retry(ctx, n.clock, log, "measure the database clock", func() error { _, err := est.Sync(ctx); return err }); err != nil {
		return nil // stopped before it could start
	}
	if e, ok := est.Current(); ok {
		log.Info("database clock measured", "offset", e.Offset, "error_bound", e.Error)
	}

	base, _ := url.Parse(cfg.Jobs.BaseURL)
	var runner *jobs.Runner
	var keeper *jobs.Keeper
	var reg *checkin.Heartbeats
	nudge := make(chan struct{}, 1)
	renewTasks := make(chan struct{}, 1)
	reg = checkin.New(s, checkin.Options{
		Name: cfg.Node.Name, Capacity: cfg.Node.Capacity,
		Heartbeat: time.Duration(cfg.Checkin.Heartbeat), TTL: time.Duration(cfg.Checkin.TTL),
		Clock: n.clock, Logger: log,
		Status: func() checkin.Status {
			st := checkin.Status{Free: cfg.Node.Capacity}
			if runner != nil {
				st.Free = runner.Free()
			}
			if e, ok := est.Current(); ok {
				st.Offset, st.OffsetError = e.Offset, e.Error
			}
			return st
		},
		Changed: func(m checkin.Membership) {
			if runner != nil {
				runner.FarmBacklog(m.Backlog())
			}
			select {
			case nudge <- struct{}{}:
			default:
			}
			// The membership read counts each node's tasks: more than this
			// node works means one was just given to it.
			if keeper != nil && m.TasksOf(reg.Incarnation()) > keeper.Stats().Held {
				select {
				case renewTasks <- struct{}{}:
				default:
				}
			}
		},
	})
	// Calls are signed with the real wall clock (Invoker.Now nil), never the
	// skewed one: endpoints judge the timestamp by their own clocks.
	var signingKey []byte
	if cfg.Jobs.SigningKey != "" {
		signingKey = []byte(cfg.Jobs.SigningKey)
	}
	// One client for the jobs and the tasks, keeping a connection per call.
	client := jobs.NewClient(cfg.Node.Capacity)
	runner = jobs.NewRunner(s, &jobs.Invoker{Base: base, Client: client, SigningKey: signingKey}, jobs.Options{
		Node: cfg.Node.Name, Incarnation: reg.Incarnation(), Capacity: cfg.Node.Capacity,
		Lease: time.Duration(cfg.Jobs.Lease), Timeout: time.Duration(cfg.Jobs.Timeout),
		Backoff: time.Duration(cfg.Jobs.Backoff), BackoffMax: time.Duration(cfg.Jobs.BackoffMax),
		Clock: n.clock, Logger: log, OnCall: n.metrics.observeCall,
		BacklogSpread: time.Duration(cfg.Checkin.Heartbeat), // every node reads the membership once a heartbeat
		FinishWindow:  jobs.DefaultFinishWindow,
	})
	heartbeat, ttl := time.Duration(cfg.Checkin.Heartbeat), time.Duration(cfg.Checkin.TTL)
	keeper = jobs.NewKeeper(s, &jobs.Invoker{Base: base, Client: client, SigningKey: signingKey}, jobs.TaskOptions{
		Node: cfg.Node.Name, Incarnation: reg.Incarnation(),
		// A task's lease is the TTL: a dead owner's tasks free up when the
		// registry counts the owner out.
		Lease: ttl, Heartbeat: heartbeat, Margin: heartbeat / 2,
		Timeout: time.Duration(cfg.Jobs.Timeout), BackoffMax: time.Duration(cfg.Jobs.BackoffMax),
		MinHold: 10 * heartbeat, Clock: n.clock, Logger: log,
	})
	n.mu.Lock()
	n.reg, n.runner, n.keeper = reg, runner, keeper
	n.mu.Unlock()

	if err := retry(ctx, n.clock, log, "check in to the node registry", func() error { return reg.Join(ctx) }); err != nil {
		if ctx.Err() != nil {
			// Stopped while checking in: the check-in may have been written
			// before the stop cut the membership read short. Leaving is
			// fenced by this process's incarnation, so it is harmless if not.
			lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := reg.Leave(lctx); err != nil {
				log.Warn("stopped while checking in, and could not mark the node left; the others count it out after the TTL", "err", err)
			}
			return nil
		}
		return err // another live process has the node's name
	}
	log.Info("checked in", "incarnation", reg.Incarnation(), "live_nodes", len(reg.Membership().Members))
	n.putSchedules(ctx, log, s)

	// Everything below stops when work ends: on ctx, or when a part fails
	// for good.
	work, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var wg sync.WaitGroup
	goRun := func(f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(work); err != nil && work.Err() == nil {
				stop(err)
			}
		}()
	}
	// Job leases are renewed until the drain is over, not just until work
	// ends: a call finishing during the drain must keep its lease.
	renewing, stopRenewing := context.WithCancel(context.Background())
	defer stopRenewing()
	renewDone := make(chan struct{})
	go func() { defer close(renewDone); _ = runner.RenewLeases(renewing) }()

	goRun(est.Run)
	goRun(reg.Run)
	goRun(runner.Refill)
	goRun(func(ctx context.Context) error { return watchFile(ctx, n.clock, s, heartbeat) })
	goRun(func(ctx context.Context) error { n.taskLoop(ctx, log, keeper, reg, renewTasks); return nil })
	if cfg.Clock.NTPServer != "" {
		goRun(func(ctx context.Context) error { n.checkNTP(ctx, log); return nil })
	}
	waiter := &rotation.Waiter{
		Clock: n.clock, DB: est, Slot: time.Duration(cfg.Rotation.Slot), Me: cfg.Node.Name,
		Members: func() []string { return reg.Membership().Names() },
		Widen:   func() bool { return reg.Membership().Backlog() },
		Nudge:   nudge,
	}
	pruner := jobs.NewPruner(s, jobs.PruneOptions{
		Jobs: cfg.Jobs.retention(), Nodes: time.Duration(cfg.Checkin.Retention),
		// A turn's deleting stays a fraction of the slot: the slot owner's
		// next turn is due a slot later.
		Budget: min(jobs.DefaultPruneBudget, time.Duration(cfg.Rotation.Slot)/5),
		Clock:  n.clock, Logger: log,
	})
	goRun(func(ctx context.Context) error {
		n.pollLoop(ctx, log, waiter, est, reg, runner, keeper, pruner, renewTasks)
		return nil
	})

	<-work.Done()
	cause := context.Cause(work)
	n.mu.Lock()
	n.stopping = true // /readyz says so while the node drains
	n.mu.Unlock()
	wg.Wait()

	// Graceful stop. Leave first, so that no node gives this one work any
	// more and the rotation closes over it; then hand the tasks back (the
	// next slot owner re-assigns them); then finish or give back the jobs
	// in flight, their leases still renewed.
	lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := reg.Leave(lctx); err != nil {
		log.Error("could not leave the node registry; the others will count this node out after the TTL", "err", err)
	}
	// The task release has a budget of its own: it first waits for the task
	// calls in flight, each bounded by its lease (the TTL).
	rctx, rcancel := context.WithTimeout(context.Background(), time.Duration(cfg.Checkin.TTL)+5*time.Second)
	defer rcancel()
	if released, err := keeper.Release(rctx); err != nil {
		log.Error("could not release tasks; they move when their leases end", "err", err)
	} else if released > 0 {
		log.Info("released tasks", "count", released)
	}
	log.Info("stopping: draining calls in flight", "running", runner.Running(), "drain_timeout", cfg.Jobs.DrainTimeout)
	runner.DrainContext(n.hurry, time.Duration(cfg.Jobs.DrainTimeout))
	stopRenewing()
	<-renewDone
	admin.stop()
	log.Info("stopped", "polls", runner.Stats().Polls)
	if errors.Is(cause, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return cause
}

// putSchedules creates or updates the schedules declared in the config.
// Every node does it at start; the writes are idempotent, so nodes starting
// together agree. A schedule that cannot be written is logged, not fatal:
// the config was validated, so this is the database talking.
func (n *Node) putSchedules(ctx context.Context, log *slog.Logger, s *store.Store) {
	for _, c := range n.cfg.Schedules {
		what, err := jobs.PutSchedule(ctx, s, c.Schedule(n.cfg.Jobs.MaxAttempts))
		if err != nil {
			log.Error("could not write schedule from config", "schedule", c.Name, "err", err)
			continue
		}
		if what != "unchanged" {
			log.Info("schedule from config "+what, "schedule", c.Name)
		}
	}
}

// pollersAhead is the capacity the share of this turn is measured against:
// in a widened slot, that of this node and the nodes whose turns in the slot
// are still to come. Each of them then takes an even part of what is left,
// and one round of turns spreads a burst evenly, where dividing by the whole
// farm at every turn would leave a geometric tail (each poller taking a
// quarter of what the one before left). In a plain slot it is the whole
// farm's, which the coming slots' owners share.
func pollersAhead(m checkin.Membership, turn rotation.Turn) int {
	if turn.Rank == 0 || len(m.Members) == 0 {
		total, _ := m.Capacity()
		return total
	}
	names := m.Names()
	sum := 0
	for _, mm := range m.Members {
		if rotation.Rank(turn.Slot, mm.Name, names) >= turn.Rank {
			sum += mm.Capacity
		}
	}
	return sum
}

// taskLoop renews the node's task leases at every heartbeat (one
// statement), and at once when a task was just given to this node (by its
// own poll loop, or as the membership read shows). A node that works no
// task and holds none by the last membership read sends nothing.
func (n *Node) taskLoop(ctx context.Context, log *slog.Logger, k *jobs.Keeper, reg *checkin.Heartbeats, now <-chan struct{}) {
	heartbeat := time.Duration(n.cfg.Checkin.Heartbeat)
	failing := false
	for {
		t := n.clock.NewTimer(heartbeat)
		nudged := false
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-now:
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
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			log.Error("could not renew task leases; tasks stop before their leases end", "err", err)
			failing = true
		case err == nil && failing:
			log.Info("task leases renewed again")
			failing = false
		}
	}
}

func (n *Node) pollLoop(ctx context.Context, log *slog.Logger, w *rotation.Waiter, est *clocksync.Estimator,
	reg checkin.Registry, r *jobs.Runner, k *jobs.Keeper, pruner *jobs.Pruner, renewTasks chan<- struct{}) {
	slot := time.Duration(n.cfg.Rotation.Slot)
	hold := 3 * max(time.Duration(n.cfg.Checkin.Heartbeat), slot)
	failing, pruneFailing := false, false
	for {
		turn, err := w.Wait(ctx)
		if err != nil {
			return
		}
		m := reg.Membership()
		total := pollersAhead(m, turn)
		if turn.Rank == 0 {
			// The slot's owner writes the schedules' occurrences due soon
			// (a little ahead, so that they wait in the queue for their
			// time and any poller can take them), before it polls.
			mat, err := jobs.Materialize(ctx, r.Store(), 2*slot, log)
			switch {
			case err != nil && ctx.Err() == nil:
				log.Error("writing schedule occurrences failed; trying again next turn", "err", err)
			case mat.Created > 0:
				log.Debug("schedule occurrences written", "slot", turn.Slot, "count", mat.Created)
			}
		}
		// When does the farm poll next? At the next slot, or, while the
		// rotation is widened, at the next node's turn in this one.
		next := rotation.Start(turn.Slot+1, slot)
		if m.Backlog() && len(m.Members) > 0 {
			next = turn.Start.Add(slot / time.Duration(len(m.Members)))
		}
		nextPoll := slot
		if now, _, ok := est.Now(); ok {
			nextPoll = next.Sub(now)
			n.metrics.observeSlotLag(now.Sub(turn.Start))
		}
		// A one-off job's start window is one slot: the rotation's promise
		// is that a due job starts within a slot of its run time.
		res, err := r.Poll(ctx, jobs.Turn{FarmCapacity: total, NextPoll: nextPoll, StartWindow: slot})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !failing {
				log.Error("poll failed; trying again next turn", "slot", turn.Slot, "err", err)
			}
			failing = true
			continue
		}
		if failing {
			log.Info("polling works again")
			failing = false
		}
		if res.Claimed > 0 || res.Reclaimed > 0 {
			log.Debug("polled", "slot", turn.Slot, "rank", turn.Rank, "due", res.Due, "claimed", res.Claimed, "left", res.Left)
		}
		if res.Left > 0 {
			if err := reg.SignalBacklog(ctx, hold); err != nil && ctx.Err() == nil {
				log.Warn("could not signal backlog", "err", err)
			}
		}
		if turn.Rank != 0 {
			continue // tasks are balanced and rows pruned once per slot, by its owner
		}
		// Retention after the poll, so that it never delays a claim.
		pr, err := pruner.Turn(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !pruneFailing:
			log.Warn("retention could not delete finished jobs; trying again next turn", "err", err)
			pruneFailing = true
		case err == nil:
			pruneFailing = false
		}
		n.metrics.observePrune(pr)
		var members []jobs.Member
		for _, mm := range m.Members {
			members = append(members, jobs.Member{Name: mm.Name, Incarnation: mm.Incarnation, Capacity: mm.Capacity})
		}
		bal, err := k.Balance(ctx, members, time.Duration(n.cfg.Checkin.TTL))
		if err != nil {
			if ctx.Err() == nil {
				log.Error("task balancing failed; trying again next turn", "err", err)
			}
			continue
		}
		if bal.Assigned > 0 {
			log.Debug("assigned tasks", "slot", turn.Slot, "count", bal.Assigned, "to_me", bal.AssignedToMe)
		}
		if bal.AssignedToMe > 0 {
			select {
			case renewTasks <- struct{}{}:
			default:
			}
		}
	}
}

// connect opens the database and brings its schema to this binary's
// version, retrying with backoff while it cannot: a service may boot
// before its database, its login or its network. Each failure is logged
// as what it is (authentication failed, no such database, unreachable,
// TLS; store.ExplainConnect). What waiting cannot fix is not retried: a
// schema newer than the binary, a SQLite file that is not a database.
func (n *Node) connect(ctx context.Context, log *slog.Logger) (*store.Store, error) {
	var s *store.Store
	err := retry(ctx, n.clock, log, "connect to the database", func() error {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var err error
		s, err = store.Open(octx, n.cfg.Database.Driver, n.cfg.Database.DSN, store.WithSchema(n.cfg.Database.Schema))
		if err != nil {
			return err
		}
		if n.cfg.Database.Migrate {
			var applied []int
			if applied, err = install.Migrate(octx, s); err == nil && len(applied) > 0 {
				log.Info("schema migrated", "versions", applied)
			}
		} else {
			err = install.Check(octx, s)
		}
		if err != nil {
			s.Close()
			// The first statements can meet what the ping did not: a file
			// that is not a database, a login without rights.
			return store.ExplainConnect(err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if s == nil || ctx.Err() != nil {
		if s != nil {
			s.Close()
		}
		return nil, ctx.Err()
	}
	return s, nil
}

// watchFile stops the node (by returning an error) when its SQLite file
// is removed or replaced: its connection would go on writing to a file
// that no other process sees, and a node restarted on a recreated file
// would find an empty queue. Stopping loudly lets the operator restore
// the file first. A stat per heartbeat; nothing for the server databases.
func watchFile(ctx context.Context, clk clock.Clock, s *store.Store, every time.Duration) error {
	for {
		if err := s.CheckFile(); err != nil {
			return err
		}
		if clock.Sleep(ctx, clk, every) != nil {
			return nil
		}
	}
}

// retry runs op until it succeeds, with backoff from 1s to 30s, logging
// each failure. Errors about the schema being ahead of or behind the
// binary, about another live process using the node's name, and permanent
// connection errors, are not retried: waiting will not fix them.
func retry(ctx context.Context, clk clock.Clock, log *slog.Logger, what string, op func() error) error {
	pause := time.Second
	for {
		err := op()
		if err == nil {
			return nil
		}
		if errors.Is(err, install.ErrSchemaNewer) || errors.Is(err, install.ErrSchemaBehind) || errors.Is(err, checkin.ErrNameInUse) ||
			store.Permanent(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Error("could not "+what+"; retrying", "err", err, "retry_in", pause)
		if err := clock.Sleep(ctx, clk, pause); err != nil {
			return err
		}
		pause = min(2*pause, 30*time.Second)
	}
}

func (n *Node) checkNTP(ctx context.Context, log *slog.Logger) {
	for {
		res, err := clocksync.CheckNTP(ctx, n.cfg.Clock.NTPServer, time.Duration(n.cfg.Clock.NTPMaxOffset))
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("NTP health check failed", "err", err)
		case err == nil && !res.Healthy:
			log.Warn("local clock is off from NTP; slotpoller does not depend on it, but other software may",
				"offset", res.Offset, "max", n.cfg.Clock.NTPMaxOffset)
		}
		if clock.Sleep(ctx, n.clock, time.Duration(n.cfg.Clock.Resync)) != nil {
			return
		}
	}
}

// Stats are a running node's counters (for benchmarks and the metrics).
type Stats struct {
	Jobs       jobs.Stats
	Tasks      jobs.TaskStats
	Statements int64
}

// Stats returns the node's counters; zero before the node is connected.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	var st Stats
	if n.runner != nil {
		st.Jobs = n.runner.Stats()
	}
	if n.keeper != nil {
		st.Tasks = n.keeper.Stats()
	}
	if n.store != nil {
		st.Statements = n.store.Statements()
	}
	return st
}
