package service

// The node's turn: what a node does in each of its turns of the rotation,
// one duty after another, in the order turner.duties lists them.

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/slotpoller/slotpoller/checkin"
	"github.com/slotpoller/slotpoller/clocksync"
	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/rotation"
)

// A turn is one of this node's turns: the slot and rank the rotation gave
// it, and what its duties learn for the duties after them.
type turn struct {
	rotation.Turn
	// hints say which duties have anything to do, as the turn's registry
	// reading found the queue. A widened turn (rank > 0) comes only while
	// the farm knows of a backlog: it polls, without a reading.
	hints checkin.Hints
	// members is the farm as the registry last read it.
	members checkin.Membership
	// stepped: the database clock stepped lately (seen by this turn's
	// reading, or one before it), which makes every lease and start window
	// written before the step suspect until their holders have renewed.
	stepped bool
	// given are the incarnations this turn's balancing gave a task to.
	given []string
}

// ownersTurn reports whether the turn is the slot owner's own (rank 0), in
// which the owner writes the schedules' occurrences, prunes and balances
// tasks, once per slot.
func ownersTurn(t *turn) bool { return t.Rank == 0 }

// A duty is one thing a turn does: it returns an error when it failed.
// The failures of every duty are logged one way (failureLog): the first
// failure of a run, then nothing until the duty works again, which is
// logged too.
type duty struct {
	name string
	// when says whether the turn has the duty at all; nil: every turn. A
	// turn without it neither fails nor recovers it.
	when func(t *turn) bool
	run  func(ctx context.Context, t *turn) error
	// endsTurn: a failure ends the turn; the duties after it need what it
	// did (a failed poll leaves nothing to prune after or balance with).
	endsTurn   bool
	failureLog // what its failures log; whether it is failing now
}

// turner takes the node's turns.
type turner struct {
	w         *wiring
	slot      time.Duration
	hold      time.Duration // how long a flagged backlog holds (checkin.SignalBacklog)
	afterStep time.Duration // how long a clock step makes leases suspect
	kept      time.Duration // the rotation the pool keeps connections for
}

func newTurner(w *wiring) *turner {
	cfg := w.n.cfg
	slot := time.Duration(cfg.Rotation.Slot)
	return &turner{w: w, slot: slot,
		hold: 3 * max(time.Duration(cfg.Checkin.Heartbeat), slot),
		// After a step of the database clock, every live holder has renewed
		// its leases on the clock as it now reads within a lease (jobs,
		// every third of it) or a TTL (tasks, every heartbeat); until then
		// a lease that looks run out may not be.
		afterStep: max(time.Duration(cfg.Jobs.Lease), time.Duration(cfg.Checkin.TTL)) + slot,
	}
}

// duties are a turn's duties, in the order they run. The registry comes
// first: its reading says what the others have to do, and an idle farm's
// turn ends there. Retention comes after the poll, so that it never delays
// a claim.
func (tr *turner) duties() []duty {
	whenSchedules := func(t *turn) bool { return ownersTurn(t) && t.hints.Schedules }
	whenGiven := func(t *turn) bool { return len(t.given) > 0 }
	return []duty{
		{name: "registry", run: tr.readRegistry, failureLog: logs(slog.LevelError,
			"the turn's registry reading failed; polling anyway", "the turn's registry reading works again")},
		{name: "pool", run: tr.keepPool},
		{name: "schedules", when: whenSchedules, run: tr.writeSchedules, failureLog: logs(slog.LevelError,
			"writing schedule occurrences failed; trying again next turn", "writing schedule occurrences works again")},
		{name: "poll", run: tr.poll, endsTurn: true, failureLog: logs(slog.LevelError,
			"poll failed; trying again next turn", "polling works again")},
		{name: "retention", when: ownersTurn, run: tr.prune, failureLog: logs(slog.LevelWarn,
			"retention could not delete finished jobs; trying again next turn", "retention deletes finished jobs again")},
		{name: "task leases", when: ownersTurn, run: tr.awaitTaskLeases},
		{name: "balance", when: ownersTurn, run: tr.balance, failureLog: logs(slog.LevelError,
			"task balancing failed; trying again next turn", "task balancing works again")},
		{name: "notes", when: whenGiven, run: tr.tellGiven, failureLog: logs(slog.LevelWarn,
			"could not tell a node of the task it was given; it finds out at its next turn", "telling nodes of their tasks works again")},
	}
}

// run takes the node's turns until ctx ends. It returns an error only when
// the node must stop: its name is another process's now.
func (tr *turner) run(ctx context.Context) error {
	ds := tr.duties()
	for {
		rt, err := tr.w.waiter.Wait(ctx)
		if err != nil {
			return nil
		}
		// The row the turn's reading writes already counts this turn for
		// the dashboard's strip: on PostgreSQL it is the node's only write
		// until its next turn.
		tr.w.n.turns.Record(rt.Slot)
		tr.w.n.turnsTaken.Add(1)
		t := &turn{Turn: rt}
		for i := range ds {
			d := &ds[i]
			if d.when != nil && !d.when(t) {
				continue
			}
			err := d.run(ctx, t)
			switch {
			case errors.Is(err, checkin.ErrReplaced):
				return err // the node stops: its name is another process's now
			case err != nil && ctx.Err() != nil:
				return nil
			}
			d.report(tr.w.log, err, "duty", d.name, "slot", t.Slot)
			if err != nil && d.endsTurn {
				break
			}
		}
	}
}

// readRegistry is the turn's registry reading: the node's row, the
// membership, and whether the queue, the schedules and the tasks have
// anything for this turn to do. A widened turn reads nothing (this node's
// own turn as the slot's owner writes its row each rotation). The reading
// is a sample of the database clock too: a step it saw counts from here.
func (tr *turner) readRegistry(ctx context.Context, t *turn) error {
	reg := tr.w.reg
	var err error
	t.hints = checkin.Hints{Jobs: true}
	if ownersTurn(t) {
		t.hints, err = reg.Turn(ctx) // all hints set when it fails: poll anyway
	}
	t.members = reg.Membership()
	t.stepped = tr.w.est.SteppedWithin(tr.afterStep)
	return err
}

// keepPool makes the database pool keep a connection from one turn of
// this node to the next: for a rotation.
func (tr *turner) keepPool(_ context.Context, t *turn) error {
	if rot := time.Duration(len(t.members.Members)) * tr.slot; rot != tr.kept {
		tr.w.runner.Store().KeepIdleFor(rot)
		tr.kept = rot
	}
	return nil
}

// writeSchedules writes the occurrences of the schedules due soon (a
// little ahead, so that they wait in the queue for their time and any
// poller can take them), before the poll.
func (tr *turner) writeSchedules(ctx context.Context, t *turn) error {
	materialize := jobs.Materialize
	if t.stepped {
		materialize = jobs.MaterializeAcrossStep
	}
	mat, err := materialize(ctx, tr.w.runner.Store(), 2*tr.slot, tr.w.log)
	if err != nil {
		return err
	}
	if mat.Created > 0 {
		tr.w.log.Debug("schedule occurrences written", "slot", t.Slot, "count", mat.Created)
	}
	return nil
}

// poll claims the turn's share of the due jobs and starts them; a turn
// whose reading found none due polls nothing.
func (tr *turner) poll(ctx context.Context, t *turn) error {
	w, r, est := tr.w, tr.w.runner, tr.w.est
	// When does the farm poll next? At the next slot, or, while the
	// rotation is widened, at the next node's turn in this one.
	next := rotation.NextPoll(t.Turn, tr.slot, len(t.members.Members), t.members.Backlog())
	nextPoll := tr.slot
	if now, _, ok := est.Now(); ok {
		nextPoll = next.Sub(now)
		w.n.metrics.observeSlotLag(now.Sub(t.Start))
	}
	if !t.hints.Jobs {
		r.Idle()
		return nil
	}
	// The database's now as this node carries it, and how far past it the
	// database's clock may read before that is a step.
	dbClock := func() (time.Time, time.Duration, bool) {
		now, bound, ok := est.Now()
		return now, bound + clocksync.MinStep, ok
	}
	farm, _ := t.members.Capacity()
	// A one-off job's start window is one slot: the rotation's promise is
	// that a due job starts within a slot of its run time.
	res, err := r.Poll(ctx, jobs.Turn{FarmCapacity: farm, AheadCapacity: pollersAhead(t.members, t.Turn), NextPoll: nextPoll,
		StartWindow: tr.slot, Widened: t.Rank > 0, ClockStepped: t.stepped, DBClock: dbClock,
		Backlog: func(ctx context.Context, _ int) error { return w.reg.SignalBacklog(ctx, tr.hold) }})
	if res.BacklogErr != nil && ctx.Err() == nil {
		// The poll itself went on: the others learn of the backlog at
		// their turns' readings instead.
		w.log.Warn("could not signal backlog", "err", res.BacklogErr)
	}
	if err != nil {
		return err
	}
	if res.Claimed > 0 || res.Reclaimed > 0 {
		w.log.Debug("polled", "slot", t.Slot, "rank", t.Rank, "due", res.Due, "claimed", res.Claimed, "left", res.Left)
	}
	return nil
}

// prune deletes finished jobs past their retention: at this node's first
// turn, then once a minute of database time by that slot's owner (a
// handful of statements when nothing is due), and at this node's turns
// while it is behind.
func (tr *turner) prune(ctx context.Context, t *turn) error {
	pr, err := tr.w.pruner.TurnInSlot(ctx, t.Slot, tr.slot)
	tr.w.n.metrics.observePrune(pr)
	return err
}

// awaitTaskLeases: a task's owner stopped renewing and its lease ends
// within two slots (checkin's task window). Wait for it and have the task
// given away now, rather than leave it to the next turns' owners, the
// first of which may be the dead owner itself.
func (tr *turner) awaitTaskLeases(ctx context.Context, t *turn) error {
	if t.hints.Tasks || t.hints.TaskLeaseEnds <= 0 {
		return nil
	}
	if err := clock.Sleep(ctx, tr.w.n.clock, t.hints.TaskLeaseEnds+taskExpiryGuard); err != nil {
		return err
	}
	t.hints.Tasks = true
	return nil
}

// balance gives the tasks waiting for an owner, and hands tasks off when,
// by the tasks each member holds as the turn read them, that would even
// them out.
func (tr *turner) balance(ctx context.Context, t *turn) error {
	w := tr.w
	var members []jobs.Member
	load := map[string]int{}
	for _, mm := range t.members.Members {
		members = append(members, jobs.Member{Name: mm.Name, Incarnation: mm.Incarnation, Capacity: mm.Capacity})
		load[mm.Incarnation] = mm.Tasks
	}
	if !t.hints.Tasks && !jobs.Uneven(members, load) {
		return nil
	}
	bal, err := w.keeper.Balance(ctx, members, time.Duration(w.n.cfg.Checkin.TTL), t.stepped)
	if err != nil {
		return err
	}
	if bal.Assigned > 0 {
		w.log.Debug("assigned tasks", "slot", t.Slot, "count", bal.Assigned, "to_me", bal.AssignedToMe)
	}
	if bal.AssignedToMe > 0 {
		signal(w.renewTasks)
	}
	t.given = bal.GivenTo
	return nil
}

// tellGiven tells the nodes this turn gave a task to (a note, where the
// database carries notes), so that they renew its lease before its next
// turn's reading would tell them.
func (tr *turner) tellGiven(ctx context.Context, t *turn) error {
	var errs []error
	for _, inc := range t.given {
		if err := tr.w.reg.NoteTaskGiven(ctx, inc); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// failureLog logs the failures of one of the node's recurring parts (a turn's
// duty, the task lease renewals): the first failure of a run at its level,
// then nothing until the part works again, which is logged at info. The
// log says when something broke and when it healed, not every turn in
// between.
type failureLog struct {
	level  slog.Level
	failed string // logged at the first failure, with the error
	worked string // logged when it works again
	// failing: the last run failed.
	failing bool
}

// logs is the failureLog of a part: failed is logged at level at its first
// failure, with the error; worked at info when it works again.
func logs(level slog.Level, failed, worked string) failureLog {
	return failureLog{level: level, failed: failed, worked: worked}
}

// report records the outcome of one run.
func (o *failureLog) report(log *slog.Logger, err error, attrs ...any) {
	switch {
	case err != nil && !o.failing:
		o.failing = true
		if o.failed != "" {
			log.Log(context.Background(), o.level, o.failed, append(attrs, "err", err)...)
		}
	case err == nil && o.failing:
		o.failing = false
		if o.worked != "" {
			log.Info(o.worked)
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
