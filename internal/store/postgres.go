package store

import (
	"database/sql"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Postgres is the PostgreSQL dialect (pgx through database/sql: package
// driver/postgres). The
// database clock is clock_timestamp(), not now(): now() is frozen at the
// start of the transaction, and a lease must be measured from the moment the
// row is written.
type Postgres struct{}

func (Postgres) Name() string                   { return "postgres" }
func (Postgres) Placeholder(n int) string       { return "$" + strconv.Itoa(n) }
func (Postgres) Now() string                    { return "clock_timestamp()" }
func (Postgres) ClockResolution() time.Duration { return time.Microsecond }
func (Postgres) NowPlusMillis() string {
	return "(clock_timestamp() + CAST(? AS double precision) * interval '1 millisecond')"
}
func (Postgres) NowPlusMillisOf(expr string) string {
	return "(clock_timestamp() + CAST(" + expr + " AS double precision) * interval '1 millisecond')"
}
func (Postgres) Table(name string) string { return "slotpoller_" + name }

// NowOnce is the clock read once, a subquery's value, on which an index
// seeks (see onceClock).
func (Postgres) NowOnce() string { return "(SELECT clock_timestamp())" }
func (d Postgres) NowOncePlusMillis() string {
	return "(" + d.NowOnce() + " + CAST(? AS double precision) * interval '1 millisecond')"
}

// SeekNowPlusMillis: statement_timestamp() is stable, so an index seeks on
// it (see seekClock).
func (Postgres) SeekNowPlusMillis() string {
	return "(statement_timestamp() + CAST(? AS double precision) * interval '1 millisecond')"
}

// EndpointKey is the endpoint in byte order, as the index of migration 10
// orders it whatever the database's collation.
func (Postgres) EndpointKey() string     { return `endpoint COLLATE "C"` }
func (Postgres) TimeArg(t time.Time) any { return t.UTC() }

// Arg hands pgx a valid time as the UTC time TimeArg makes of it; every
// other value, typed NULLs included, pgx binds as it is.
func (d Postgres) Arg(v any) any {
	if t, ok := v.(sql.NullTime); ok && t.Valid {
		return d.TimeArg(t.Time)
	}
	return v
}

func (Postgres) MigrationLock() string         { return "SELECT pg_advisory_xact_lock(7305112)" }
func (Postgres) Returning(cols string) string  { return "RETURNING " + cols }
func (Postgres) Output(string) string          { return "" }
func (Postgres) TextParam() string             { return "CAST(? AS text)" }
func (Postgres) RowLimit() (top, limit string) { return "", "LIMIT ?" }
func (Postgres) Tail(expr string, n int) string {
	return "right(" + expr + ", " + strconv.Itoa(n) + ")"
}

// TimeText writes the UTC wall time: a timestamptz cast to text would
// follow the session's DateStyle and TimeZone.
func (Postgres) TimeText(expr string) string {
	return "to_char(" + expr + " AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')"
}

// ClaimJobs is the function of schema version 16 (last replaced in 20), slotpoller_claim_jobs:
// the claim of the other dialects (candidates locked with SKIP LOCKED in a
// CTE, so that pollers in one slot take different rows, written back
// fenced by their state), run where the planner may neither sort nor build
// a bitmap. Statistics a burst has outrun count its ready rows as a
// handful, and the plan they chose read and sorted the whole backlog for
// each claim; the function's walks the due index in order and stops at
// its limit. TestPostgresClaimFunctionIsTheClaim keeps its conditions
// those of claimable.
func (Postgres) ClaimJobs() string {
	return "SELECT * FROM slotpoller_claim_jobs($1, $2, $3, $4, $5, $6, $7)"
}

// PostgresWithSchema returns a PostgreSQL DSN whose connections use schema
// as their search_path: how tests and benchmarks give each run tables of
// its own in one database.
func PostgresWithSchema(dsn, schema string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return strings.TrimSpace(dsn) + " search_path=" + schema
}

// MillisBetween truncates the interval's epoch seconds, with their
// microseconds, to whole milliseconds.
func (Postgres) MillisBetween(from, to string) string {
	return "CAST(TRUNC(EXTRACT(EPOCH FROM (" + to + " - " + from + ")) * 1000) AS BIGINT)"
}

// NowMillis: the epoch seconds with their microseconds, truncated to
// whole milliseconds.
func (Postgres) NowMillis() string {
	return "CAST(TRUNC(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT)"
}

// ClaimManaged (managedClaimer): the function of schema version 14, whose
// statements each take a fresh snapshot, in one round trip instead of a
// transaction's five.
func (Postgres) ClaimManaged() string {
	return "SELECT * FROM slotpoller_claim_managed($1, $2, $3, $4, $5, $6, $7, $8)"
}

// The text search (search.go): position() on bytea compares bytes, on text
// characters, both exactly.
func (Postgres) IdemKey() string { return "idem_key" }
func (Postgres) NthRow() string  { return "LIMIT 1 OFFSET ?" }
func (Postgres) BytesContain(col, text string) (string, []any) {
	return "position(CAST(? AS bytea) in " + col + ") > 0", []any{[]byte(text)}
}
func (Postgres) TextContains(col, text string) (string, []any) {
	return "position(CAST(? AS text) in " + col + ") > 0", []any{text}
}
