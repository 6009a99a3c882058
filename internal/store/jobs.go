package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Job states.
const (
	StateReady     = "ready"
	StateRunning   = "running"
	StateDone      = "done"
	StateFailed    = "failed"
	StateDead      = "dead"
	StateCancelled = "cancelled"
	StateMissed    = "missed"
)

// NewJob is a job to enqueue. Exactly one of RunAt and Delay decides when
// it is due: Delay is added to the database clock inside the statement;
// RunAt is an absolute time the user gave.
type NewJob struct {
	Endpoint       string
	Method         string
	Payload        []byte
	RunAt          *time.Time
	Delay          time.Duration
	MaxAttempts    int
	Timeout        time.Duration // 0: the node's default
	UniqueKey      string        // "" for none
	IdempotencyKey string        // sent on every attempt

	// An occurrence of a schedule carries its schedule, its fire time, the
	// time by which it must have started (or it is missed), and whether it
	// must wait while another occurrence of its schedule runs.
	Schedule     string
	ScheduledFor *time.Time
	StartBy      *time.Time
	Exclusive    bool

	// Queue is the job's queue; "" for the queue its endpoint is routed to
	// (QueueRoutesPut), else DefaultQueue.
	Queue string

	// Traceparent is the W3C trace context the job was enqueued in
	// (jobspec.CheckTraceparent's form); "" for none.
	Traceparent string
}

// Job is a row of the queue.
type Job struct {
	ID             int64
	Endpoint       string
	Method         string
	Payload        []byte
	State          string
	RunAt          time.Time
	Attempt        int
	MaxAttempts    int
	Timeout        time.Duration
	UniqueKey      string
	IdempotencyKey string
	Owner          string // incarnation holding the lease
	OwnerNode      string // node name that holds it or last ran it
	Token          int64
	LeaseUntil     *time.Time
	Created        time.Time
	Started        *time.Time
	Finished       *time.Time
	LastStatus     int
	LastError      string
	Schedule       string
	ScheduledFor   *time.Time
	Queue          string
	Traceparent    string  // the W3C trace context it was enqueued in; "" for none
	History        []Event // JobGet only: the last attempts and actions, oldest first
	// JobGet only: who asked that the running call be cancelled, and when
	// (database time); "" and nil when nobody did (see cancel.go).
	CancelRequestedBy string
	CancelRequestedAt *time.Time
}

// Claim is a job this node now holds under Token until its lease ends.
type Claim struct {
	ID             int64
	Token          int64
	Attempt        int
	MaxAttempts    int
	Endpoint       string
	Method         string
	Payload        []byte
	IdempotencyKey string
	Timeout        time.Duration
	RunAt          time.Time  // when it was due
	ScheduledFor   *time.Time // the occurrence's fire time, for a schedule's job
	Queue          string
	// Traceparent is the trace it was enqueued in, as the row holds it:
	// "" for none, and not checked (an application may have written the
	// row), so the caller parses it (jobspec.ParseTraceparent).
	Traceparent string
}

// claimedColumns are the columns a claim hands back, in Claim's order.
const claimedColumns = "id, token, attempt, max_attempts, endpoint, method, payload, idem_key, timeout_ms, run_at, scheduled_for, queue, trace_parent"

// claimable is the condition, beyond ready and due, for the plain claim
// (and the count of due work) to take job alias j: its queue is neither
// paused nor managed (a managed queue's jobs are claimed only under its
// lock: limits.go), and exclusiveOK.
func claimable(j, scheduleHint string) string {
	return notHeld(j) + ` AND ` + exclusiveOK(j, scheduleHint)
}

// exclusiveOK is the condition that job alias j does not overlap its
// schedule: an occurrence of a schedule that forbids overlap is claimable
// only while its schedule exists (a removed schedule's occurrences are
// cancelled), and waits while an occurrence of the same schedule runs, or
// an earlier one still waits (so even one claim statement takes at most one
// of them). scheduleHint is the dialect's table hint on the schedule's row
// (SQL Server's update lock, so that claims of one schedule's occurrences
// take turns and a concurrent claim cannot slip between the two look-ups
// under locking read committed), or "".
func exclusiveOK(j, scheduleHint string) string {
	return `(` + j + `.exclusive = 0 OR (
    EXISTS (SELECT 1 FROM {schedules} AS s` + scheduleHint + ` WHERE s.name = ` + j + `.schedule)
    AND NOT EXISTS (SELECT 1 FROM {jobs} r WHERE r.schedule = ` + j + `.schedule AND r.state = 'running')
    AND NOT EXISTS (SELECT 1 FROM {jobs} e WHERE e.schedule = ` + j + `.schedule AND e.state = 'ready'
      AND e.scheduled_for < ` + j + `.scheduled_for)))`
}

// qualified prefixes each column of a list with a table name.
func qualified(table, cols string) string {
	parts := strings.Split(cols, ", ")
	for i, c := range parts {
		parts[i] = table + "." + c
	}
	return strings.Join(parts, ", ")
}

// jobInsertColumns are the columns a new job writes, in the order of
// jobValues.
const jobInsertColumns = `endpoint, method, payload, state, run_at, attempt, max_attempts, timeout_ms,
  unique_key, idem_key, token, created_at, schedule, scheduled_for, start_by, exclusive, trace_parent, queue`

// jobValues returns the value list of a new job for jobInsertColumns and
// its arguments. The list is the same for every job (a run time, or NULL
// and the delay on the database clock), so that a statement of n rows is
// one text, expanded once.
func (s *Store) jobValues(j NewJob) (string, []any) {
	exclusive := 0
	if j.Exclusive {
		exclusive = 1
	}
	return `?, ?, ?, 'ready', COALESCE(?, {now+?}), 0, ?, ?, ?, ?, 0, {now}, ?, ?, ?, ?, ?, ` + s.queueOf(),
		append([]any{j.Endpoint, j.Method, j.Payload, nullTime(j.RunAt), millis(j.Delay), j.MaxAttempts, millis(j.Timeout),
			nullString(j.UniqueKey), j.IdempotencyKey, nullString(j.Schedule), nullTime(j.ScheduledFor), nullTime(j.StartBy), exclusive,
			nullString(j.Traceparent)},
			queueArgs(j)...)
}

// JobInsert enqueues a job and returns its id. A taken unique key gives
// ErrDuplicate along with the id of the job that holds it; a payload over
// the server's packet limit, ErrPacketTooLarge before anything is sent.
func (s *Store) JobInsert(ctx context.Context, j NewJob) (int64, error) {
	if err := s.jobFits(ctx, "enqueue job for "+j.Endpoint, j); err != nil {
		return 0, err
	}
	values, args := s.jobValues(j)
	q := s.statement(`INSERT INTO {jobs} (` + jobInsertColumns + `) {output id}
VALUES (` + values + `) {returning id}`)
	id, err := s.insertOne(ctx, q, args)
	if err != nil && s.drv.UniqueViolation(err) {
		return s.duplicate(ctx, j.UniqueKey)
	}
	if err != nil {
		return 0, fmt.Errorf("enqueue job for %s: %w", j.Endpoint, s.packetError(ctx, "the statement", []NewJob{j}, s.rowBytes(j), err))
	}
	return id, nil
}

// insertOne runs an INSERT of one row that hands back its id ({output
// id} ... {returning id}), or on MySQL, which hands back none, reads the
// driver's last insert id; again on a transient conflict.
func (s *Store) insertOne(ctx context.Context, q string, args []any) (int64, error) {
	var id int64
	err := s.retry(ctx, func() error {
		if s.writesBack() {
			var err error
			id, err = s.insertedID(ctx, q, args)
			return err
		}
		return s.queryRow(ctx, q, args...).Scan(&id)
	})
	return id, err
}

// duplicate is the answer to an insert whose unique key is taken:
// ErrDuplicate with the id of the job that holds the key.
func (s *Store) duplicate(ctx context.Context, key string) (int64, error) {
	var existing int64
	if e := s.queryRow(ctx, s.statement(`SELECT id FROM {jobs} WHERE unique_key = ?`), key).Scan(&existing); e == nil {
		return existing, fmt.Errorf("enqueue: a job with unique key %q %w (id %d)", key, ErrDuplicate, existing)
	}
	return 0, fmt.Errorf("enqueue: a job with unique key %q %w", key, ErrDuplicate)
}

// JobInsertClaimed enqueues a job due now already claimed by owner (an
// incarnation) with a lease, as a claim would leave it: running, token 1,
// first attempt. It is the local fast path of a node that has room for the
// job: no poll and no claim statement stand between the enqueue and the
// call. A taken unique key gives ErrDuplicate, and a payload over the
// server's packet limit ErrPacketTooLarge, as JobInsert does. j's RunAt
// and Delay are ignored: the job is due at the database's now. A job whose
// queue (given or routed) is paused is not written: ErrQueueHeld, and
// the caller enqueues it as usual, to wait for the queue's resume.
func (s *Store) JobInsertClaimed(ctx context.Context, j NewJob, owner, ownerNode string, hold Hold) (Claim, error) {
	if err := s.jobFits(ctx, "enqueue job for "+j.Endpoint+", claimed by this node", j); err != nil {
		return Claim{}, err
	}
	exclusive := 0
	if j.Exclusive {
		exclusive = 1
	}
	// The queue is resolved once, in a derived table, and the row is
	// written only where that queue is not paused: one statement still.
	q := s.statement(`INSERT INTO {jobs} (` + jobInsertColumns + `, owner, owner_node, lease_until, started_at)
{output ` + claimedColumns + `}
SELECT ?, ?, ?, 'running', {now}, 1, ?, ?, ?, ?, 1, {now}, ?, ?, ?, ?, ?, rq.queue, ?, ?, {now+?}, {now}
FROM (SELECT ` + s.queueOf() + ` AS queue) AS rq
WHERE ` + notHeld("rq") + `
{returning ` + claimedColumns + `}`)
	args := append([]any{j.Endpoint, j.Method, j.Payload, j.MaxAttempts, millis(j.Timeout), nullString(j.UniqueKey), j.IdempotencyKey,
		nullString(j.Schedule), nullTime(j.ScheduledFor), nullTime(j.StartBy), exclusive, nullString(j.Traceparent), owner, ownerNode, millis(hold.For(j.Timeout))},
		queueArgs(j)...)
	var c Claim
	err := s.retry(ctx, func() error {
		var err error
		if s.writesBack() {
			var id int64
			if id, err = s.insertedID(ctx, q, args); err != nil {
				return err
			}
			c, err = scanClaim(s.queryRow(ctx, s.statement(`SELECT `+claimedColumns+` FROM {jobs} WHERE id = ?`), id))
			return err
		}
		c, err = scanClaim(s.queryRow(ctx, q, args...))
		return err
	})
	if err != nil && s.drv.UniqueViolation(err) {
		id, err := s.duplicate(ctx, j.UniqueKey)
		return Claim{ID: id}, err
	}
	if errors.Is(err, sql.ErrNoRows) {
		return c, fmt.Errorf("enqueue job for %s: %w", j.Endpoint, ErrQueueHeld)
	}
	if err != nil {
		return c, fmt.Errorf("enqueue job for %s, claimed by this node: %w", j.Endpoint, s.packetError(ctx, "the statement", []NewJob{j}, s.rowBytes(j), err))
	}
	return c, nil
}

// scanClaim reads a row of claimedColumns; a row the node cannot run is
// an error (see readClaim).
func scanClaim(r rowScanner) (Claim, error) {
	c, reason, err := readClaim(r)
	if err == nil && reason != "" {
		err = fmt.Errorf("job %d: %s", c.ID, reason)
	}
	return c, err
}

// QueueLoad is what a poller needs to size its share.
type QueueLoad struct {
	Due     int // ready and due now
	Urgent  int // of those, due before the urgency cutoff
	Running int // held by any node
	// Managed counts the due jobs (among Due) of managed queues: a claim
	// that should reach them is JobsClaimManaged.
	Managed int
}

// JobsLoad counts due and running jobs, and the due jobs that are urgent:
// those that would miss their start window if left to a poll nextPoll from
// now. A job's start window ends at its start_by (a schedule's tolerance),
// or, for a one-off job, window after its run time.
//
// Due counts at most limit jobs, so that a turn costs the same whatever
// the backlog: counting a queue of a million due rows took every turn
// longer the deeper the queue, while a poller needs the exact number only
// while it is smaller than what the farm can take in a few rounds (see
// jobs.LoadLimit). Urgent counts among those limit jobs. Running is not
// bounded: it is at most what the farm holds.
//
// Due and urgent count only what a claim could take now: not paused, and
// not waiting for its schedule (exclusiveOK). A managed queue's due jobs
// are counted whatever its limits (Managed says how many); an
// overlap-forbid occurrence waiting behind a running or earlier occurrence
// of its schedule is work no poller can do, and counting it would keep the
// rotation widened for nothing. It needs no lock hint, as a count decides
// nothing about which rows are taken.
func (s *Store) JobsLoad(ctx context.Context, nextPoll, window time.Duration, limit int) (QueueLoad, error) {
	if limit <= 0 {
		return QueueLoad{}, fmt.Errorf("count due jobs: a limit of %d counts nothing", limit)
	}
	q, args := s.loadStatement(nextPoll, window, limit)
	var l QueueLoad
	err := s.retry(ctx, func() error {
		return s.queryRow(ctx, q, args...).Scan(&l.Due, &l.Urgent, &l.Running, &l.Managed)
	})
	if err != nil {
		return l, fmt.Errorf("count due jobs: %w", err)
	}
	return l, nil
}

// loadStatement is JobsLoad's statement and its arguments.
func (s *Store) loadStatement(nextPoll, window time.Duration, limit int) (string, []any) {
	q, args := rowLimit(s.d, `SELECT j.run_at, j.start_by,
    CASE WHEN EXISTS (SELECT 1 FROM {queues} mq WHERE mq.name = j.queue AND mq.managed = 1) THEN 1 ELSE 0 END AS managed
  FROM {jobs} j
    WHERE j.state = 'ready' AND j.run_at <= {now_once} AND `+notPaused("j")+` AND `+exclusiveOK("j", ""), nil, limit)
	q = s.statement(`SELECT COUNT(*),
  COALESCE(SUM(CASE WHEN (start_by IS NULL AND run_at <= {now+?}) OR start_by <= {now+?} THEN 1 ELSE 0 END), 0),
  (SELECT COUNT(*) FROM {jobs} held WHERE held.state = 'running'),
  COALESCE(SUM(managed), 0)
FROM (` + q + `) AS pending`)
	return q, append([]any{millis(nextPoll - window), millis(nextPoll)}, args...)
}

// JobsClaim claims up to limit due jobs for owner (an incarnation) with a
// lease, bumping each job's fencing token. A claimed row the node cannot
// run is set aside (see oddrows.go) and not returned.
func (s *Store) JobsClaim(ctx context.Context, owner, ownerNode string, limit int, hold Hold) ([]Claim, error) {
	if limit <= 0 {
		return nil, nil
	}
	var rows []claimRow
	var err error
	if s.writesBack() {
		rows, err = s.claimPicked(ctx, "claim jobs", s.statement(s.d.ClaimJobs()), []any{limit}, owner, ownerNode, hold)
	} else {
		rows, err = queryAll(ctx, s, "claim jobs", s.statement(s.d.ClaimJobs()), append([]any{owner, ownerNode, limit}, hold.args()...), scanClaimRow)
	}
	if err != nil {
		return nil, err
	}
	return s.setAsideOdd(ctx, owner, rows)
}

// JobRenewLeaseIfRunning extends the lease of a job this node holds. It
// reports false when the claim is no longer ours (the token moved on).
func (s *Store) JobRenewLeaseIfRunning(ctx context.Context, id, token int64, lease time.Duration) (bool, error) {
	q := s.statement(`UPDATE {jobs} SET lease_until = {now+?} WHERE id = ? AND token = ? AND state = 'running'`)
	return s.fenced(ctx, fmt.Sprintf("renew lease of job %d", id), q, millis(lease), id, token)
}

// Outcome is how a call ended, for JobFinishIfRunning.
type Outcome struct {
	State      string        // done, failed, dead, or ready to retry
	RetryAfter time.Duration // with ready: delay on the database clock
	Status     int           // HTTP status, 0 when no response
	Error      string        // "" when done
}

// JobFinishIfRunning records the end of a call, fenced by the claim's token:
// a node whose lease was lost cannot overwrite what the new owner wrote.
func (s *Store) JobFinishIfRunning(ctx context.Context, id, token int64, o Outcome) (bool, error) {
	status, errText := nullInt(o.Status), nullString(o.Error)
	if o.State == StateReady {
		// A requested cancel ends it instead, as in finishSet.
		q := s.statement(`UPDATE {jobs} SET state = CASE WHEN cancel_requested_at IS NULL THEN 'ready' ELSE 'cancelled' END,
  owner = NULL, lease_until = NULL, run_at = {now+?},
  finished_at = CASE WHEN cancel_requested_at IS NULL THEN finished_at ELSE {now} END,
  last_status = ?, last_error = CASE WHEN cancel_requested_at IS NULL THEN ? ELSE ` + cancelledError(s.d, "") + ` END,
  history = ` + s.attemptLine() + `
WHERE id = ? AND token = ? AND state = 'running'`)
		before, after := cancelledErrorParts()
		args := append([]any{millis(o.RetryAfter), status, errText, before, after}, historySeps()...)
		args = append(args, historySuffix(OutcomeRetry, o.Status, o.Error), id, token)
		return s.fenced(ctx, fmt.Sprintf("schedule retry of job %d", id), q, args...)
	}
	q := s.statement(`UPDATE {jobs} SET state = ?, owner = NULL, lease_until = NULL, finished_at = {now},
  last_status = ?, last_error = ?, history = ` + s.attemptLine() + `
WHERE id = ? AND token = ? AND state = 'running'`)
	args := append([]any{o.State, status, errText}, historySeps()...)
	args = append(args, historySuffix(o.State, o.Status, o.Error), id, token)
	return s.fenced(ctx, fmt.Sprintf("record result of job %d", id), q, args...)
}

// attemptLine is the history with the line of the attempt that a running
// row ends: its node and start, as the claim wrote them, and a suffix
// parameter.
func (s *Store) attemptLine() string {
	return historyLine(s.d, "owner_node", "started_at", s.d.TextParam())
}

// JobReleaseIfRunning gives a claimed job back unrun (a graceful stop that
// could not wait for it): ready at once, and the interrupted attempt not
// counted.
//
// A job whose cancel was requested is not given back: it ends cancelled
// (releaseSet).
func (s *Store) JobReleaseIfRunning(ctx context.Context, id, token int64, reason string) (bool, error) {
	q := s.statement(`UPDATE {jobs} SET ` + s.releaseSet() + `
WHERE id = ? AND token = ? AND state = 'running'`)
	args := append(releaseArgs(reason), id, token)
	return s.fenced(ctx, fmt.Sprintf("release job %d", id), q, args...)
}

func (s *Store) fenced(ctx context.Context, what string, q string, args ...any) (bool, error) {
	n, err := s.execCount(ctx, what, q, args...)
	return n == 1, err
}

// execCount runs a write (retrying transient conflicts) and returns how
// many rows it changed; errors say what the write was for.
func (s *Store) execCount(ctx context.Context, what, q string, args ...any) (int64, error) {
	var n int64
	err := s.retry(ctx, func() error {
		res, err := s.exec(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}

const jobColumns = `id, endpoint, method, payload, state, run_at, attempt, max_attempts, timeout_ms, unique_key, idem_key,
  owner, owner_node, token, lease_until, created_at, started_at, finished_at, last_status, last_error, schedule, scheduled_for, queue, trace_parent`

func scanJob(sc rowScanner) (Job, error) {
	var j Job
	// A row may hold what no door writes (see oddrows.go): it is shown as
	// well as it can be, never refused.
	var runAt, lease, created, started, finished, scheduledFor shownTime
	var attempt, maxAttempts, token, timeoutMS shownInt
	var unique, owner, ownerNode, lastErr, schedule, trace sql.NullString
	var status sql.NullInt64
	err := sc.Scan(&j.ID, &j.Endpoint, &j.Method, &j.Payload, &j.State, &runAt, &attempt, &maxAttempts, &timeoutMS,
		&unique, &j.IdempotencyKey, &owner, &ownerNode, &token, &lease, &created, &started, &finished, &status, &lastErr,
		&schedule, &scheduledFor, &j.Queue, &trace)
	if err != nil {
		return j, err
	}
	j.Attempt, j.MaxAttempts, j.Token = int(attempt), int(maxAttempts), int64(token)
	j.RunAt, j.Timeout = runAt.T, time.Duration(min(max(int64(timeoutMS), 0), math.MaxInt64/int64(time.Millisecond)))*time.Millisecond
	j.UniqueKey, j.Owner, j.OwnerNode, j.LastError = unique.String, owner.String, ownerNode.String, lastErr.String
	j.LeaseUntil, j.Created, j.Started, j.Finished = lease.ptr(), created.T, started.ptr(), finished.ptr()
	j.LastStatus = int(status.Int64)
	j.Schedule, j.ScheduledFor = schedule.String, scheduledFor.ptr()
	j.Traceparent = trace.String
	return j, nil
}

// JobCounts counts jobs by state.
func (s *Store) JobCounts(ctx context.Context) (map[string]int, error) {
	rows, err := s.query(ctx, s.statement(`SELECT state, COUNT(*) FROM {jobs} GROUP BY state`))
	if err != nil {
		return nil, fmt.Errorf("count jobs by state: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("count jobs by state: %w", err)
		}
		out[st] = n
	}
	return out, rows.Err()
}

// Held is a job an owner still holds after a lease renewal.
type Held struct {
	ID    int64
	Token int64
	// CancelBy is who asked that the job's call be cancelled (see
	// cancel.go), "" when nobody did. It is not part of the claim: a map
	// of claims is keyed by Claim().
	CancelBy string
}

// Claim is the claim h names (its id and token), without the request.
func (h Held) Claim() Held { return Held{ID: h.ID, Token: h.Token} }

// JobsRenewLeases extends, in one statement, the lease of every job the
// owner holds, and returns which ones it still holds: a job missing from the
// answer was reclaimed and must not be worked on under its old token. Each
// job held says whether an operator asked that its call be cancelled.
func (s *Store) JobsRenewLeases(ctx context.Context, owner string, hold Hold) ([]Held, error) {
	q := `UPDATE {jobs} SET lease_until = {now+hold} {output id, token, cancel_requested_by}
WHERE owner = ? AND state = 'running' {returning id, token, cancel_requested_by}`
	if r, ok := s.d.(interface{ renewJobLeases() string }); ok {
		q = r.renewJobLeases()
	}
	q, args := s.statement(q), append(hold.args(), owner)
	if s.writesBack() {
		// The ids first (idsfirst.go), then the jobs the owner holds now.
		const held = "owner = ? AND state = 'running'"
		ids, err := keysOf(ctx, s, nil, "renew job leases", jobsByID, held, []any{owner})
		if err != nil || len(ids) == 0 {
			return nil, err
		}
		if _, err := updateKeys(ctx, s, nil, "renew job leases", jobsByID, "lease_until = {now+hold}", hold.args(), ids, held, []any{owner}); err != nil {
			return nil, err
		}
		q, args = s.statement(`SELECT id, token, cancel_requested_by FROM {jobs} WHERE `+held+` ORDER BY id`), []any{owner}
	}
	return queryAll(ctx, s, "renew job leases", q, args, func(r rowScanner) (Held, error) {
		var h Held
		var by sql.NullString
		err := r.Scan(&h.ID, &h.Token, &by)
		h.CancelBy = by.String
		return h, err
	})
}

// JobsReleaseOwned gives back, unrun, every job an owner still holds: at
// the end of a graceful stop, when no call of the owner is left, anything
// still held is a claim whose answer was lost.
// A job whose cancel was requested ends cancelled (releaseSet).
func (s *Store) JobsReleaseOwned(ctx context.Context, owner, reason string) (int64, error) {
	// On MySQL the ids first (idsfirst.go): the owner's rows are found
	// through the owner's index, and a result written beside the release
	// (by id) changes that index.
	return updateWhere(ctx, s, nil, "release jobs of a stopping node", jobsByID, s.releaseSet(), releaseArgs(reason),
		"owner = ? AND state = 'running'", []any{owner})
}
