//go:build unix

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// pathRecorder notes when each path was first called.
type pathRecorder struct {
	mu    sync.Mutex
	first map[string]time.Time
	calls map[string]int
}

func (r *pathRecorder) handler(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	if _, ok := r.first[req.URL.Path]; !ok {
		r.first[req.URL.Path] = time.Now()
	}
	r.calls[req.URL.Path]++
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// called counts the calls of the paths that start with prefix, and the
// earliest of them.
func (r *pathRecorder) called(prefix string) (int, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, first := 0, time.Time{}
	for p, c := range r.calls {
		if strings.HasPrefix(p, prefix) {
			n += c
			if first.IsZero() || r.first[p].Before(first) {
				first = r.first[p]
			}
		}
	}
	return n, first
}

// startNodeIn starts a node as startNode does, in dir, whose config.yaml
// it reads.
func startNodeIn(t *testing.T, environ []string, name, dir string) *node {
	t.Helper()
	n := &node{name: name, log: &bytes.Buffer{}, mu: &sync.Mutex{}}
	n.cmd = exec.Command(binary, "run")
	n.cmd.Env, n.cmd.Dir = environ, dir
	n.cmd.SysProcAttr = dieWithTheTest()
	w := syncWriter{n.mu, n.log}
	n.cmd.Stdout, n.cmd.Stderr = w, w
	require.NoError(t, n.cmd.Start())
	t.Cleanup(func() {
		if n.cmd.ProcessState == nil {
			_ = n.cmd.Process.Kill()
			_ = n.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("--- log of node %s ---\n%s", name, n.output())
		}
	})
	return n
}

// cliCommand runs the binary's CLI with a node's environment and config.
func cliCommand(t *testing.T, environ []string, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env, cmd.Dir = environ, dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "slotpoller %s: %s", strings.Join(args, " "), out)
	return string(out)
}

// Two node processes with a queue routed by their config: a paused
// queue's jobs do not start, while the other queues' do; resumed, they
// start within a few slots. Pause and resume go through the CLI.
func TestFarmPausesAndResumesAQueue(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, db := storetest.OpenDB(t, driver)
		ctx := context.Background()
		rec := &pathRecorder{first: map[string]time.Time{}, calls: map[string]int{}}
		srv := httptest.NewServer(http.HandlerFunc(rec.handler))
		defer srv.Close()

		// The nodes run in a folder whose config.yaml routes the queue:
		// lists are not reached by environment variables.
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "config.yaml"),
			[]byte("queues:\n  - name: reports\n    endpoints: [\"/jobs/reports/*\"]\n"), 0o600))
		var nodes []*node
		for _, name := range []string{"node-a", "node-b"} {
			nodes = append(nodes, startNodeIn(t, env(driver, db.DSN, name, srv.URL, db.ExtraEnv()...), name, dir))
		}
		waitSettled(t, s, 2)
		waitFor(t, 30*time.Second, "the nodes to write their routes", func() bool {
			rs, err := s.QueueRoutes(ctx)
			require.NoError(t, err)
			return len(rs) == 1
		})
		environ := env(driver, db.DSN, "cli", srv.URL, db.ExtraEnv()...)
		require.Contains(t, cliCommand(t, environ, dir, "queue", "pause", "-name", "reports"), "paused")
		// A claim already under way when the pause was written may still
		// take a job: after one slot, none does.
		time.Sleep(250 * time.Millisecond)

		const total = 5
		for i := range total {
			_, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: fmt.Sprintf("/jobs/reports/r%d", i), MaxAttempts: 3})
			require.NoError(t, err)
		}
		_, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/other", MaxAttempts: 3})
		require.NoError(t, err)
		waitFor(t, time.Minute, "the job of the queue not paused to run", func() bool { n, _ := rec.called("/jobs/other"); return n == 1 })
		// Several more turns of the farm: still nothing of the paused queue.
		time.Sleep(4 * 250 * time.Millisecond)
		n, _ := rec.called("/jobs/reports/")
		require.Zero(t, n, "a paused queue's jobs started")
		paused, err := s.QueuesPaused(ctx)
		require.NoError(t, err)
		require.Len(t, paused, 1)
		qs, err := s.Queues(ctx)
		require.NoError(t, err)
		require.Contains(t, qs, store.QueueState{Name: "reports", Paused: true, PausedBy: "cli", PausedAt: paused[0].PausedAt, Waiting: total})
		require.Contains(t, cliCommand(t, environ, dir, "status"), "queue reports paused by cli")

		resumed := time.Now()
		require.Contains(t, cliCommand(t, environ, dir, "queue", "resume", "-name", "reports"), "resumed")
		waitFor(t, time.Minute, "the resumed queue's jobs to run", func() bool { n, _ := rec.called("/jobs/reports/"); return n == total })
		_, first := rec.called("/jobs/reports/")
		delay := first.Sub(resumed)
		t.Logf("%s: the first job of the resumed queue started %v after the resume command began", driver, delay.Round(time.Millisecond))
		// The CLI's own start and connection are in this; a slot is 250 ms.
		bound := 3 * time.Second
		if driver == "sqlserver" {
			bound = 15 * time.Second // the T-SQL test server compiles each statement per connection
		}
		require.Less(t, delay, bound, "a resumed queue's jobs start at the next turns")
		for _, n := range nodes {
			n.stop(t)
		}
	})
}
