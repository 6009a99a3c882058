package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// openPostgres opens the pool. Each connection turns JIT compilation off
// when it opens, unless the DSN sets jit itself (…?jit=on). A node's
// statements all run in milliseconds, but PostgreSQL plans them from
// estimates, and claimable's checks for schedules that forbid overlap (a
// branch a row takes only when it is such an occurrence) cost each row as
// if it were one: a turn's count of 16,000 due jobs is estimated at a
// million, far past jit_above_cost. With JIT on, the default of builds with
// LLVM, every such count compiled for 20 to 400 ms to run for 2. The
// setting is sent by SET, not as a startup parameter, which poolers such
// as PgBouncer refuse (a node needs session pooling anyway, for LISTEN and
// its session lock).
//
// The DSN is parsed here, so that a bad one fails at Open, and again for
// every new connection, as database/sql's "pgx" driver does: a password
// file or a TLS certificate rotated on disk reaches the next connection.
func openPostgres(dsn string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	reparse := stdlib.OptionBeforeConnect(func(_ context.Context, c *pgx.ConnConfig) error {
		fresh, err := pgx.ParseConfig(dsn)
		if err != nil {
			return err
		}
		*c = *fresh
		return nil
	})
	if _, set := cfg.RuntimeParams["jit"]; set {
		return stdlib.OpenDB(*cfg, reparse), nil
	}
	return stdlib.OpenDB(*cfg, reparse, stdlib.OptionAfterConnect(jitOff)), nil
}

// jitOff turns JIT off for a new session. The session works without it,
// so a server that refuses the setting (one before PostgreSQL 11, or a
// server that only speaks its protocol) keeps the connection; a
// connection that failed sending it is closed, since database/sql drops
// it without closing it.
func jitOff(ctx context.Context, c *pgx.Conn) error {
	_, err := c.Exec(ctx, "SET jit = off")
	var pe *pgconn.PgError
	if err == nil || errors.As(err, &pe) {
		return nil
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(closeCtx)
	return fmt.Errorf("setting up the session (SET jit = off): %w", err)
}

// Postgres is the PostgreSQL dialect (pgx through database/sql). The
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

// SeekNowPlusMillis: statement_timestamp() is stable, so an index seeks on
// it (see seekClock).
func (Postgres) SeekNowPlusMillis() string {
	return "(statement_timestamp() + CAST(? AS double precision) * interval '1 millisecond')"
}

// PlanPerCall runs the statement as the unnamed statement, described
// first (pgx's QueryExecModeDescribeExec: two round trips), which
// PostgreSQL plans for the arguments of each call, not as a named prepared
// statement that may get a generic plan (see perCallPlan).
func (Postgres) PlanPerCall(q string, args []any) (string, []any) {
	return q, append([]any{pgx.QueryExecModeDescribeExec}, args...)
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

// ClaimJobs locks candidate rows with SKIP LOCKED so that pollers in the
// same slot (backlog mode) take different rows instead of queueing behind
// each other; the outer state test keeps the claim correct even without it.
//
// The candidates are picked in a CTE (River's shape): PostgreSQL does not
// inline a CTE that locks rows, so the LIMIT is applied exactly once.
// Parameters are numbered by hand to keep the order every dialect shares.
func (Postgres) ClaimJobs() string {
	return `WITH picked AS (
  SELECT c.id FROM {jobs} c WHERE c.state = 'ready' AND c.run_at <= {now} AND ` + claimable("c", "") + `
  ORDER BY c.run_at, c.id LIMIT $3 FOR UPDATE OF c SKIP LOCKED)
UPDATE {jobs} SET state = 'running', owner = $1, owner_node = $2, token = token + ` + bumpBelow("token", maxToken) + `,
  attempt = attempt + ` + bumpBelow("attempt", maxAttempt) + `, started_at = {now}, start_by = NULL,
  lease_until = ` + Postgres{}.NowPlusMillisOf(holdMillis("timeout_ms", "$4", "$5", "$6", "$7")) + `
FROM picked WHERE {jobs}.id = picked.id AND {jobs}.state = 'ready'
RETURNING ` + qualified("{jobs}", claimedColumns)
}

func (Postgres) Retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", "40P01", "55P03": // serialization failure, deadlock, lock not available
			return true
		}
	}
	return false
}

func (Postgres) UndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}

func (Postgres) UniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
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
