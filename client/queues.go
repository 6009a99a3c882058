package client

import (
	"context"
	"time"

	"github.com/slotpoller/slotpoller/internal/jobspec"
	"github.com/slotpoller/slotpoller/internal/store"
)

// DefaultQueue is the queue of a job that names none and whose endpoint
// no route of the nodes' config matches.
const DefaultQueue = store.DefaultQueue

// QueueInfo is a queue: whether it is paused (by whom, since when, on the
// database clock), its settings from the nodes' config, its work now and
// how late its recent jobs started.
type QueueInfo struct {
	Name     string     `json:"name"`
	Paused   bool       `json:"paused"`
	PausedBy string     `json:"paused_by,omitempty"`
	PausedAt *time.Time `json:"paused_at,omitempty"`
	Waiting  int        `json:"waiting"` // ready and due now; a paused queue's wait for its resume
	Running  int        `json:"running"`
	// Priority orders the claims, higher first; 0 is every other queue's.
	Priority int `json:"priority"`
	// Limit and NodeLimit are the most of its jobs running across the
	// farm and on one node; 0 is none.
	Limit     int `json:"limit,omitempty"`
	NodeLimit int `json:"node_limit,omitempty"`
	// Rate is the most of its jobs started per RatePeriod (0: none), and
	// RateUsed how many started in the current window of the database
	// clock.
	Rate       int           `json:"rate,omitempty"`
	RatePeriod time.Duration `json:"rate_period_ns,omitempty"`
	RateUsed   int           `json:"rate_used,omitempty"`
	// StartDelay is how late its recent jobs started (QueueStartDelayWindow).
	StartDelay StartDelay `json:"start_delay"`
}

// StartDelay is how late a queue's jobs started, from when each was due
// to its start on the database clock: the jobs that finished (done,
// failed or dead) within QueueStartDelayWindow, and the running ones.
type StartDelay struct {
	Jobs int           `json:"jobs"` // 0: no job to say, the percentiles are 0
	P50  time.Duration `json:"p50_ns"`
	P99  time.Duration `json:"p99_ns"`
}

// QueueStartDelayWindow is how far back a queue's start delays look.
const QueueStartDelayWindow = 5 * time.Minute

// queueStartDelayRows bounds each part of the start delays' read: the
// newest finished jobs of each state, and the running ones.
const queueStartDelayRows = 1000

// Limited is whether the queue has a limit on its running jobs or its
// starts.
func (q QueueInfo) Limited() bool { return q.Limit > 0 || q.NodeLimit > 0 || q.Rate > 0 }

// Queues lists the queues that jobs waiting or running name, and those
// ever paused or resumed or given settings, by name. Two reads: the
// queues with their work, and their recent start delays (bounded).
func (c *Client) Queues(ctx context.Context) ([]QueueInfo, error) {
	qs, err := c.s.Queues(ctx)
	if err != nil {
		return nil, err
	}
	delays, err := c.s.QueueStartDelays(ctx, QueueStartDelayWindow, queueStartDelayRows)
	if err != nil {
		return nil, err
	}
	out := make([]QueueInfo, len(qs))
	for i, q := range qs {
		d := delays[q.Name]
		out[i] = QueueInfo{Name: q.Name, Paused: q.Paused, PausedBy: q.PausedBy, PausedAt: q.PausedAt,
			Waiting: q.Waiting, Running: q.Running, Priority: q.Priority, Limit: q.Limit, NodeLimit: q.NodeLimit,
			Rate: q.Rate, RatePeriod: q.RatePeriod, RateUsed: q.RateUsed,
			StartDelay: StartDelay{Jobs: d.Jobs, P50: d.P50, P99: d.P99}}
	}
	return out, nil
}

// PauseQueue pauses a queue: no node starts its jobs until ResumeQueue
// (calls already running go on). The client's actor is recorded. A queue
// no job names yet may be paused: its jobs wait from their enqueue.
func (c *Client) PauseQueue(ctx context.Context, name string) error {
	return c.pause(ctx, name, true)
}

// ResumeQueue lets the nodes start a queue's jobs again, from their next
// claim.
func (c *Client) ResumeQueue(ctx context.Context, name string) error {
	return c.pause(ctx, name, false)
}

func (c *Client) pause(ctx context.Context, name string, paused bool) error {
	if err := CheckQueueName(name); err != nil {
		return err
	}
	return c.s.QueuePause(ctx, name, c.actor, paused)
}

// CheckQueueName checks a queue name as PauseQueue and Enqueue do: a
// *FieldError for the field queue when it is not a valid name.
func CheckQueueName(name string) error {
	if err := jobspec.ValidateQueueName(name); err != nil {
		return &FieldError{Field: "queue", Problem: err.Error()}
	}
	return nil
}

// QueueCancelled is what CancelQueue did.
type QueueCancelled struct {
	// Requested is how many running jobs of the queue were asked to stop:
	// each one's node cancels the call at its next lease renewal (within a
	// third of the lease) and records the job cancelled, as CancelJob
	// does for one. Jobs asked before are not counted: their first
	// request stands.
	Requested int64 `json:"requested"`
	// Cancelled is how many waiting jobs (ready, backing off after a
	// failure included) were cancelled at once; 0 unless waiting was set.
	Cancelled int64 `json:"cancelled"`
}

// CancelQueue stops every running job of a queue, as CancelJob does for
// one, and, with waiting set, cancels its waiting jobs too. The client's
// actor is recorded. A queue need not be paused first, but jobs it starts
// after the call are not stopped: pause it (PauseQueue) to stop its starts
// as well.
func (c *Client) CancelQueue(ctx context.Context, name string, waiting bool) (QueueCancelled, error) {
	if err := CheckQueueName(name); err != nil {
		return QueueCancelled{}, err
	}
	requested, cancelled, err := c.s.QueueCancel(ctx, name, c.actor, waiting)
	return QueueCancelled{Requested: requested, Cancelled: cancelled}, err
}
