package checkin

import (
	"context"
	"time"
)

// SignalBacklog tells the farm this node left due work behind. Locking,
// the nodes read the registry only in their turns, so it also sends them a
// note (on MySQL, a wake), unless the backlog was already up as last read
// (then they know).
func (reg *Registry) SignalBacklog(ctx context.Context, hold time.Duration) error {
	if err := reg.store.NodeSignalBacklog(ctx, reg.opts.Name, reg.incarnation, hold); err != nil {
		return err
	}
	if !reg.locking || reg.Membership().Backlog() {
		return nil
	}
	return reg.store.NodeNotify(ctx, NoteBacklog)
}

// NoteBacklog is the note a node sends when it flags a backlog. (The
// database itself sends store.NoteDue when a job due now is enqueued.)
const NoteBacklog = "backlog"

// noteTaskGiven, followed by an incarnation, says a task was given to it.
const noteTaskGiven = "task:"

// NoteTaskGiven tells the node of incarnation that it was given a task, so
// that it takes it up at once. Only where notes carry their payload
// (PostgreSQL): a heartbeating node reads the registry, and finds the task,
// within a heartbeat anyway, and a wake (MySQL) would wake every node to
// tell one.
func (reg *Registry) NoteTaskGiven(ctx context.Context, incarnation string) error {
	if !reg.locking || !reg.store.HearsNotes() {
		return nil
	}
	return reg.store.NodeNotify(ctx, noteTaskGiven+incarnation)
}
