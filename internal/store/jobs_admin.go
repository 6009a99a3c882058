package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// JobGet reads one job with its history.
func (s *Store) JobGet(ctx context.Context, id int64) (Job, error) {
	var history, cancelBy sql.NullString
	var cancelAt shownTime
	row := s.queryRow(ctx, s.statement(`SELECT `+jobColumns+`, history, cancel_requested_by, cancel_requested_at FROM {jobs} WHERE id = ?`), id)
	j, err := scanJob(scanExtra{row, []any{&history, &cancelBy, &cancelAt}})
	if errors.Is(err, sql.ErrNoRows) {
		return j, fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return j, fmt.Errorf("read job %d: %w", id, err)
	}
	j.History = parseHistory(history.String)
	j.CancelRequestedBy, j.CancelRequestedAt = cancelBy.String, cancelAt.ptr()
	return j, nil
}

// scanExtra scans a row's job columns and then extra ones.
type scanExtra struct {
	r     rowScanner
	extra []any
}

func (x scanExtra) Scan(dest ...any) error { return x.r.Scan(append(dest, x.extra...)...) }

// JobFilter selects jobs for JobsList and JobsRetry. Zero fields select
// everything.
type JobFilter struct {
	ID       int64    // one job
	States   []string // any of these states
	Retrying bool     // only jobs that have had an attempt (with States ready: backing off after a failure)
	// EndpointPrefix: the endpoint starts with it.
	EndpointPrefix string
	// Since: created within this long before the database's now.
	Since time.Duration
	// Until: created at least this long before the database's now (the
	// upper end of a time range whose lower end is Since).
	Until time.Duration
	// Before: only ids below it (keyset paging, newest first).
	Before int64
	Limit  int // required by JobsList and JobsRetry
}

// where returns the conditions of the filter, for alias-free job rows,
// and their arguments.
func (f JobFilter) where() (string, []any) {
	conds := []string{"1 = 1"}
	var args []any
	if f.ID != 0 {
		conds, args = append(conds, "id = ?"), append(args, f.ID)
	}
	if f.Retrying && slices.Equal(f.States, []string{StateReady}) {
		// The jobs backing off after a failure, in the words of the
		// partial index on them (migration 5): a filter made of
		// parameters would not match it in a plan made for any value.
		conds = append(conds, "state = '"+StateReady+"' AND attempt > 0")
	} else {
		if len(f.States) > 0 {
			conds = append(conds, "state IN (?"+strings.Repeat(", ?", len(f.States)-1)+")")
			for _, st := range f.States {
				args = append(args, st)
			}
		}
		if f.Retrying {
			conds = append(conds, "attempt > 0")
		}
	}
	if f.EndpointPrefix != "" {
		// A range of the index on the endpoint finds the candidates
		// (prefixRange); SUBSTRING, not LIKE, decides: a prefix is
		// compared as it is, with no wildcard to escape.
		if lo, hi, ok := prefixRange(f.EndpointPrefix); ok {
			conds, args = append(conds, "{endpoint_key} >= ? AND {endpoint_key} < ?"), append(args, lo, hi)
		}
		conds = append(conds, "SUBSTRING(endpoint, 1, ?) = ?")
		args = append(args, utf8.RuneCountInString(f.EndpointPrefix), f.EndpointPrefix)
	}
	// The time bounds are read once per statement ({seeknow+?}), so that
	// the index on created_at seeks on them.
	if c, a := f.window(); c != "" {
		conds, args = append(conds, c), append(args, a...)
	}
	if f.Before > 0 {
		conds, args = append(conds, "id < ?"), append(args, f.Before)
	}
	return strings.Join(conds, " AND "), args
}

// window returns the conditions of the filter's time window on created_at
// and their arguments: "" without one.
func (f JobFilter) window() (string, []any) {
	var conds []string
	var args []any
	if f.Since > 0 {
		conds, args = append(conds, "created_at >= {seeknow+?}"), append(args, seekOffset(-millis(f.Since)))
	}
	if f.Until > 0 {
		conds, args = append(conds, "created_at < {seeknow+?}"), append(args, seekOffset(-millis(f.Until)))
	}
	return strings.Join(conds, " AND "), args
}

// maxPrefixRange is the most characters of an endpoint prefix that its
// range bounds: fewer than the 400 of SQL Server's endpoint_head.
const maxPrefixRange = 200

// prefixRange returns bounds lo <= e < hi that every endpoint e starting
// with prefix satisfies in binary order, the order of the endpoint's
// index on every database (UTF-8 bytes, code points, UTF-16 units: they
// agree on ASCII). They are made of prefix's leading ASCII characters (at
// most maxPrefixRange), hi with the last one the next character; without
// such a character there is no range (ok false) and only SUBSTRING
// decides. The range narrows the candidates only: SUBSTRING stays exact.
func prefixRange(prefix string) (lo, hi string, ok bool) {
	n := 0
	for n < len(prefix) && n < maxPrefixRange && prefix[n] < utf8.RuneSelf-1 {
		n++ // up to DEL (0x7f) excluded: the last character must have a successor
	}
	if n == 0 {
		return "", "", false
	}
	lo = prefix[:n]
	return lo, lo[:n-1] + string(lo[n-1]+1), true
}

// rowLimit puts the dialect's row limit into q, which starts with
// "SELECT ", and n among args where its placeholder falls.
func rowLimit(d Dialect, q string, args []any, n int) (string, []any) {
	top, limit := d.RowLimit()
	if top != "" {
		return "SELECT " + top + " " + strings.TrimPrefix(q, "SELECT "), append([]any{n}, args...)
	}
	return q + " " + limit, append(args, n)
}

// JobsList reads up to f.Limit jobs, newest first, without their history.
func (s *Store) JobsList(ctx context.Context, f JobFilter) ([]Job, error) {
	if f.Limit <= 0 {
		return nil, errors.New("list jobs: a limit is required")
	}
	q, args, err := s.listStatement(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return queryAll(ctx, s, "list jobs", q, args, scanJob)
}

// listStatement is JobsList's statement and its arguments, planned for
// them on every call: which plan is best depends on the filter's values.
func (s *Store) listStatement(ctx context.Context, f JobFilter) (string, []any, error) {
	q, args, err := s.newest(ctx, jobColumns, f, f.Limit)
	if err != nil {
		return "", nil, err
	}
	if args, err = s.seekArgs(ctx, args); err != nil {
		return "", nil, err
	}
	q, args = s.planPerCall(s.statement(q), args)
	return q, args, nil
}

// newest is the SELECT of cols of up to limit jobs f selects, newest
// first, and its arguments: one plain statement, or for a prefix where the
// dialect walks the newest jobs first (prefixWalk) the walk and the
// prefix's range, whose bound it reads first. Where the dialect reads a
// time window by its size (timeWindow), it counts the window's rows
// first: a small window is read by the index on created_at, a large one
// by a walk of the ids (by the prefix walk with a prefix).
func (s *Store) newest(ctx context.Context, cols string, f JobFilter, limit int) (string, []any, error) {
	where, args := f.where()
	p, walks := s.d.(prefixWalk)
	lo, hi, ranged := prefixRange(f.EndpointPrefix)
	from := "{jobs}"
	if w, ok := s.d.(timeWindow); ok && f.ID == 0 {
		if conds, _ := f.window(); conds != "" {
			// The bounds are read once, for the count and the read: they
			// are where's only offsets from the database's time.
			var at []int
			for i, a := range args {
				if _, ok := a.(seekOffset); ok {
					at = append(at, i)
				}
			}
			var err error
			if args, err = s.seekArgs(ctx, args); err != nil {
				return "", nil, err
			}
			var wargs []any
			for _, i := range at {
				wargs = append(wargs, args[i])
			}
			capped := timeWindowRows
			if s.windowRows > 0 {
				capped = s.windowRows
			}
			var held int
			if err := s.queryRow(ctx, s.statement(w.WindowCount(conds)), append(wargs, capped)...).Scan(&held); err != nil {
				return "", nil, fmt.Errorf("count the time window's jobs: %w", err)
			}
			switch {
			case held < capped:
				walks, from = false, w.WindowByIndex()
			case len(f.States) > 0 && !f.Retrying:
				// A state's rows, newest first, through its index: a
				// rare state in a large window would otherwise walk the
				// whole window. The window stays a filter, kept off its
				// index by the unary +.
				where = strings.Replace(where, "created_at ", "+created_at ", 2)
			default:
				from = w.WindowByWalk()
			}
		}
	}
	if b, ok := s.d.(byState); ok && from == "{jobs}" && len(f.States) == 1 && f.ID == 0 {
		from = b.ByState()
	}
	if !walks || f.EndpointPrefix == "" || !ranged {
		q, args := rowLimit(s.d, `SELECT `+cols+` FROM `+from+` WHERE `+where+` ORDER BY id DESC`, args, limit)
		return q, args, nil
	}
	before := f.Before
	if before <= 0 {
		before = math.MaxInt64
	}
	// The walk goes prefixWalkRows below the newest id under the cursor,
	// unless the range holds fewer rows than the page: then the range
	// alone is small, and read alone.
	var held int
	var newest sql.NullInt64
	err := s.queryRow(ctx, s.statement(p.PrefixWalkBound()), lo, hi, limit, before).Scan(&held, &newest)
	if err != nil {
		return "", nil, fmt.Errorf("read the newest jobs' bound: %w", err)
	}
	bound, walk := newest.Int64-prefixWalkRows, limit // NULL: no row below the cursor, nothing to read
	if held < limit {
		bound, walk = newest.Int64, 0
	}
	retrying := f.Retrying && slices.Equal(f.States, []string{StateReady})
	q := p.NewestByPrefix(cols, where, retrying)
	var out []any
	out = append(append(append(out, args...), bound), walk)               // the walk
	out = append(append(out, args...), bound)                             // the older rows
	out = append(append(append(out, args...), bound), walk, limit, limit) // the walk counted, the older rows' limit
	return q, append(out, limit), nil
}

// noTime is a NULL of a time column's type, for the start of an operator's
// action (a bare NULL has no type for PostgreSQL's functions to pick by).
const noTime = "NULLIF(started_at, started_at)"

// Actor names who acted on a job in its history: an operator's command or
// an application.
const maxActor = 200

// JobCancelIfWaiting cancels a job that waits (ready, backing off after a
// failure included). It reports false when the job is not ready.
func (s *Store) JobCancelIfWaiting(ctx context.Context, id int64, actor string) (bool, error) {
	q := s.statement(`UPDATE {jobs} SET state = 'cancelled', finished_at = {now}, start_by = NULL,
  history = ` + historyLine(s.d, s.d.TextParam(), noTime, s.d.TextParam()) + `
WHERE id = ? AND state = 'ready'`)
	args := append([]any{"\t", cut(actor, maxActor)}, historySeps()[1:]...)
	args = append(args, historySuffix(StateCancelled, 0, ""), id)
	return s.fenced(ctx, fmt.Sprintf("cancel job %d", id), q, args...)
}

// RetryableStates are the states a job may be retried from.
var RetryableStates = []string{StateDead, StateFailed, StateCancelled, StateMissed}

// JobsRetry makes the finished jobs that f selects among RetryableStates
// (f.States narrows them) ready now, with a fresh attempt budget and the
// same idempotency key: a retry is the same logical run. It changes at
// most f.Limit jobs, newest first, and returns how many it changed.
func (s *Store) JobsRetry(ctx context.Context, f JobFilter, actor string) (int64, error) {
	n, err := s.jobsRetry(ctx, f, actor)
	if err == nil && n > 0 {
		s.noteDue(ctx) // retried jobs are due at once
	}
	return n, err
}

func (s *Store) jobsRetry(ctx context.Context, f JobFilter, actor string) (int64, error) {
	if f.Limit <= 0 {
		return 0, errors.New("retry jobs: a limit is required")
	}
	q, args, err := s.retryStatement(ctx, f, actor)
	if err != nil {
		return 0, fmt.Errorf("retry jobs: %w", err)
	}
	if q == "" {
		return 0, nil
	}
	if !s.writesBack() {
		return s.execCount(ctx, "retry jobs", q, args...)
	}
	ids, err := queryAll(ctx, s, "retry jobs: pick the jobs", q, args, func(r rowScanner) (int64, error) {
		var id int64
		return id, r.Scan(&id)
	})
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	slices.Sort(ids)
	q, args = s.retryWrite(byID, placeholders(len(ids)), int64Args(ids), retryStates(f), actor)
	return s.execCount(ctx, "retry jobs", q, args...)
}

// retryStates are the RetryableStates f selects.
func retryStates(f JobFilter) []string {
	var states []string
	for _, st := range RetryableStates {
		if len(f.States) == 0 || slices.Contains(f.States, st) {
			states = append(states, st)
		}
	}
	return states
}

// retryStatement is JobsRetry's statement and its arguments, planned for
// them on every call as a list is; "" when f selects no retryable state.
// On a dialect that writes back it is the pick alone, the ids newest
// first: MySQL would walk every job in a retryable state to match them
// against an IN of a derived table, so JobsRetry reads them first and
// writes them by primary key.
func (s *Store) retryStatement(ctx context.Context, f JobFilter, actor string) (string, []any, error) {
	f.States = retryStates(f)
	if len(f.States) == 0 {
		return "", nil, nil
	}
	pick, wargs, err := s.newest(ctx, "id", f, f.Limit)
	if err != nil {
		return "", nil, err
	}
	var q string
	var args []any
	if s.writesBack() {
		q, args = s.statement(pick), wargs
	} else {
		q, args = s.retryWrite("", pickedIDs(s.d, pick), wargs, f.States, actor)
	}
	if args, err = s.seekArgs(ctx, args); err != nil {
		return "", nil, err
	}
	q, args = s.planPerCall(q, args)
	return q, args, nil
}

// retryWrite is the UPDATE that makes the jobs ids selects (a pick, or a
// list of parameters, with idArgs) in one of states ready now, and its
// arguments. A retry is a fresh run: a cancel requested of an earlier run
// is void. The history first: it reads the attempt this write resets, and
// MySQL gives each assignment the columns as the earlier ones left them.
func (s *Store) retryWrite(hint, ids string, idArgs []any, states []string, actor string) (string, []any) {
	q := s.statement(`UPDATE {jobs}` + hint + ` SET history = ` + historyLine(s.d, s.d.TextParam(), noTime, s.d.TextParam()) + `,
  state = 'ready', run_at = {now}, attempt = 0, finished_at = NULL,
  start_by = NULL, owner = NULL, lease_until = NULL, cancel_requested_by = NULL, cancel_requested_at = NULL
WHERE id IN (` + ids + `) AND state IN (?` + strings.Repeat(", ?", len(states)-1) + `)`)
	args := append([]any{"\t", cut(actor, maxActor)}, historySeps()[1:]...)
	args = append(append(args, historySuffix(OutcomeRetried, 0, "")), idArgs...)
	return q, append(args, stateArgs(states)...)
}

func stateArgs(states []string) []any {
	out := make([]any, len(states))
	for i, st := range states {
		out[i] = st
	}
	return out
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// JobsByUniqueKey returns the ids of the jobs that hold any of keys.
func (s *Store) JobsByUniqueKey(ctx context.Context, keys []string) (map[string]int64, error) {
	out := map[string]int64{}
	for start := 0; start < len(keys); start += insertChunk {
		chunk := keys[start:min(len(keys), start+insertChunk)]
		args := make([]any, len(chunk))
		for i, k := range chunk {
			args[i] = k
		}
		q := s.statement(`SELECT unique_key, id FROM {jobs} WHERE unique_key IN (?` + strings.Repeat(", ?", len(chunk)-1) + `)`)
		type held struct {
			key string
			id  int64
		}
		rows, err := queryAll(ctx, s, "look up unique keys", q, args, func(r rowScanner) (held, error) {
			var h held
			return h, r.Scan(&h.key, &h.id)
		})
		if err != nil {
			return nil, err
		}
		for _, h := range rows {
			out[h.key] = h.id
		}
	}
	return out, nil
}

// insertChunk is how many jobs one INSERT writes: SQL Server takes at most
// 2,100 parameters in a statement and 1,000 rows in a VALUES list.
const insertChunk = 100

// JobInsertMany enqueues jobs in multi-row INSERTs of insertChunk rows,
// or fewer where the server's packet limit asks for it (insertBatches),
// all in one transaction (the caller's, with WithTx, or one of its own),
// and returns their ids in the order of jobs. A unique key taken makes
// the whole batch fail with ErrDuplicate; a payload over the server's
// packet limit, before anything is sent, with ErrPacketTooLarge.
func (s *Store) JobInsertMany(ctx context.Context, jobs []NewJob) ([]int64, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	what := fmt.Sprintf("enqueue %d jobs", len(jobs))
	batches, err := s.insertBatches(ctx, what, jobs)
	if err != nil {
		return nil, err
	}
	var ids []int64
	var failed insertBatch
	if s.callerTx {
		ids, err = s.insertAll(ctx, batches, &failed)
	} else {
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			var err error
			failed = insertBatch{} // of this attempt
			ids, err = s.WithTx(tx).insertAll(ctx, batches, &failed)
			return err
		})
	}
	if err != nil && failed.jobs != nil {
		// Explained once the transaction is over: its connection may be
		// the pool's only one.
		subject := fmt.Sprintf("the statement of jobs %d to %d", failed.first, failed.first+len(failed.jobs)-1)
		if len(failed.jobs) == 1 {
			subject = fmt.Sprintf("the statement of job %d", failed.first)
		}
		if perr := s.packetError(ctx, subject, failed.jobs, failed.bytes, err); errors.Is(perr, ErrPacketTooLarge) {
			return nil, fmt.Errorf("%s: %w", what, perr)
		}
	}
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// insertAll writes batches in order, in the store's transaction, and
// returns the jobs' ids; failed is the batch whose INSERT failed.
func (s *Store) insertAll(ctx context.Context, batches []insertBatch, failed *insertBatch) ([]int64, error) {
	var ids []int64
	for _, b := range batches {
		got, err := s.insertChunk(ctx, b.jobs)
		if err != nil {
			*failed = b
			return nil, err
		}
		ids = append(ids, got...)
	}
	return ids, nil
}

// insertChunk writes jobs in one INSERT. The rows it hands back carry
// their idempotency keys, which tie each id to its job: neither OUTPUT nor
// RETURNING promises the order of VALUES.
func (s *Store) insertChunk(ctx context.Context, jobs []NewJob) ([]int64, error) {
	var values []string
	var args []any
	for _, j := range jobs {
		v, a := s.jobValues(j)
		values, args = append(values, "("+v+")"), append(args, a...)
	}
	q := s.statement(`INSERT INTO {jobs} (` + jobInsertColumns + `) {output id, idem_key}
VALUES ` + strings.Join(values, ",\n  ") + ` {returning id, idem_key}`)
	type written struct {
		id  int64
		key string
	}
	scan := func(r rowScanner) (written, error) {
		var w written
		return w, r.Scan(&w.id, &w.key)
	}
	var rows []written
	var err error
	if s.writesBack() {
		// InnoDB gives the rows of one INSERT with a known row count
		// consecutive ids from the first, in every autoinc lock mode
		// (writesBack); this runs in a transaction (JobInsertMany). The
		// range is read by its bounds, not "from the first": a concurrent
		// enqueue's committed rows past it are not this batch's, and a
		// range that held any would fail the key check below, undone.
		var first int64
		if first, err = s.insertedID(ctx, q, args); err == nil {
			rows, err = queryAll(ctx, s, fmt.Sprintf("enqueue %d jobs", len(jobs)),
				s.statement(`SELECT id, idem_key FROM {jobs} WHERE id BETWEEN ? AND ?`), []any{first, first + int64(len(jobs)) - 1}, scan)
		}
	} else {
		rows, err = queryAll(ctx, s, fmt.Sprintf("enqueue %d jobs", len(jobs)), q, args, scan)
	}
	if err != nil {
		if s.drv.UniqueViolation(err) {
			return nil, fmt.Errorf("enqueue: a unique key of the batch %w", ErrDuplicate)
		}
		return nil, err
	}
	if len(rows) != len(jobs) {
		return nil, fmt.Errorf("enqueue %d jobs: the database reported %d rows written", len(jobs), len(rows))
	}
	// Jobs sharing a key get their ids in ascending order.
	byKey := map[string][]int64{}
	for _, w := range rows {
		byKey[w.key] = append(byKey[w.key], w.id)
	}
	for _, list := range byKey {
		slices.Sort(list)
	}
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		list := byKey[j.IdempotencyKey]
		if len(list) == 0 {
			return nil, fmt.Errorf("enqueue %d jobs: no id came back for job %d", len(jobs), i)
		}
		ids[i], byKey[j.IdempotencyKey] = list[0], list[1:]
	}
	return ids, nil
}
