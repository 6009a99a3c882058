package admin

import (
	"context"
	"net/http"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/jobs"
)

// queueView is a queue as the API shows it.
type queueView struct {
	Name     string   `json:"name"`
	Paused   bool     `json:"paused"`
	PausedBy string   `json:"paused_by,omitempty"`
	PausedAt *apiTime `json:"paused_at,omitempty"` // database time
	Waiting  int      `json:"waiting"`             // ready and due now
	Running  int      `json:"running"`
}

func queueViews(qs []client.QueueInfo) []queueView {
	out := make([]queueView, len(qs))
	for i, q := range qs {
		out[i] = queueView{Name: q.Name, Paused: q.Paused, PausedBy: q.PausedBy, PausedAt: optTime(q.PausedAt),
			Waiting: q.Waiting, Running: q.Running}
	}
	return out
}

// queues is GET /api/v1/queues.
func (a *api) queues(ctx context.Context, c *client.Client, r *http.Request) (int, any, error) {
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	qs, err := c.Queues(ctx)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string][]queueView{"queues": queueViews(qs)}, nil
}

// queueAction is POST /api/v1/queues/{name}/pause (paused true) or
// .../resume, whose body is empty or {}. The node's client records its
// actor (api@node) as who paused. A queue no job names yet may be paused.
func (a *api) queueAction(paused bool) apiFunc {
	return func(ctx context.Context, c *client.Client, r *http.Request) (int, any, error) {
		name := r.PathValue("name")
		if err := jobs.ValidateQueueName(name); err != nil {
			return 0, nil, &client.FieldError{Field: "name", Problem: err.Error()}
		}
		if _, err := query(r); err != nil {
			return 0, nil, err
		}
		if err := decodeBody(r, &struct{}{}, true); err != nil {
			return 0, nil, err
		}
		do, done := c.ResumeQueue, "resumed"
		if paused {
			do, done = c.PauseQueue, "paused"
		}
		if err := do(ctx, name); err != nil {
			return 0, nil, err
		}
		a.log.Info("queue "+done+" through the API", "queue", name)
		return http.StatusOK, map[string]any{"name": name, "paused": paused}, nil
	}
}
