package store

import (
	"database/sql"
	"strconv"
	"time"
)

// SQLite is the embedded dialect (modernc.org/sqlite, pure Go: package
// driver/sqlite). Times are
// stored as integer Unix milliseconds: SQLite has no time type, integers
// compare correctly, and unixepoch('now','subsec') gives the millisecond.
type SQLite struct{}

func (SQLite) Name() string                   { return "sqlite" }
func (SQLite) Placeholder(int) string         { return "?" }
func (SQLite) ClockResolution() time.Duration { return time.Millisecond }
func (SQLite) Now() string                    { return "CAST(unixepoch('now','subsec')*1000 AS INTEGER)" }
func (SQLite) NowPlusMillis() string          { return "(CAST(unixepoch('now','subsec')*1000 AS INTEGER) + ?)" }
func (SQLite) NowPlusMillisOf(expr string) string {
	return "(CAST(unixepoch('now','subsec')*1000 AS INTEGER) + (" + expr + "))"
}
func (SQLite) Table(name string) string { return "slotpoller_" + name }

// SeekNowPlusMillis is a bare parameter, which the store fills with the
// database's time plus the offset (see boundByValue).
func (SQLite) SeekNowPlusMillis() string { return "?" }
func (SQLite) boundByValue()             {}
func (SQLite) TimeArg(t time.Time) any   { return t.UnixMilli() }

// Arg turns a time into the integer milliseconds of SQLite's time columns,
// and a NULL time into a NULL integer.
func (d SQLite) Arg(v any) any {
	if t, ok := v.(sql.NullTime); ok {
		if !t.Valid {
			return sql.NullInt64{}
		}
		return d.TimeArg(t.Time)
	}
	return v
}

func (SQLite) MigrationLock() string         { return "" }
func (SQLite) Returning(cols string) string  { return "RETURNING " + cols }
func (SQLite) Output(string) string          { return "" }
func (SQLite) TimeText(expr string) string   { return expr } // integer milliseconds
func (SQLite) TextParam() string             { return "?" }
func (SQLite) RowLimit() (top, limit string) { return "", "LIMIT ?" }
func (SQLite) Tail(expr string, n int) string {
	return "substr(" + expr + ", -" + strconv.Itoa(n) + ")"
}

// ClaimJobs needs no row locks: SQLite has one writer at a time, so the
// subquery and the update see the same rows.
func (SQLite) ClaimJobs() string {
	return `UPDATE {jobs} SET state = 'running', owner = ?1, owner_node = ?2, token = token + ` + bumpBelow("token", maxToken) + `,
  attempt = attempt + ` + bumpBelow("attempt", maxAttempt) + `, lease_until = ` + SQLite{}.NowPlusMillisOf(holdMillis("timeout_ms", "?4", "?5", "?6", "?7")) + `,
  started_at = {now}, start_by = NULL
WHERE state = 'ready' AND id IN (
  SELECT c.id FROM {jobs} c WHERE c.state = 'ready' AND c.run_at <= {now} AND ` + claimable("c", "") + `
  ORDER BY c.run_at, c.id LIMIT ?3)
RETURNING ` + claimedColumns
}

// MillisBetween: times are integer milliseconds already.
func (SQLite) MillisBetween(from, to string) string { return "(" + to + " - " + from + ")" }

// WindowCount (timeWindow): one range of the index on created_at, read
// alone, at most the cap of it.
func (SQLite) WindowCount(conds string) string {
	return `SELECT COUNT(*) FROM (SELECT 1 FROM {jobs} INDEXED BY slotpoller_jobs_created WHERE ` + conds + ` LIMIT ?)`
}

// WindowByIndex (timeWindow): the window's range of the index on
// created_at, sorted by id; WindowByWalk: the rowid newest first (a rowid
// range below a cursor), stopped at the page.
func (SQLite) WindowByIndex() string { return "{jobs} INDEXED BY slotpoller_jobs_created" }
func (SQLite) WindowByWalk() string  { return "{jobs} NOT INDEXED" }

// PrefixWalkBound (prefixWalk): the count reads the range's index alone,
// at most a page of it; MAX(id) below the cursor is one seek.
func (SQLite) PrefixWalkBound() string {
	return `SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM {jobs} WHERE endpoint >= ? AND endpoint < ? LIMIT ?)), MAX(id)
FROM {jobs} WHERE id < ?`
}

// NewestByPrefix (prefixWalk): the walk (NOT INDEXED: the rowid newest
// first, stopped at the page), then the older rows by an index, read only
// when the walk does not fill the page. Each part is turned off by a LIMIT
// of 0, which SQLite checks before it reads or sorts anything; a WHERE
// term made of a subquery would not stop it (the merge of the two parts
// starts both).
func (SQLite) NewestByPrefix(cols, where string, retrying bool) string {
	index := "slotpoller_jobs_endpoint"
	if retrying {
		index = "slotpoller_jobs_retrying"
	}
	walk := `SELECT ` + cols + ` FROM {jobs} NOT INDEXED WHERE ` + where + ` AND id > ?`
	return `SELECT ` + cols + ` FROM (` + walk + ` ORDER BY id DESC LIMIT ?)
UNION ALL
SELECT ` + cols + ` FROM (SELECT ` + cols + ` FROM {jobs} INDEXED BY ` + index + ` WHERE ` + where + ` AND id <= ? ORDER BY id DESC
  LIMIT CASE WHEN (SELECT COUNT(*) FROM (` + walk + ` LIMIT ?)) < ? THEN ? ELSE 0 END)
ORDER BY id DESC LIMIT ?`
}

// NowMillis: SQLite's times are epoch milliseconds already.
func (SQLite) NowMillis() string { return SQLite{}.Now() }

// The text search (search.go): instr() compares bytes when both arguments
// are blobs, characters when they are text, both exactly.
func (SQLite) IdemKey() string { return "idem_key" }
func (SQLite) NthRow() string  { return "LIMIT 1 OFFSET ?" }
func (SQLite) BytesContain(col, text string) (string, []any) {
	return "instr(" + col + ", ?) > 0", []any{[]byte(text)}
}
func (SQLite) TextContains(col, text string) (string, []any) {
	return "instr(" + col + ", ?) > 0", []any{text}
}
