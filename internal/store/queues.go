package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"
)

// Queues: every job belongs to one (jobs.queue). A queue is a name, not a
// row: it exists while jobs name it. The queues table holds only what is
// said about a queue (paused, by whom, since when); the queue_routes table
// maps endpoint prefixes to queues for the jobs enqueued without one.
//
// Invariants:
//   - A job of a paused queue is never claimed: every statement that moves
//     a job to running (the batch claim of every dialect, the start-now
//     insert) carries notPaused, and the count of due work (JobsLoad) does
//     too, so a paused backlog does not widen the rotation.
//   - A job's queue is resolved in the statement that writes it (queueOf),
//     by every door (the store's inserts and the database entry points):
//     the queue given, else the longest route prefix the endpoint starts
//     with, else DefaultQueue. Routes change nothing already written.

// DefaultQueue is the queue of a job that names none and matches no route.
const DefaultQueue = "default"

// ErrQueueHeld is returned by JobInsertClaimed for a job whose queue is
// paused, or managed (its jobs start only through JobsClaimManaged):
// nothing was written.
var ErrQueueHeld = errors.New("its queue is paused or limited")

// QueueRoute sends the jobs whose endpoint starts with Prefix, enqueued
// without a queue, to Queue.
type QueueRoute struct {
	Prefix string
	Queue  string
}

// QueueState is a queue as the operator sees it: what was said about it
// and its work now.
type QueueState struct {
	Name     string
	Paused   bool
	PausedBy string     // "" when not paused
	PausedAt *time.Time // database time; nil when not paused
	Waiting  int        // ready and due now (paused or not)
	Running  int
	// The queue's settings (QueueSettings), zero where none is set.
	Priority   int
	Limit      int
	NodeLimit  int
	Rate       int
	RatePeriod time.Duration
	// RateUsed is how many of its jobs started in the current rate window
	// (of the database clock); 0 without a rate.
	RateUsed int
}

// Limited is whether the queue has a limit on its running jobs or its
// starts.
func (q QueueState) Limited() bool { return q.Limit > 0 || q.NodeLimit > 0 || q.Rate > 0 }

// queueSettingsColumns are a queues row m's settings, as queueSettingsScan
// reads them: its priority, limits and rate, and the starts counted in
// the current rate window (a count of an earlier window is 0 now: the
// next managed claim rolls it).
func queueSettingsColumns() string {
	return `COALESCE(m.priority, 0), m.max_running, m.max_per_node, m.rate_limit, m.rate_period_ms,
  CASE WHEN m.rate_limit IS NOT NULL AND m.rate_window >= ` + rateWindow("m") + ` THEN m.rate_used ELSE 0 END`
}

// queueSettingsScan holds queueSettingsColumns as they are scanned.
type queueSettingsScan struct {
	maxRunning, maxPerNode, rate, periodMS sql.NullInt64
}

// dest are the scan destinations of queueSettingsColumns for qs.
func (v *queueSettingsScan) dest(qs *QueueState) []any {
	return []any{&qs.Priority, &v.maxRunning, &v.maxPerNode, &v.rate, &v.periodMS, &qs.RateUsed}
}

// set fills qs's settings from the scanned values.
func (v *queueSettingsScan) set(qs *QueueState) {
	qs.Limit, qs.NodeLimit = int(v.maxRunning.Int64), int(v.maxPerNode.Int64)
	if v.rate.Valid && v.periodMS.Int64 > 0 {
		qs.Rate, qs.RatePeriod = int(v.rate.Int64), time.Duration(v.periodMS.Int64)*time.Millisecond
	} else {
		qs.RateUsed = 0
	}
}

// notPaused is the condition that the queue of row alias j (a column
// named queue) is not paused: an anti-join on the queues table's primary
// key, one seek per row a claim looks at.
func notPaused(j string) string {
	return `NOT EXISTS (SELECT 1 FROM {queues} pq WHERE pq.name = ` + j + `.queue AND pq.paused = 1)`
}

// notHeld is the condition that the queue of row alias j is neither
// paused nor managed: the plain claim's and the start-now insert's, which
// leave a managed queue's jobs to JobsClaimManaged (limits.go).
func notHeld(j string) string {
	return `NOT EXISTS (SELECT 1 FROM {queues} pq WHERE pq.name = ` + j + `.queue AND (pq.paused = 1 OR pq.managed = 1))`
}

// queueOf is the SQL expression of a new job's queue, with three
// parameters (queueArgs): the queue given (NULL for none), and the
// endpoint twice, for the longest route prefix it starts with. Two
// matching prefixes of one length are the same prefix, the table's key,
// so the subquery returns at most one row in every dialect without a
// row limit.
func (s *Store) queueOf() string {
	p := s.d.TextParam()
	return `COALESCE(?, (SELECT qr.queue FROM {queue_routes} qr
    WHERE qr.prefix = SUBSTRING(` + p + `, 1, qr.prefix_len)
      AND qr.prefix_len = (SELECT MAX(qm.prefix_len) FROM {queue_routes} qm WHERE qm.prefix = SUBSTRING(` + p + `, 1, qm.prefix_len))),
  '` + DefaultQueue + `')`
}

// queueArgs are queueOf's parameters for j.
func queueArgs(j NewJob) []any {
	return []any{nullString(j.Queue), j.Endpoint, j.Endpoint}
}

// QueueRoutesPut replaces every route with routes, in one transaction: a
// node writes its config's routes at start. Prefixes must be distinct.
// Jobs already written keep their queue.
func (s *Store) QueueRoutesPut(ctx context.Context, routes []QueueRoute) error {
	del := s.statement(`DELETE FROM {queue_routes}`)
	ins := s.statement(`INSERT INTO {queue_routes} (prefix, prefix_len, queue) VALUES (?, ?, ?)`)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := s.txExec(ctx, tx, del); err != nil {
			return err
		}
		for _, r := range routes {
			if _, err := s.txExec(ctx, tx, ins, r.Prefix, utf8.RuneCountInString(r.Prefix), r.Queue); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write %d queue routes: %w", len(routes), err)
	}
	return nil
}

// QueueRoutes lists the routes, longest prefix first.
func (s *Store) QueueRoutes(ctx context.Context) ([]QueueRoute, error) {
	q := s.statement(`SELECT prefix, queue FROM {queue_routes} ORDER BY prefix_len DESC, prefix`)
	return queryAll(ctx, s, "list queue routes", q, nil, func(r rowScanner) (QueueRoute, error) {
		var qr QueueRoute
		return qr, r.Scan(&qr.Prefix, &qr.Queue)
	})
}

// QueuePause pauses (paused true) or resumes a queue, recording the actor
// and the database time of a pause. A queue no job names yet may be
// paused: jobs enqueued to it later wait. A running job is not touched: a
// pause stops new starts only.
func (s *Store) QueuePause(ctx context.Context, name, actor string, paused bool) error {
	what, set, values, args := "resume", `paused = 0, paused_by = NULL, paused_at = NULL`, `0, NULL, NULL`, []any{}
	if paused {
		what, set, values, args = "pause", `paused = 1, paused_by = ?, paused_at = {now}`, `1, ?, {now}`, []any{nullString(actor)}
	}
	upd := s.statement(`UPDATE {queues} SET ` + set + ` WHERE name = ?`)
	ins := s.statement(`INSERT INTO {queues} (name, paused, paused_by, paused_at)
SELECT ?, ` + values + ` WHERE NOT EXISTS (SELECT 1 FROM {queues} WHERE name = ?)`)
	updArgs := append(slices.Clone(args), name)
	insArgs := append(append([]any{name}, args...), name)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		n, err := s.txExec(ctx, tx, upd, updArgs...)
		if err != nil || n > 0 {
			return err
		}
		_, err = s.txExec(ctx, tx, ins, insArgs...)
		return err
	})
	if err != nil && s.drv.UniqueViolation(err) {
		// Another caller wrote the queue's first row between our UPDATE
		// and INSERT: the row exists now, and this call's word is the last.
		_, err = s.exec(ctx, upd, updArgs...)
	}
	if err != nil {
		return fmt.Errorf("%s queue %q: %w", what, name, err)
	}
	if !paused {
		s.noteDue(ctx) // the queue's due jobs may be claimed again
	}
	return nil
}

// Queues lists every queue that jobs waiting or running name, or that
// was paused or resumed or given settings, by name, with its waiting
// (ready and due) and running jobs and its settings.
//
// Its cost: one pass over the ready and running rows, grouped by queue;
// finished jobs are not read. On PostgreSQL at 1,000,000 jobs of which
// 100,000 ready or running: a bitmap scan of the index on (state, id) for
// the two states, the rows' queues read from the table by two parallel
// workers, a hash aggregate, a hash full join with the queues table:
// 134 ms. It grows with the ready and running rows (a backlog of a million
// ready jobs is read whole): it is an operator's and a scrape's read,
// never a turn's.
func (s *Store) Queues(ctx context.Context) ([]QueueState, error) {
	work := `(SELECT j.queue,
    SUM(CASE WHEN j.state = 'ready' AND j.run_at <= {now} THEN 1 ELSE 0 END) AS waiting,
    SUM(CASE WHEN j.state = 'running' THEN 1 ELSE 0 END) AS running
  FROM {jobs} j WHERE j.state IN ('ready', 'running') GROUP BY j.queue) AS w`
	from := work + "\nFULL OUTER JOIN {queues} m ON m.name = w.queue"
	if _, ok := s.d.(noFullJoin); ok {
		// Every name first, from both sides, then each side joined to it.
		from = `(SELECT name AS queue FROM {queues}
  UNION SELECT j.queue FROM {jobs} j WHERE j.state IN ('ready', 'running')) AS n
LEFT JOIN ` + work + ` ON w.queue = n.queue
LEFT JOIN {queues} m ON m.name = n.queue`
	}
	q := s.statement(`SELECT COALESCE(w.queue, m.name),
  COALESCE(m.paused, 0), m.paused_by, m.paused_at, COALESCE(w.waiting, 0), COALESCE(w.running, 0),
  ` + queueSettingsColumns() + `
FROM ` + from + `
ORDER BY 1`)
	return queryAll(ctx, s, "list queues", q, nil, func(r rowScanner) (QueueState, error) {
		var qs QueueState
		var paused int
		var by sql.NullString
		var at dbTime
		var set queueSettingsScan
		err := r.Scan(append([]any{&qs.Name, &paused, &by, &at, &qs.Waiting, &qs.Running}, set.dest(&qs)...)...)
		qs.Paused, qs.PausedBy, qs.PausedAt = paused == 1, by.String, at.ptr()
		set.set(&qs)
		return qs, err
	})
}

// noFullJoin is a dialect without FULL OUTER JOIN (MySQL): Queues joins
// the queues' names from both sides to each side instead.
type noFullJoin interface{ noFullJoin() }

// QueuesHeld lists the queues that are paused or have settings (a
// priority, limits or a rate), by name, with their settings and without
// their work: a read of the queues table alone (a few rows), for the
// farm's status and a scrape past the job counts' cap.
func (s *Store) QueuesHeld(ctx context.Context) ([]QueueState, error) {
	q := s.statement(`SELECT m.name, m.paused, m.paused_by, m.paused_at, ` + queueSettingsColumns() + `
FROM {queues} m WHERE m.paused = 1 OR m.managed = 1 ORDER BY m.name`)
	return queryAll(ctx, s, "list paused and limited queues", q, nil, func(r rowScanner) (QueueState, error) {
		var qs QueueState
		var paused int
		var by sql.NullString
		var at dbTime
		var set queueSettingsScan
		err := r.Scan(append([]any{&qs.Name, &paused, &by, &at}, set.dest(&qs)...)...)
		qs.Paused, qs.PausedBy, qs.PausedAt = paused == 1, by.String, at.ptr()
		set.set(&qs)
		return qs, err
	})
}

// QueuesPaused lists the paused queues, by name, without their work: a
// read of the queues table alone (a few rows), for the farm's status.
func (s *Store) QueuesPaused(ctx context.Context) ([]QueueState, error) {
	q := s.statement(`SELECT name, paused_by, paused_at FROM {queues} WHERE paused = 1 ORDER BY name`)
	return queryAll(ctx, s, "list paused queues", q, nil, func(r rowScanner) (QueueState, error) {
		qs := QueueState{Paused: true}
		var by sql.NullString
		var at dbTime
		err := r.Scan(&qs.Name, &by, &at)
		qs.PausedBy, qs.PausedAt = by.String, at.ptr()
		return qs, err
	})
}

// QueueWork counts one queue's running jobs and its waiting ones (ready
// and due), each at most cap: two seeks on the queue's indexes, for the
// farm's status, whatever the table's size.
func (s *Store) QueueWork(ctx context.Context, name string, cap int) (running, waiting int, err error) {
	run, runArgs := rowLimit(s.d, `SELECT 1 FROM {jobs} WHERE queue = ? AND state = 'running'`, []any{name}, cap)
	wait, waitArgs := rowLimit(s.d, `SELECT 1 FROM {jobs} WHERE queue = ? AND state = 'ready' AND run_at <= {now}`, []any{name}, cap)
	q := s.statement(`SELECT (SELECT COUNT(*) FROM (` + run + `) r), (SELECT COUNT(*) FROM (` + wait + `) w)`)
	err = s.retry(ctx, func() error {
		return s.queryRow(ctx, q, append(runArgs, waitArgs...)...).Scan(&running, &waiting)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("count the work of queue %q: %w", name, err)
	}
	return running, waiting, nil
}
