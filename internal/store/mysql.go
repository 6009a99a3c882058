package store

import (
	"strconv"
	"strings"
	"time"

	"database/sql"
)

// MySQL is the MySQL 8.0+ and MariaDB 10.6+ dialect
// (github.com/go-sql-driver/mysql: package driver/mysql). It keeps to SQL
// both servers accept. Times are DATETIME(6) in UTC on the database clock,
// UTC_TIMESTAMP(6): never NOW(), which follows the session's time zone
// (the driver sets the session to '+00:00' as well, so that nothing reads a
// DATETIME through a zone).
//
// Neither server hands back the rows an UPDATE wrote (no RETURNING on an
// UPDATE: MariaDB has it for INSERT and DELETE only, MySQL nowhere), so
// the statements that need them take another path (writesBack).
type MySQL struct{}

func (MySQL) Name() string                   { return "mysql" }
func (MySQL) Placeholder(int) string         { return "?" }
func (MySQL) Now() string                    { return "UTC_TIMESTAMP(6)" }
func (MySQL) ClockResolution() time.Duration { return time.Microsecond }

// NowPlusMillis adds microseconds, so that a fraction of the clock's
// second is kept (INTERVAL in milliseconds does not exist).
func (MySQL) NowPlusMillis() string { return MySQL{}.NowPlusMillisOf("?") }
func (MySQL) NowPlusMillisOf(expr string) string {
	return "TIMESTAMPADD(MICROSECOND, (" + expr + ") * 1000, UTC_TIMESTAMP(6))"
}

// NowMillis: the microseconds since 1970 of the database clock, in whole
// milliseconds. TIMESTAMPDIFF between two DATETIMEs involves no time zone
// (UNIX_TIMESTAMP of a DATETIME would read it in the session's).
func (MySQL) NowMillis() string {
	return "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)"
}

// MillisBetween: whole milliseconds, truncated toward zero as the other
// dialects do.
func (MySQL) MillisBetween(from, to string) string {
	return "(TIMESTAMPDIFF(MICROSECOND, " + from + ", " + to + ") DIV 1000)"
}

func (MySQL) Table(name string) string { return "slotpoller_" + name }

// TimeArg sends a time in UTC: the driver writes a time.Time's wall clock
// in its loc, which the DSN check holds at UTC.
func (MySQL) TimeArg(t time.Time) any { return t.UTC() }

// Arg hands the driver a valid time in UTC (TimeArg); typed NULLs bind as
// NULLs of their kind.
func (d MySQL) Arg(v any) any {
	if t, ok := v.(sql.NullTime); ok && t.Valid {
		return d.TimeArg(t.Time)
	}
	return v
}

// MigrationLock takes a named lock, which (unlike a row lock) outlives the
// implicit commit every DDL statement makes on MySQL: its migrations are
// not transactional, so it is the lock, not the transaction, that keeps
// two nodes from applying a version twice. GET_LOCK returns 0 on timeout
// rather than failing: the IF turns a 0 (or NULL) into error 1242 (a
// subquery of two rows), which stops the migration. The lock is the
// database's (a lock name is server-wide; at most 64 characters), and
// MigrationUnlock releases it.
func (MySQL) MigrationLock() string {
	return "DO IF(GET_LOCK(" + mysqlMigrationLockName + ", 600) = 1, 0, (SELECT 1 UNION ALL SELECT 2))"
}

// MigrationUnlock releases MigrationLock's lock (migrationUnlocker).
func (MySQL) MigrationUnlock() string { return "DO RELEASE_LOCK(" + mysqlMigrationLockName + ")" }

// mysqlMigrationLockName is 'slotpoller-migrate:' and the MD5 of the
// database's name: 51 characters whatever the name.
const mysqlMigrationLockName = "CONCAT('slotpoller-migrate:', MD5(DATABASE()))"

func (MySQL) Returning(string) string       { return "" }
func (MySQL) Output(string) string          { return "" }
func (MySQL) TextParam() string             { return "?" }
func (MySQL) RowLimit() (top, limit string) { return "", "LIMIT ?" }
func (MySQL) Tail(expr string, n int) string {
	return "RIGHT(" + expr + ", " + strconv.Itoa(n) + ")"
}

// TimeText: the UTC wall time with its microseconds, which parseTimeText
// reads.
func (MySQL) TimeText(expr string) string {
	return "DATE_FORMAT(" + expr + ", '%Y-%m-%d %H:%i:%s.%f')"
}

// ClaimJobs is the pick of the claim (writesBack): up to ? due ready jobs
// in claim order, locked, skipping those another claim holds. SKIP
// LOCKED, not a wait: claimers never queue behind each other and never
// take part in a deadlock (a claim waits for no lock but its own rows').
// The claim's UPDATE then writes these rows by primary key. The locking
// clause locks the rows of the jobs table read here, not those the
// subqueries of claimable read. (No FOR UPDATE OF: MariaDB lacks it.)
func (MySQL) ClaimJobs() string {
	return `SELECT c.id FROM {jobs} c WHERE c.state = 'ready' AND c.run_at <= {now} AND ` + claimable("c", "") + `
ORDER BY c.run_at, c.id LIMIT ? FOR UPDATE SKIP LOCKED`
}

// writesBack (see the store's returning.go); derivedPick (pickedIDs);
// noFullJoin (Queues).
func (MySQL) writesBack()  {}
func (MySQL) derivedPick() {}
func (MySQL) noFullJoin()  {}

// Rewrite adapts the few spellings of the statements written once that
// MySQL reads otherwise (sqlRewriter):
//   - CAST(... AS BIGINT) and AS INTEGER: MySQL casts to SIGNED;
//   - a / between integers is a DECIMAL division on MySQL, and every /
//     the statements write is an integer one (a rate window's number, the
//     minutes ago of the dashboard): DIV;
//   - CONCAT returns NULL when any argument is NULL on MySQL, where the
//     others skip a NULL (a new job's empty history): CONCAT_WS with an
//     empty separator skips them.
func (MySQL) Rewrite(q string) string { return mysqlSpellings.Replace(q) }

var mysqlSpellings = strings.NewReplacer(
	" AS BIGINT)", " AS SIGNED)",
	" AS INTEGER)", " AS SIGNED)",
	" / ", " DIV ",
	"CONCAT(", "CONCAT_WS('', ",
)

// TryLock (sessionLocker) takes the node's named lock without waiting:
// GET_LOCK answers 1 when taken, 0 when another connection holds it, NULL
// on an error. The server releases it when the connection ends, however it
// ends: the lock's connection waits in a statement that notices a dead
// client within seconds (driver/mysql's ListenNotes).
func (MySQL) TryLock() string {
	return "SELECT COALESCE(GET_LOCK(" + mysqlNodeLockName("?") + ", 0), 0) = 1"
}

// LockHeld (sessionLocker): IS_USED_LOCK, once per row of the registry (a
// look-up in the server's table of named locks, with no statement of its
// own); a row without a key heartbeats instead.
func (MySQL) LockHeld(col string) string {
	return "(" + col + " IS NULL OR IS_USED_LOCK(" + mysqlNodeLockName(col) + ") IS NOT NULL)"
}

// MySQLListening is the statement a MySQL node's lock connection waits in
// for as long as the node runs (driver/mysql's ListenNotes): the server
// notices a dead client under it, and a wake (waker) interrupts it. The
// comment is how the wake finds it in the server's process list.
const MySQLListening = "DO SLEEP(31536000) /* slotpoller: a node waiting for a wake */"

// Listening (waker): the connections of the farm's database waiting in
// MySQLListening. The process list shows a login its own connections
// (all of it to one with the PROCESS privilege), so the farm's nodes are
// woken when they log in as one user.
func (MySQL) Listening() string {
	return "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND INFO = ?"
}

// Wake (waker): KILL QUERY ends the connection's statement and leaves the
// connection (and its session lock) as it was; DO SLEEP returns, without
// an error, to the listener, which waits again.
func (MySQL) Wake() string { return "KILL QUERY ?" }

// mysqlNodeLockName is the name of the lock under a node's key: named
// from the database, as a lock's name is the whole server's, and at most
// 64 characters (11 + 32 + 1 + a key of at most 20).
func mysqlNodeLockName(key string) string {
	return "CONCAT('slotpoller:', MD5(DATABASE()), ':', " + key + ")"
}

// ByState (byState): the primary key may not give the order, so the
// optimizer weighs the state's own rows (the index on (state, id), in id
// order) against a seek of another filter's index and a sort; forcing the
// state's index would read a common state's every row for a window of
// seconds.
func (MySQL) ByState() string { return "{jobs} IGNORE INDEX FOR ORDER BY (PRIMARY)" }

// The text search (search.go): LOCATE() on a blob and a binary string
// compares bytes; on the text column, in the table's binary collation
// (utf8mb4_bin), characters exactly.
func (MySQL) IdemKey() string { return "idem_key" }
func (MySQL) NthRow() string  { return "LIMIT 1 OFFSET ?" }
func (MySQL) BytesContain(col, text string) (string, []any) {
	return "LOCATE(?, " + col + ") > 0", []any{[]byte(text)}
}
func (MySQL) TextContains(col, text string) (string, []any) {
	return "LOCATE(?, " + col + ") > 0", []any{text}
}
