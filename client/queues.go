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
// database clock) and its work now.
type QueueInfo struct {
	Name     string     `json:"name"`
	Paused   bool       `json:"paused"`
	PausedBy string     `json:"paused_by,omitempty"`
	PausedAt *time.Time `json:"paused_at,omitempty"`
	Waiting  int        `json:"waiting"` // ready and due now; a paused queue's wait for its resume
	Running  int        `json:"running"`
}

// Queues lists the queues that jobs waiting or running name, and those
// ever paused or resumed, by name.
func (c *Client) Queues(ctx context.Context) ([]QueueInfo, error) {
	qs, err := c.s.Queues(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]QueueInfo, len(qs))
	for i, q := range qs {
		out[i] = QueueInfo(q)
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
