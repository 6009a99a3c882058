package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"  // registers the "pgx" database/sql driver
	_ "github.com/microsoft/go-mssqldb" // registers the "sqlserver" database/sql driver
	_ "modernc.org/sqlite"              // registers the "sqlite" database/sql driver
)

// ErrDuplicate is returned when a unique key is already taken.
var ErrDuplicate = errors.New("already exists")

// ErrNotFound is returned when a row asked for by key does not exist.
var ErrNotFound = errors.New("not found")

// Store runs slotpoller's statements against one database.
type Store struct {
	db    *sql.DB
	d     Dialect
	stmts atomic.Int64
}

// DialectFor returns the dialect of a database.driver value.
func DialectFor(driver string) (Dialect, error) {
	switch driver {
	case "sqlite":
		return SQLite{}, nil
	case "postgres":
		return Postgres{}, nil
	case "sqlserver":
		return SQLServer{}, nil
	}
	return nil, fmt.Errorf("database driver %q is not supported (use sqlite, postgres or sqlserver)", driver)
}

// Option adjusts Open.
type Option func(*options)

type options struct {
	schema string
}

// WithSchema names the SQL Server schema that holds slotpoller's tables
// (database.schema; "" for the default, slotpoller). The other databases
// ignore it: SQLite has no schemas, and PostgreSQL takes its search_path
// from the DSN.
func WithSchema(name string) Option { return func(o *options) { o.schema = name } }

// Open connects to the database and checks that it answers. Errors never
// carry the DSN's password.
func Open(ctx context.Context, driver, dsn string, opts ...Option) (*Store, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	d, err := DialectFor(driver)
	if err != nil {
		return nil, err
	}
	if _, ok := d.(SQLServer); ok {
		if d, err = NewSQLServer(o.schema); err != nil {
			return nil, err
		}
	}
	var db *sql.DB
	switch d.(type) {
	case SQLite:
		db, err = sql.Open("sqlite", sqliteDSN(dsn))
		// One connection per process: SQLite has one writer anyway, and a
		// single connection cannot deadlock against itself on the file lock.
		db.SetMaxOpenConns(1)
	case Postgres:
		db, err = sql.Open("pgx", dsn)
		db.SetMaxOpenConns(8)
		db.SetConnMaxIdleTime(time.Minute)
	case SQLServer:
		// The "sqlserver" driver name makes go-mssqldb bind @p1..@pN.
		db, err = sql.Open("sqlserver", dsn)
		if err == nil {
			db.SetMaxOpenConns(8)
			// Idle connections are kept (database/sql keeps 2): Babelfish
			// parses a statement afresh on each new connection, 0.1-0.5 s
			// for the claim, longer than a short lease's renewal deadline.
			db.SetMaxIdleConns(8)
			db.SetConnMaxIdleTime(time.Minute)
		}
	}
	if err != nil {
		return nil, scrub(fmt.Errorf("open %s database: %w", driver, err), dsn)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, scrub(fmt.Errorf("connect to %s database: %w", driver, err), dsn)
	}
	if c, ok := d.(interface {
		checkSession(context.Context, *sql.DB) error
	}); ok {
		if err := c.checkSession(ctx, db); err != nil {
			db.Close()
			return nil, scrub(fmt.Errorf("%s database: %w", driver, err), dsn)
		}
	}
	return New(db, d), nil
}

// New wraps a connection pool the caller opened (a go-mssqldb connector
// with Azure AD authentication, say, or a test's recording driver) as a
// store of dialect d.
func New(db *sql.DB, d Dialect) *Store { return &Store{db: db, d: d} }

// scrub removes the DSN's password from an error message: drivers quote
// connection strings in their errors, and an operator's log is no place for
// a password.
func scrub(err error, dsn string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, pw := range dsnPasswords(dsn) {
		if pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	if msg == err.Error() {
		return err
	}
	return errors.New(msg)
}

// dsnPasswords returns the password as it appears in the DSN and as the
// driver decodes it: an error may quote either.
func dsnPasswords(dsn string) []string {
	pw := dsnPassword(dsn)
	out := []string{pw}
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if raw, _, ok := strings.Cut(strings.TrimPrefix(u.User.String(), u.User.Username()+":"), "@"); ok || raw != "" {
			out = append(out, raw)
		}
	}
	if dec, err := url.QueryUnescape(pw); err == nil {
		out = append(out, dec)
	}
	return out
}

var kvPassword = regexp.MustCompile(`(?i)(?:^|[\s;])(?:password|pwd)\s*=\s*('[^']*'|[^\s;]*)`)

func dsnPassword(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			return pw
		}
	}
	if u, err := url.Parse(dsn); err == nil {
		if pw := u.Query().Get("password"); pw != "" {
			return pw
		}
	}
	if m := kvPassword.FindStringSubmatch(dsn); m != nil {
		return strings.Trim(m[1], "'")
	}
	return ""
}

// Close closes the connection pool.
func (s *Store) Close() error { return s.db.Close() }

// DB is the connection pool, for the migrator.
func (s *Store) DB() *sql.DB { return s.db }

// Dialect is the store's dialect.
func (s *Store) Dialect() Dialect { return s.d }

// Statements returns how many statements this store has sent, for the
// benchmark of the farm's database load.
func (s *Store) Statements() int64 { return s.stmts.Load() }

// args passes each parameter through the dialect's Arg.
func (s *Store) args(in []any) []any {
	out := make([]any, len(in))
	for i, v := range in {
		out[i] = s.d.Arg(v)
	}
	return out
}

func (s *Store) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	s.stmts.Add(1)
	return s.db.ExecContext(ctx, q, s.args(args)...)
}

func (s *Store) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	s.stmts.Add(1)
	return s.db.QueryContext(ctx, q, s.args(args)...)
}

func (s *Store) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	s.stmts.Add(1)
	return s.db.QueryRowContext(ctx, q, s.args(args)...)
}

// retry runs op again while the database reports a transient conflict
// (SQLite busy, a deadlock victim), with a short growing pause. Conflicts
// are expected when several nodes write the same rows; they are never
// surfaced as a failed operation unless they persist.
func (s *Store) retry(ctx context.Context, op func() error) error {
	pause := 5 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil || attempt >= 8 || !s.d.Retryable(err) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause *= 2
	}
}

// rowScanner is what a scan function reads one row from.
type rowScanner interface{ Scan(dest ...any) error }

// queryAll runs a statement that returns rows, retrying transient
// conflicts like every other statement, and scans each row with scan.
// Errors say what the statement was for.
func queryAll[T any](ctx context.Context, s *Store, what, q string, args []any, scan func(rowScanner) (T, error)) ([]T, error) {
	var out []T
	err := s.retry(ctx, func() error {
		out = out[:0]
		rows, err := s.query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			v, err := scan(rows)
			if err != nil {
				return err
			}
			out = append(out, v)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// Now reads the database clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var t dbTime
	if err := s.queryRow(ctx, expand(s.d, "SELECT {now}")).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("read database clock: %w", err)
	}
	return t.T, nil
}

func millis(d time.Duration) int64 { return d.Milliseconds() }
