// Package mysql is slotpoller's support for MySQL 8.0+ and MariaDB 10.6+
// (the versions with SKIP LOCKED), through github.com/go-sql-driver/mysql:
// an application gives Driver() to client.New with the *sql.DB it opened.
// It imports that driver (which registers "mysql" with database/sql) and
// no other database driver.
//
// Invariants: every connection the node's pool opens reads times as UTC
// time.Time values (parseTime=true, loc=UTC), runs its session in UTC
// (time_zone '+00:00': a DATETIME never goes through the server's zone)
// and at READ COMMITTED (no gap or next-key locks on the range a claim
// reads), binds every value as a parameter of a server-side prepared
// statement (interpolateParams stays off), and counts the rows an UPDATE
// matched, not those it changed, as the other databases do (a fenced write
// that leaves a row as it was still reports it). Its connections read the
// server's max_allowed_packet when they open (unless the DSN sets
// maxAllowedPacket), so that a large payload travels in pieces; an
// application's pool needs maxAllowedPacket=0 in its DSN for the same,
// where the server's limit is under 2 MiB. Errors are told apart by their
// server error numbers.
package mysql

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/internal/store"
)

// Driver is MySQL's and MariaDB's support, for client.New.
func Driver() client.Driver { return driver{} }

// driver implements store.Driver for go-sql-driver/mysql.
type driver struct{}

// Dialect is the MySQL dialect; the database is the DSN's, so schema is
// ignored.
func (driver) Dialect(string) (store.Dialect, error) { return store.MySQL{}, nil }

// Bind: go-sql-driver binds every value the dialect makes as it is.
func (driver) Bind(v any) any { return v }

// Open checks the DSN (CheckDSN) and opens a pool whose connections set up
// their session as the package's invariants say.
func (driver) Open(dsn string) (*sql.DB, error) {
	cfg, err := Config(dsn)
	if err != nil {
		return nil, err
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(sessionConnector{c}), nil
}

// Config parses dsn, refuses what would break slotpoller's times or send
// a value inside a statement's text (CheckDSN), and sets what every
// session needs: the matched-rows count, the session's time zone, and
// the server's packet limit (readServersMaxPacket).
func Config(dsn string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		// The driver's parse errors may quote the DSN: say what is wrong
		// without it (the store scrubs the password from what is left).
		return nil, fmt.Errorf("the MySQL DSN does not parse (user:password@tcp(host:3306)/database?parseTime=true&loc=UTC): %w", err)
	}
	if err := CheckDSN(cfg); err != nil {
		return nil, err
	}
	cfg.ClientFoundRows = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	// The driver sends each param as SET <name>=<value> when it connects.
	cfg.Params["time_zone"] = "'+00:00'"
	readServersMaxPacket(cfg)
	return cfg, nil
}

// CheckDSN refuses a DSN whose settings slotpoller cannot run on:
//   - parseTime=true, so that time columns scan as time.Time;
//   - loc=UTC, so that times are read and sent in UTC (the driver's
//     default location is UTC, but a DSN saying loc=Local would shift
//     every time the node writes by its zone);
//   - interpolateParams off: every value travels as a bound parameter of a
//     prepared statement, never inside the statement's text;
//   - no time_zone other than UTC: the session's zone is forced to
//     '+00:00'.
//
// The error names the setting and never the password.
func CheckDSN(cfg *mysql.Config) error {
	var bad []string
	if !cfg.ParseTime {
		bad = append(bad, "parseTime=true is required (time columns must scan as times)")
	}
	if cfg.Loc == nil || cfg.Loc.String() != "UTC" {
		bad = append(bad, "loc=UTC is required (slotpoller's times are UTC)")
	}
	if cfg.InterpolateParams {
		bad = append(bad, "interpolateParams must be false (every value stays a bound parameter)")
	}
	if tz, ok := cfg.Params["time_zone"]; ok && !utcZone(tz) {
		bad = append(bad, "time_zone must be left unset or '+00:00' (slotpoller sets the session's zone to UTC)")
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("the MySQL DSN: %s", strings.Join(bad, "; "))
}

func utcZone(tz string) bool {
	switch strings.Trim(strings.TrimSpace(tz), `'"`) {
	case "+00:00", "UTC", "+0:00":
		return true
	}
	return false
}

// sessionConnector sets each new connection's isolation level before the
// pool hands it out: READ COMMITTED, under which InnoDB locks the rows a
// statement writes or locks (FOR UPDATE) and not the gaps between index
// records that REPEATABLE READ adds, where concurrent claims, renewals,
// finishes and retention deadlock each other. The statement is the same
// on MySQL and MariaDB (the variable behind it is not: transaction_isolation
// or tx_isolation).
// SessionsReadCommitted says the pools Open returns are at READ COMMITTED
// (sessionConnector), so the store sets no level per transaction.
func (driver) SessionsReadCommitted() bool { return true }

type sessionConnector struct {
	sqldriver.Connector
}

func (c sessionConnector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := conn.(sqldriver.ExecerContext)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("setting up the session: the driver's connection %T cannot execute", conn)
	}
	if _, err := ex.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("setting up the session (READ COMMITTED): %w", err)
	}
	return conn, nil
}

// MySQL and MariaDB server error numbers.
const (
	erDupEntry         = 1062 // a unique key is taken
	erNoSuchThread     = 1094 // KILL: no connection has that id
	erQueryInterrupted = 1317 // the statement was interrupted (KILL QUERY, on some versions)
	erLockDeadlock     = 1213 // chosen as a deadlock victim: the transaction was rolled back
	erLockWaitTimeout  = 1205 // innodb_lock_wait_timeout passed
	erNoSuchTable      = 1146
	erAccessDenied     = 1045 // wrong user or password
	erDBAccessDenied   = 1044 // the user may not use the database
	erBadDB            = 1049 // unknown database
	erLockNowait       = 3572 // MySQL: a NOWAIT lock was not granted
	erPacketTooLarge   = 1153 // a packet over max_allowed_packet: the server drops the connection
	erUnknown          = 1105 // among others, a value sent in pieces over max_allowed_packet
)

func number(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// Retryable: a deadlock victim (its transaction rolled back) and a lock
// wait timeout (its statement rolled back; the store retries the whole
// transaction) are conflicts that pass.
func (driver) Retryable(err error) bool {
	switch number(err) {
	case erLockDeadlock, erLockWaitTimeout, erLockNowait:
		return true
	}
	return false
}

func (driver) UndefinedTable(err error) bool  { return number(err) == erNoSuchTable }
func (driver) UniqueViolation(err error) bool { return number(err) == erDupEntry }

// ConnectError tells a failed login and a missing database by their
// error numbers.
func (driver) ConnectError(err error) error {
	switch number(err) {
	case erAccessDenied, erDBAccessDenied:
		return store.ErrAuthentication
	case erBadDB:
		return store.ErrNoDatabase
	}
	return nil
}

// ListenNotes (store.NotesListener) holds the node lock's connection:
// MySQL has no notes, so it waits in store.MySQLListening, which the
// server interrupts (checking every few seconds) when the client is gone,
// releasing the lock with the connection. A wake from another node (KILL
// QUERY: the statement returns, the connection and its lock stay) is
// handed on as store.NoteWake, and the connection waits again. When the
// connection breaks (the server restarted, the network failed, KILL
// CONNECTION), the lock is lost and it returns. Cancelling ctx closes the
// connection. While nothing happens it costs one statement for as long
// as the node runs.
func (driver) ListenNotes(ctx context.Context, dc any, _ string, ready func(), note func(string)) error {
	c, ok := dc.(sqldriver.ExecerContext)
	if !ok {
		return fmt.Errorf("unexpected driver connection %T", dc)
	}
	ready()
	for {
		_, err := c.ExecContext(ctx, store.MySQLListening, nil)
		if ctx.Err() != nil || (err != nil && number(err) != erQueryInterrupted) {
			return sqldriver.ErrBadConn // the connection is over either way: never back to the pool
		}
		note(store.NoteWake)
	}
}

// ListenerGone (the store's wakeRefusals): the connection to wake ended
// between the listing and the wake.
func (driver) ListenerGone(err error) bool { return number(err) == erNoSuchThread }
