package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A verb that reads or changes rows never creates a SQLite file: it says
// which file it looked for. Only `schema migrate` (and a node's start)
// creates one.
func TestVerbsDoNotCreateASQLiteFile(t *testing.T) {
	db := filepath.Join(t.TempDir(), "farm.db")
	cfg := writeConfig(t, "database:\n  dsn: "+db+"\n")
	for _, args := range [][]string{
		{"status"}, {"status", "-json"}, {"job", "list"}, {"job", "show", "1"}, {"schedule", "list"}, {"task", "list"},
		{"schema", "status"},
		{"enqueue", "-endpoint", "/x"}, {"job", "cancel", "1"}, {"job", "retry", "1"}, {"schedule", "remove", "-name", "s"},
		{"task", "delete", "-name", "t"},
	} {
		code, _, errOut := cli(t, append(args, "-config", cfg)...)
		require.Equal(t, 1, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, "no database at "+db, "%v", args)
		require.NoFileExists(t, db, "%v created the database file", args)
	}
	code, _, errOut := cli(t, "job", "list", "-config", cfg)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "(nothing to show)")

	code, _, errOut = cli(t, "schema", "migrate", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.FileExists(t, db)
	code, _, errOut = cli(t, "job", "list", "-config", cfg)
	require.Equal(t, 0, code, errOut)
}

func TestSQLiteFile(t *testing.T) {
	for dsn, want := range map[string]string{
		"/var/lib/slotpoller/farm.db":                "/var/lib/slotpoller/farm.db",
		"/srv/a b/farm 'x' $y.db":                    "/srv/a b/farm 'x' $y.db",
		"file:/srv/farm.db?_pragma=busy_timeout(10)": "/srv/farm.db",
		"file:///srv/a%20b/farm.db":                  "/srv/a b/farm.db",
		"file:memdb?mode=memory&cache=shared":        "",
		":memory:":                                   "",
		"file::memory:":                              "",
	} {
		require.Equal(t, want, sqliteFile(dsn), dsn)
	}
}
