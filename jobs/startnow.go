package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/slotpoller/slotpoller/internal/store"
)

// StartNow is the local fast path of an enqueue: a job due now that this
// node has room for is inserted already claimed by it, in the one INSERT,
// and its call starts at once, with no poll in between. It reports
// taken false, having written nothing, when the job is not due now (it
// has a run time or a delay), or when the node is full or stopping: the
// caller then enqueues it as usual. A job of a paused queue, or of one with
// limits or a priority, is not inserted claimed: see startHeld. The claim is fenced like any other:
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
	paused := false
	claimed, err := r.claimWith(ctx, func(ctx context.Context) ([]store.Claim, error) {
		c, err := r.store.JobInsertClaimed(ctx, j, r.opts.Incarnation, r.opts.Node, r.hold())
		if errors.Is(err, store.ErrDuplicate) {
			id, dup = c.ID, err // nothing was written: no doubt to raise
			return nil, nil
		}
		if errors.Is(err, store.ErrQueueHeld) {
			paused = true // nothing was written
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
	if paused && err == nil {
		return r.startHeld(ctx, j)
	}
	if err != nil {
		return 0, true, err
	}
	r.start(claimed[0])
	return claimed[0].claim.ID, true, nil
}

// startHeld enqueues a job due now whose queue is paused or managed (the
// insert already claimed refused it), then claims through the managed
// claim as the node has room: a managed queue's job starts now if its
// limits allow it and nothing of a higher priority waits, instead of at
// the next turn. A paused queue's job waits; that claim finds nothing of
// it. r.claimMu is held. The job was written (taken true) unless err says
// otherwise before the insert.
func (r *Runner) startHeld(ctx context.Context, j store.NewJob) (id int64, taken bool, err error) {
	id, err = r.store.JobInsert(ctx, j)
	if err != nil {
		return id, errors.Is(err, store.ErrDuplicate), err
	}
	r.managed.Store(true)
	r.others.Store(true) // unknown here: look
	started, err := r.claim(ctx, r.Free())
	if err != nil {
		// The job is written and waits for a turn's claim.
		r.opts.Logger.Warn("claiming a limited queue's job enqueued here failed; it waits for a turn", "job", id, "err", err)
	}
	for _, f := range started {
		r.start(f)
	}
	return id, true, nil
}
