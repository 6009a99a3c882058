//go:build unix

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// The dashboard's Queues page in a browser: it pauses a queue, whose jobs
// then wait, and resumes it, after which they run. Both actions are in
// the audit log as the dashboard's, and on its Audit page.
func TestDashboardPausesAQueue(t *testing.T) {
	b := startBrowser(t)
	s, n, port := dashboardNode(t)
	ctx := context.Background()
	// A queue shows once it has work or was paused: a job it holds due in
	// an hour, and one in another queue.
	_, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/report", MaxAttempts: 1, Queue: "reports", Delay: time.Hour})
	require.NoError(t, err)

	b.open(fmt.Sprintf("http://127.0.0.1:%d/#/queues", port))
	b.waitFor(`#queues tr[data-queue="reports"][data-paused="false"]`)
	b.click(`#queues tr[data-queue="reports"] button[data-action="pause"]`)
	b.waitFor(`#queues tr[data-queue="reports"][data-paused="true"]`)
	paused, err := s.QueuesPaused(ctx)
	require.NoError(t, err)
	require.Len(t, paused, 1)
	require.Equal(t, "api@node-a", paused[0].PausedBy, "the dashboard acts through the node's API")

	id, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/report-now", MaxAttempts: 1, Queue: "reports"})
	require.NoError(t, err)
	time.Sleep(time.Second) // four slots: the node had its turns
	j, err := s.JobGet(ctx, id)
	require.NoError(t, err)
	require.Equal(t, store.StateReady, j.State, "a paused queue's job waits")

	b.click(`#queues tr[data-queue="reports"] button[data-action="resume"]`)
	b.waitFor(`#queues tr[data-queue="reports"][data-paused="false"]`)
	waitFor(t, 10*time.Second, "the resumed queue's job done", func() bool {
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		return j.State == store.StateDone
	})

	// The audit log has both actions, as the dashboard's: in the
	// database, and on its Audit page.
	entries, err := s.AuditList(ctx, store.AuditFilter{Action: "queue", Limit: 10})
	require.NoError(t, err)
	require.Len(t, entries, 2)
	require.Equal(t, "queue.resume", entries[0].Action, "newest first")
	require.Equal(t, "queue.pause", entries[1].Action)
	for _, e := range entries {
		require.Equal(t, "reports", e.Target)
		require.Equal(t, "dashboard (loopback, no admin.token)", e.Actor)
		require.Equal(t, "127.0.0.1 via node-a", e.Origin)
	}
	b.open(fmt.Sprintf("http://127.0.0.1:%d/#/audit", port))
	b.waitFor(`#audit tr[data-action="queue.pause"][data-target="reports"]`)
	b.waitFor(`#audit tr[data-action="queue.resume"][data-target="reports"]`)
	n.stop(t)
}

// The Queues page's "Cancel running" (two clicks) reaches a queue's running
// call: the endpoint sees its request cancelled and the job ends
// cancelled by the dashboard's node, not retried.
func TestDashboardCancelsAQueuesRunningCalls(t *testing.T) {
	b := startBrowser(t)
	s, db := storetest.OpenDB(t, "sqlite")
	ctx := context.Background()
	started, ended := make(chan struct{}, 1), make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-r.Context().Done():
			ended <- struct{}{}
		case <-time.After(time.Minute):
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer srv.Close()
	port := freePort(t)
	n := startNode(t, env("sqlite", db.DSN, "node-a", srv.URL, append(db.ExtraEnv(), "SLOTPOLLER_ADMIN_LISTEN=127.0.0.1:"+strconv.Itoa(port))...), "node-a")
	waitFor(t, 30*time.Second, "the node live", func() bool { return liveNodes(t, s) == 1 })
	id, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/import", MaxAttempts: 5, Queue: "imports"})
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the import was not called")
	}

	b.open(fmt.Sprintf("http://127.0.0.1:%d/#/queues", port))
	button := `#queues tr[data-queue="imports"] button[data-action="cancel"]`
	b.waitFor(button)
	b.click(button)
	b.waitJS("cancel armed", `return document.querySelector('`+button+`').textContent.includes('confirm')`)
	b.click(button)
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the endpoint never saw its call cancelled")
	}
	waitFor(t, 10*time.Second, "the job cancelled", func() bool {
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		return j.State == store.StateCancelled
	})
	j, err := s.JobGet(ctx, id)
	require.NoError(t, err)
	require.Equal(t, 1, j.Attempt, "cancelled, not retried")
	require.Contains(t, j.LastError, "api@node-a", "the dashboard acts through the node's API, which names itself")
	n.stop(t)
}
