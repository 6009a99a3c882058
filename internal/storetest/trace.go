package storetest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"sync"
	"testing"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
)

// Trace records every statement a store sends and answers from a script.
// It is for tests of the SQL a dialect generates where no server of that
// kind is at hand (SQL Server in most checkouts): it proves what is sent,
// with which parameters, in which order, never what a database would do
// with it. The conformance suite on real databases does that.
type Trace struct {
	mu      sync.Mutex
	calls   []Call
	respond func(Call) Reply
}

// Call is one statement as the driver received it.
type Call struct {
	Query string
	Args  []any // as the driver would bind them (after database/sql's conversion)
	Exec  bool  // sent with Exec rather than Query
	InTx  bool  // sent inside a transaction
}

// Reply is the scripted answer to a Call.
type Reply struct {
	Columns  []string
	Rows     [][]any
	Affected int64 // for Exec
	Err      error
}

// NewTrace returns a store of dialect d whose database is a Trace, standing
// for the database of d's driver: values bind, and errors are told apart,
// as that driver does. respond
// answers each statement; nil answers every Exec with one row affected and
// every Query with no rows.
func NewTrace(t testing.TB, d store.Dialect, respond func(Call) Reply) (*store.Store, *Trace) {
	t.Helper()
	drv, err := open.Driver(d.Name())
	if err != nil {
		t.Fatal(err)
	}
	tr := &Trace{respond: respond}
	db := sql.OpenDB(traceConnector{tr})
	t.Cleanup(func() { db.Close() })
	return store.New(db, d).WithDriver(drv), tr
}

// Calls returns the statements sent so far and forgets them.
func (tr *Trace) Calls() []Call {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	c := tr.calls
	tr.calls = nil
	return c
}

func (tr *Trace) do(c Call) Reply {
	tr.mu.Lock()
	tr.calls = append(tr.calls, c)
	tr.mu.Unlock()
	if tr.respond != nil {
		return tr.respond(c)
	}
	return Reply{Affected: 1}
}

type traceConnector struct{ tr *Trace }

func (c traceConnector) Connect(context.Context) (driver.Conn, error) {
	return &traceConn{tr: c.tr}, nil
}
func (c traceConnector) Driver() driver.Driver { return traceDriver{} }

type traceDriver struct{}

func (traceDriver) Open(string) (driver.Conn, error) {
	return nil, errors.New("storetest: the trace driver is opened through its connector")
}

type traceConn struct {
	tr   *Trace
	inTx bool
}

var (
	_ driver.QueryerContext    = (*traceConn)(nil)
	_ driver.ExecerContext     = (*traceConn)(nil)
	_ driver.ConnBeginTx       = (*traceConn)(nil)
	_ driver.NamedValueChecker = (*traceConn)(nil)
)

func (c *traceConn) Prepare(string) (driver.Stmt, error) {
	return nil, errors.New("storetest: the trace driver does not prepare statements")
}
func (c *traceConn) Close() error { return nil }
func (c *traceConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *traceConn) BeginTx(context.Context, driver.TxOptions) (driver.Tx, error) {
	c.inTx = true
	return traceTx{c}, nil
}

// CheckNamedValue passes every value through as it is, so that a test sees
// the Go type the real driver would be given (civil.DateTime, []byte...).
func (c *traceConn) CheckNamedValue(*driver.NamedValue) error { return nil }

func (c *traceConn) call(query string, args []driver.NamedValue, exec bool) Reply {
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	return c.tr.do(Call{Query: query, Args: vals, Exec: exec, InTx: c.inTx})
}

func (c *traceConn) ExecContext(_ context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	r := c.call(query, args, true)
	if r.Err != nil {
		return nil, r.Err
	}
	return driver.RowsAffected(r.Affected), nil
}

func (c *traceConn) QueryContext(_ context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	r := c.call(query, args, false)
	if r.Err != nil {
		return nil, r.Err
	}
	return &traceRows{cols: r.Columns, rows: r.Rows}, nil
}

type traceTx struct{ c *traceConn }

func (tx traceTx) Commit() error   { tx.c.inTx = false; return nil }
func (tx traceTx) Rollback() error { tx.c.inTx = false; return nil }

type traceRows struct {
	cols []string
	rows [][]any
}

func (r *traceRows) Columns() []string {
	if r.cols == nil && len(r.rows) > 0 {
		r.cols = make([]string, len(r.rows[0]))
	}
	return r.cols
}
func (r *traceRows) Close() error { return nil }

func (r *traceRows) Next(dest []driver.Value) error {
	if len(r.rows) == 0 {
		return io.EOF
	}
	for i, v := range r.rows[0] {
		dest[i] = v
	}
	r.rows = r.rows[1:]
	return nil
}
