// Package storetest gives tests real, freshly migrated databases: SQLite in
// a temporary file always, and PostgreSQL when SLOTPOLLER_TEST_POSTGRES_DSN
// is set, each test in a schema of its own so packages can run in parallel
// against one server.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/install"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/stretchr/testify/require"
)

// PostgresEnv names the variable holding the PostgreSQL test DSN.
const PostgresEnv = "SLOTPOLLER_TEST_POSTGRES_DSN"

// Drivers are the databases every conformance test runs on.
var Drivers = []string{"sqlite", "postgres"}

// Each runs fn once per database driver as a subtest.
func Each(t *testing.T, fn func(t *testing.T, driver string)) {
	for _, d := range Drivers {
		t.Run(d, func(t *testing.T) {
			if d == "postgres" {
				RequirePostgres(t)
			}
			fn(t, d)
		})
	}
}

// RequirePostgres skips the test, saying why, when no PostgreSQL is configured.
func RequirePostgres(t testing.TB) string {
	dsn := os.Getenv(PostgresEnv)
	if dsn == "" {
		t.Skipf("%s is not set: skipping the PostgreSQL test (set it to e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)", PostgresEnv)
	}
	return dsn
}

// DSN returns a DSN for a new empty database of the driver, removed when
// the test ends.
func DSN(t testing.TB, driver string) string {
	t.Helper()
	switch driver {
	case "sqlite":
		return filepath.Join(t.TempDir(), "slotpoller.db")
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
	}
	t.Fatalf("unknown driver %q", driver)
	return ""
}

// Open returns a migrated store on a new empty database.
func Open(t testing.TB, driver string) (*store.Store, string) {
	t.Helper()
	dsn := DSN(t, driver)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := store.Open(ctx, driver, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	_, err = install.Migrate(ctx, s)
	require.NoError(t, err)
	return s, dsn
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
