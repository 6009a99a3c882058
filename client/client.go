// Package client is the Go API of a slotpoller farm for applications:
// enqueue jobs (one or a batch, in the application's own transaction if it
// likes), read a job with its attempt history, list jobs, cancel a waiting
// job or stop a running one's call, and retry finished ones.
//
// A Client works on the farm's database directly, through a *sql.DB the
// application opened with one of the drivers slotpoller uses, and that
// database's Driver from its package: postgres.Driver() (package
// github.com/slotpoller/slotpoller/driver/postgres, for a pool of
// github.com/jackc/pgx/v5/stdlib's "pgx"), sqlserver.Driver()
// (driver/sqlserver, github.com/microsoft/go-mssqldb's "sqlserver") or
// sqlite.Driver() (driver/sqlite, modernc.org/sqlite's "sqlite"). This
// package imports no database driver: the application compiles in only
// the one it uses. The schema must be migrated (slotpoller schema
// migrate). A job enqueued with
// EnqueueTx in a transaction that rolls back never runs; one in a
// transaction that commits runs once (at least once if a node dies while
// calling it: the endpoint gets a stable Idempotency-Key for that).
//
// Times are the database's clock: a Job's Delay is added to the database
// time inside the statement, and every time a JobInfo reports was written
// by the database.
package client

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/slotpoller/slotpoller/internal/jobspec"
	"github.com/slotpoller/slotpoller/internal/store"
)

// Limits of a job's fields; Enqueue refuses a job beyond them with a
// *FieldError.
const (
	MaxPayload     = jobspec.MaxPayload     // bytes of a request body: 1 MiB
	MaxAttempts    = jobspec.MaxAttempts    // attempts of a job
	MaxLeadTime    = jobspec.MaxLeadTime    // how far ahead a job may be due: 366 days
	MaxUniqueKey   = jobspec.MaxUniqueKey   // characters of a unique key
	MaxCallTimeout = jobspec.MaxCallTimeout // a call's deadline
)

// DefaultMaxAttempts is a job's attempt budget when Job.MaxAttempts is 0
// and no WithDefaultMaxAttempts says otherwise.
const DefaultMaxAttempts = jobspec.DefaultMaxAttempts

// MaxBatch is the most jobs one EnqueueMany writes.
const MaxBatch = 10000

// Client enqueues, reads and steers the jobs of one farm. It is safe for
// concurrent use.
type Client struct {
	s           *store.Store
	maxAttempts int
	actor       string
}

// Statements returns how many statements the client has sent to the
// database: what its calls cost (the dashboard's benchmark counts them).
func (c *Client) Statements() int64 { return c.s.Statements() }

// Option adjusts New.
type Option func(*options) error

type options struct {
	schema      string
	maxAttempts int
	actor       string
}

// WithSchema names the SQL Server schema that holds slotpoller's tables
// (database.schema in the nodes' configuration; default slotpoller). The
// other databases ignore it.
func WithSchema(name string) Option {
	return func(o *options) error { o.schema = name; return nil }
}

// WithDefaultMaxAttempts sets the attempt budget of jobs that do not give
// one (the nodes' jobs.max_attempts, say).
func WithDefaultMaxAttempts(n int) Option {
	return func(o *options) error {
		if n < 1 || n > MaxAttempts {
			return fmt.Errorf("default max attempts %d must be between 1 and %d", n, MaxAttempts)
		}
		o.maxAttempts = n
		return nil
	}
}

// WithActor names who cancels and retries in the jobs' histories
// (default "client").
func WithActor(name string) Option {
	return func(o *options) error { o.actor = name; return nil }
}

// Driver is one database's support: postgres.Driver(), sqlserver.Driver()
// or sqlite.Driver(), from the package of that database under
// github.com/slotpoller/slotpoller/driver, each of which imports that
// database's Go driver alone. Only those packages implement it.
type Driver interface {
	store.Driver
}

// New returns a client of the farm whose database db is, on the database
// of d: the Driver of the database/sql driver db was opened with. New
// sends nothing to the database.
func New(db *sql.DB, d Driver, opts ...Option) (*Client, error) {
	if d == nil {
		return nil, errors.New("client.New needs the database's Driver (postgres.Driver(), sqlserver.Driver() or sqlite.Driver())")
	}
	o := options{maxAttempts: DefaultMaxAttempts, actor: "client"}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	s, err := store.Wrap(db, d, o.schema)
	if err != nil {
		return nil, err
	}
	return &Client{s: s, maxAttempts: o.maxAttempts, actor: o.actor}, nil
}

// Job is a job to enqueue.
type Job struct {
	// Endpoint is the path the job calls on the node's base URL, e.g.
	// /jobs/report?id=42. A job cannot send a node to another host.
	Endpoint string
	// Method is GET, POST (the default), PUT, PATCH or DELETE.
	Method  string
	Payload []byte // the request body, at most MaxPayload bytes
	// When the job is due: RunAt (an absolute time), or Delay after the
	// database's now; neither means now.
	RunAt time.Time
	Delay time.Duration
	// MaxAttempts is the attempt budget; 0 is the client's default.
	MaxAttempts int
	// Timeout is one call's deadline; 0 is the node's jobs.timeout. A
	// claim holds the job from every other node until that deadline has
	// passed (at least jobs.lease): if the node running it dies, the job
	// waits this long for another node. Give a job the timeout it needs,
	// not more.
	Timeout time.Duration
	// UniqueKey, when set, refuses a second job with the same key while
	// the first is in the table (a *DuplicateError).
	UniqueKey string
	// IdempotencyKey is sent as Idempotency-Key on every attempt; "" gets
	// a random one.
	IdempotencyKey string
	// Queue is the job's queue; "" for the queue the nodes' config routes
	// its endpoint to (queues:), else "default". A paused queue's jobs
	// wait (Client.PauseQueue).
	Queue string
	// Traceparent is the W3C trace context the job belongs to: every
	// call of it carries it, with the node's call as the parent span, so
	// that the request that enqueued the job, the job's calls and their
	// retries are one trace. "" takes the OpenTelemetry span of the
	// enqueue's context, if it carries one; with neither, the node starts
	// a trace of the job's own.
	Traceparent string
}

// FieldError is a job refused by validation: which field, and why.
type FieldError struct {
	Index   int    // the job's index in a batch; 0 for one job
	Field   string // endpoint, method, max_attempts, timeout, delay, run_at, unique_key, idempotency_key, payload, queue, traceparent
	Problem string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: %s", e.Field, e.Problem)
}

// DuplicateError is a job refused because its unique key is taken.
type DuplicateError struct {
	UniqueKey string
	// ID is the job that holds the key; 0 when it could not be told (a
	// key taken by a concurrent transaction, seen only at the INSERT).
	ID int64
}

func (e *DuplicateError) Error() string {
	if e.ID == 0 {
		return fmt.Sprintf("a job with unique key %q exists", e.UniqueKey)
	}
	return fmt.Sprintf("a job with unique key %q exists (id %d)", e.UniqueKey, e.ID)
}

// ErrNotFound is returned for a job id that is not in the table (never
// enqueued, or deleted by retention).
var ErrNotFound = errors.New("job not found")

// StateError is a Cancel or Retry refused because of the job's state:
// only a waiting (ready) or running job can be cancelled, and only a
// finished one that did not succeed (dead, failed, cancelled, missed)
// retried.
type StateError struct {
	ID    int64
	State string
	Op    string // cancel or retry
}

func (e *StateError) Error() string {
	why := ""
	switch {
	case e.Op == "cancel":
		why = ": only a waiting (ready) or running job can be cancelled"
	case e.Op == "retry":
		why = ": only a dead, failed, cancelled or missed job can be retried"
	}
	return fmt.Sprintf("cannot %s job %d, it is %s%s", e.Op, e.ID, e.State, why)
}

// Job states.
const (
	StateReady     = store.StateReady     // waiting until due (Retrying: after a failed attempt)
	StateRunning   = store.StateRunning   // a node is calling it
	StateDone      = store.StateDone      // succeeded
	StateFailed    = store.StateFailed    // answered with a 4xx that is not retried
	StateDead      = store.StateDead      // out of attempts
	StateCancelled = store.StateCancelled // cancelled while waiting, or its call stopped by a cancel
	StateMissed    = store.StateMissed    // a schedule's occurrence not started within its tolerance
	// StateRetrying is a filter, not a stored state: ready after a failed
	// attempt, backing off.
	StateRetrying = "retrying"
)

// Enqueue validates and adds one job, and returns its id.
func (c *Client) Enqueue(ctx context.Context, j Job) (int64, error) {
	return c.enqueue(ctx, c.s, j)
}

// EnqueueTx adds one job in tx, the application's transaction: the job
// exists if and only if tx commits. A transient conflict (a deadlock) is
// not retried: it rolled back the whole transaction, which the
// application runs again.
func (c *Client) EnqueueTx(ctx context.Context, tx *sql.Tx, j Job) (int64, error) {
	return c.enqueue(ctx, c.s.WithTx(tx), j)
}

func (c *Client) enqueue(ctx context.Context, s *store.Store, j Job) (int64, error) {
	nj, err := c.newJob(ctx, j, 0)
	if err != nil {
		return 0, err
	}
	if s.InTx() && nj.UniqueKey != "" {
		// In a transaction a failed INSERT may abort it (PostgreSQL), with
		// no way left to read the key's holder: look first.
		if err := c.checkKeys(ctx, s, []store.NewJob{nj}); err != nil {
			return 0, err
		}
	}
	id, err := s.JobInsert(ctx, nj)
	if errors.Is(err, store.ErrDuplicate) {
		return 0, &DuplicateError{UniqueKey: nj.UniqueKey, ID: id}
	}
	return id, err
}

// EnqueueMany validates and adds jobs in one transaction, in multi-row
// INSERTs of 100, and returns their ids in order. Either every job is
// added or none. A batch holds at most MaxBatch jobs.
func (c *Client) EnqueueMany(ctx context.Context, js []Job) ([]int64, error) {
	return c.enqueueMany(ctx, c.s, js)
}

// EnqueueManyTx is EnqueueMany in tx, the application's transaction.
func (c *Client) EnqueueManyTx(ctx context.Context, tx *sql.Tx, js []Job) ([]int64, error) {
	return c.enqueueMany(ctx, c.s.WithTx(tx), js)
}

func (c *Client) enqueueMany(ctx context.Context, s *store.Store, js []Job) ([]int64, error) {
	if len(js) > MaxBatch {
		return nil, &FieldError{Field: "jobs", Problem: fmt.Sprintf("a batch of %d jobs; at most %d are allowed", len(js), MaxBatch)}
	}
	batch := make([]store.NewJob, len(js))
	keys := map[string]int{}
	for i, j := range js {
		nj, err := c.newJob(ctx, j, i)
		if err != nil {
			return nil, err
		}
		if nj.UniqueKey != "" {
			if first, ok := keys[nj.UniqueKey]; ok {
				return nil, &FieldError{Index: i, Field: "unique_key", Problem: fmt.Sprintf("unique key %q is also job %d's in this batch", nj.UniqueKey, first)}
			}
			keys[nj.UniqueKey] = i
		}
		batch[i] = nj
	}
	if err := c.checkKeys(ctx, s, batch); err != nil {
		return nil, err
	}
	ids, err := s.JobInsertMany(ctx, batch)
	if errors.Is(err, store.ErrDuplicate) {
		// Taken by a concurrent writer since the check: name one if it can
		// still be read (not in an aborted transaction).
		if err := c.checkKeys(ctx, c.s, batch); err != nil {
			return nil, err
		}
		return nil, &DuplicateError{}
	}
	return ids, err
}

// checkKeys returns a *DuplicateError when a job's unique key is taken.
func (c *Client) checkKeys(ctx context.Context, s *store.Store, batch []store.NewJob) error {
	var keys []string
	for _, j := range batch {
		if j.UniqueKey != "" {
			keys = append(keys, j.UniqueKey)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	held, err := s.JobsByUniqueKey(ctx, keys)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if id, ok := held[k]; ok {
			return &DuplicateError{UniqueKey: k, ID: id}
		}
	}
	return nil
}

// newJob validates j (the CLI's rules) and converts it.
func (c *Client) newJob(ctx context.Context, j Job, index int) (store.NewJob, error) {
	nj := store.NewJob{Endpoint: j.Endpoint, Method: j.Method, Payload: j.Payload, Delay: j.Delay,
		MaxAttempts: j.MaxAttempts, Timeout: j.Timeout, UniqueKey: j.UniqueKey, IdempotencyKey: j.IdempotencyKey, Queue: j.Queue,
		Traceparent: j.Traceparent}
	if nj.Traceparent == "" {
		nj.Traceparent = traceparentOf(ctx)
	}
	if nj.MaxAttempts == 0 {
		nj.MaxAttempts = c.maxAttempts
	}
	if !j.RunAt.IsZero() {
		at := j.RunAt
		nj.RunAt = &at
	}
	if err := jobspec.CheckNewJob(&nj); err != nil {
		var fe *jobspec.FieldError
		if errors.As(err, &fe) {
			return nj, &FieldError{Index: index, Field: fe.Field, Problem: fe.Problem}
		}
		return nj, err
	}
	return nj, nil
}

// traceparentOf is the traceparent of ctx's OpenTelemetry span, "" when
// it carries none.
func traceparentOf(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return jobspec.Trace{ID: sc.TraceID(), Parent: sc.SpanID(), Flags: byte(sc.TraceFlags())}.String()
}
