// Package storetest gives tests real, freshly migrated databases: SQLite in
// a temporary file always, PostgreSQL when SLOTPOLLER_TEST_POSTGRES_DSN is
// set, SQL Server when SLOTPOLLER_TEST_SQLSERVER_DSN is set and MySQL or
// MariaDB when SLOTPOLLER_TEST_MYSQL_DSN is set, each test in a schema (on
// MySQL a database) of its own so packages can run in parallel against one
// server.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mysqlconf "github.com/go-sql-driver/mysql"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/schema"
	"github.com/stretchr/testify/require"
)

// PostgresEnv names the variable holding the PostgreSQL test DSN.
const PostgresEnv = "SLOTPOLLER_TEST_POSTGRES_DSN"

// SQLServerEnv names the variable holding the SQL Server test DSN, a
// go-mssqldb DSN of a database the login may create schemas and tables in.
const SQLServerEnv = "SLOTPOLLER_TEST_SQLSERVER_DSN"

// MySQLEnv names the variable holding the MySQL (or MariaDB) test DSN, a
// go-sql-driver DSN of a login that may create databases; each test gets a
// database of its own, created beside the DSN's.
const MySQLEnv = "SLOTPOLLER_TEST_MYSQL_DSN"

// Drivers are the databases every conformance test runs on.
var Drivers = []string{"sqlite", "postgres", "sqlserver", "mysql"}

// Each runs fn once per database driver as a subtest.
func Each(t *testing.T, fn func(t *testing.T, driver string)) {
	for _, d := range Drivers {
		t.Run(d, func(t *testing.T) {
			switch d {
			case "postgres":
				RequirePostgres(t)
			case "sqlserver":
				RequireSQLServer(t)
			case "mysql":
				RequireMySQL(t)
			}
			fn(t, d)
		})
	}
}

// EachParallel is Each with the databases' subtests run side by side:
// each has a database of its own, and the suite's time is then about the
// slowest database's (the T-SQL test server's) rather than the sum of all
// four. fn must not change process-wide state (t.Setenv) or read a
// server-wide counter another database's subtest could move.
func EachParallel(t *testing.T, fn func(t *testing.T, driver string)) {
	Each(t, func(t *testing.T, driver string) {
		t.Parallel()
		fn(t, driver)
	})
}

// RequirePostgres skips the test, saying why, when no PostgreSQL is configured.
func RequirePostgres(t testing.TB) string {
	dsn := os.Getenv(PostgresEnv)
	if dsn == "" {
		t.Skipf("%s is not set: skipping the PostgreSQL test (set it to e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)", PostgresEnv)
	}
	return dsn
}

// RequireSQLServer skips the test, saying why, when no SQL Server is configured.
func RequireSQLServer(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(SQLServerEnv)
	if dsn == "" {
		t.Skipf("%s is not set: skipping the SQL Server test (set it to e.g. sqlserver://sa:PASSWORD@127.0.0.1:1433?database=test)", SQLServerEnv)
	}
	return dsn
}

// RequireMySQL skips the test, saying why, when no MySQL is configured.
func RequireMySQL(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(MySQLEnv)
	if dsn == "" {
		t.Skipf("%s is not set: skipping the MySQL test (set it to e.g. root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC)", MySQLEnv)
	}
	return dsn
}

// DB is a new empty database for one test: what a store or a node process
// needs to reach it.
type DB struct {
	Driver string
	DSN    string
	// Schema is the SQL Server schema that holds the test's tables ("" for
	// the other databases, whose DSN says it all).
	Schema string
}

// Open connects a new store to the database, as another node would.
func (db DB) Open(ctx context.Context) (*store.Store, error) {
	return open.Store(ctx, db.Driver, db.DSN, store.WithSchema(db.Schema))
}

// ExtraEnv is what a slotpoller process needs besides
// SLOTPOLLER_DATABASE_DRIVER and _DSN to reach the database.
func (db DB) ExtraEnv() []string {
	if db.Schema == "" {
		return nil
	}
	return []string{"SLOTPOLLER_DATABASE_SCHEMA=" + db.Schema}
}

// New returns a new empty database of the driver, removed when the test
// ends. On SQL Server it is a schema sp_test_<random> that the first
// migration creates.
func New(t testing.TB, driver string) DB {
	t.Helper()
	if driver == "sqlserver" {
		dsn := RequireSQLServer(t)
		return DB{Driver: driver, DSN: dsn, Schema: sqlServerSchema(t, dsn)}
	}
	return DB{Driver: driver, DSN: DSN(t, driver)}
}

// sqlServerSchema names a schema for the test and drops it, with whatever
// tables it holds, when the test ends.
func sqlServerSchema(t testing.TB, dsn string) string {
	t.Helper()
	schema := "sp_test_" + randomHex(6)
	t.Cleanup(func() {
		db, err := sql.Open("sqlserver", dsn)
		if err != nil {
			t.Errorf("drop test schema %s: %v", schema, err)
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := DropSQLServerSchema(ctx, db, schema); err != nil {
			t.Errorf("drop test schema %s: %v", schema, err)
		}
	})
	return schema
}

// DropSQLServerSchema drops a test's (or the bench's) schema with its
// procedures and tables, one DROP per object: concatenating over rows
// (`SELECT @s = @s + ...`) is not portable (Babelfish keeps the last row)
// and STRING_AGG is SQL Server 2017+. The name is ours (a prefix and hex),
// so it needs no quoting.
func DropSQLServerSchema(ctx context.Context, db *sql.DB, schema string) error {
	rows, err := db.QueryContext(ctx, `SELECT name, type FROM sys.objects WHERE schema_id = SCHEMA_ID(N'`+schema+`') AND type IN ('P', 'U') ORDER BY type`)
	if err != nil {
		return err
	}
	var drops []string
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			rows.Close()
			return err
		}
		kind := "TABLE"
		if strings.TrimSpace(typ) == "P" {
			kind = "PROCEDURE"
		}
		drops = append(drops, kind+"\x00"+name)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, d := range drops {
		kind, name, _ := strings.Cut(d, "\x00")
		if _, err := db.ExecContext(ctx, `DECLARE @q nvarchar(max) = N'DROP `+kind+` [`+schema+`].' + QUOTENAME(@p1); EXEC sp_executesql @q`, name); err != nil {
			return err
		}
	}
	_, err = db.ExecContext(ctx, `IF SCHEMA_ID(N'`+schema+`') IS NOT NULL EXEC(N'DROP SCHEMA [`+schema+`]')`)
	return err
}

// DSN returns a DSN for a new empty database of the driver, removed when
// the test ends. For SQL Server a DSN is not enough (the test's tables are
// in a schema of their own): use New.
func DSN(t testing.TB, driver string) string {
	t.Helper()
	switch driver {
	case "sqlite":
		return filepath.Join(t.TempDir(), "slotpoller.db")
	case "sqlserver":
		t.Fatalf("storetest.DSN: a SQL Server test database is a DSN and a schema; use storetest.New")
	case "postgres":
		base := RequirePostgres(t)
		schema := "sp_test_" + randomHex(6)
		db, err := sql.Open("pgx", base)
		require.NoError(t, err)
		ctx := context.Background()
		_, err = db.ExecContext(ctx, "CREATE SCHEMA "+schema)
		require.NoError(t, err, "create test schema")
		t.Cleanup(func() {
			_, _ = db.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			db.Close()
		})
		return store.PostgresWithSchema(base, schema)
	case "mysql":
		return mysqlDatabase(t, RequireMySQL(t))
	}
	t.Fatalf("unknown driver %q", driver)
	return ""
}

// Open returns a migrated store on a new empty database, and its DSN. For
// SQL Server the DSN alone does not reach the test's tables: a test that
// connects again uses OpenDB.
func Open(t testing.TB, driver string) (*store.Store, string) {
	t.Helper()
	s, db := OpenDB(t, driver)
	return s, db.DSN
}

// OpenDB returns a migrated store on a new empty database, and the
// database. On the T-SQL test server the schema may be one an earlier
// test gave back, emptied (sqlserverpool.go).
func OpenDB(t testing.TB, driver string) (*store.Store, DB) {
	t.Helper()
	if driver == "sqlserver" {
		return openPooledSQLServer(t)
	}
	db := New(t, driver)
	return OpenMigrated(t, db), db
}

// OpenMigrated opens a store on db (a new database, or a private
// server's) and migrates it; the store is closed when the test ends.
func OpenMigrated(t testing.TB, db DB) *store.Store {
	t.Helper()
	// The T-SQL test server compiles each statement of the 20 versions
	// afresh: beside the other packages' tests a migration there took
	// more than 30 s (timed out at version 14 in CI).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := db.Open(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	_, err = schema.Migrate(ctx, s)
	require.NoError(t, err)
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// TakeOver makes another node ("node-b", incarnation "inc-b") the holder of
// a running job, as the farm does when its node froze past its lease: the
// lease runs out, the job is reclaimed and claimed again under a new
// token. It returns the new claim; the old holder's token is then stale.
func TakeOver(t testing.TB, s *store.Store, id int64) store.Claim {
	t.Helper()
	ctx := context.Background()
	_, err := s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {jobs} SET lease_until = {now+?} WHERE id = ?`), -1000, id)
	if err != nil {
		t.Fatalf("expire the lease of job %d: %v", id, err)
	}
	if _, err := s.JobsReclaimExpired(ctx, time.Time{}); err != nil {
		t.Fatalf("reclaim job %d: %v", id, err)
	}
	cs, err := s.JobsClaim(ctx, "inc-b", "node-b", 1, store.Lease(time.Minute))
	if err != nil || len(cs) != 1 || cs[0].ID != id {
		t.Fatalf("claim job %d for node-b: %v, %v", id, cs, err)
	}
	return cs[0]
}

// mysqlDatabase creates a database sp_test_<random> beside the DSN's and
// returns the DSN with its name; the database is dropped when the test
// ends. The name is ours (a prefix and hex): it needs no quoting.
func mysqlDatabase(t testing.TB, base string) string {
	t.Helper()
	cfg, err := mysqlconf.ParseDSN(base)
	require.NoError(t, err, "parse %s", MySQLEnv)
	name := "sp_test_" + randomHex(6)
	db, err := sql.Open("mysql", base)
	require.NoError(t, err)
	_, err = db.ExecContext(context.Background(), "CREATE DATABASE "+name+" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
	require.NoError(t, err, "create test database")
	t.Cleanup(func() {
		_, _ = db.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name)
		db.Close()
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

// MySQLListeners counts the nodes of s's database waiting for a wake in
// their lock's connection (store.MySQLListening): a woken node must be
// waiting again before the next wake can find it.
func MySQLListeners(ctx context.Context, t testing.TB, s *store.Store) int {
	t.Helper()
	var n int
	if err := s.DB().QueryRowContext(ctx,
		"SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND INFO = ?", store.MySQLListening).Scan(&n); err != nil {
		t.Fatalf("count the nodes waiting for a wake: %v", err)
	}
	return n
}
