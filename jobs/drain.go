package jobs

import (
	"context"
	"time"
)

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
