// Package service is one slotpoller node: given its configuration
// (package config), it connects to the farm's database (retrying while it
// is away), measures the offset to the database clock, checks in, and then
// takes its turns in the rotation (turn.go) until it is told to stop, when
// it drains its calls, gives back what it could not finish and leaves.
// (Running it as an OS service is package install's.)
//
// Invariants:
//   - The node's long-lived parts (wiring.go's loops) start in one order
//     and stop in the reverse order, each ended before the one before it
//     is told to end: the turns stop claiming before the registry and the
//     clock they rely on stop.
//   - A turn's duties run in the one order turner.duties lists; a duty's
//     failure is logged when it starts and when it heals, not every turn.
//   - A stop takes at most StopTimeout: every step of it has a budget.
//   - The node's logger names the node once (NewNode); its parts log
//     through it and do not name it again.
package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slotpoller/slotpoller/checkin"
	"github.com/slotpoller/slotpoller/clocksync"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/internal/turns"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/schema"
)

// NewLogger builds the node's logger from its log settings.
func NewLogger(w io.Writer, c config.LogConfig) *slog.Logger {
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, c.HandlerOptions()))
	}
	return slog.New(slog.NewTextHandler(w, c.HandlerOptions()))
}

// Node is one slotpoller node.
type Node struct {
	cfg   config.Config
	log   *slog.Logger
	clock clock.Clock

	metrics *metrics
	dbCheck dbCheck   // the cached database check of /readyz
	turns   turns.Log // the slots this node polled lately, for the dashboard
	// turnsTaken counts the turns the rotation gave the node, a widened
	// one that had nothing to send included (Stats.Turns).
	turnsTaken atomic.Int64

	// hurry ends when the operator asks for a stop at once (StopNow).
	hurry   context.Context
	stopNow context.CancelFunc

	mu        sync.Mutex
	store     *store.Store
	est       *clocksync.Estimator
	reg       *checkin.Registry
	runner    *jobs.Runner
	keeper    *jobs.Keeper
	stopping  bool     // work has ended: leaving, releasing, draining
	adminHook Endpoint // served while Run runs (Serve); nil: none
}

// NewNode returns a node for a validated configuration. clk is the local
// clock; nil means the real one. The configured clock.skew is applied on
// top of it.
func NewNode(cfg config.Config, logger *slog.Logger, clk clock.Clock) *Node {
	if clk == nil {
		clk = clock.Real()
	}
	// The node's logger names the node once; its parts log through it and
	// do not name it again.
	n := &Node{cfg: cfg, log: logger.With("node", cfg.Node.Name), clock: clock.Skewed(clk, time.Duration(cfg.Clock.Skew))}
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
// The endpoint given to Serve (package admin's, when admin.listen is set)
// serves from the start, while the database may still be away,
// until the drain is over.
func (n *Node) Run(ctx context.Context) error {
	cfg := n.cfg
	log := n.log
	log.Info("starting", "driver", cfg.Database.Driver, "dsn", config.MaskDSN(cfg.Database.DSN), "slot", cfg.Rotation.Slot,
		"heartbeat", cfg.Checkin.Heartbeat, "ttl", cfg.Checkin.TTL, "capacity", cfg.Node.Capacity, "base_url", cfg.Jobs.BaseURL)
	if cfg.Clock.Skew != 0 {
		log.Warn("clock.skew is set: this node reads its local clock as off by it", "skew", cfg.Clock.Skew)
	}

	stopAdmin := n.startEndpoint()
	defer stopAdmin() // on an early return; stop may be called again

	s, err := n.connect(ctx, log)
	if err != nil {
		if ctx.Err() != nil {
			return nil // told to stop while the database was away
		}
		return err
	}
	defer func() { stopAdmin(); s.Close() }() // the endpoint reads the store: stop it first

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

	tracer, stopTracing := n.startTracing(log)
	defer stopTracing()
	w := n.wire(s, est, log, tracer)
	if err := retry(ctx, n.clock, log, "check in to the node registry", func() error { return w.reg.Join(ctx) }); err != nil {
		if ctx.Err() != nil {
			// Stopped while checking in: the check-in may have been written
			// before the stop cut the membership read short. Leaving is
			// fenced by this process's incarnation, so it is harmless if not.
			lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := w.reg.Leave(lctx); err != nil {
				log.Warn("stopped while checking in, and could not mark the node left; the others count it out after the TTL", "err", err)
			}
			return nil
		}
		return err // another live process has the node's name
	}
	log.Info("checked in", "incarnation", w.reg.Incarnation(), "live_nodes", len(w.reg.Membership().Members))
	n.carryTurns(ctx, s)
	n.putSchedules(ctx, log, s)
	n.putQueueRoutes(ctx, log, s)

	// Job leases are renewed until the drain is over, not just until work
	// ends: a call finishing during the drain must keep its lease.
	renewing, stopRenewing := context.WithCancel(context.Background())
	defer stopRenewing()
	renewDone := make(chan struct{})
	go func() { defer close(renewDone); _ = w.runner.RenewLeases(renewing) }()

	cause := runLoops(ctx, log, w.loops(), func() {
		n.mu.Lock()
		n.stopping = true // /readyz says so while the node drains
		n.mu.Unlock()
	})
	w.gracefulStop(n.hurry)
	stopRenewing()
	<-renewDone
	stopAdmin()
	log.Info("stopped", "polls", w.runner.Stats().Polls)
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

// connect opens the database and brings its schema to this binary's
// version, retrying with backoff while it cannot: a node may start (at
// boot, as an OS service) before its database, its login or its network. Each failure is logged
// as what it is (authentication failed, no such database, unreachable,
// TLS; open.ExplainConnect). What waiting cannot fix is not retried: a
// schema newer than the binary, a SQLite file that is not a database.
func (n *Node) connect(ctx context.Context, log *slog.Logger) (*store.Store, error) {
	var s *store.Store
	err := retry(ctx, n.clock, log, "connect to the database", func() error {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var err error
		s, err = open.Store(octx, n.cfg.Database.Driver, n.cfg.Database.DSN, store.WithSchema(n.cfg.Database.Schema))
		if err != nil {
			return err
		}
		if n.cfg.Database.Migrate {
			var applied []int
			if applied, err = schema.Migrate(octx, s); err == nil && len(applied) > 0 {
				log.Info("schema migrated", "versions", applied)
			}
		} else {
			err = schema.Check(octx, s)
		}
		if err != nil {
			s.Close()
			// The first statements can meet what the ping did not: a file
			// that is not a database, a login without rights.
			return open.ExplainConnect(err)
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
		if errors.Is(err, schema.ErrSchemaNewer) || errors.Is(err, schema.ErrSchemaBehind) || errors.Is(err, checkin.ErrNameInUse) ||
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

// stopMargin is what a stop may take beyond jobs.drain_timeout and the
// task calls in flight (checkin.ttl), by Node.Run's stop sequence: leaving
// the registry (5s at most), the tasks' release write (5s beyond the
// TTL), the release of the jobs given back unrun (5s), and the admin
// endpoint's shutdown (adminStopTimeout).
const stopMargin = 3*5*time.Second + adminStopTimeout

// StopTimeout is how long a node's stop takes at most: leave the registry,
// hand the tasks back once their calls in flight end (checkin.ttl), drain
// the job calls (jobs.drain_timeout) and give back the rest, each step
// bounded. The OS service manager must wait longer than this before it
// kills the process.
func StopTimeout(cfg config.Config) time.Duration {
	return time.Duration(cfg.Jobs.DrainTimeout) + time.Duration(cfg.Checkin.TTL) + stopMargin
}

// Stats are a running node's counters (for benchmarks and the metrics).
type Stats struct {
	Jobs  jobs.Stats
	Tasks jobs.TaskStats
	// Turns is how many turns of the rotation the node has taken. It
	// differs from Jobs.Polls by the widened turns of a node that drains
	// the farm's backlog, which send nothing.
	Turns      int64
	Statements int64
}

// Stats returns the node's counters; zero before the node is connected.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := Stats{Turns: n.turnsTaken.Load()}
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

// carryTurns takes over the turns the node's previous incarnation left on
// its row, so that the dashboard's strip keeps showing the slots polled
// before a restart as polled (one read at start; if it fails, the strip
// shows those slots as gaps, nothing else).
func (n *Node) carryTurns(ctx context.Context, s *store.Store) {
	nodes, _, err := s.Nodes(ctx, time.Duration(n.cfg.Checkin.TTL))
	if err != nil {
		return
	}
	for _, r := range nodes {
		if r.Name == n.cfg.Node.Name {
			n.turns.Carry(r.Turns)
		}
	}
}
