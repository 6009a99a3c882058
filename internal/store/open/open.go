// Package open opens a node's database by its database.driver name
// (sqlite, postgres, sqlserver, mysql), with the driver packages of all four:
// it is the one place that compiles every database driver in, for the
// node and its commands. Applications import only their database's
// package under driver/.
package open

import (
	"context"
	"fmt"

	"github.com/slotpoller/slotpoller/driver/mysql"
	"github.com/slotpoller/slotpoller/driver/postgres"
	"github.com/slotpoller/slotpoller/driver/sqlite"
	"github.com/slotpoller/slotpoller/driver/sqlserver"
	"github.com/slotpoller/slotpoller/internal/store"
)

// Driver returns the driver of a database.driver value.
func Driver(name string) (store.Driver, error) {
	switch name {
	case "sqlite":
		return sqlite.Driver(), nil
	case "postgres":
		return postgres.Driver(), nil
	case "sqlserver":
		return sqlserver.Driver(), nil
	case "mysql":
		return mysql.Driver(), nil
	}
	return nil, fmt.Errorf("database driver %q is not supported (use sqlite, postgres, sqlserver or mysql)", name)
}

// Store connects to the database of the database.driver name at dsn and
// checks that it answers (store.Open). Errors never carry the DSN's
// password.
func Store(ctx context.Context, name, dsn string, opts ...store.Option) (*store.Store, error) {
	d, err := Driver(name)
	if err != nil {
		return nil, err
	}
	return store.Open(ctx, d, dsn, opts...)
}

// ExplainConnect is store.ExplainConnect with every driver's errors told
// apart: an error from any of the databases is explained as what it is.
func ExplainConnect(err error) error {
	return store.ExplainConnect(err, sqlite.Driver(), postgres.Driver(), sqlserver.Driver(), mysql.Driver())
}
