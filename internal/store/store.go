package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrDuplicate is returned when a unique key is already taken.
var ErrDuplicate = errors.New("already exists")

// ErrNotFound is returned when a row asked for by key does not exist.
var ErrNotFound = errors.New("not found")

// Store runs slotpoller's statements against one database.
type Store struct {
	pool *sql.DB
	db   conn // the pool, or the caller's transaction (WithTx)
	d    Dialect
	drv  Driver
	// callerTx: the statements run in a transaction the caller owns, so a
	// transient conflict is not retried here: a deadlock victim's whole
	// transaction was rolled back, and only the caller can run it again.
	callerTx bool
	stmts    atomic.Int64
	file     *sqliteFile // the SQLite file opened; nil for the others
	// finishSQL is JobsFinish's statement by its number of rows (-1: any), built
	// once: a busy node writes a batch of results every few milliseconds.
	finishSQL sync.Map // int → string
	// statements holds the statements expanded so far, shared with the
	// stores WithTx makes.
	statements *expandedStatements
	// windowRows, when set, replaces timeWindowRows (tests read both
	// ways of a time window on a few rows).
	windowRows int
	// readCommitted: the pool is Open's, and its driver sets every
	// connection to READ COMMITTED (sessionsReadCommitted), so the store's
	// own transactions need not say so again.
	readCommitted bool
	// packet is the server's packet limit once read (packet.go), shared
	// with the stores WithTx makes.
	packet *packetLimit
}

// sessionsReadCommitted is a driver whose pools set each connection's
// isolation level to READ COMMITTED when it connects (MySQL's).
type sessionsReadCommitted interface{ SessionsReadCommitted() bool }

// conn is what a statement is sent through: a *sql.DB or a *sql.Tx.
type conn interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// WithTx returns a store that sends its statements in tx, the caller's
// transaction: what it writes commits or rolls back with the caller's own
// writes. It does not retry transient conflicts (see Store.callerTx).
func (s *Store) WithTx(tx *sql.Tx) *Store {
	return &Store{pool: s.pool, db: tx, d: s.d, drv: s.drv, callerTx: true, statements: s.statements, windowRows: s.windowRows, packet: s.packet}
}

// InTx reports whether the store sends its statements in a caller's
// transaction.
func (s *Store) InTx() bool { return s.callerTx }

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

// Open connects to the database of drv and checks that it answers. Errors
// never carry the DSN's password. (The node opens a database by its
// database.driver name through internal/store/open.)
func Open(ctx context.Context, drv Driver, dsn string, opts ...Option) (*Store, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	d, err := drv.Dialect(o.schema)
	if err != nil {
		return nil, err
	}
	what := d.Name() + " database"
	if _, ok := d.(SQLite); ok {
		what = fmt.Sprintf("SQLite database %q", dsn) // a path: no secret in it
	}
	db, err := drv.Open(dsn)
	if err != nil {
		return nil, scrub(fmt.Errorf("open %s: %w", what, err), dsn)
	}
	configurePool(db, d)
	if err := ping(ctx, db, drv); err != nil {
		db.Close()
		return nil, scrub(ExplainConnect(fmt.Errorf("connect to %s: %w", what, err), drv), dsn)
	}
	if c, ok := d.(interface {
		checkSession(context.Context, *sql.DB) error
	}); ok {
		if err := c.checkSession(ctx, db); err != nil {
			db.Close()
			return nil, scrub(ExplainConnect(fmt.Errorf("%s: %w", what, err), drv), dsn)
		}
	}
	s := newStore(db, d, drv)
	if rc, ok := drv.(sessionsReadCommitted); ok {
		s.readCommitted = rc.SessionsReadCommitted()
	}
	if _, ok := d.(SQLite); ok {
		if s.file, err = openedFile(ctx, db); err != nil {
			db.Close()
			return nil, ExplainConnect(fmt.Errorf("%s: %w", what, err), drv)
		}
	}
	return s, nil
}

// poolSize is how many connections a node opens to a server database:
// enough for the poll, the heartbeats, the lease renewals and the results
// of the calls in flight at once.
const poolSize = 8

// configurePool sizes the pool for dialect d. The pool keeps idle as many
// connections as it may open (database/sql keeps 2 by default): a node
// uses them all again at its next burst, and closing and reopening them
// costs a login each time. Connections idle for a minute (or, see
// KeepIdleFor, two rotations) are closed.
func configurePool(db *sql.DB, d Dialect) {
	if _, ok := d.(SQLite); ok {
		// One connection per process: SQLite has one writer anyway, and a
		// single connection cannot deadlock against itself on the file lock.
		db.SetMaxOpenConns(1)
		return
	}
	size := poolSize
	if _, ok := d.(SQLServer); ok {
		size = sqlServerPoolSize
	}
	db.SetMaxOpenConns(size)
	db.SetMaxIdleConns(size)
	db.SetConnMaxIdleTime(minIdleTime)
}

// minIdleTime is how long a server database's pool keeps a connection
// nobody uses, unless KeepIdleFor asks for longer.
const minIdleTime = time.Minute

// IdleTimeFor is how long a pool must keep idle connections for a node
// whose turns come every between: two rotations, and never less than a
// minute.
func IdleTimeFor(between time.Duration) time.Duration {
	return max(minIdleTime, 2*between)
}

// KeepIdleFor makes the pool of a server database keep an idle connection
// for IdleTimeFor(between), so that a node of a farm whose rotation is
// longer than a minute (more than 60 nodes at a slot of 1 s) does not log
// in again at each of its turns: a new backend process on PostgreSQL, a
// statement to turn JIT off, and on Babelfish a compile of every statement
// the connection sends. SQLite's one connection is never closed.
func (s *Store) KeepIdleFor(between time.Duration) {
	if _, ok := s.d.(SQLite); ok {
		return
	}
	s.pool.SetConnMaxIdleTime(IdleTimeFor(between))
}

// sqlServerPoolSize is the pool of a SQL Server node. Babelfish compiles
// each statement afresh on every connection that first sends it (1.4 s
// for a claim, 2.8 s for the load count on the CI test server, then 15 ms),
// so every extra connection costs a round of compiles: under a burst,
// eight connections a node on three nodes kept a 2-core test server busy
// compiling until statements timed out, which discards their connections
// and starts the compiles over. SQL Server caches plans for the whole
// server and does not care.
const sqlServerPoolSize = 4

// ping checks that the database answers. A transient conflict is waited
// out: opening a SQLite file sets its journal mode, which needs the file's
// lock for a moment and fails busy (not waiting on busy_timeout) while
// another process migrates it.
func ping(ctx context.Context, db *sql.DB, drv Driver) error {
	return retryTransient(ctx, drv, 12, func() error { return db.PingContext(ctx) })
}

// retryTransient runs op up to attempts times while drv calls its error
// transient, pausing 5 ms, doubling, at most a second, and never past ctx.
func retryTransient(ctx context.Context, drv Driver, attempts int, op func() error) error {
	pause := 5 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil || attempt >= attempts || !drv.Retryable(err) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}

// Wrap makes a store of a connection pool the caller opened (an
// application's, or a go-mssqldb connector with Azure AD authentication,
// say) on the database of drv, with slotpoller's tables in schema (SQL
// Server; "" for the default). It sends nothing.
func Wrap(db *sql.DB, drv Driver, schema string) (*Store, error) {
	d, err := drv.Dialect(schema)
	if err != nil {
		return nil, err
	}
	return newStore(db, d, drv), nil
}

// New wraps a connection pool as a store of dialect d with no driver: its
// values are bound as the dialect makes them, and no error is told apart
// (none is retried). It is for tests of the statements a dialect
// generates; WithDriver gives such a store a driver.
func New(db *sql.DB, d Dialect) *Store { return newStore(db, d, noDriver{}) }

// WithDriver returns a store of s's pool and dialect whose values bind and
// whose errors are told apart by drv (a test's recording database, which
// stands for drv's).
func (s *Store) WithDriver(drv Driver) *Store { return newStore(s.pool, s.d, drv) }

func newStore(db *sql.DB, d Dialect, drv Driver) *Store {
	return &Store{pool: db, db: db, d: d, drv: drv, statements: &expandedStatements{}, packet: &packetLimit{}}
}

// scrub removes the DSN's password from an error message: drivers quote
// connection strings in their errors, or pieces of a password they
// misparsed as a host or a port, and an operator's log is no place for a
// password. The error stays in the chain, for errors.Is and errors.As.
func scrub(err error, dsn string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if dsn != "" {
		msg = strings.ReplaceAll(msg, dsn, MaskDSN(dsn))
	}
	for _, secret := range dsnSecrets(dsn) {
		msg = replaceSecret(msg, secret)
	}
	if msg == err.Error() {
		return err
	}
	return &scrubbedError{msg: msg, err: err}
}

// scrubbedError is an error whose message lost the password.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// replaceSecret masks secret in msg. A short one is masked only as a
// whole word, so that a password "pa" does not turn "parse" into
// "xxxxxrse"; a long one wherever it appears.
func replaceSecret(msg, secret string) string {
	if len(secret) >= 4 {
		return strings.ReplaceAll(msg, secret, passwordMask)
	}
	var b strings.Builder
	for {
		i := strings.Index(msg, secret)
		if i < 0 {
			b.WriteString(msg)
			return b.String()
		}
		end := i + len(secret)
		b.WriteString(msg[:i])
		if (i > 0 && isWordByte(msg[i-1])) || (end < len(msg) && isWordByte(msg[end])) {
			b.WriteString(secret)
		} else {
			b.WriteString(passwordMask)
		}
		msg = msg[end:]
	}
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// Close closes the connection pool.
func (s *Store) Close() error { return s.pool.Close() }

// DB is the connection pool, for the migrator.
func (s *Store) DB() *sql.DB { return s.pool }

// Dialect is the store's dialect.
func (s *Store) Dialect() Dialect { return s.d }

// Driver is the store's driver.
func (s *Store) Driver() Driver { return s.drv }

// UndefinedTable reports whether err, from one of the store's statements,
// says a table does not exist (a database never migrated).
func (s *Store) UndefinedTable(err error) bool { return s.drv.UndefinedTable(err) }

// Statements returns how many statements this store has sent, for the
// benchmark of the farm's database load.
func (s *Store) Statements() int64 { return s.stmts.Load() }

// args passes each parameter through the dialect's Arg, then the
// driver's Bind.
func (s *Store) args(in []any) []any {
	out := make([]any, len(in))
	for i, v := range in {
		out[i] = s.drv.Bind(s.d.Arg(v))
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
	if s.callerTx {
		return op()
	}
	return retryTransient(ctx, s.drv, 8, op)
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
	if err := s.queryRow(ctx, s.statement("SELECT {now}")).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("read database clock: %w", err)
	}
	return t.T, nil
}

func millis(d time.Duration) int64 { return d.Milliseconds() }
