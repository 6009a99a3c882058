package client

import (
	"context"
	"fmt"

	"github.com/slotpoller/slotpoller/internal/store"
)

// CancelResult is what CancelJob did.
type CancelResult int

// What CancelJob did.
const (
	// Cancelled: the job waited; it is cancelled and will not run.
	Cancelled CancelResult = iota + 1
	// CancelRequested: the job runs. Its node cancels the call at its
	// next lease renewal (within a third of the lease) and records the
	// job cancelled, with no retry; a call that succeeds before then ends
	// done.
	CancelRequested
)

// StateCancelling is the state the HTTP API and the CLI report for a
// running job whose cancel was requested: the job's row stays running
// until its node has stopped the call.
const StateCancelling = "cancelling"

// CancelJob cancels job id as Cancel does and says which of the two
// happened: a waiting job is cancelled, a running one's call is asked to
// stop. A finished job is refused with a *StateError, an unknown one with
// ErrNotFound.
func (c *Client) CancelJob(ctx context.Context, id int64) (CancelResult, error) {
	r, err := c.s.JobCancel(ctx, id, c.actor)
	if err != nil {
		return 0, err
	}
	switch r {
	case store.CancelledWaiting:
		return Cancelled, nil
	case store.CancelRequested:
		return CancelRequested, nil
	case store.CancelNotFound:
		return 0, fmt.Errorf("cancel job %d: %w", id, ErrNotFound)
	}
	return 0, c.refused(ctx, id, "cancel")
}
