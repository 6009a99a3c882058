package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/stretchr/testify/require"
)

// The queue commands on a SQLite farm: enqueue -queue, pause, list,
// status, resume.
func TestQueueCommands(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "farm.db")
	cfg := writeConfig(t, "database:\n  dsn: "+dbPath+"\n")
	code, _, errOut := cli(t, "schema", "migrate", "-config", cfg)
	require.Equal(t, 0, code, errOut)

	code, out, errOut := cli(t, "queue", "pause", "-name", "reports", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `queue "reports" paused`)
	code, out, errOut = cli(t, "enqueue", "-endpoint", "/jobs/report", "-queue", "reports", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	require.NoError(t, err, out)

	s, err := open.Store(context.Background(), "sqlite", dbPath)
	require.NoError(t, err)
	defer s.Close()
	j, err := s.JobGet(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, "reports", j.Queue)

	code, out, errOut = cli(t, "job", "show", strconv.FormatInt(id, 10), "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^queue +reports$`, out)

	code, out, errOut = cli(t, "queue", "list", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^QUEUE +STATE +WAITING +RUNNING +PRIORITY +LIMIT +NODE LIMIT +RATE +RATE USED +DELAY P50 +DELAY P99 +PAUSED BY +PAUSED AT\n`+
		`reports +paused +1 +0 +0 +- +- +- +- +- +- +cli +\d{4}-`, out)

	code, out, errOut = cli(t, "status", "-config", cfg)
	require.Contains(t, out, "queue reports paused by cli at ", "status shows the paused queue (exit %d: %s)", code, errOut)

	code, out, errOut = cli(t, "queue", "resume", "-name", "reports", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `queue "reports" resumed`)
	code, out, errOut = cli(t, "queue", "list", "-json", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	var got struct{ Queues []client.QueueInfo }
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Equal(t, []client.QueueInfo{{Name: "reports", Waiting: 1}}, got.Queues)

	// Names are checked before any connection.
	for _, args := range [][]string{
		{"queue", "pause", "-name", "a/b"},
		{"queue", "pause"},
		{"enqueue", "-endpoint", "/x", "-queue", " x"},
		{"queue", "drain", "-name", "x"},
		{"queue", "cancel"},
		{"queue", "cancel", "-name", "a/b", "-waiting"},
	} {
		code, _, errOut = cli(t, append(args, "-config", cfg)...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
	}
}

// queue cancel on a SQLite farm: the queue's running job is asked to stop
// (by cli), its waiting job cancelled only with -waiting, another queue's
// jobs untouched.
func TestQueueCancelCommand(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "farm.db")
	cfg := writeConfig(t, "database:\n  dsn: "+dbPath+"\njobs:\n  lease: 9s\n")
	code, _, errOut := cli(t, "schema", "migrate", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	ctx := context.Background()
	s, err := open.Store(ctx, "sqlite", dbPath)
	require.NoError(t, err)
	defer s.Close()
	insert := func(endpoint, queue string, delay time.Duration) int64 {
		t.Helper()
		id, err := s.JobInsert(ctx, store.NewJob{Endpoint: endpoint, Method: "POST", MaxAttempts: 3, IdempotencyKey: "k", Queue: queue, Delay: delay})
		require.NoError(t, err)
		return id
	}
	running, other := insert("/r", "reports", 0), insert("/o", "mail", 0)
	_, err = s.JobsClaim(ctx, "inc-a", "node-a", 2, store.Lease(time.Minute))
	require.NoError(t, err)
	waiting := insert("/w", "reports", time.Hour)
	state := func(id int64) store.Job {
		t.Helper()
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		return j
	}

	code, out, errOut := cli(t, "queue", "cancel", "-name", "reports", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "queue \"reports\": cancel requested of 1 job running; the nodes stop the calls within 3s (a third of jobs.lease)\n", out)
	require.Equal(t, "cli", state(running).CancelRequestedBy)
	require.Equal(t, store.StateRunning, state(running).State)
	require.Empty(t, state(other).CancelRequestedBy)
	require.Equal(t, store.StateReady, state(waiting).State)

	code, out, errOut = cli(t, "queue", "cancel", "-name", "reports", "-waiting", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "cancel requested of 0 jobs running")
	require.Contains(t, out, "queue \"reports\": 1 job waiting cancelled\n")
	require.Equal(t, store.StateCancelled, state(waiting).State)
	require.Equal(t, store.StateRunning, state(other).State)
}

// queue list and status show a queue's settings as the nodes wrote them,
// its rate window's use and its start delays.
func TestQueueListShowsLimits(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "farm.db")
	cfg := writeConfig(t, "database:\n  dsn: "+dbPath+"\n")
	code, _, errOut := cli(t, "schema", "migrate", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	s, err := open.Store(context.Background(), "sqlite", dbPath)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{
		{Name: "reports", Priority: 3, Limit: 2, NodeLimit: 1, Rate: 50, RatePeriod: time.Hour},
		{Name: "mail", Priority: -5},
	}))
	for range 2 {
		code, _, errOut = cli(t, "enqueue", "-endpoint", "/jobs/report", "-queue", "reports", "-config", cfg)
		require.Equal(t, 0, code, errOut)
	}
	claims, err := s.JobsClaimManaged(ctx, "inc-a", "node-a", 10, store.Lease(time.Minute), true)
	require.NoError(t, err)
	require.Len(t, claims, 1, "one per node")

	code, out, errOut := cli(t, "queue", "list", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^mail +active +0 +0 +-5 +- +- +- +- +- +- +- +-$`, out)
	require.Regexp(t, `(?m)^reports +active +1 +1 +3 +2 +1 +50/1h +1 +\d+ms +\d+ms +- +-$`, out)

	code, out, errOut = cli(t, "queue", "list", "-json", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	var got struct{ Queues []client.QueueInfo }
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got.Queues, 2)
	r := got.Queues[1]
	require.Equal(t, "reports", r.Name)
	require.Equal(t, 1, r.StartDelay.Jobs, "the running job")
	r.StartDelay = client.StartDelay{}
	require.Equal(t, client.QueueInfo{Name: "reports", Waiting: 1, Running: 1, Priority: 3, Limit: 2, NodeLimit: 1,
		Rate: 50, RatePeriod: time.Hour, RateUsed: 1}, r)
	require.Contains(t, out, `"rate_period_ns": 3600000000000`)

	code, out, errOut = cli(t, "status", "-config", cfg)
	require.Contains(t, out, "queue mail: priority -5; 0 running, 0 waiting\n", "exit %d: %s", code, errOut)
	require.Regexp(t, `(?m)^queue reports: limit 2, 1 per node, rate 50/1h \(1 used in this window\), priority 3; 1 running, 1 waiting, start delay p50 \d+(ms|s) p99 \d+(ms|s)$`, out)
}
