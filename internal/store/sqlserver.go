package store

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/golang-sql/civil"
)

// DefaultSQLServerSchema is the SQL Server schema that holds slotpoller's
// tables unless database.schema names another.
const DefaultSQLServerSchema = "slotpoller"

// schemaName is what a schema name may be: a regular identifier that needs
// no quoting, so that it can be written into statements (between brackets,
// and inside the N'...' of SCHEMA_ID) without any way to escape them.
var schemaName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// ValidSchemaName reports whether name can be a SQL Server schema for
// slotpoller: a letter or _, then up to 127 letters, digits or _.
func ValidSchemaName(name string) bool { return schemaName.MatchString(name) }

// SQLServer is the SQL Server dialect (github.com/microsoft/go-mssqldb,
// driver "sqlserver", which binds @p1..@pN: package driver/sqlserver). The
// tables live in a schema of their own; every time is a datetime2 in UTC on the database clock,
// SYSUTCDATETIME().
//
// It works the same on SQL Server 2016+ and Azure SQL, with
// READ_COMMITTED_SNAPSHOT on or off: the statements take the locks they
// need (UPDLOCK on the claim; an UPDATE always reads its target rows under
// update locks) rather than relying on the isolation level.
type SQLServer struct {
	schema string // "" means DefaultSQLServerSchema
}

// NewSQLServer returns the SQL Server dialect for the tables in schema
// ("" for the default).
func NewSQLServer(schema string) (SQLServer, error) {
	if schema != "" && !ValidSchemaName(schema) {
		return SQLServer{}, fmt.Errorf("SQL Server schema %q is not a plain identifier (a letter or _, then up to 127 letters, digits or _)", schema)
	}
	return SQLServer{schema: schema}, nil
}

// Schema is the name of the schema that holds the tables.
func (d SQLServer) Schema() string {
	if d.schema == "" {
		return DefaultSQLServerSchema
	}
	return d.schema
}

func (SQLServer) Name() string             { return "sqlserver" }
func (SQLServer) Placeholder(n int) string { return fmt.Sprintf("@p%d", n) }
func (SQLServer) Now() string              { return "SYSUTCDATETIME()" }

// ClockResolution: SYSUTCDATETIME() is a datetime2(7), but on Windows it
// reads GetSystemTimeAsFileTime, which advances with the system timer: 1 ms
// where the timer runs at 1 ms, up to 15.6 ms at Windows' default (on Linux
// it is finer). 1 ms is the common case; at 15.6 ms the error bound is
// understated by at most 8 ms, small beside a slot.
func (SQLServer) ClockResolution() time.Duration { return time.Millisecond }

// NowPlusMillis adds the milliseconds in two steps, whole days then the
// rest, because DATEADD takes an int: a single DATEADD(millisecond, ...)
// overflows past 24.8 days, and a job may well be due in a month. The one
// parameter is used twice ({again}); it is a bigint (go-mssqldb sends Go
// integers as bigint), hence the casts.
func (SQLServer) NowPlusMillis() string { return sqlServerPlusMillis("?", "{again}") }

// NowPlusMillisOf adds a hold in one DATEADD: a hold is at most a call's
// timeout (24h) plus a lease (24h), far below the int's 24.8 days, and the
// expression, written once, keeps its parameters once.
func (SQLServer) NowPlusMillisOf(expr string) string {
	return "DATEADD(millisecond, CAST(" + expr + " AS int), SYSUTCDATETIME())"
}

// EndpointKey is the computed column of migration 10: the endpoint's first
// 400 characters in a binary collation, which an index can hold (the
// endpoint, NVARCHAR(MAX), cannot be an index key).
func (SQLServer) EndpointKey() string { return "endpoint_head" }

// PlanPerCall asks for a plan made for each call's arguments (see
// perCallPlan): a compile per call, which an admin read can afford.
func (SQLServer) PlanPerCall(q string, args []any) (string, []any) {
	return q + " OPTION (RECOMPILE)", args
}

func sqlServerPlusMillis(p, again string) string {
	return "DATEADD(millisecond, CAST(" + p + " % 86400000 AS int), DATEADD(day, CAST(" + again + " / 86400000 AS int), SYSUTCDATETIME()))"
}

// Table quotes the table's name with the schema's: the schema name was
// checked to be a plain identifier, so brackets cannot be escaped.
func (d SQLServer) Table(name string) string { return "[" + d.Schema() + "].[" + name + "]" }

// TimeArg sends a time as a civil.DateTime, which go-mssqldb binds as a
// datetime2(7): exactly the columns' type. A time.Time would travel as a
// datetimeoffset, and SQL Server converts datetimeoffset to datetime2 by
// dropping the offset, keeping the local wall time (10:00+02:00 would be
// stored as 10:00, two hours late), and compared with a datetime2 column it
// makes SQL Server convert the column's side. In UTC the wall time is the
// instant, so the value is converted to UTC first.
func (SQLServer) TimeArg(t time.Time) any { return civil.DateTimeOf(t.UTC()) }

// Arg sends a valid time as a datetime2 (TimeArg). The driver's Bind
// gives the other parameters their types (driver/sqlserver): together
// every parameter has a declared type that does not depend on its value,
// so that SQL Server keeps one cached plan per statement.
func (d SQLServer) Arg(v any) any {
	if x, ok := v.(sql.NullTime); ok && x.Valid {
		return d.TimeArg(x.Time)
	}
	return v
}

// MigrationLock takes an application lock that the transaction holds until
// it ends. sp_getapplock reports failure (timeout, deadlock victim) by its
// return code, not by an error, so the code is checked and turned into one.
// The lock is the schema's: farms in schemas of their own (and the tests,
// a schema each) do not wait for each other's migrations. The schema name
// is a checked plain identifier.
func (d SQLServer) MigrationLock() string {
	return `DECLARE @lock int;
EXEC @lock = sp_getapplock @Resource = N'slotpoller-migrate:` + d.Schema() + `', @LockMode = N'Exclusive', @LockOwner = N'Transaction';
IF @lock < 0 RAISERROR(N'slotpoller: could not take the migration lock (sp_getapplock returned %d)', 16, 1, @lock);`
}

func (SQLServer) Returning(string) string { return "" }

// TimeText: style 121 is the ODBC canonical yyyy-mm-dd hh:mi:ss with the
// datetime2's seven fractional digits, whatever the session's language.
func (SQLServer) TimeText(expr string) string { return "CONVERT(nvarchar(27), " + expr + ", 121)" }
func (SQLServer) TextParam() string           { return "?" }
func (SQLServer) RowLimit() (top, limit string) {
	return "TOP (?)", ""
}
func (SQLServer) Tail(expr string, n int) string {
	return "RIGHT(" + expr + ", " + strconv.Itoa(n) + ")"
}

// Output is the OUTPUT clause, placed before VALUES in an INSERT and before
// WHERE in an UPDATE. It writes INTO a table variable that the batch then
// reads (wrapOutput): a plain OUTPUT, which sends the rows to the client,
// fails (error 334) once anyone adds a trigger to the table. The rows are
// read with a query, never counted with Exec: Babelfish reports 0 rows
// affected for a statement with OUTPUT.
func (SQLServer) Output(cols string) string {
	return "OUTPUT " + qualified("inserted", cols) + " INTO @out"
}

// wrapOutput declares the table variable an OUTPUT ... INTO @out fills, and
// reads it back, ordered by its first column (an id or a name).
func (SQLServer) wrapOutput(cols, stmt string) string {
	names := strings.Split(cols, ", ")
	decl := make([]string, len(names))
	for i, c := range names {
		decl[i] = c + " " + sqlServerOutputTypes[c]
	}
	return "DECLARE @out TABLE (" + strings.Join(decl, ", ") + ");\n" + strings.TrimSpace(stmt) +
		";\nSELECT " + cols + " FROM @out ORDER BY " + names[0]
}

// sqlServerOutputTypes are the column types (schema/migrations/sqlserver)
// of the columns statements hand back.
var sqlServerOutputTypes = map[string]string{
	"id": "BIGINT", "token": "BIGINT", "attempt": "INT", "max_attempts": "INT", "endpoint": "NVARCHAR(MAX)",
	"method": "NVARCHAR(16)", "payload": "VARBINARY(MAX)", "idem_key": "NVARCHAR(MAX)", "timeout_ms": "BIGINT",
	"run_at": "DATETIME2(7)", "scheduled_for": "DATETIME2(7)", "name": "NVARCHAR(200)", "state": "NVARCHAR(20)",
	"every_ms": "BIGINT", "handoff": "INT", "failures": "INT",
	"cancel_requested_by": "NVARCHAR(200)", "queue": "NVARCHAR(100)", "trace_parent": "VARCHAR(55)",
}

// ClaimJobs picks the due jobs in order in a derived table (TOP with ORDER
// BY: an UPDATE TOP alone takes any n rows, not the oldest) and updates
// them, handing the claimed rows back through OUTPUT ... INTO. A derived
// table, not a CTE: SQL Server inlines either the same way, and Babelfish
// fails a CTE-joined UPDATE whose OUTPUT goes INTO a table variable (stack
// depth limit exceeded).
//
// UPDLOCK makes the pick a locking read of the latest committed rows, even
// under READ_COMMITTED_SNAPSHOT, and holds the rows until the update;
// READPAST skips the rows another poller has locked instead of queueing
// behind it; ROWLOCK keeps the locks on rows, not pages, so that pollers do
// not block each other on neighbours. Correctness does not rest on
// READPAST: the UPDATE re-checks state = 'ready' on the row it writes, under
// its own exclusive lock, so a server that blocked instead of skipping would
// find the row taken once the other claim commits and leave it.
//
// An occurrence of a schedule that forbids overlap is claimed only under an
// update lock on its schedule's row, held until the claim commits: claims
// of one schedule's occurrences take turns, so the look-ups for a running or
// earlier occurrence read what the previous claim wrote, with no
// SERIALIZABLE key-range locks (which concurrent claims need too, a deadlock
// pattern once the rotation widens). READPAST there too: a claimer that
// finds the schedule's row locked leaves its occurrences to the claim that
// holds it, the next poll takes them, and claimers never wait on each other.
// An occurrence whose schedule was removed is not claimed (removing a
// schedule cancels its occurrences that have not started).
//
// INDEX(jobs_due), FORCESEEK keeps the pick a seek on jobs_due (state,
// run_at, id), which hands the rows over in claim order, even where statistics would tempt the
// optimizer to scan a small table and sort it (locking every row it reads,
// the road to the deadlocks Hangfire's users met). Every poller takes its
// locks in the same order, so concurrent claims do not deadlock on each
// other.
//
// Parameters are numbered by hand to keep the order every dialect shares:
// owner, owner_node, limit, and the hold (Hold.args).
func (SQLServer) ClaimJobs() string {
	return `UPDATE j SET state = 'running', owner = @p1, owner_node = @p2, token = j.token + ` + bumpBelow("j.token", maxToken) + `,
  attempt = j.attempt + ` + bumpBelow("j.attempt", maxAttempt) + `, started_at = {now}, start_by = NULL,
  lease_until = ` + SQLServer{}.NowPlusMillisOf(holdMillis("j.timeout_ms", "@p4", "@p5", "@p6", "@p7")) + `
{output ` + claimedColumns + `}
FROM {jobs} AS j WITH (ROWLOCK) INNER JOIN (
  SELECT TOP (@p3) c.id FROM {jobs} AS c WITH (UPDLOCK, READPAST, ROWLOCK, INDEX(jobs_due), FORCESEEK)
  WHERE c.state = 'ready' AND c.run_at <= {now} AND ` + claimable("c", SQLServer{}.ScheduleHint()) + `
  ORDER BY c.run_at, c.id) AS picked ON j.id = picked.id
WHERE j.state = 'ready'`
}

// renewJobLeases is JobsRenewLeases' statement (parameters: the hold's
// four, owner). It finds the owner's rows through the (state, lease_until) index
// but updates them through the primary key, so that it locks a job's row
// before its index keys, as a finish (which starts at the row) does: had
// the update come in through the index, the two would take the same two
// locks in opposite order and could deadlock on one job.
func (SQLServer) renewJobLeases() string {
	return `UPDATE j SET lease_until = ` + SQLServer{}.NowPlusMillisOf(holdMillis("j.timeout_ms", "?", "?", "?", "?")) + ` {output id, token, cancel_requested_by}
FROM {jobs} AS j WITH (ROWLOCK, INDEX(pk_jobs), FORCESEEK)
WHERE j.id IN (SELECT r.id FROM {jobs} AS r WHERE r.owner = ? AND r.state = 'running')
  AND j.owner = {again} AND j.state = 'running'`
}

// checkSession refuses a connection whose session options break
// slotpoller's writes (set as a server or login default: sp_configure 'user
// options', or a logon trigger); see sessionOptionsError.
func (SQLServer) checkSession(ctx context.Context, db *sql.DB) error {
	var opts int64
	if err := db.QueryRowContext(ctx, "SELECT @@OPTIONS").Scan(&opts); err != nil {
		return fmt.Errorf("read session options: %w", err)
	}
	return sessionOptionsError(opts)
}

// The @@OPTIONS bits slotpoller refuses.
const (
	mssqlImplicitTransactions = 2
	mssqlNoCount              = 512
)

// sessionOptionsError says what is wrong with a session's @@OPTIONS:
//   - NOCOUNT: every fenced write reads its rows-affected count, and would
//     read 0 and give up a claim it holds;
//   - IMPLICIT_TRANSACTIONS: every UPDATE opens a transaction that
//     slotpoller never commits, so claims, results and heartbeats would stay
//     invisible to the other nodes and hold their locks until the
//     connection closes, when they are rolled back.
func sessionOptionsError(opts int64) error {
	var bad []string
	if opts&mssqlNoCount != 0 {
		bad = append(bad, "NOCOUNT ON (user options 512): slotpoller needs row counts")
	}
	if opts&mssqlImplicitTransactions != 0 {
		bad = append(bad, "IMPLICIT_TRANSACTIONS ON (user options 2): slotpoller's writes would never commit")
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("the server or login sets %s; turn it off for slotpoller's logins", strings.Join(bad, ", and "))
}

// MillisBetween: DATEDIFF_BIG, as a plain DATEDIFF in milliseconds
// overflows past 24 days.
func (SQLServer) MillisBetween(from, to string) string {
	return "DATEDIFF_BIG(millisecond, " + from + ", " + to + ")"
}

// NowMillis: DATEDIFF_BIG from 1970, as a plain DATEDIFF in milliseconds
// overflows past 24 days.
func (SQLServer) NowMillis() string {
	return "DATEDIFF_BIG(millisecond, DATEFROMPARTS(1970, 1, 1), SYSUTCDATETIME())"
}

// ScheduleHint (scheduleLocker): an update lock on an exclusive schedule's
// row, skipped where another claim holds it (see ClaimJobs).
func (SQLServer) ScheduleHint() string { return " WITH (UPDLOCK, READPAST, ROWLOCK)" }

// IdemKey is the computed column of migration 19: the idempotency key
// (NVARCHAR(MAX), which cannot be an index key; at most 200 characters)
// in a binary collation, which an index holds.
func (SQLServer) IdemKey() string { return "idem_key_200" }
func (SQLServer) NthRow() string  { return "OFFSET ? ROWS FETCH NEXT 1 ROWS ONLY" }

// BytesContain: CHARINDEX of the bytes in the VARBINARY(MAX), which SQL
// Server compares byte for byte. Babelfish 4.2 compares the two as the
// text of their hexadecimal forms ('\x7a6263'), so that the bytes are
// found only at the payload's start: there the second test, the bytes'
// hexadecimal text in the payload's, finds them anywhere. It may also
// match half a byte off, and on SQL Server it matches a payload holding
// that hexadecimal text as characters: the store keeps only the rows
// whose payload holds the bytes (searchMatch), so that the second test
// only ever adds candidates.
func (SQLServer) BytesContain(col, text string) (string, []any) {
	return "(CHARINDEX(?, " + col + ") > 0 OR CHARINDEX(?, " + col + ") > 0)", []any{[]byte(text), hex.EncodeToString([]byte(text))}
}

// TextContains compares in a binary collation: case-sensitive, as on the
// other databases, whatever the column's (the database's default).
func (SQLServer) TextContains(col, text string) (string, []any) {
	return "CHARINDEX(?, " + col + " COLLATE Latin1_General_100_BIN2) > 0", []any{text}
}
