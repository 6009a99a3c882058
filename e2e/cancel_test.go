//go:build unix

package e2e

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// A running job cancelled with `slotpoller job cancel`: the endpoint sees
// its request cancelled within a third of the lease (the renewal that
// reports the request) and a slot, and the job ends cancelled, with no
// further attempt.
func TestCancelRunningJobReachesTheEndpoint(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		if driver == "sqlserver" {
			// Its test nodes run with a 60 s lease (see env): a renewal
			// every 20 s. The statements are the conformance suite's.
			t.Skip("the T-SQL test server's nodes renew every 20 s; the cancel's statements are checked by the conformance suite")
		}
		const lease, slot = 3 * time.Second, 250 * time.Millisecond // env's
		s, db := storetest.OpenDB(t, driver)
		ctx := context.Background()

		var mu sync.Mutex
		var calls int
		var gone time.Time
		started := make(chan struct{}, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body) // a server hears of a closed connection once it has read the body
			mu.Lock()
			calls++
			mu.Unlock()
			select {
			case started <- struct{}{}:
			default:
			}
			select {
			case <-r.Context().Done():
				mu.Lock()
				gone = time.Now()
				mu.Unlock()
			case <-time.After(time.Minute):
				w.WriteHeader(http.StatusOK)
			}
		}))
		defer srv.Close()

		n := startNode(t, env(driver, db.DSN, "node-a", srv.URL, db.ExtraEnv()...), "node-a")
		waitSettled(t, s, 1)
		id, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/long", MaxAttempts: 5, Timeout: 2 * time.Minute})
		require.NoError(t, err)
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the job was never called")
		}

		cli := exec.Command(binary, "job", "cancel", strconv.FormatInt(id, 10))
		cli.Env = env(driver, db.DSN, "operator", srv.URL, db.ExtraEnv()...)
		cli.Dir = t.TempDir()
		out, err := cli.CombinedOutput()
		asked := time.Now() // the request was committed before the command ended
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "cancel requested")

		waitFor(t, 30*time.Second, "the endpoint to see its request cancelled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return !gone.IsZero()
		})
		mu.Lock()
		took := gone.Sub(asked)
		mu.Unlock()
		t.Logf("%s: the endpoint saw the disconnect %v after the cancel was requested", driver, took)
		require.LessOrEqual(t, took, lease/3+slot, "the call outlived the next renewal by more than a slot")

		waitFor(t, 10*time.Second, "the job to be recorded cancelled", func() bool {
			j, err := s.JobGet(ctx, id)
			require.NoError(t, err)
			return j.State == store.StateCancelled
		})
		// A few more slots and a renewal: nothing runs it again.
		time.Sleep(lease/3 + 4*slot)
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.StateCancelled, j.State)
		require.Equal(t, 1, j.Attempt, "no further attempt")
		require.True(t, strings.HasPrefix(j.LastError, "cancelled by "), j.LastError)
		require.True(t, strings.HasSuffix(j.LastError, " while running"), j.LastError)
		mu.Lock()
		require.Equal(t, 1, calls)
		mu.Unlock()
		require.Contains(t, n.output(), "cancelling call: an operator asked")
		n.stop(t)
	})
}
