package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/stretchr/testify/require"
)

// `job cancel` of a running job requests the cancel and says when the
// node acts on it; `job show` shows the request until then.
func TestJobCancelRunning(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "farm.db")
	cfg := writeConfig(t, "database:\n  dsn: "+dbPath+"\njobs:\n  lease: 6s\n")
	code, _, errOut := cli(t, "schema", "migrate", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	code, out, errOut := cli(t, "enqueue", "-endpoint", "/jobs/long", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	require.NoError(t, err)

	s, err := open.Store(context.Background(), "sqlite", dbPath)
	require.NoError(t, err)
	defer s.Close()
	cs, err := s.JobsClaim(context.Background(), "inc-a", "node-a", 1, store.Lease(time.Minute))
	require.NoError(t, err)
	require.Len(t, cs, 1)

	code, out, errOut = cli(t, "job", "cancel", strconv.FormatInt(id, 10), "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "job "+strconv.FormatInt(id, 10)+": cancel requested; the node stops the call within 2s (a third of jobs.lease)\n", out)
	code, out, errOut = cli(t, "job", "show", strconv.FormatInt(id, 10), "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "cancel requested")
	require.Contains(t, out, "running")

	held, err := s.JobsRenewLeases(context.Background(), "inc-a", store.Lease(time.Minute))
	require.NoError(t, err)
	require.Len(t, held, 1)
	require.NotEmpty(t, held[0].CancelBy, "the node's next renewal hears of it")
}
