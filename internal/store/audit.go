package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// The operator audit log: one row per operator action (a job retried or
// cancelled, a queue paused, a schedule changed), so that "who did this,
// from where, and when" has an answer on the farm's one shared database,
// whichever node, CLI or dashboard the action came through. The callers
// of the actions write it beside them; the store only records, lists and
// prunes.
//
// Invariants:
//   - An entry's time is the database clock when it was written, the one
//     clock the farm compares (never the writer's own clock).
//   - An entry is never changed once written: it is listed, and deleted
//     by age (AuditPrune), nothing else.
//   - A record never fails for its length: each text is cut to its
//     column's width (auditText), the same on every database.

// The widths of the audit table's text columns, in characters (see
// auditText for how a character outside the Basic Multilingual Plane
// counts).
const (
	auditActorWidth  = 200
	auditOriginWidth = 200
	auditActionWidth = 100
	auditTargetWidth = 400
	auditDetailWidth = 1000
)

// AuditListMax is the most entries one AuditList returns.
const AuditListMax = 1000

// AuditEntry is one operator action.
type AuditEntry struct {
	ID int64
	At time.Time // the database clock when it was recorded
	// Actor is who (an OS user for the CLI, a token or dashboard sign-in
	// for the API); Origin from where (a host, a remote address); Action
	// what was done (job.retry, queue.pause); Target to what (a job id, a
	// queue or schedule name, a filter); Detail the outcome or parameters.
	Actor, Origin, Action, Target, Detail string
}

// AuditFilter selects entries, newest first.
type AuditFilter struct {
	Since  time.Duration // within this long before the database's now; 0: any
	Before int64         // ids below this (the next page's cursor); 0: from the newest
	Actor  string        // "" any; else exactly this actor
	Action string        // "" any; else this action, or actions starting with it followed by "." (e.g. "queue" matches "queue.pause")
	Limit  int           // 1..AuditListMax
}

const auditColumns = `id, at, actor, origin, action, target, detail`

// AuditAdd records an operator action and returns its id. At is the
// database clock when the row is written (e.At is ignored); each text is
// cut to its column's width (auditText). An entry without an actor or an
// action says nothing of who did what: it is refused. In a store on the
// caller's transaction (WithTx) the entry commits or rolls back with the
// action it records.
func (s *Store) AuditAdd(ctx context.Context, e AuditEntry) (int64, error) {
	e.Actor, e.Origin = auditText(e.Actor, auditActorWidth), auditText(e.Origin, auditOriginWidth)
	e.Action, e.Target = auditText(e.Action, auditActionWidth), auditText(e.Target, auditTargetWidth)
	e.Detail = auditText(e.Detail, auditDetailWidth)
	if strings.TrimSpace(e.Actor) == "" {
		return 0, fmt.Errorf("record audit entry %q: the actor (who did it) is empty", e.Action)
	}
	if strings.TrimSpace(e.Action) == "" {
		return 0, fmt.Errorf("record audit entry by %q: the action (what was done) is empty", e.Actor)
	}
	q := s.statement(`INSERT INTO {audit} (at, actor, origin, action, target, detail) {output id}
VALUES ({now}, ?, ?, ?, ?, ?) {returning id}`)
	args := []any{e.Actor, e.Origin, e.Action, e.Target, e.Detail}
	id, err := s.insertOne(ctx, q, args)
	if err != nil {
		return 0, fmt.Errorf("record audit entry %q by %q: %w", e.Action, e.Actor, err)
	}
	return id, nil
}

// AuditList reads up to f.Limit entries f selects, newest first (by id:
// the order they were written in, whatever the database clock did). The
// next page is the entries before the last one's id (f.Before).
func (s *Store) AuditList(ctx context.Context, f AuditFilter) ([]AuditEntry, error) {
	const what = "list audit entries"
	switch {
	case f.Limit < 1 || f.Limit > AuditListMax:
		return nil, fmt.Errorf("%s: the limit %d is not between 1 and %d", what, f.Limit, AuditListMax)
	case f.Since < 0:
		return nil, fmt.Errorf("%s: since %s is negative", what, f.Since)
	case f.Before < 0:
		return nil, fmt.Errorf("%s: before id %d is negative", what, f.Before)
	}
	conds := []string{"1 = 1"}
	var args []any
	if f.Since > 0 {
		// Read once per statement ({seeknow+?}), so that the index on at
		// can seek on it.
		conds, args = append(conds, "at >= {seeknow+?}"), append(args, seekOffset(-millis(f.Since)))
	}
	if f.Before > 0 {
		conds, args = append(conds, "id < ?"), append(args, f.Before)
	}
	if f.Actor != "" {
		conds, args = append(conds, "actor = ?"), append(args, f.Actor)
	}
	if f.Action != "" {
		// The action itself, or one under it: SUBSTRING, not LIKE, so that
		// the filter is compared as it is, with no wildcard to escape.
		under := f.Action + "."
		conds = append(conds, "(action = ? OR SUBSTRING(action, 1, ?) = ?)")
		args = append(args, f.Action, utf8.RuneCountInString(under), under)
	}
	q, args := s.firstRows(auditColumns, "FROM {audit} WHERE "+strings.Join(conds, " AND ")+" ORDER BY id DESC", args, f.Limit)
	args, err := s.seekArgs(ctx, args)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	// Planned for each call's filter, as the other admin reads are: a walk
	// of the newest ids suits a filter most entries pass, a seek on at a
	// short window.
	q, args = s.planPerCall(s.statement(q), args)
	return queryAll(ctx, s, what, q, args, scanAudit)
}

func scanAudit(r rowScanner) (AuditEntry, error) {
	var e AuditEntry
	var at dbTime
	err := r.Scan(&e.ID, &at, &e.Actor, &e.Origin, &e.Action, &e.Target, &e.Detail)
	e.At = at.T
	return e, err
}

// AuditPrune deletes up to limit entries recorded more than age before
// the database's now, oldest first, and returns how many it deleted: a
// range of the index on at and at most limit row locks. An age of zero or
// less is refused rather than read as "everything": an audit log emptied
// by a missing setting is an audit log lost.
func (s *Store) AuditPrune(ctx context.Context, age time.Duration, limit int) (int64, error) {
	what := "delete audit entries older than " + age.String()
	switch {
	case age <= 0:
		return 0, fmt.Errorf("%s: the age must be above zero", what)
	case limit < 1:
		return 0, errors.New(what + ": a limit is required")
	}
	// The bound is read once ({seeknow+?}), so that PostgreSQL seeks the
	// index on it rather than walking the index to its end when nothing
	// is old enough, which is what most prunes find.
	pick, args := s.firstRows("id", "FROM {audit} WHERE at < {seeknow+?} ORDER BY at", []any{seekOffset(-millis(age))}, limit)
	args, err := s.seekArgs(ctx, args)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if !s.writesBack() {
		return s.execCount(ctx, what, s.statement(`DELETE FROM {audit} WHERE id IN (`+pick+`)`), args...)
	}
	// MySQL takes no row limit in an IN subquery, nor a read of the table
	// a DELETE writes: the ids first, then a delete by primary key in id
	// order (idsfirst.go), keysPerWrite a statement. An entry never
	// changes, so an id read is still one to delete.
	ids, err := queryKeys[int64](ctx, s, nil, what, s.statement(pick), args)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	slices.Sort(ids)
	var n int64
	for chunk := range slices.Chunk(ids, keysPerWrite) {
		m, err := s.execCount(ctx, what, s.statement(`DELETE FROM {audit} WHERE id IN (`+placeholders(len(chunk))+`)`), int64Args(chunk)...)
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// auditText is v as a column of width characters keeps it, the same on
// every database: valid UTF-8 (a byte that is not, and a NUL, which
// PostgreSQL's text cannot hold, become U+FFFD), cut after the last whole
// character that fits. A character outside the Basic Multilingual Plane
// (an emoji) counts two, as SQL Server's NVARCHAR counts it (in UTF-16
// code units); the other databases count it one and keep the same text.
func auditText(v string, width int) string {
	v = strings.ReplaceAll(strings.ToValidUTF8(v, "\uFFFD"), "\x00", "\uFFFD")
	n := 0
	for i, r := range v {
		if n += utf16.RuneLen(r); n > width {
			return v[:i]
		}
	}
	return v
}
