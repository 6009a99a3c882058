package jobs

import (
	"context"
	"errors"

	"github.com/slotpoller/slotpoller/internal/store"
)

// Cancel of a running job (store/cancel.go): an operator's request waits on
// the job's row until this node's next lease renewal reports it (every
// lease/3); the renewal then cancels the call's context with a
// cancelRequest as its cause, so that the endpoint sees its request
// cancelled (the connection closed). The call's end is recorded, fenced by
// its token like any result, as cancelled, with no retry whatever attempts
// it has left. A response that succeeded before the cancel reached the
// call is recorded done: the work was done.

// cancelRequest is the cause of a call cut off because an operator asked
// that its job be cancelled; it names who asked.
type cancelRequest struct{ actor string }

func (c cancelRequest) Error() string { return store.CancelledWhileRunning(c.actor) }

// cancelAskedLocked cuts f's call off for actor, once: the request stays
// on the row, and every renewal until the result is written reports it
// again. A call that is over is left to its result. r.mu is held.
func (r *Runner) cancelAskedLocked(f *inflight, actor string) {
	if f.cancelAsked || f.ended {
		return
	}
	f.cancelAsked = true
	r.opts.Logger.Info("cancelling call: an operator asked", "job", f.claim.ID, "token", f.claim.Token, "by", actor)
	f.cancel(cancelRequest{actor: actor})
}

// cancelledOutcome is the outcome of a call cut off by a cancel request:
// cancelled, with the response's status if one came, unless the call
// succeeded first. It reports false for any other call.
func cancelledOutcome(ctx context.Context, res Result) (store.Outcome, bool) {
	var asked cancelRequest
	if !errors.As(context.Cause(ctx), &asked) || res.Verdict == Succeeded {
		return store.Outcome{}, false
	}
	return store.Outcome{State: store.StateCancelled, Status: res.Status, Error: asked.Error()}, true
}
