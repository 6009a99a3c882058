package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/stretchr/testify/require"
)

// enqueue puts the job in the trace of -traceparent, else of
// $TRACEPARENT (the environment carrier of OpenTelemetry's tools), and
// `job show` says it.
func TestEnqueueTakesTheTraceparent(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "farm.db")
	cfg := writeConfig(t, "database:\n  dsn: "+dbPath+"\n")
	code, _, errOut := cli(t, "schema", "migrate", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	const flag = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const fromEnv = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

	enqueue := func(args ...string) int64 {
		t.Helper()
		code, out, errOut := cli(t, append([]string{"enqueue", "-endpoint", "/jobs/x", "-in", "1h", "-config", cfg}, args...)...)
		require.Equal(t, 0, code, errOut)
		id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		require.NoError(t, err, out)
		return id
	}
	t.Setenv("TRACEPARENT", fromEnv)
	byFlag := enqueue("-traceparent", strings.ToUpper(flag))
	byEnv := enqueue()
	t.Setenv("TRACEPARENT", "")
	none := enqueue()

	s, err := open.Store(context.Background(), "sqlite", dbPath)
	require.NoError(t, err)
	defer s.Close()
	for id, want := range map[int64]string{byFlag: flag, byEnv: fromEnv, none: ""} {
		j, err := s.JobGet(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, want, j.Traceparent, "job %d", id)
	}
	code, out, errOut := cli(t, "job", "show", strconv.FormatInt(byFlag, 10), "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^traceparent +`+flag+`$`, out)
}
