package admin

import (
	"context"
	"net/http"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/jobs"
)

// queueView is a queue as the API shows it: its state, its settings from
// the nodes' config (limits of 0 are none, and left out) and its recent
// start delays.
type queueView struct {
	Name       string    `json:"name"`
	Paused     bool      `json:"paused"`
	PausedBy   string    `json:"paused_by,omitempty"`
	PausedAt   *apiTime  `json:"paused_at,omitempty"` // database time
	Waiting    int       `json:"waiting"`             // ready and due now
	Running    int       `json:"running"`
	Priority   int       `json:"priority"`
	Limit      int       `json:"limit,omitempty"`
	NodeLimit  int       `json:"node_limit,omitempty"`
	Rate       *rateView `json:"rate,omitempty"`
	StartDelay delayView `json:"start_delay"`
}

// rateView is a queue's rate: at most Limit starts in each window of
// PeriodMS on the database clock, Used of them in the current one.
type rateView struct {
	Limit    int   `json:"limit"`
	PeriodMS int64 `json:"period_ms"`
	Used     int   `json:"used"`
}

// delayView is how late a queue's recent jobs started (client.StartDelay).
type delayView struct {
	Jobs   int   `json:"jobs"`
	P50MS  int64 `json:"p50_ms"`
	P99MS  int64 `json:"p99_ms"`
	Within int64 `json:"within_ms"` // how far back finished jobs are read
}

func queueViews(qs []client.QueueInfo) []queueView {
	out := make([]queueView, len(qs))
	for i, q := range qs {
		out[i] = queueView{Name: q.Name, Paused: q.Paused, PausedBy: q.PausedBy, PausedAt: optTime(q.PausedAt),
			Waiting: q.Waiting, Running: q.Running, Priority: q.Priority, Limit: q.Limit, NodeLimit: q.NodeLimit,
			StartDelay: delayView{Jobs: q.StartDelay.Jobs, P50MS: q.StartDelay.P50.Milliseconds(), P99MS: q.StartDelay.P99.Milliseconds(),
				Within: client.QueueStartDelayWindow.Milliseconds()}}
		if q.Rate > 0 {
			out[i].Rate = &rateView{Limit: q.Rate, PeriodMS: q.RatePeriod.Milliseconds(), Used: q.RateUsed}
		}
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

// queueCancel is POST /api/v1/queues/{name}/cancel, whose body is empty,
// {} or {"waiting": true}: every running job of the queue is asked to
// stop (its node cancels the call at its next lease renewal and records
// it cancelled), and with waiting its waiting jobs are cancelled at once.
// It answers 202 Accepted with the two counts: the running jobs end
// cancelled later, each when its node acts. The node's client records its
// actor (api@node) as who asked.
func (a *api) queueCancel(ctx context.Context, c *client.Client, r *http.Request) (int, any, error) {
	name := r.PathValue("name")
	if err := jobs.ValidateQueueName(name); err != nil {
		return 0, nil, &client.FieldError{Field: "name", Problem: err.Error()}
	}
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	var body struct {
		Waiting bool `json:"waiting"`
	}
	if err := decodeBody(r, &body, true); err != nil {
		return 0, nil, err
	}
	res, err := c.CancelQueue(ctx, name, body.Waiting)
	if err != nil {
		return 0, nil, err
	}
	a.log.Info("queue cancel through the API: its nodes stop the calls at their next lease renewal", "queue", name,
		"running_asked", res.Requested, "waiting_cancelled", res.Cancelled)
	return http.StatusAccepted, struct {
		Name string `json:"name"`
		client.QueueCancelled
	}{name, res}, nil
}
