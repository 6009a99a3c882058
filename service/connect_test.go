package service

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/nodetest"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

func connectTestConfig(t *testing.T, driver, dsn string) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Database.Driver, cfg.Database.DSN = driver, dsn
	cfg.Node.Name = "connect-test"
	require.NoError(t, cfg.Validate())
	return cfg
}

// A SQLite file that is not a database stops the node at once with an
// error that says so: retrying cannot change the file, and a node that
// retried forever would look alive while doing nothing.
func TestNodeGivesUpOnAFileThatIsNotADatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(strings.Repeat("database:\n  driver: sqlite\n", 20)), 0o600))
	logs := &nodetest.Log{}
	n := NewNode(connectTestConfig(t, "sqlite", path), NewLogger(logs, config.LogConfig{Level: "info"}), nil)
	done := make(chan error, 1)
	go func() { done <- n.Run(t.Context()) }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, store.ErrNotADatabase)
		require.ErrorContains(t, err, "not a SQLite database")
		require.ErrorContains(t, err, path)
	case <-time.After(20 * time.Second):
		t.Fatalf("the node kept retrying a file that is not a database:\n%s", logs)
	}
}

// A database that does not exist on a PostgreSQL or MySQL server is
// retried (it may be created after the node starts), and the log says what
// is wrong, never the password.
func TestNodeSaysWhyItCannotConnect(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		u, err := url.Parse(storetest.RequirePostgres(t))
		require.NoError(t, err)
		u.Path = "/no_such_database_for_slotpoller"
		u.User = url.UserPassword(u.User.Username(), "pw-s3cret-x")
		saysWhyItCannotConnect(t, "postgres", u.String())
	})
	t.Run("mysql", func(t *testing.T) {
		cfg, err := mysqldriver.ParseDSN(storetest.RequireMySQL(t))
		require.NoError(t, err)
		cfg.DBName, cfg.Passwd = "no_such_database_for_slotpoller", "pw-s3cret-x"
		// The local server's root takes no password; a wrong one would
		// be refused first. The database is the point here.
		if cfg.User == "root" {
			cfg.User = "slotpoller_connect_test"
			createUser(t, storetest.RequireMySQL(t), cfg.User, cfg.Passwd)
		}
		saysWhyItCannotConnect(t, "mysql", cfg.FormatDSN())
	})
}

func saysWhyItCannotConnect(t *testing.T, driver, dsn string) {
	logs := &nodetest.Log{}
	n := NewNode(connectTestConfig(t, driver, dsn), NewLogger(logs, config.LogConfig{Level: "info"}), nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "retrying") }, 20*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.Contains(t, logs.String(), "the database does not exist")
	require.NotContains(t, logs.String(), "pw-s3cret-x")
}

// createUser makes a MySQL login with a password and every right on every
// database, dropped when the test ends.
func createUser(t *testing.T, adminDSN, user, password string) {
	t.Helper()
	db, err := sql.Open("mysql", adminDSN)
	require.NoError(t, err)
	defer db.Close()
	for _, q := range []string{
		"DROP USER IF EXISTS '" + user + "'@'%'",
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY '" + password + "'",
		"GRANT ALL ON *.* TO '" + user + "'@'%'",
	} {
		_, err := db.ExecContext(t.Context(), q)
		require.NoError(t, err, q)
	}
	t.Cleanup(func() {
		db, err := sql.Open("mysql", adminDSN)
		if err == nil {
			_, _ = db.Exec("DROP USER IF EXISTS '" + user + "'@'%'")
			db.Close()
		}
	})
}

// A node whose SQLite file is removed stops with an error that says so,
// within a few heartbeats.
func TestNodeStopsWhenItsSQLiteFileIsRemoved(t *testing.T) {
	path := filepath.Join(t.TempDir(), "farm.db")
	cfg := connectTestConfig(t, "sqlite", path)
	cfg.Checkin.Heartbeat, cfg.Checkin.TTL = config.Duration(100*time.Millisecond), config.Duration(time.Second)
	cfg.Rotation.Slot = config.Duration(100 * time.Millisecond)
	cfg.Jobs.DrainTimeout = config.Duration(time.Second)
	require.NoError(t, cfg.Validate())
	logs := &nodetest.Log{}
	n := NewNode(cfg, NewLogger(logs, config.LogConfig{Level: "info"}), nil)
	done := make(chan error, 1)
	go func() { done <- n.Run(t.Context()) }()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "checked in") }, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, os.Remove(path))
	select {
	case err := <-done:
		require.ErrorIs(t, err, store.ErrFileGone)
		require.ErrorContains(t, err, path)
	case <-time.After(20 * time.Second):
		t.Fatalf("the node ran on without its file:\n%s", logs)
	}
}
