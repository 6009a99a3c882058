package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
)

// JobInfo is a job as the table holds it. Times are the database clock's,
// in UTC.
type JobInfo struct {
	ID             int64         `json:"id"`
	Endpoint       string        `json:"endpoint"`
	Method         string        `json:"method"`
	Payload        []byte        `json:"payload"`
	State          string        `json:"state"`    // one of the State constants (never StateRetrying)
	Retrying       bool          `json:"retrying"` // ready after a failed attempt: backing off
	RunAt          time.Time     `json:"run_at"`
	Attempt        int           `json:"attempt"` // attempts made (the running one included)
	MaxAttempts    int           `json:"max_attempts"`
	Timeout        time.Duration `json:"timeout_ns"` // 0: the node's default
	UniqueKey      string        `json:"unique_key,omitempty"`
	IdempotencyKey string        `json:"idempotency_key"`
	Node           string        `json:"node,omitempty"` // the node running it, or the last that ran it
	LeaseUntil     *time.Time    `json:"lease_until,omitempty"`
	Created        time.Time     `json:"created"`
	Started        *time.Time    `json:"started,omitempty"` // the last attempt's start
	Finished       *time.Time    `json:"finished,omitempty"`
	LastStatus     int           `json:"last_status,omitempty"` // HTTP status of the last call; 0 when none
	LastError      string        `json:"last_error,omitempty"`
	Schedule       string        `json:"schedule,omitempty"`      // the schedule whose occurrence it is
	ScheduledFor   *time.Time    `json:"scheduled_for,omitempty"` // the occurrence's fire time
	Queue          string        `json:"queue"`
	// Traceparent is the W3C trace context the job was enqueued in, as
	// its row holds it; "" when it was enqueued in none.
	Traceparent string `json:"traceparent,omitempty"`
	// History lists the last attempts and actions, oldest first (Get only;
	// about the last twenty are kept).
	History []Event `json:"history,omitempty"`
	// CancelRequestedBy is who asked that the running call be cancelled,
	// and CancelRequestedAt when (Get only): the node stops the call at
	// its next lease renewal. Empty when nobody asked.
	CancelRequestedBy string     `json:"cancel_requested_by,omitempty"`
	CancelRequestedAt *time.Time `json:"cancel_requested_at,omitempty"`
}

// Event is one ended attempt, or an operator's cancel or retry, in a job's
// history.
type Event struct {
	Attempt int        `json:"attempt"`
	Node    string     `json:"node"`              // the node that ran the attempt, or who acted
	Started *time.Time `json:"started,omitempty"` // nil for an action
	Ended   time.Time  `json:"ended"`
	// Outcome is done, failed, dead, retry (failed, due again after a
	// backoff), reclaimed (the node stopped renewing its lease), released
	// (given back unrun by a stopping node), cancelled or retried.
	Outcome string `json:"outcome"`
	Status  int    `json:"status,omitempty"` // HTTP status; 0 when there was no response
	Error   string `json:"error,omitempty"`
}

// Filter selects jobs for List and RetryMatching. The zero Filter selects
// every job.
type Filter struct {
	// State is a job state, or StateRetrying; "" is any.
	State string
	// EndpointPrefix keeps jobs whose endpoint starts with it (compared
	// as it is: no wildcards).
	EndpointPrefix string
	// Since keeps jobs created within this long before the database's now.
	Since time.Duration
	// Until keeps jobs created at least this long before the database's
	// now: with Since, the jobs created between Since ago and Until ago.
	Until time.Duration
	// Limit is the most jobs a page holds (default 100, at most 1000), or
	// RetryMatching changes (default and at most 1000).
	Limit int
	// Cursor continues a List where a page's NextCursor left it.
	Cursor string
}

// Page is one page of List, newest job first.
type Page struct {
	Jobs []JobInfo
	// NextCursor continues the list in Filter.Cursor; "" on the last page.
	NextCursor string
}

// List limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

var states = []string{StateReady, StateRunning, StateDone, StateFailed, StateDead, StateCancelled, StateMissed, StateRetrying}

// filter converts f, with limit as its default and cap.
func (f Filter) filter(def, max int) (store.JobFilter, error) {
	sf := store.JobFilter{EndpointPrefix: f.EndpointPrefix, Since: f.Since, Until: f.Until, Limit: f.Limit}
	switch {
	case f.State == "":
	case f.State == StateRetrying:
		sf.States, sf.Retrying = []string{StateReady}, true
	default:
		if !slices.Contains(states, f.State) {
			return sf, &FieldError{Field: "state", Problem: fmt.Sprintf("state %q is not one of %v", f.State, states)}
		}
		sf.States = []string{f.State}
	}
	if f.Since < 0 {
		return sf, &FieldError{Field: "since", Problem: fmt.Sprintf("since %v must not be negative", f.Since)}
	}
	switch {
	case f.Until < 0:
		return sf, &FieldError{Field: "until", Problem: fmt.Sprintf("until %v must not be negative", f.Until)}
	case f.Since > 0 && f.Until >= f.Since:
		// An empty range is a mistake (the two swapped), not a question
		// whose answer is "no job".
		return sf, &FieldError{Field: "until", Problem: fmt.Sprintf("until %v must be less than since %v: the range runs from since ago to until ago", f.Until, f.Since)}
	}
	switch {
	case f.Limit < 0 || f.Limit > max:
		return sf, &FieldError{Field: "limit", Problem: fmt.Sprintf("limit %d must be between 1 and %d", f.Limit, max)}
	case f.Limit == 0:
		sf.Limit = def
	}
	if f.Cursor != "" {
		var before int64
		if _, err := fmt.Sscanf(f.Cursor, "%d", &before); err != nil || before <= 0 || fmt.Sprint(before) != f.Cursor {
			return sf, &FieldError{Field: "cursor", Problem: fmt.Sprintf("cursor %q is not one a page gave", f.Cursor)}
		}
		sf.Before = before
	}
	return sf, nil
}

// CheckFilter validates a filter as List does, without a database: a
// *FieldError names what is wrong.
func CheckFilter(f Filter) error {
	_, err := f.filter(DefaultListLimit, MaxListLimit)
	return err
}

// Get reads a job with its history; ErrNotFound when it is not in the
// table.
func (c *Client) Get(ctx context.Context, id int64) (JobInfo, error) {
	j, err := c.s.JobGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return JobInfo{}, fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return JobInfo{}, err
	}
	return info(j), nil
}

// List reads a page of jobs, newest first. Pages are cut by id, so a
// job enqueued while paging does not shift the pages that follow.
func (c *Client) List(ctx context.Context, f Filter) (Page, error) {
	sf, err := f.filter(DefaultListLimit, MaxListLimit)
	if err != nil {
		return Page{}, err
	}
	js, err := c.s.JobsList(ctx, sf)
	if err != nil {
		return Page{}, err
	}
	var p Page
	for _, j := range js {
		p.Jobs = append(p.Jobs, info(j))
	}
	if len(js) == sf.Limit {
		p.NextCursor = fmt.Sprint(js[len(js)-1].ID)
	}
	return p, nil
}

// Cancel cancels a waiting job (ready, backing off after a failure
// included): it will not run. A running job's call is cancelled by its
// node within a lease renewal (see CancelJob). A finished job is refused
// with a *StateError.
func (c *Client) Cancel(ctx context.Context, id int64) error {
	_, err := c.CancelJob(ctx, id)
	return err
}

// Retry makes a dead, failed, cancelled or missed job ready now with a
// fresh attempt budget. It keeps its idempotency key: it is the same
// logical run. Another state is refused with a *StateError.
func (c *Client) Retry(ctx context.Context, id int64) error {
	n, err := c.s.JobsRetry(ctx, store.JobFilter{ID: id, Limit: 1}, c.actor)
	if err != nil || n == 1 {
		return err
	}
	return c.refused(ctx, id, "retry")
}

// RetryMatching retries, as Retry does, the jobs f selects among the dead,
// failed, cancelled and missed ones (f.State narrows them), at most
// f.Limit (default and at most 1000) of them, newest first; it returns how
// many. f.Cursor is not used.
func (c *Client) RetryMatching(ctx context.Context, f Filter) (int64, error) {
	f.Cursor = ""
	sf, err := f.filter(MaxListLimit, MaxListLimit)
	if err != nil {
		return 0, err
	}
	if f.State != "" && !slices.Contains(store.RetryableStates, f.State) {
		return 0, &FieldError{Field: "state", Problem: fmt.Sprintf("a %s job cannot be retried: say dead, failed, cancelled or missed", f.State)}
	}
	return c.s.JobsRetry(ctx, sf, c.actor)
}

// refused tells why a fenced change did not apply.
func (c *Client) refused(ctx context.Context, id int64, op string) error {
	j, err := c.s.JobGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%s job %d: %w", op, id, ErrNotFound)
	}
	if err != nil {
		return err
	}
	return &StateError{ID: id, State: j.State, Op: op}
}

func info(j store.Job) JobInfo {
	out := JobInfo{ID: j.ID, Endpoint: j.Endpoint, Method: j.Method, Payload: j.Payload, State: j.State,
		Retrying: j.State == StateReady && j.Attempt > 0, RunAt: j.RunAt, Attempt: j.Attempt, MaxAttempts: j.MaxAttempts,
		Timeout: j.Timeout, UniqueKey: j.UniqueKey, IdempotencyKey: j.IdempotencyKey, Node: j.OwnerNode,
		LeaseUntil: j.LeaseUntil, Created: j.Created, Started: j.Started, Finished: j.Finished, LastStatus: j.LastStatus,
		LastError: j.LastError, Schedule: j.Schedule, ScheduledFor: j.ScheduledFor, Queue: j.Queue, Traceparent: j.Traceparent,
		CancelRequestedBy: j.CancelRequestedBy, CancelRequestedAt: j.CancelRequestedAt}
	for _, e := range j.History {
		out.History = append(out.History, Event(e))
	}
	return out
}
