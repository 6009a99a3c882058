package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Rows the node cannot run. A row may hold values that no door of
// slotpoller writes (an application or an operator wrote it directly, or it
// was corrupted): a time of infinity, a counter at its type's maximum, a
// column of the wrong type on SQLite. One such row must never stop the
// others, so:
//
//   - the claim cannot fail on a row: it bumps a token or an attempt only
//     below its type's maximum, and a claimed row is read column by column
//     in a form that cannot fail to scan (readClaim);
//   - a claimed row that cannot be represented is set aside at once, dead,
//     with last_error saying what is wrong ("cannot run: run_at is
//     -infinity"), by an UPDATE fenced by its owner (setAside), and the
//     other rows of the batch run;
//   - a row the invoker cannot send (an endpoint, method or header it
//     refuses) fails at its call, at once, with the invoker's reason.

// CannotRun starts the last_error of a row set aside because the node
// cannot run it.
const CannotRun = "cannot run: "

// Largest values of the counters: a claim bumps token (bigint) and attempt
// (int) only below them, and a row at one is set aside.
const (
	maxToken   = math.MaxInt64
	maxAttempt = math.MaxInt32
)

// maxTimeoutMS is the longest call timeout a row may carry (the invoker's
// 24 hours, the longest a hold covers).
const maxTimeoutMS = int64(MaxHeldTimeout / time.Millisecond)

// Time bounds of a row: years 1 to 9999, what every dialect and JSON
// represent.
var (
	minRowTime = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	maxRowTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

// claimRaw is a claimed row of claimedColumns as the driver gave it, every
// column but the id unconverted, so that reading it cannot fail.
type claimRaw struct {
	id                                               int64
	token, attempt, maxAttempts, endpoint, method    any
	payload, idemKey, timeoutMS, runAt, scheduledFor any
	queue, trace                                     any
}

// readClaim reads a row of claimedColumns. A row it can read but not use
// comes back with the reason, starting with CannotRun, and the claim as far
// as it could be read (its id always).
//
// A sound row is read as typed values (readSoundClaim); only one that is
// not is read again, every column as the driver gave it, for what is wrong
// with it: boxing every column of every row would cost a claim of
// thousands of rows allocations for nothing.
func readClaim(r rowScanner) (Claim, string, error) {
	if c, ok := readSoundClaim(r); ok {
		return c, "", nil
	}
	var raw claimRaw
	if err := r.Scan(&raw.id, &raw.token, &raw.attempt, &raw.maxAttempts, &raw.endpoint, &raw.method, &raw.payload,
		&raw.idemKey, &raw.timeoutMS, &raw.runAt, &raw.scheduledFor, &raw.queue, &raw.trace); err != nil {
		return Claim{}, "", err
	}
	c := Claim{ID: raw.id}
	var problems []string
	bad := func(p string) { problems = append(problems, p) }

	var ok bool
	if c.Token, ok = rawInt(raw.token); !ok {
		bad("token " + rawShown(raw.token) + " is not an integer")
	} else if c.Token >= maxToken {
		bad(fmt.Sprintf("token is at its maximum (%d); no claim can give it a new one", c.Token))
	} else if c.Token < 1 {
		bad(fmt.Sprintf("token %d is not positive", c.Token))
	}
	attempt, ok := rawInt(raw.attempt)
	maxAttempts, okMax := rawInt(raw.maxAttempts)
	switch {
	case !ok:
		bad("attempt " + rawShown(raw.attempt) + " is not an integer")
	case attempt >= maxAttempt:
		bad(fmt.Sprintf("attempt is at its maximum (%d)", attempt))
	case attempt < 1:
		bad(fmt.Sprintf("attempt %d is negative", attempt-1))
	case okMax && maxAttempts >= 1 && attempt > maxAttempts:
		bad(fmt.Sprintf("attempt %d is beyond max_attempts %d", attempt, maxAttempts))
	}
	c.Attempt = int(attempt)
	switch {
	case !okMax:
		bad("max_attempts " + rawShown(raw.maxAttempts) + " is not an integer")
	case maxAttempts < 1:
		bad(fmt.Sprintf("max_attempts %d is below 1", maxAttempts))
	case maxAttempts > maxAttempt:
		bad(fmt.Sprintf("max_attempts %d is out of range", maxAttempts))
	}
	c.MaxAttempts = int(maxAttempts)
	if c.Endpoint, ok = rawText(raw.endpoint); !ok {
		bad("endpoint " + rawShown(raw.endpoint) + " is not text")
	}
	if c.Method, ok = rawText(raw.method); !ok {
		bad("method " + rawShown(raw.method) + " is not text")
	}
	switch p := raw.payload.(type) {
	case nil:
	case []byte:
		c.Payload = p
	case string:
		c.Payload = []byte(p)
	default:
		bad("payload " + rawShown(raw.payload) + " is not bytes")
	}
	if c.IdempotencyKey, ok = rawText(raw.idemKey); !ok {
		bad("idem_key " + rawShown(raw.idemKey) + " is not text")
	}
	switch ms, ok := rawInt(raw.timeoutMS); {
	case !ok:
		bad("timeout_ms " + rawShown(raw.timeoutMS) + " is not an integer")
	case ms < 0:
		bad(fmt.Sprintf("timeout_ms %d is negative", ms))
	case ms > maxTimeoutMS:
		bad(fmt.Sprintf("timeout_ms %d is above 24 hours", ms))
	default:
		c.Timeout = time.Duration(ms) * time.Millisecond
	}
	if t, p := rawTime(raw.runAt); p != "" {
		bad("run_at " + p)
	} else if t == nil {
		bad("run_at is NULL")
	} else {
		c.RunAt = *t
	}
	if t, p := rawTime(raw.scheduledFor); p != "" {
		bad("scheduled_for " + p)
	} else {
		c.ScheduledFor = t
	}
	if c.Queue, ok = rawText(raw.queue); !ok {
		bad("queue " + rawShown(raw.queue) + " is not text")
	}
	// A trace parent is the job's context, not its work: one that is not
	// text is dropped, and the caller judges one that is (see Claim).
	c.Traceparent, _ = rawText(raw.trace)
	if len(problems) > 0 {
		return c, CannotRun + strings.Join(problems, "; "), nil
	}
	return c, "", nil
}

// readSoundClaim reads a row of claimedColumns as typed values, and
// reports whether it scanned and every value lies where readClaim's checks
// pass: a counter below its maximum, attempts within max_attempts, a
// timeout within a day, times strictly inside the years 1 to 9999 (dbTime
// clamps beyond them to a bound). Any other row is readClaim's to judge.
func readSoundClaim(r rowScanner) (Claim, bool) {
	var c Claim
	var token, attempt, maxAttempts, timeoutMS int64
	var runAt, scheduledFor dbTime
	var payload bytesOnly
	var trace sql.NullString
	if err := r.Scan(&c.ID, &token, &attempt, &maxAttempts, &c.Endpoint, &c.Method, &payload,
		&c.IdempotencyKey, &timeoutMS, &runAt, &scheduledFor, &c.Queue, &trace); err != nil {
		return c, false
	}
	c.Payload, c.Traceparent = payload, trace.String
	// In whole milliseconds: SQLite's times are, and dbTime clamps them.
	inside := func(t dbTime) bool {
		ms := t.T.UnixMilli()
		return ms > minRowTime.UnixMilli() && ms < maxRowTime.UnixMilli()
	}
	sound := token >= 1 && token < maxToken && attempt >= 1 && attempt < maxAttempt &&
		maxAttempts >= 1 && maxAttempts <= maxAttempt && attempt <= maxAttempts &&
		timeoutMS >= 0 && timeoutMS <= maxTimeoutMS &&
		runAt.Valid && inside(runAt) && (!scheduledFor.Valid || inside(scheduledFor))
	if !sound {
		return c, false
	}
	c.Token, c.Attempt, c.MaxAttempts = token, int(attempt), int(maxAttempts)
	c.Timeout, c.RunAt, c.ScheduledFor = time.Duration(timeoutMS)*time.Millisecond, runAt.T, scheduledFor.ptr()
	return c, true
}

// bytesOnly scans a payload that is bytes, text or NULL, and refuses
// anything else (a number, on SQLite), which readClaim then judges.
type bytesOnly []byte

func (b *bytesOnly) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		*b = nil
	case []byte:
		*b = append([]byte(nil), x...)
	case string:
		*b = []byte(x)
	default:
		return fmt.Errorf("payload %T is not bytes", v)
	}
	return nil
}

// rawInt is an integer column's value, if it is an integer.
func rawInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case int:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint8:
		return int64(x), true
	}
	return 0, false
}

// rawText is a text column's value, if it is text.
func rawText(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	}
	return "", false
}

// rawShown is a value for a message: quoted and cut short.
func rawShown(v any) string {
	s := fmt.Sprint(v)
	switch x := v.(type) {
	case nil:
		return "NULL"
	case []byte:
		s = string(x)
	}
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return strconv.Quote(s)
}

// rawTime is a time column's value (nil for NULL), or what is wrong with
// it: infinity, out of the years 1 to 9999, or not a time at all.
func rawTime(v any) (*time.Time, string) {
	var t time.Time
	switch x := v.(type) {
	case nil:
		return nil, ""
	case time.Time:
		t = x.UTC()
	case int64:
		if x < minRowTime.UnixMilli() || x > maxRowTime.UnixMilli() {
			return nil, fmt.Sprintf("%d is out of range (Unix milliseconds of the years 1 to 9999)", x)
		}
		t = time.UnixMilli(x).UTC()
	case float64:
		if !(x >= float64(minRowTime.UnixMilli()) && x <= float64(maxRowTime.UnixMilli())) {
			return nil, fmt.Sprintf("%g is out of range (Unix milliseconds of the years 1 to 9999)", x)
		}
		t = time.UnixMicro(int64(x * 1000)).UTC()
	case []byte:
		return rawTime(string(x))
	case string:
		switch x {
		case "infinity", "-infinity":
			return nil, "is " + x
		}
		if ms, err := strconv.ParseInt(x, 10, 64); err == nil {
			return rawTime(ms)
		}
		p, err := time.Parse(time.RFC3339Nano, x)
		if err != nil {
			return nil, rawShown(x) + " is not a time"
		}
		t = p.UTC()
	default:
		return nil, rawShown(v) + " is not a time"
	}
	if t.Before(minRowTime) || t.After(maxRowTime) {
		return nil, t.Format(time.RFC3339) + " is out of range (years 1 to 9999)"
	}
	return &t, ""
}

// setAside makes a row this owner claimed but cannot run dead, with the
// reason as its last error and a line in its history. It is fenced by the
// owner (the claim just wrote it; a row's token may be the one thing that
// cannot be read) and by the running state. The row was never started:
// started_at goes back to NULL (the history line keeps the claim's), so
// that no start delay is counted from a run_at that may be infinite.
func (s *Store) setAside(ctx context.Context, id int64, owner, reason string) (bool, error) {
	q := s.statement(`UPDATE {jobs} SET state = 'dead', owner = NULL, lease_until = NULL, finished_at = {now},
  started_at = NULL, last_status = NULL, last_error = ?, history = ` + s.attemptLine() + `
WHERE id = ? AND owner = ? AND state = 'running'`)
	args := append(append([]any{reason}, historySeps()...), historySuffix(StateDead, 0, reason), id, owner)
	return s.fenced(ctx, fmt.Sprintf("set aside job %d", id), q, args...)
}

// claimRow is a claimed row as JobsClaim reads it: the claim, or why it
// cannot run.
type claimRow struct {
	claim  Claim
	reason string
}

func scanClaimRow(r rowScanner) (claimRow, error) {
	c, reason, err := readClaim(r)
	return claimRow{c, reason}, err
}

// setAsideOdd sets aside the rows of a claim that cannot run and returns
// the others' claims. If a row could not be set aside, the claim fails as
// a claim statement that may have committed unseen does: the rows it left
// held are the owner's to find and give back (jobs.Runner's doubt).
func (s *Store) setAsideOdd(ctx context.Context, owner string, rows []claimRow) ([]Claim, error) {
	out := make([]Claim, 0, len(rows))
	var errs []error
	for _, r := range rows {
		if r.reason == "" {
			out = append(out, r.claim)
			continue
		}
		if _, err := s.setAside(ctx, r.claim.ID, owner, r.reason); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("claim jobs: %w", err)
	}
	return out, nil
}

// bumpBelow is what a claim adds to a counter column: 1, or 0 once the
// column is at its type's maximum, where adding 1 would fail the whole
// claim statement (and every later claim of every node); such a row is
// claimed unchanged and set aside.
func bumpBelow(column string, max int64) string {
	return "CASE WHEN " + column + " < " + strconv.FormatInt(max, 10) + " THEN 1 ELSE 0 END"
}

// clampRowTime is t within the years 1 to 9999.
func clampRowTime(t time.Time) time.Time {
	switch {
	case t.Before(minRowTime):
		return minRowTime
	case t.After(maxRowTime):
		return maxRowTime
	}
	return t
}

// shownTime reads a time column for display: as dbTime, and a value that
// is no time at all (text on SQLite) as NULL, so that listing or showing a
// row the node set aside never fails on it.
type shownTime struct{ dbTime }

func (t *shownTime) Scan(v any) error {
	if err := t.dbTime.Scan(v); err != nil {
		t.T, t.Valid = time.Time{}, false
	}
	return nil
}

// shownInt reads an integer column for display: a value that is not an
// integer (a real or text on SQLite) as its integer part, or 0.
type shownInt int64

func (n *shownInt) Scan(v any) error {
	switch x := v.(type) {
	case float64:
		switch {
		case x >= math.MaxInt64:
			*n = math.MaxInt64
		case x <= math.MinInt64:
			*n = math.MinInt64
		default:
			*n = shownInt(x)
		}
		return nil
	case string:
		i, _ := strconv.ParseInt(x, 10, 64)
		*n = shownInt(i)
		return nil
	case []byte:
		return n.Scan(string(x))
	}
	i, _ := rawInt(v)
	*n = shownInt(i)
	return nil
}

// JobsSetAsideUnreachable sets aside, dead, up to limit ready jobs due
// further ahead than beyond (a run time of infinity, or years ahead:
// written directly, past what any door accepts). No claim would ever take
// them, and they would wait unseen for ever; set aside, they show with
// their reason. One seek from the far end of the ready rows' (run_at, id)
// index, which finds nothing on a sound table. It returns how many it set
// aside. The bound is the clock read once ({now_once+?}): on PostgreSQL
// one read for every row is no index condition, and the seek was a walk
// of every ready job.
func (s *Store) JobsSetAsideUnreachable(ctx context.Context, beyond time.Duration, limit int) (int64, error) {
	const what = "set aside jobs due beyond any door's reach"
	where := "state = 'ready' AND run_at > {now_once+?}"
	pick, args := s.firstRows("id", "FROM {jobs} WHERE "+where, []any{millis(beyond)}, limit)
	set := "state = 'dead', finished_at = {now}, last_error = ?"
	why := CannotRun + "run_at is more than " + strconv.FormatInt(int64(beyond/(24*time.Hour)), 10) + " days ahead, further than any door accepts; no claim would ever take it"
	if s.writesBack() {
		// The ids first, then a write by primary key in id order
		// (idsfirst.go): the pick reads the due index, which a claim locks
		// entry first, row second.
		ids, err := queryKeys[int64](ctx, s, nil, what, s.statement(pick), args)
		if err != nil || len(ids) == 0 {
			return 0, err
		}
		slices.Sort(ids)
		return updateKeys(ctx, s, nil, what, jobsByID, set, []any{why}, ids, where, []any{millis(beyond)})
	}
	q := s.statement(`UPDATE {jobs} SET ` + set + `
WHERE ` + where + ` AND id IN (` + pickedIDs(s.d, pick) + `)`)
	return s.execCount(ctx, what, q, append([]any{why, millis(beyond)}, args...)...)
}
