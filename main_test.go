package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/stretchr/testify/require"
)

// cli runs a verb in-process and returns exit code, stdout and stderr.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestUsageErrors(t *testing.T) {
	code, _, errOut := cli(t)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "Usage:")

	code, _, errOut = cli(t, "frobnicate")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown verb "frobnicate"`)

	cases := map[string][]string{
		"-endpoint is required":               {"enqueue"},
		"must not be negative":                {"enqueue", "-endpoint", "/x", "-in", "-1s"},
		"not an RFC 3339 time":                {"enqueue", "-endpoint", "/x", "-at", "tomorrow"},
		"not both":                            {"enqueue", "-endpoint", "/x", "-in", "1s", "-at", "2030-01-01T00:00:00Z"},
		"-endpoint \"http://evil.example/x\"": {"enqueue", "-endpoint", "http://evil.example/x"},
		"-endpoint \"/a/../../etc/passwd\"":   {"enqueue", "-endpoint", "/a/../../etc/passwd"},
		"invalid value":                       {"enqueue", "-endpoint", "/x", "-in", "soon"},
		"schema migrate":                      {"schema"},
		"unexpected argument":                 {"status", "extra"},
	}
	for want, args := range cases {
		code, _, errOut := cli(t, args...)
		require.Equal(t, 2, code, "%v", args)
		require.Contains(t, errOut, want, "%v", args)
	}
}

func TestConfigErrorsNameKeyAndValue(t *testing.T) {
	code, _, errOut := cli(t, "status", "-config", writeConfig(t, "jobs:\n  bse_url: http://localhost\n"))
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "jobs.bse_url")

	code, _, errOut = cli(t, "status", "-config", writeConfig(t, "rotation:\n  slot: fast\n"))
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "rotation.slot")
	require.Contains(t, errOut, "fast")

	code, _, errOut = cli(t, "status", "-config", writeConfig(t, "database:\n  driver: oracle\n"))
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "database.driver")
	require.Contains(t, errOut, "oracle")

	t.Setenv("SLOTPOLLER_CHECKIN_HEARTBEAT", "-5s")
	code, _, errOut = cli(t, "status", "-config", writeConfig(t, ""))
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "SLOTPOLLER_CHECKIN_HEARTBEAT")

	code, _, errOut = cli(t, "run", "-config", filepath.Join(t.TempDir(), "missing.yaml"))
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "missing.yaml")

	// run -service, what install registers, reads its config first too.
	code, _, errOut = cli(t, "run", "-service", "-config", filepath.Join(t.TempDir(), "missing.yaml"))
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "missing.yaml")
}

func TestOneShotVerbsFailFastOnAnUnreachableDatabase(t *testing.T) {
	cfg := writeConfig(t, "database:\n  driver: postgres\n  dsn: postgres://farm:s3cr3tpw@127.0.0.1:1/farm?connect_timeout=2\n")
	for _, args := range [][]string{
		{"enqueue", "-endpoint", "/x", "-config", cfg},
		{"schema", "migrate", "-config", cfg},
		{"status", "-config", cfg},
	} {
		code, _, errOut := cli(t, args...)
		require.Equal(t, 1, code, "%v", args)
		require.Contains(t, errOut, "cannot reach the database", "%v", args)
		require.NotContains(t, errOut, "s3cr3tpw", "the password must not be shown")
	}
}

func TestSchemaEnqueueStatus(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, "database:\n  dsn: "+filepath.Join(dir, "farm.db")+"\n")

	code, _, errOut := cli(t, "enqueue", "-endpoint", "/x", "-config", cfg)
	require.Equal(t, 1, code, "enqueue before the schema exists must say so")
	require.Contains(t, errOut, "schema migrate")

	code, out, errOut := cli(t, "schema", "migrate", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "applied schema versions [1 ") // every version, from the first
	code, out, _ = cli(t, "schema", "migrate", "-config", cfg)
	require.Equal(t, 0, code)
	require.Contains(t, out, "up to date")

	code, out, errOut = cli(t, "enqueue", "-endpoint", "/jobs/report?x=1", "-in", "1h", "-payload", `{"a":1}`, "-max-attempts", "2", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	require.NoError(t, err, "enqueue prints the job id, got %q", out)

	s, err := open.Store(context.Background(), "sqlite", filepath.Join(dir, "farm.db"))
	require.NoError(t, err)
	defer s.Close()
	j, err := s.JobGet(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, "/jobs/report?x=1", j.Endpoint)
	require.Equal(t, 2, j.MaxAttempts)
	require.Equal(t, `{"a":1}`, string(j.Payload))

	code, out, errOut = cli(t, "status", "-json", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	var rep struct {
		Nodes []map[string]any `json:"nodes"`
		Jobs  map[string]int   `json:"jobs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.NotNil(t, rep.Nodes)
	require.Equal(t, 1, rep.Jobs["ready"])

	code, out, _ = cli(t, "status", "-config", cfg)
	require.Equal(t, 0, code)
	require.Contains(t, out, "ready=1")

	// A newer slotpoller migrated the database: refuse, change nothing.
	_, err = s.DB().Exec(`INSERT INTO slotpoller_schema_version (version, description, applied_at) VALUES (42, 'future', 0)`)
	require.NoError(t, err)
	code, _, errOut = cli(t, "schema", "migrate", "-config", cfg)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "newer")
	code, _, errOut = cli(t, "enqueue", "-endpoint", "/x", "-config", cfg)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "newer")
}

func TestTaskVerbs(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, "database:\n  dsn: "+filepath.Join(dir, "farm.db")+"\n")
	code, _, errOut := cli(t, "schema", "migrate", "-config", cfg)
	require.Equal(t, 0, code, errOut)

	for want, args := range map[string][]string{
		"-name is required":      {"task", "add", "-endpoint", "/x", "-every", "1s"},
		"-every is required":     {"task", "add", "-name", "a", "-endpoint", "/x"},
		"-endpoint \"//evil/x\"": {"task", "add", "-name", "a", "-endpoint", "//evil/x", "-every", "1s"},
		"unknown task verb":      {"task", "frob"},
		"say `task add`":         {"task"},
	} {
		code, _, errOut := cli(t, append(args, "-config", cfg)...)
		if args[len(args)-1] == "task" || args[1] == "frob" {
			code, _, errOut = cli(t, args...)
		}
		require.Equal(t, 2, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, want, "%v", args)
	}

	code, out, errOut := cli(t, "task", "add", "-name", "feed", "-endpoint", "/feed", "-every", "5s", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `task "feed" added`)
	code, _, errOut = cli(t, "task", "add", "-name", "feed", "-endpoint", "/other", "-every", "5s", "-config", cfg)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `a task named "feed" already exists (delete it first)`)
	require.Equal(t, 1, strings.Count(errOut, "exists"), "the message says it once: %s", errOut)

	code, out, errOut = cli(t, "task", "list", "-json", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	var tasks []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &tasks), out)
	require.Len(t, tasks, 1)
	require.Equal(t, "feed", tasks[0]["name"])
	require.Equal(t, "created", tasks[0]["state"])
	require.Equal(t, "5s", tasks[0]["every"])

	code, out, _ = cli(t, "task", "delete", "-name", "feed", "-config", cfg)
	require.Equal(t, 0, code)
	require.Contains(t, out, "deleted")
	code, out, _ = cli(t, "task", "list", "-config", cfg)
	require.Equal(t, 0, code)
	require.NotContains(t, out, "feed")
	code, _, errOut = cli(t, "task", "delete", "-name", "nope", "-config", cfg)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not found")
}

func TestScheduleVerbs(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, "database:\n  dsn: "+filepath.Join(dir, "farm.db")+"\n")
	code, _, errOut := cli(t, "schema", "migrate", "-config", cfg)
	require.Equal(t, 0, code, errOut)

	code, _, errOut = cli(t, "schedule", "add", "-name", "x", "-every", "1s", "-cron", "* * * * *", "-endpoint", "/x", "-config", cfg)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "-every or -cron")
	code, _, errOut = cli(t, "schedule", "add", "-name", "x", "-cron", "61 * * * *", "-endpoint", "/x", "-config", cfg)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "minute")
	code, _, errOut = cli(t, "schedule", "add", "-name", "x", "-every", "1m", "-endpoint", "/x", "-misfire", "later", "-config", cfg)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "misfire")

	code, out, errOut := cli(t, "schedule", "add", "-name", "nightly", "-cron", "0 2 * * 1-5", "-tz", "Europe/Berlin",
		"-endpoint", "/jobs/report", "-tolerance", "10m", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `schedule "nightly" added; first occurrence`)
	code, _, errOut = cli(t, "schedule", "add", "-name", "nightly", "-every", "1h", "-endpoint", "/x", "-config", cfg)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `a schedule named "nightly"`)
	require.Equal(t, 1, strings.Count(errOut, "exists"), "the message says it once: %s", errOut)

	code, out, _ = cli(t, "schedule", "pause", "-name", "nightly", "-config", cfg)
	require.Equal(t, 0, code)
	require.Contains(t, out, "paused")
	code, out, errOut = cli(t, "schedule", "list", "-json", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	require.Len(t, list, 1)
	require.Equal(t, "cron 0 2 * * 1-5 (Europe/Berlin)", list[0]["when"])
	require.Equal(t, false, list[0]["enabled"])
	require.Equal(t, "10m", list[0]["tolerance"])

	code, out, _ = cli(t, "schedule", "resume", "-name", "nightly", "-config", cfg)
	require.Equal(t, 0, code)
	require.Contains(t, out, "resumed")
	code, out, _ = cli(t, "schedule", "list", "-config", cfg)
	require.Equal(t, 0, code)
	require.Contains(t, out, "nightly")
	code, _, _ = cli(t, "schedule", "remove", "-name", "nightly", "-config", cfg)
	require.Equal(t, 0, code)
	code, _, errOut = cli(t, "schedule", "remove", "-name", "nightly", "-config", cfg)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not found")
}
