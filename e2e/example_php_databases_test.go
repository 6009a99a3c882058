//go:build unix

package e2e

import (
	"testing"

	"github.com/slotpoller/slotpoller/internal/storetest"
)

// phpDriver is a database the PHP example runs on: the node's driver, the
// PDO extension PHP reaches it with, and the Debian package holding it.
type phpDriver struct{ driver, extension, debian string }

// phpDrivers are the databases both PHP example tests run on. SQL Server
// goes through pdo_dblib (FreeTDS), the PDO driver Debian ships.
var phpDrivers = []phpDriver{
	{"mysql", "pdo_mysql", "php-mysql"},
	{"postgres", "pdo_pgsql", "php-pgsql"},
	{"sqlserver", "pdo_dblib", "php-sybase"},
}

// requirePHPFor skips the test, saying what is missing, without PHP and
// its PDO extension for d or without d's test database.
func requirePHPFor(t *testing.T, d phpDriver) {
	t.Helper()
	requirePHP(t, d.extension, d.debian)
	switch d.driver {
	case "mysql":
		storetest.RequireMySQL(t)
	case "postgres":
		storetest.RequirePostgres(t)
	case "sqlserver":
		storetest.RequireSQLServer(t)
	}
}

// phpDBEnv is phpEnv for a test's database, with the SQL Server schema
// that holds the test's tables as APP_DB_SCHEMA: the example names its
// entry point and its own tables in it there (SQL Server has no search
// path that a DSN could set, as the PostgreSQL test's does).
func phpDBEnv(t *testing.T, db storetest.DB) []string {
	t.Helper()
	e := phpEnv(t, db.Driver, db.DSN)
	if db.Schema != "" {
		e = append(e, "APP_DB_SCHEMA="+db.Schema)
	}
	return e
}
