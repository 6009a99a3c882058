package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// run and config show read an environment file as the service does on
// System V init: values literal, winning over the process's own.
func TestEnvFileSetsTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, "database:\n  driver: postgres\n")
	dsn := `host=127.0.0.1 port=5432 dbname=farm user=postgres password='a b"$c\d'`
	envFile := filepath.Join(dir, "slotpoller.env")
	require.NoError(t, os.WriteFile(envFile, []byte("# comment\nSLOTPOLLER_DATABASE_DSN="+dsn+"\nSLOTPOLLER_NODE_NAME=from-file\n"), 0o600))
	t.Setenv("SLOTPOLLER_NODE_NAME", "from-shell")

	code, out, errOut := cli(t, "config", "show", "-json", "-config", cfg, "-env-file", envFile)
	require.Equal(t, 0, code, errOut)
	var shown struct {
		Settings []struct {
			Key   string `json:"key"`
			Value any    `json:"value"`
		} `json:"settings"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &shown), out)
	values := map[string]any{}
	for _, s := range shown.Settings {
		values[s.Key] = s.Value
	}
	require.Equal(t, "from-file", values["node.name"], "the file wins over the process's environment")
	require.Contains(t, values["database.dsn"], "dbname=farm user=postgres", "the whole DSN, spaces and all (its password masked)")

	code, _, errOut = cli(t, "config", "show", "-config", cfg, "-env-file", filepath.Join(dir, "missing.env"))
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "missing.env")
	code, _, errOut = cli(t, "run", "-config", cfg, "-env-file", filepath.Join(dir, "missing.env"))
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "missing.env")

	// status looks at the database the file names.
	db := filepath.Join(dir, "node's farm.db")
	sqliteEnv := filepath.Join(dir, "sqlite.env")
	require.NoError(t, os.WriteFile(sqliteEnv, []byte("SLOTPOLLER_DATABASE_DRIVER=sqlite\nSLOTPOLLER_DATABASE_DSN="+db+"\n"), 0o600))
	code, _, errOut = cli(t, "status", "-config", cfg, "-env-file", sqliteEnv)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "no database at "+db+" (nothing to show)")
}
