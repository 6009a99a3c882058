// Package sqlite is slotpoller's support for SQLite, through
// modernc.org/sqlite (pure Go, database/sql's "sqlite" driver): an
// application gives Driver() to client.New with the *sql.DB it opened. It
// imports modernc.org/sqlite (which registers "sqlite" with database/sql)
// and no other database driver.
//
// Invariants: a file the node opens is in WAL mode, waits up to 10 s for
// the write lock and begins its transactions IMMEDIATE, unless its "file:"
// DSN says otherwise; busy and locked errors are retried.
package sqlite

import (
	"database/sql"
	"errors"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/internal/store"
)

// Driver is SQLite's support, for client.New.
func Driver() client.Driver { return driver{} }

// driver implements store.Driver for modernc.org/sqlite.
type driver struct{}

// Dialect is the SQLite dialect; SQLite has no schemas, so schema is
// ignored.
func (driver) Dialect(string) (store.Dialect, error) { return store.SQLite{}, nil }

// Open opens the file at dsn with the settings of sqliteDSN.
func (driver) Open(dsn string) (*sql.DB, error) { return sql.Open("sqlite", sqliteDSN(dsn)) }

// Bind: modernc.org/sqlite binds every value the dialect makes as it is.
func (driver) Bind(v any) any { return v }

func (driver) Retryable(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return true
		}
	}
	return err != nil && strings.Contains(err.Error(), "database is locked")
}

// UndefinedTable: SQLite reports a missing table only in its message
// (SQLITE_ERROR is the generic code).
func (driver) UndefinedTable(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such table")
}

func (driver) UniqueViolation(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		c := se.Code()
		return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	return false
}

// SQLite result codes (the primary code: the low byte of an extended one).
const (
	sqliteCantOpen = 14
	sqliteNotADB   = 26
)

// ConnectError tells a file that is not a database, and one that cannot
// be opened, by their result codes.
func (driver) ConnectError(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqliteNotADB:
			return store.ErrNotADatabase
		case sqliteCantOpen:
			return store.ErrCannotOpen
		}
	}
	return nil
}

// sqliteDSN turns a plain path into a modernc DSN with the settings several
// processes sharing one file need: WAL so readers don't block the writer, a
// busy timeout so a writer waits for the lock instead of failing, and
// IMMEDIATE transactions so a transaction takes the write lock when it
// begins rather than failing to upgrade halfway. A plain path is taken
// literally (a '#', '%' or '?' in a folder name is escaped); a "file:" URI
// is passed on as written, with the settings added unless it sets them.
func sqliteDSN(dsn string) string {
	path, query := dsn, ""
	if strings.HasPrefix(dsn, "file:") {
		path, query, _ = strings.Cut(dsn, "?")
	} else {
		path = "file:" + strings.NewReplacer("%", "%25", "#", "%23", "?", "%3F").Replace(dsn)
	}
	var params []string
	if query != "" {
		params = append(params, query)
	}
	for _, p := range []struct{ key, param string }{
		{"busy_timeout", "_pragma=busy_timeout(10000)"},
		{"journal_mode", "_pragma=journal_mode(WAL)"},
		{"synchronous", "_pragma=synchronous(NORMAL)"},
		{"_txlock", "_txlock=immediate"},
	} {
		if !strings.Contains(query, p.key) {
			params = append(params, p.param)
		}
	}
	return path + "?" + strings.Join(params, "&")
}
