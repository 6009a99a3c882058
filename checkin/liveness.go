package checkin

import (
	"context"
	"errors"

	"github.com/slotpoller/slotpoller/internal/store"
)

// Run keeps the node live until ctx ends. Heartbeating, it writes the row
// and reads the membership every heartbeat (the first one a phase into
// it). Locking, it writes nothing while the turns do, and steps in (a write
// and a reading) only when a turn is overdue (the last write's promise is
// within a TTL of its end), when the lock's session ended, or when another
// node notes a backlog (at most once a slot): the backlog widens the
// rotation, and every node must learn of it sooner than its own turn. A
// note of a job enqueued due now (heard apart, store.NodeLock.Due) goes to
// Options.Due, costing nothing here.
// Database errors are logged and retried at the next beat: a node that
// cannot reach its database simply stops being live for the others. It
// returns ErrReplaced if another process took the node's row.
func (reg *Registry) Run(ctx context.Context) error {
	failing := false
	wait := reg.Phase(reg.opts.Heartbeat)
	if reg.locking {
		wait = reg.opts.Heartbeat
	}
	// A backlog note that came within a slot of the last reading is not
	// dropped: the reading is made when that slot is up.
	pending := false
	for {
		var notes <-chan string
		var due, lost <-chan struct{}
		reg.mu.Lock()
		if reg.lock != nil {
			notes, due, lost = reg.lock.Notes(), reg.lock.Due(), reg.lock.Lost()
		}
		reg.mu.Unlock()
		began := reg.opts.Clock.Monotonic()
		// A note that asks nothing of the registry leaves the beat where it
		// was: notes every few milliseconds (enqueues) must not put it off.
		waitOn := func() { wait = max(0, wait-(reg.opts.Clock.Monotonic()-began)) }
		t := reg.opts.Clock.NewTimer(wait)
		beat := false
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
			wait = reg.opts.Heartbeat
			beat, pending = pending, false
		case <-due:
			t.Stop()
			if reg.opts.Due != nil {
				reg.opts.Due()
			}
			waitOn()
			continue
		case note := <-notes:
			t.Stop()
			if note != NoteBacklog && note != store.NoteWake {
				if note == noteTaskGiven+reg.incarnation && reg.opts.TaskGiven != nil {
					reg.opts.TaskGiven()
				}
				waitOn()
				continue
			}
			// A backlog note (or a wake, which on MySQL is the backlog's
			// note) is news to a node whose last reading showed
			// no backlog: it reads at once (a burst is over in a fraction
			// of a slot, and a node that waited out the slot since its
			// last reading ran a fifth of its share of one). One that
			// knows of a backlog already reads at most once a slot.
			reg.mu.Lock()
			age := reg.opts.Clock.Monotonic() - reg.readAt
			known := reg.membership.Backlog()
			reg.mu.Unlock()
			if known && age < reg.opts.Slot {
				pending, wait = true, reg.opts.Slot-age
				continue
			}
			wait, beat, pending = reg.opts.Heartbeat, true, false
		case <-lost:
			t.Stop()
			beat = true
		}
		var err error
		if beat {
			err = reg.Beat(ctx)
		} else {
			err = reg.keepLive(ctx)
		}
		switch {
		case errors.Is(err, ErrReplaced):
			return err
		case err != nil && ctx.Err() == nil:
			if !failing {
				reg.opts.Logger.Error("node registry write failed; the other nodes will count this node out when its last write's promise runs out, if it goes on",
					"err", err, "ttl", reg.opts.TTL)
			}
			failing = true
		case err == nil && failing:
			reg.opts.Logger.Info("node registry writes work again")
			failing = false
		}
	}
}

// keepLive is one beat of Run.
func (reg *Registry) keepLive(ctx context.Context) error {
	if !reg.locking {
		return reg.Beat(ctx)
	}
	reg.mu.Lock()
	liveUntil, read := reg.liveUntil, reg.membership.OK
	reg.mu.Unlock()
	if read && reg.opts.Clock.Monotonic() < liveUntil-reg.opts.TTL {
		return nil
	}
	return reg.Beat(ctx)
}
