//go:build unix

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// `slotpoller queue cancel` on a farm of two node processes, each holding
// calls of the queue: every running call of the queue sees its request
// cancelled within a third of the lease and a slot, and every one of its
// jobs ends cancelled with no further attempt; another queue's call runs
// on.
func TestQueueCancelReachesEveryCall(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		if driver == "sqlserver" {
			t.Skip("the T-SQL test server's nodes renew every 20 s; the queue cancel's statements are checked by the conformance suite")
		}
		const lease, slot = 3 * time.Second, 250 * time.Millisecond // env's
		s, db := storetest.OpenDB(t, driver)
		ctx := context.Background()

		var mu sync.Mutex
		calls, gone := map[string]int{}, map[string]time.Time{}
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body) // a server hears of a closed connection once it has read the body
			mu.Lock()
			calls[r.URL.Path]++
			mu.Unlock()
			select {
			case <-r.Context().Done():
				mu.Lock()
				gone[r.URL.Path] = time.Now()
				mu.Unlock()
			case <-release:
				w.WriteHeader(http.StatusOK)
			case <-time.After(time.Minute):
				w.WriteHeader(http.StatusOK)
			}
		}))
		defer srv.Close()
		defer close(release)

		// Two calls at most on each node: the four calls are held two by
		// two, and the queue's three by both nodes.
		nodeEnv := func(name string) []string {
			return append(env(driver, db.DSN, name, srv.URL, db.ExtraEnv()...), "SLOTPOLLER_NODE_CAPACITY=2")
		}
		a := startNode(t, nodeEnv("node-a"), "node-a")
		b := startNode(t, nodeEnv("node-b"), "node-b")
		waitSettled(t, s, 2)
		ids := map[string]int64{}
		for _, path := range []string{"/jobs/long/1", "/jobs/long/2", "/jobs/long/3", "/jobs/other"} {
			queue := "reports"
			if path == "/jobs/other" {
				queue = "mail"
			}
			id, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: path, MaxAttempts: 5, Timeout: 2 * time.Minute, Queue: queue})
			require.NoError(t, err)
			ids[path] = id
		}
		waitFor(t, 30*time.Second, "every job to be called", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(calls) == 4
		})

		cli := exec.Command(binary, "queue", "cancel", "-name", "reports")
		cli.Env = env(driver, db.DSN, "operator", srv.URL, db.ExtraEnv()...)
		cli.Dir = t.TempDir()
		out, err := cli.CombinedOutput()
		asked := time.Now() // the requests were committed before the command ended
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "cancel requested of 3 jobs running")

		waitFor(t, 30*time.Second, "every call of the queue to see its request cancelled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(gone) == 3
		})
		mu.Lock()
		for path, at := range gone {
			require.Contains(t, []string{"/jobs/long/1", "/jobs/long/2", "/jobs/long/3"}, path)
			took := at.Sub(asked)
			t.Logf("%s: %s saw the disconnect %v after the cancel was requested", driver, path, took)
			require.LessOrEqual(t, took, lease/3+slot, "%s outlived the next renewal by more than a slot", path)
		}
		mu.Unlock()

		waitFor(t, 10*time.Second, "the queue's jobs to be recorded cancelled", func() bool {
			for _, path := range []string{"/jobs/long/1", "/jobs/long/2", "/jobs/long/3"} {
				j, err := s.JobGet(ctx, ids[path])
				require.NoError(t, err)
				if j.State != store.StateCancelled {
					return false
				}
			}
			return true
		})
		// A few more slots and a renewal: nothing runs them again, and the
		// other queue's call runs on.
		time.Sleep(lease/3 + 4*slot)
		holders := map[string]bool{}
		for path, id := range ids {
			j, err := s.JobGet(ctx, id)
			require.NoError(t, err)
			if path == "/jobs/other" {
				require.Equal(t, store.StateRunning, j.State, "another queue's call is not stopped")
				require.Empty(t, j.CancelRequestedBy)
				continue
			}
			require.Equal(t, store.StateCancelled, j.State, path)
			require.Equal(t, 1, j.Attempt, "%s: no further attempt", path)
			require.Equal(t, "cancelled by cli while running", j.LastError, path)
			require.NotEmpty(t, j.History)
			holders[j.History[len(j.History)-1].Node] = true
		}
		require.Equal(t, map[string]bool{"node-a": true, "node-b": true}, holders, "both nodes stopped calls of the queue")
		mu.Lock()
		require.Equal(t, map[string]int{"/jobs/long/1": 1, "/jobs/long/2": 1, "/jobs/long/3": 1, "/jobs/other": 1}, calls)
		_, otherGone := gone["/jobs/other"]
		mu.Unlock()
		require.False(t, otherGone, "another queue's call runs on")
		require.Contains(t, a.output()+b.output(), "cancelling call: an operator asked", fmt.Sprintf("%s: the nodes' logs", driver))
		a.stop(t)
		b.stop(t)
	})
}
