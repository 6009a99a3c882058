package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Misfire policies and overlap rules of a schedule.
const (
	MisfireOnce    = "once" // after an outage the latest missed occurrence runs once
	MisfireSkip    = "skip" // missed occurrences are recorded as missed
	MisfireAll     = "all"  // every missed occurrence runs
	OverlapForbid  = "forbid"
	OverlapAllow   = "allow"
	SourceConfig   = "config"
	SourceCommand  = "cli"
	scheduleFields = `every_ms, cron, time_zone, endpoint, method, payload, timeout_ms, max_attempts, tolerance_ms, misfire, overlap`
)

// Schedule is a recurring schedule's definition and progress.
type Schedule struct {
	Name        string
	Every       time.Duration
	Cron        string
	TimeZone    string
	Endpoint    string
	Method      string
	Payload     []byte
	Timeout     time.Duration
	MaxAttempts int
	Tolerance   time.Duration
	Misfire     string
	Overlap     string
	Enabled     bool
	Source      string

	NextFireAt *time.Time // the first occurrence not yet materialized
	Missed     int64      // occurrences skipped by the misfire policy
	LastFireAt *time.Time
	Version    int64 // bumped by every change; guards concurrent advances
}

func (s *Store) scheduleArgs(sc Schedule) []any {
	return []any{millis(sc.Every), sc.Cron, sc.TimeZone, sc.Endpoint, sc.Method, sc.Payload, millis(sc.Timeout),
		sc.MaxAttempts, millis(sc.Tolerance), sc.Misfire, sc.Overlap}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ScheduleInsert adds a schedule whose first occurrence is next.
func (s *Store) ScheduleInsert(ctx context.Context, sc Schedule, next time.Time) error {
	q := s.statement(`INSERT INTO {schedules} (name, ` + scheduleFields + `, enabled, next_fire_at, missed, version, source, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?, {now}, {now})`)
	args := append([]any{sc.Name}, s.scheduleArgs(sc)...)
	args = append(args, boolInt(sc.Enabled), s.d.TimeArg(next), sc.Source)
	err := s.retry(ctx, func() error { _, err := s.exec(ctx, q, args...); return err })
	if err != nil && s.drv.UniqueViolation(err) {
		return fmt.Errorf("add schedule: a schedule named %q %w", sc.Name, ErrDuplicate)
	}
	if err != nil {
		return fmt.Errorf("add schedule %q: %w", sc.Name, err)
	}
	return nil
}

// ScheduleUpdate rewrites a schedule's definition; a non-nil next moves its
// next occurrence (when the timing changed).
func (s *Store) ScheduleUpdate(ctx context.Context, sc Schedule, next *time.Time) (bool, error) {
	q := `UPDATE {schedules} SET every_ms = ?, cron = ?, time_zone = ?, endpoint = ?, method = ?, payload = ?,
  timeout_ms = ?, max_attempts = ?, tolerance_ms = ?, misfire = ?, overlap = ?, enabled = ?, source = ?,
  version = version + 1, updated_at = {now}`
	args := append(s.scheduleArgs(sc), boolInt(sc.Enabled), sc.Source)
	if next != nil {
		q += `, next_fire_at = ?`
		args = append(args, s.d.TimeArg(*next))
	}
	args = append(args, sc.Name)
	return s.fenced(ctx, "update schedule "+strconv.Quote(sc.Name), s.statement(q+` WHERE name = ?`), args...)
}

const scheduleColumns = `name, ` + scheduleFields + `, enabled, source, next_fire_at, missed, last_fire_at, version`

// scanSchedule reads a row of scheduleColumns; extra receives any columns
// selected after them.
func scanSchedule(sc rowScanner, extra ...any) (Schedule, error) {
	var r Schedule
	var everyMS, timeoutMS, toleranceMS int64
	var enabled int
	var next, last dbTime
	err := sc.Scan(append([]any{&r.Name, &everyMS, &r.Cron, &r.TimeZone, &r.Endpoint, &r.Method, &r.Payload, &timeoutMS,
		&r.MaxAttempts, &toleranceMS, &r.Misfire, &r.Overlap, &enabled, &r.Source, &next, &r.Missed, &last, &r.Version}, extra...)...)
	r.Every, r.Timeout, r.Tolerance = time.Duration(everyMS)*time.Millisecond, time.Duration(timeoutMS)*time.Millisecond, time.Duration(toleranceMS)*time.Millisecond
	r.Enabled, r.NextFireAt, r.LastFireAt = enabled == 1, next.ptr(), last.ptr()
	return r, err
}

// ScheduleGet reads one schedule.
func (s *Store) ScheduleGet(ctx context.Context, name string) (Schedule, error) {
	r, err := scanSchedule(s.queryRow(ctx, s.statement(`SELECT `+scheduleColumns+` FROM {schedules} WHERE name = ?`), name))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("schedule %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("read schedule %q: %w", name, err)
	}
	return r, nil
}

func (s *Store) schedules(ctx context.Context, what, where string, args ...any) ([]Schedule, time.Time, error) {
	q := s.statement(`SELECT ` + scheduleColumns + `, {now} FROM {schedules} ` + where + ` ORDER BY name`)
	var now dbTime
	out, err := queryAll(ctx, s, what, q, args, func(r rowScanner) (Schedule, error) { return scanSchedule(r, &now) })
	if err != nil {
		return nil, time.Time{}, err
	}
	// With no rows there is no database time either; callers need it only
	// for the schedules they got.
	return out, now.T, nil
}

// Schedules reads every schedule and the database time (zero when there
// are none).
func (s *Store) Schedules(ctx context.Context) ([]Schedule, time.Time, error) {
	return s.schedules(ctx, "read schedules", "")
}

// SchedulesDue reads the enabled schedules whose next occurrence falls
// before now+lookahead on the database clock, and the database time.
func (s *Store) SchedulesDue(ctx context.Context, lookahead time.Duration) ([]Schedule, time.Time, error) {
	return s.schedules(ctx, "read due schedules", `WHERE enabled = 1 AND next_fire_at <= {now+?}`, millis(lookahead))
}

// ScheduleMaterialize writes a schedule's occurrences (jobs under their
// unique keys) and moves the schedule past them, if nobody changed it since
// it was read (version) and it is still enabled. It reports how many
// occurrences it wrote and whether it advanced the schedule; when it did
// not, it wrote nothing.
//
// It is one transaction that begins with the advance: the update locks the
// schedule's row, so a removal or pause either waits for the occurrences to
// be written (and a removal then cancels them), or goes first and leaves
// the fenced advance nothing to update, and nothing is written. Checking
// the schedule in the insert itself would not do: under read committed the
// insert's snapshot can predate a removal whose cancel then misses the row.
// Two slot owners racing cannot both advance it; an occurrence that exists
// already (a changed grid landing on a written one) is not written again.
func (s *Store) ScheduleMaterialize(ctx context.Context, name string, version int64, occurrences []NewJob,
	next time.Time, lastFire *time.Time, missed int64) (int, bool, error) {
	// No NULL parameter for a missing last fire time: an untyped NULL is
	// refused by Babelfish.
	advance := `UPDATE {schedules} SET next_fire_at = ?, missed = missed + ?, version = version + 1`
	args := []any{s.d.TimeArg(next), missed}
	if lastFire != nil {
		advance += `, last_fire_at = ?`
		args = append(args, s.d.TimeArg(*lastFire))
	}
	advance = s.statement(advance + ` WHERE name = ? AND version = ? AND enabled = 1`)
	args = append(args, name, version)
	created, advanced := 0, false
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		created, advanced = 0, false
		n, err := s.txExec(ctx, tx, advance, args...)
		if err != nil || n == 0 {
			return err
		}
		advanced = true
		for _, j := range occurrences {
			values, args := s.jobValues(j)
			ins := s.statement(`INSERT INTO {jobs} (` + jobInsertColumns + `)
SELECT ` + values + ` WHERE NOT EXISTS (SELECT 1 FROM {jobs} WHERE unique_key = ?)`)
			n, err := s.txExec(ctx, tx, ins, append(args, j.UniqueKey)...)
			if err != nil {
				return err
			}
			created += int(n)
		}
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("write occurrences of schedule %q: %w", name, err)
	}
	return created, advanced, nil
}

// inTx runs fn in a transaction, all of it again on a transient conflict;
// in the caller's transaction when the store is in one (WithTx).
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	if tx, ok := s.db.(*sql.Tx); ok && s.callerTx {
		// A store in the caller's transaction sends every statement there:
		// the caller commits, and retries the whole of it if it must.
		return fn(tx)
	}
	return s.retry(ctx, func() error {
		tx, err := s.pool.BeginTx(ctx, s.txOptions())
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := fn(tx); err != nil {
			return err
		}
		return tx.Commit()
	})
}

// txExec runs a write in a transaction and returns how many rows it changed.
func (s *Store) txExec(ctx context.Context, tx *sql.Tx, q string, args ...any) (int64, error) {
	s.stmts.Add(1)
	res, err := tx.ExecContext(ctx, q, s.args(args)...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// ScheduleSetEnabled pauses or resumes a schedule; resuming starts again at
// next, the first occurrence after now (a pause is not a misfire).
func (s *Store) ScheduleSetEnabled(ctx context.Context, name string, enabled bool, next *time.Time) (bool, error) {
	q := `UPDATE {schedules} SET enabled = ?, version = version + 1, updated_at = {now}`
	args := []any{boolInt(enabled)}
	if next != nil {
		q += `, next_fire_at = ?`
		args = append(args, s.d.TimeArg(*next))
	}
	args = append(args, name)
	return s.fenced(ctx, "pause or resume schedule "+strconv.Quote(name), s.statement(q+` WHERE name = ?`), args...)
}

// ScheduleTrigger writes one extra occurrence of a schedule (j, under its
// own unique key) and returns its id, in one transaction that first locks
// the schedule's row: a removal either waits for it and cancels it, or
// goes first and the trigger writes nothing (ErrNotFound). The lock is an
// update of updated_at alone, so a materializer's fenced advance (by
// version) is not disturbed.
func (s *Store) ScheduleTrigger(ctx context.Context, name string, j NewJob) (int64, error) {
	lock := s.statement(`UPDATE {schedules} SET updated_at = {now} WHERE name = ?`)
	var id int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		n, err := s.txExec(ctx, tx, lock, name)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("schedule %q: %w", name, ErrNotFound)
		}
		id, err = s.WithTx(tx).JobInsert(ctx, j)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("trigger schedule %q now: %w", name, err)
	}
	return id, nil
}

// ScheduleDelete removes a schedule and cancels its occurrences that have
// not started, in one transaction. The removal waits for a materializer
// writing the schedule's occurrences (ScheduleMaterialize holds its row),
// so the cancel sees what it wrote; a materializer that comes after finds
// no schedule to advance and writes nothing. A cancelled occurrence gives
// up its unique key: the same schedule added again must get its own
// occurrence at that fire time. On MySQL the occurrences' ids are read
// first, then written by primary key (idsfirst.go): through the
// schedule's index, the cancel would lock the index's entries before the
// rows, the order opposite to a claim of the same occurrences.
func (s *Store) ScheduleDelete(ctx context.Context, name string) (bool, error) {
	del := s.statement(`DELETE FROM {schedules} WHERE name = ?`)
	deleted := false
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		n, err := s.txExec(ctx, tx, del, name)
		if err != nil {
			return err
		}
		deleted = n == 1
		_, err = updateWhere(ctx, s, tx, "cancel the occurrences", jobsByID,
			"state = 'cancelled', finished_at = {now}, last_error = ?, unique_key = NULL", []any{"cancelled: its schedule was removed"},
			"schedule = ? AND state = 'ready'", []any{name})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("remove schedule %q and cancel its occurrences: %w", name, err)
	}
	return deleted, nil
}

// ScheduleOutcome is what became of a schedule's occurrences.
type ScheduleOutcome struct {
	LastState   string // of the latest occurrence that is no longer waiting
	LastStatus  int
	LastError   string
	MissedJobs  int64 // occurrences that were materialized but not started in time
	Occurrences int64
}

// ScheduleOutcomes reads what became of every schedule's occurrences, by
// schedule name (a schedule without occurrences is absent): two
// statements whatever the number of schedules, so that a dashboard
// refreshing its schedules page costs the same with 3 schedules or 300.
func (s *Store) ScheduleOutcomes(ctx context.Context) (map[string]ScheduleOutcome, error) {
	type tally struct {
		name           string
		missed, occurs int64
	}
	counts := s.statement(`SELECT schedule, SUM(CASE WHEN state = 'missed' THEN 1 ELSE 0 END), COUNT(*)
FROM {jobs} WHERE schedule IS NOT NULL GROUP BY schedule`)
	tallies, err := queryAll(ctx, s, "read the occurrences of the schedules", counts, nil, func(r rowScanner) (tally, error) {
		var t tally
		return t, r.Scan(&t.name, &t.missed, &t.occurs)
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]ScheduleOutcome, len(tallies))
	for _, t := range tallies {
		out[t.name] = ScheduleOutcome{MissedJobs: t.missed, Occurrences: t.occurs}
	}
	// The latest occurrence no longer waiting, per schedule; of two with
	// the same fire time (a trigger beside a regular one), the newer job.
	last := s.statement(`SELECT j.schedule, j.state, j.last_status, j.last_error FROM {jobs} j
JOIN (SELECT schedule, MAX(scheduled_for) AS fire FROM {jobs}
  WHERE schedule IS NOT NULL AND state NOT IN ('ready', 'running') GROUP BY schedule) m
  ON j.schedule = m.schedule AND j.scheduled_for = m.fire
ORDER BY j.id DESC`)
	type result struct {
		name, state string
		status      sql.NullInt64
		errText     sql.NullString
	}
	results, err := queryAll(ctx, s, "read the last occurrences of the schedules", last, nil, func(r rowScanner) (result, error) {
		var x result
		return x, r.Scan(&x.name, &x.state, &x.status, &x.errText)
	})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, x := range results {
		if seen[x.name] {
			continue
		}
		seen[x.name] = true
		o := out[x.name]
		o.LastState, o.LastStatus, o.LastError = x.state, int(x.status.Int64), x.errText.String
		out[x.name] = o
	}
	return out, nil
}
