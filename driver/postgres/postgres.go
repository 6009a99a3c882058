// Package postgres is slotpoller's support for PostgreSQL, through
// github.com/jackc/pgx/v5 (database/sql's "pgx" driver): an application
// gives Driver() to client.New with the *sql.DB it opened. It imports pgx
// (which registers "pgx" with database/sql) and no other database driver.
//
// Invariants: every connection the node's pool opens has JIT compilation
// off unless the DSN sets jit itself; the admin reads are planned for
// each call's arguments (pgx's QueryExecModeDescribeExec); errors are told
// apart by their SQLSTATE alone.
package postgres

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/internal/store"
)

// Driver is PostgreSQL's support, for client.New.
func Driver() client.Driver { return driver{} }

// driver implements store.Driver for pgx.
type driver struct{}

// Dialect is the PostgreSQL dialect; PostgreSQL takes its search_path from
// the DSN, so schema is ignored.
func (driver) Dialect(string) (store.Dialect, error) { return store.Postgres{}, nil }

// Bind: pgx binds every value the dialect makes as it is.
func (driver) Bind(v any) any { return v }

// Open opens the pool. Each connection turns JIT compilation off
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
func (driver) Open(dsn string) (*sql.DB, error) {
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

// PlanPerCall runs the statement as the unnamed statement, described
// first (pgx's QueryExecModeDescribeExec: two round trips), which
// PostgreSQL plans for the arguments of each call, not as a named prepared
// statement that may get a generic plan (see the store's perCallPlan).
func (driver) PlanPerCall(q string, args []any) (string, []any) {
	return q, append([]any{pgx.QueryExecModeDescribeExec}, args...)
}

func (driver) Retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", "40P01", "55P03": // serialization failure, deadlock, lock not available
			return true
		}
	}
	return false
}

func (driver) UndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}

func (driver) UniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// ConnectError tells a failed login and a missing database by their
// SQLSTATE.
func (driver) ConnectError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "28P01" || pe.Code == "28000":
			return store.ErrAuthentication
		case pe.Code == "3D000":
			return store.ErrNoDatabase
		}
	}
	return nil
}

// ListenNotes listens on the farm's channel on the pgx connection under
// dc (see store.NotesListener).
func (driver) ListenNotes(ctx context.Context, dc any, channel string, ready func(), note func(string)) error {
	sc, ok := dc.(*stdlib.Conn)
	if !ok {
		return fmt.Errorf("unexpected driver connection %T", dc)
	}
	c := sc.Conn()
	var name string
	if err := c.QueryRow(ctx, `SELECT `+channel).Scan(&name); err != nil {
		return err
	}
	// LISTEN takes no parameter: the channel is an identifier, quoted.
	if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{name}.Sanitize()); err != nil {
		return err
	}
	ready()
	for {
		n, err := c.WaitForNotification(ctx)
		if err != nil {
			return sqldriver.ErrBadConn // the session is over either way: never back to the pool
		}
		note(n.Payload)
	}
}
