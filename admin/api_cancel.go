package admin

import (
	"context"
	"net/http"

	"github.com/slotpoller/slotpoller/client"
)

// cancel is POST /api/v1/jobs/{id}/cancel: a waiting job is cancelled (200,
// state cancelled); a running one's call is asked to stop (202 Accepted,
// state cancelling): its node cancels the call within a third of its
// lease and records the job cancelled. A finished job is a conflict.
func (a *api) cancel(ctx context.Context, c *client.Client, r *http.Request) (int, any, error) {
	id, err := actionID(r)
	if err != nil {
		return 0, nil, err
	}
	res, err := c.CancelJob(ctx, id)
	if err != nil {
		return 0, nil, err
	}
	if res == client.CancelRequested {
		a.log.Info("job cancel requested through the API; its node stops the call at its next lease renewal", "job", id)
		return http.StatusAccepted, actionResponse{ID: id, State: client.StateCancelling}, nil
	}
	a.log.Info("job cancelled through the API", "job", id)
	return http.StatusOK, actionResponse{ID: id, State: client.StateCancelled}, nil
}
