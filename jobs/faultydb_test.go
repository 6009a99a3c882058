package jobs_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"sync"
	"testing"

	"github.com/slotpoller/slotpoller/driver/sqlite"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// faultyDB is a real, migrated SQLite database behind connections a test
// can make misbehave the way a network and a busy server do: a statement
// that stalls, or one that commits and whose answer never arrives.
type faultyDB struct {
	mu   sync.Mutex
	hook func(ctx context.Context, query string) fault
}

// fault is what the hook makes of a statement; the zero value passes it.
type fault struct {
	err  error // the statement fails with err, unrun...
	lost bool  // ...or, with lost, after it ran and committed
	// hold, if set, runs after the statement ran and committed and before
	// its answer is returned: a slow network between a commit and the node.
	hold func()
}

// openFaulty returns a store on a faultyDB. Its pool has several
// connections, as on PostgreSQL, so that a stalled statement does not hold
// the only one.
func openFaulty(t *testing.T) (*store.Store, *faultyDB) {
	_, path := storetest.Open(t, "sqlite") // creates and migrates the file
	probe, err := sql.Open("sqlite", "")
	require.NoError(t, err)
	drv := probe.Driver()
	require.NoError(t, probe.Close())
	f := &faultyDB{}
	db := sql.OpenDB(faultyConnector{f: f, drv: drv,
		dsn: "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"})
	db.SetMaxOpenConns(4)
	t.Cleanup(func() { db.Close() })
	s, err := store.Wrap(db, sqlite.Driver(), "")
	require.NoError(t, err)
	return s, f
}

// set replaces the hook; nil lets every statement through.
func (f *faultyDB) set(hook func(ctx context.Context, query string) fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hook = hook
}

func (f *faultyDB) judge(ctx context.Context, query string) fault {
	f.mu.Lock()
	hook := f.hook
	f.mu.Unlock()
	if hook == nil {
		return fault{}
	}
	return hook(ctx, query)
}

// isClaim tells the runner's claim statement.
func isClaim(query string) bool {
	return query == store.Expand(store.SQLite{}, store.SQLite{}.ClaimJobs())
}

var errAnswerLost = errors.New("read tcp: connection reset by peer")

type faultyConnector struct {
	f   *faultyDB
	drv driver.Driver
	dsn string
}

func (c faultyConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &faultyConn{conn.(sqliteConn), c.f}, nil
}

func (c faultyConnector) Driver() driver.Driver { return c.drv }

// sqliteConn is what modernc.org/sqlite's connection offers database/sql.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
}

type faultyConn struct {
	sqliteConn
	f *faultyDB
}

func (c *faultyConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	ft := c.f.judge(ctx, query)
	if ft.err != nil && !ft.lost {
		return nil, ft.err
	}
	res, err := c.sqliteConn.ExecContext(ctx, query, args)
	if ft.hold != nil {
		ft.hold()
	}
	if err != nil || ft.err == nil {
		return res, err
	}
	return nil, ft.err
}

func (c *faultyConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	ft := c.f.judge(ctx, query)
	if ft.err != nil && !ft.lost {
		return nil, ft.err
	}
	rows, err := c.sqliteConn.QueryContext(ctx, query, args)
	if err != nil || (ft.err == nil && ft.hold == nil) {
		return rows, err
	}
	// Step through every row, so that the statement completes and
	// commits, then hold or lose the answer.
	kept := &keptRows{cols: rows.Columns()}
	for {
		dest := make([]driver.Value, len(kept.cols))
		if rows.Next(dest) != nil {
			break
		}
		kept.rows = append(kept.rows, dest)
	}
	rows.Close()
	if ft.hold != nil {
		ft.hold()
	}
	if ft.err != nil {
		return nil, ft.err
	}
	return kept, nil
}

// keptRows replays the answer of a statement that has completed.
type keptRows struct {
	cols []string
	rows [][]driver.Value
}

func (r *keptRows) Columns() []string { return r.cols }
func (r *keptRows) Close() error      { return nil }
func (r *keptRows) Next(dest []driver.Value) error {
	if len(r.rows) == 0 {
		return io.EOF
	}
	copy(dest, r.rows[0])
	r.rows = r.rows[1:]
	return nil
}
