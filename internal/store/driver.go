package store

import (
	"context"
	"database/sql"
	"errors"
)

// Driver is what one database's Go driver brings to its dialect: how it
// opens connections, the types it binds values as, and what its errors
// mean. Each lives in a package of its own under driver/ (postgres,
// sqlserver, sqlite) that imports that database's driver alone: an
// application compiles in only the database it uses, and the node all
// three (internal/store/open). Only those packages implement it.
type Driver interface {
	// Dialect returns the database's dialect, with slotpoller's tables in
	// schema (SQL Server; "" is the default, and the other databases
	// ignore it).
	Dialect(schema string) (Dialect, error)
	// Open returns a connection pool for dsn, connecting lazily as
	// sql.Open does.
	Open(dsn string) (*sql.DB, error)
	// Bind converts a parameter, as the dialect's Arg made it, to the value
	// the driver should bind.
	Bind(v any) any
	// Retryable reports whether err is a transient conflict (busy database,
	// deadlock victim, serialization failure) worth retrying.
	Retryable(err error) bool
	// UndefinedTable reports whether err says a table does not exist (a
	// database never migrated).
	UndefinedTable(err error) bool
	// UniqueViolation reports whether err is a duplicate-key error.
	UniqueViolation(err error) bool
	// ConnectError returns the kind of connection failure (ErrAuthentication,
	// ErrNoDatabase, ErrNotADatabase, ErrCannotOpen) that an error of this
	// driver in err's chain says, or nil; ExplainConnect tells the network's
	// and TLS's failures itself.
	ConnectError(err error) error
}

// NotesListener is a driver that listens for the farm's notes on a
// connection of its own (PostgreSQL's LISTEN), for NodeLockTake.
type NotesListener interface {
	// ListenNotes runs on dc, the driver's connection (sql.Conn.Raw): it
	// reads the channel's name (channel is an SQL expression of it),
	// listens on it, calls ready, then hands each note's payload to note
	// until ctx ends or the session does. It returns
	// database/sql/driver.ErrBadConn once it has listened, so that the
	// connection never goes back to the pool.
	ListenNotes(ctx context.Context, dc any, channel string, ready func(), note func(payload string)) error
}

// noDriver is the driver of a store made by New: it binds values as the
// dialect made them and tells no error apart. It is for tests of the
// statements a dialect generates, which send them to a fake database.
type noDriver struct{}

func (noDriver) Dialect(string) (Dialect, error) {
	return nil, errors.New("a store made by New has no driver")
}
func (noDriver) Open(string) (*sql.DB, error) {
	return nil, errors.New("a store made by New has no driver")
}
func (noDriver) Bind(v any) any             { return v }
func (noDriver) Retryable(error) bool       { return false }
func (noDriver) UndefinedTable(error) bool  { return false }
func (noDriver) UniqueViolation(error) bool { return false }
func (noDriver) ConnectError(error) error   { return nil }
