package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// nullConnector hands out connections that do nothing, to watch the pool.
type nullConnector struct{}

func (nullConnector) Connect(context.Context) (driver.Conn, error) { return nullConn{}, nil }
func (nullConnector) Driver() driver.Driver                        { return nil }

type nullConn struct{}

func (nullConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("not supported") }
func (nullConn) Close() error                        { return nil }
func (nullConn) Begin() (driver.Tx, error)           { return nil, errors.New("not supported") }

// The pool keeps every connection it may open: with database/sql's default
// of 2 idle connections, connections 3 to 8 would be closed after each use
// and opened again under load.
func TestPoolKeepsItsConnections(t *testing.T) {
	for _, tc := range []struct {
		d        Dialect
		max      int
		wantIdle int
	}{
		{SQLite{}, 1, 1},
		{Postgres{}, 8, 8},
		{SQLServer{}, sqlServerPoolSize, sqlServerPoolSize},
	} {
		t.Run(tc.d.Name(), func(t *testing.T) {
			db := sql.OpenDB(nullConnector{})
			defer db.Close()
			configurePool(db, tc.d)
			// A pool smaller than the test thinks would block Conn for good;
			// the deadline turns that into a failure.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var conns []*sql.Conn
			for range tc.max {
				c, err := db.Conn(ctx)
				require.NoError(t, err)
				conns = append(conns, c)
			}
			for _, c := range conns {
				require.NoError(t, c.Close())
			}
			st := db.Stats()
			require.Equal(t, tc.max, st.MaxOpenConnections)
			require.Equal(t, tc.wantIdle, st.Idle, "idle connections kept")
			require.Zero(t, st.MaxIdleClosed, "connections closed for the idle limit")
		})
	}
}
