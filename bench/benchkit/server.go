// Package benchkit is what both sides of the River comparison share: the
// database set-up, the statement count, the 1 ms endpoint, the scenarios and
// the result lines. A side (slotpoller in ./bench, River in ./bench/river, a
// module of its own) only says how to start its farm and enqueue jobs, so
// the two are measured by the same code.
//
// It imports pgx and the standard library only, so that the River module
// can use it without depending on the product.
package benchkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The farm connects as FarmRole and everything else (migrations, enqueues,
// read-backs) as FeederRole, so that the count of pg_stat_statements can be
// limited to the farm's own statements in the farm's own database.
const (
	FarmRole   = "bench_farm"
	FeederRole = "bench_feeder"
)

// DBServer is the database server the scenarios run on: it gives each
// farm a fresh database and counts the statements the farm's login sends
// there. Server is PostgreSQL's; the bench supplies others (MariaDB's).
type DBServer interface {
	// FreshDatabase creates an empty database.
	FreshDatabase(ctx context.Context) (*Database, error)
	// DropDatabase removes a database FreshDatabase made, cutting off
	// anything still connected.
	DropDatabase(ctx context.Context, name string) error
	// ResetStatements starts a count.
	ResetStatements(ctx context.Context) error
	// FarmStatements is the number of statements the farm's login has
	// executed in d since the last reset, the bench's own left out.
	FarmStatements(ctx context.Context, d *Database) (int64, error)
	// CPU reads this process's CPU time and the database server's.
	CPU() (CPU, error)
}

// OtherCommands is what a DBServer that counts more than statements
// implements: round trips the farm made since the last reset that are not
// statements, by name (MariaDB's prepares and closes of server-side
// prepared statements), reported beside the statements.
type OtherCommands interface {
	FarmOtherCommands(ctx context.Context, d *Database) (map[string]int64, error)
}

// Server is a PostgreSQL server with pg_stat_statements loaded, reached
// through an administrator's DSN.
type Server struct {
	admin   string
	Version string
	// Postmaster is the server's main process id when it runs on this
	// machine (the parent of a backend), else 0: ReadCPU's filter.
	Postmaster int
}

// OpenServer checks that the server can count statements and creates the
// two roles.
func OpenServer(ctx context.Context, adminDSN string) (*Server, error) {
	c, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL as administrator: %w", err)
	}
	defer c.Close(ctx)
	s := &Server{admin: adminDSN}
	var backend int
	if err := c.QueryRow(ctx, "SELECT current_setting('server_version'), pg_backend_pid()").Scan(&s.Version, &backend); err != nil {
		return nil, err
	}
	s.Postmaster = parentOf(backend)
	var libs string
	if err := c.QueryRow(ctx, "SHOW shared_preload_libraries").Scan(&libs); err != nil {
		return nil, err
	}
	if !strings.Contains(libs, "pg_stat_statements") {
		return nil, fmt.Errorf("the server at %s does not load pg_stat_statements (shared_preload_libraries = %q): "+
			"statements cannot be counted; leave -dsn out to let the bench start a private server", host(adminDSN), libs)
	}
	for _, q := range []string{
		"CREATE EXTENSION IF NOT EXISTS pg_stat_statements",
		"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '" + FarmRole + "') THEN CREATE ROLE " + FarmRole + " LOGIN SUPERUSER; END IF; END $$",
		"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '" + FeederRole + "') THEN CREATE ROLE " + FeederRole + " LOGIN SUPERUSER; END IF; END $$",
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("prepare the server (%s): %w", q, err)
		}
	}
	return s, nil
}

// Database is a fresh database for one farm run.
type Database struct {
	Server DBServer
	// Driver is slotpoller's database.driver for the DSNs: "postgres" or
	// "mysql".
	Driver    string
	Name      string
	FarmDSN   string
	FeederDSN string
}

// FreshDatabase creates an empty database.
func (s *Server) FreshDatabase(ctx context.Context) (*Database, error) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	d := &Database{Server: s, Driver: "postgres", Name: "bench_" + hex.EncodeToString(b)}
	if err := s.exec(ctx, "CREATE DATABASE "+d.Name); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	var err error
	if d.FarmDSN, err = withUserDB(s.admin, FarmRole, d.Name); err != nil {
		return nil, err
	}
	d.FeederDSN, _ = withUserDB(s.admin, FeederRole, d.Name)
	return d, nil
}

// Drop removes the database, cutting off anything still connected.
func (d *Database) Drop(ctx context.Context) error { return d.Server.DropDatabase(ctx, d.Name) }

// DropDatabase removes database name, cutting off anything still
// connected.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	return s.exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
}

// CPU reads this process's CPU time and that of the server's processes
// (ReadCPU).
func (s *Server) CPU() (CPU, error) { return ReadCPU(s.Postmaster) }

// ResetStatements starts a count (pg_stat_statements_reset()).
func (s *Server) ResetStatements(ctx context.Context) error {
	return s.exec(ctx, "SELECT pg_stat_statements_reset()")
}

// FarmStatements is the number of statements the farm's role has completed
// in d since the last reset: the sum of calls over pg_stat_statements,
// utility statements (BEGIN, COMMIT, LISTEN, …) included.
func (s *Server) FarmStatements(ctx context.Context, d *Database) (int64, error) {
	c, err := pgx.Connect(ctx, s.admin)
	if err != nil {
		return 0, err
	}
	defer c.Close(ctx)
	var n int64
	err = c.QueryRow(ctx, `SELECT COALESCE(sum(calls), 0)::bigint FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)
		AND userid = (SELECT oid FROM pg_roles WHERE rolname = $2)`, d.Name, FarmRole).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	return n, nil
}

// StatementKind is one statement text's share of what a farm sent.
type StatementKind struct {
	Query       string // the normalised text, shortened to one line
	Calls, Rows int64
	Millis      float64 // server time executing it
}

// StatementKinds is a server that tells the farm's statements apart.
type StatementKinds interface {
	// FarmStatementKinds lists the farm's statements since the last
	// reset by text, the most called first.
	FarmStatementKinds(ctx context.Context, d *Database) ([]StatementKind, error)
}

// FarmStatementKinds reads pg_stat_statements by query for the farm.
func (s *Server) FarmStatementKinds(ctx context.Context, d *Database) ([]StatementKind, error) {
	return s.statementKinds(ctx, d, FarmRole)
}

// DatabaseStatementKinds reads pg_stat_statements by query for d, every
// role's (the farm's and the feeder's), the most called first.
func (s *Server) DatabaseStatementKinds(ctx context.Context, d *Database) ([]StatementKind, error) {
	return s.statementKinds(ctx, d, "")
}

// statementKinds reads pg_stat_statements by query for d and role, or for
// every role when role is "".
func (s *Server) statementKinds(ctx context.Context, d *Database, role string) ([]StatementKind, error) {
	c, err := pgx.Connect(ctx, s.admin)
	if err != nil {
		return nil, err
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT query, calls, rows, total_exec_time FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)
		AND ($2 = '' OR userid = (SELECT oid FROM pg_roles WHERE rolname = $2)) ORDER BY calls DESC`, d.Name, role)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	defer rows.Close()
	var out []StatementKind
	for rows.Next() {
		var k StatementKind
		if err := rows.Scan(&k.Query, &k.Calls, &k.Rows, &k.Millis); err != nil {
			return nil, fmt.Errorf("read pg_stat_statements: %w", err)
		}
		k.Query = strings.Join(strings.Fields(k.Query), " ")
		if len(k.Query) > 140 {
			k.Query = k.Query[:140] + "…"
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

func (s *Server) exec(ctx context.Context, q string) error {
	c, err := pgx.Connect(ctx, s.admin)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, q)
	return err
}

func withUserDB(dsn, user, db string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return "", errors.New("the DSN must be a URL (postgres://user@host:port/db?…)")
	}
	u.User = url.User(user)
	u.Path = "/" + db
	return u.String(), nil
}

func host(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Host != "" {
		return u.Host
	}
	return "the given DSN"
}
