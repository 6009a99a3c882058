//go:build unix

package e2e

// The chaos suite: real node processes, a recording endpoint, and faults —
// kill -9, SIGSTOP past the TTL, graceful restarts, skewed local clocks and
// (on PostgreSQL) a server restart — while endless tasks run and 2,000
// one-off jobs are enqueued. It judges the farm only by what the endpoint
// saw. A short mode runs in the normal test command; set
// SLOTPOLLER_CHAOS_DURATION (e.g. 10m) for a long run of repeated fault
// cycles, and SLOTPOLLER_CHAOS_REPORT to a file to get the summary there.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/install"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// Farm timing for the chaos run: fast, so a cycle takes seconds.
const (
	chaosSlot      = 250 * time.Millisecond
	chaosHeartbeat = 250 * time.Millisecond
	chaosTTL       = 3 * chaosHeartbeat
	chaosEvery     = 200 * time.Millisecond
	chaosNodes     = 3
	chaosTasks     = 6
	chaosJobs      = 2000
	// slack is what the bounds allow for process scheduling on a small,
	// busy test machine; the measured figures are reported as they are.
	slack = 750 * time.Millisecond
)

type chaosCall struct {
	kind       string // "task" or "job"
	key        string // task name or job id
	node       string
	token      int64
	start, end time.Time
}

type chaosRecorder struct {
	mu    sync.Mutex
	calls []chaosCall
}

func (r *chaosRecorder) handler(w http.ResponseWriter, req *http.Request) {
	c := chaosCall{node: req.Header.Get("X-Slotpoller-Node"), start: time.Now()}
	c.token, _ = strconv.ParseInt(req.Header.Get("X-Slotpoller-Token"), 10, 64)
	if task := req.Header.Get("X-Slotpoller-Task"); task != "" {
		c.kind, c.key = "task", task
	} else {
		c.kind, c.key = "job", req.Header.Get("X-Slotpoller-Job")
		time.Sleep(20 * time.Millisecond)
	}
	w.WriteHeader(http.StatusNoContent)
	c.end = time.Now()
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

func (r *chaosRecorder) snapshot() []chaosCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]chaosCall(nil), r.calls...)
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}

// fault is one injected failure, for the failover measurement.
type fault struct {
	kind  string // kill, stop, term, pg-restart
	node  string // "" for the database
	at    time.Time
	bound time.Duration
}

type chaosFarm struct {
	t      *testing.T
	driver string
	dsn    string
	base   string
	nodes  map[string]*node
	env    map[string][]string
	faults []fault
	rec    *chaosRecorder
}

// busiest returns, of the nodes not in skip, the one that called the most
// distinct tasks in the last second: the victim whose fault moves the most.
func (f *chaosFarm) busiest(skip map[string]bool) string {
	since := time.Now().Add(-time.Second)
	held := map[string]map[string]bool{}
	for _, c := range f.rec.snapshot() {
		if c.kind == "task" && c.start.After(since) {
			if held[c.node] == nil {
				held[c.node] = map[string]bool{}
			}
			held[c.node][c.key] = true
		}
	}
	best, most := "", -1
	for _, name := range []string{"node-a", "node-b", "node-c"} {
		if !skip[name] && len(held[name]) > most {
			best, most = name, len(held[name])
		}
	}
	return best
}

func (f *chaosFarm) start(name string) {
	f.nodes[name] = startNode(f.t, f.env[name], name)
}

func TestChaos(t *testing.T) {
	duration := time.Duration(0)
	if v := os.Getenv("SLOTPOLLER_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "SLOTPOLLER_CHAOS_DURATION")
		duration = d
	}
	var reports []string
	t.Run("sqlite", func(t *testing.T) {
		s, dsn := storetest.Open(t, "sqlite")
		reports = append(reports, runChaos(t, "sqlite", s, dsn, nil, duration))
	})
	t.Run("postgres", func(t *testing.T) {
		storetest.RequirePostgres(t)
		pg := startPrivatePostgres(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := store.Open(ctx, "postgres", pg.DSN())
		require.NoError(t, err)
		defer s.Close()
		_, err = install.Migrate(ctx, s)
		require.NoError(t, err)
		reports = append(reports, runChaos(t, "postgres", s, pg.DSN(), pg, duration))
	})
	if path := os.Getenv("SLOTPOLLER_CHAOS_REPORT"); path != "" && len(reports) > 0 {
		require.NoError(t, os.WriteFile(path, []byte(strings.Join(reports, "\n")), 0o644))
	}
}

func runChaos(t *testing.T, driver string, s *store.Store, dsn string, pg *privatePostgres, duration time.Duration) string {
	ctx := context.Background()
	rec := &chaosRecorder{}
	srv := httptest.NewServer(http.HandlerFunc(rec.handler))
	defer srv.Close()

	f := &chaosFarm{t: t, driver: driver, dsn: dsn, base: srv.URL, nodes: map[string]*node{}, env: map[string][]string{}, rec: rec}
	names := []string{"node-a", "node-b", "node-c"}
	skews := []string{"5s", "-3s", "0s"} // local clocks that disagree; only the database's counts
	for i, name := range names {
		f.env[name] = env(driver, dsn, name, srv.URL, "SLOTPOLLER_CLOCK_SKEW="+skews[i],
			"SLOTPOLLER_ROTATION_SLOT="+chaosSlot.String(), "SLOTPOLLER_CHECKIN_HEARTBEAT="+chaosHeartbeat.String(),
			"SLOTPOLLER_JOBS_LEASE=2s", "SLOTPOLLER_JOBS_MAX_ATTEMPTS=20", "SLOTPOLLER_LOG_LEVEL=info")
		f.start(name)
	}
	waitFor(t, 30*time.Second, "3 live nodes", func() bool { return liveNodes(t, s) == chaosNodes })
	for i := range chaosTasks {
		require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: fmt.Sprintf("feed-%d", i), Endpoint: "/tasks/feed", Every: chaosEvery}))
	}
	waitFor(t, 20*time.Second, "every task to be called", func() bool {
		seen := map[string]bool{}
		for _, c := range rec.snapshot() {
			if c.kind == "task" {
				seen[c.key] = true
			}
		}
		return len(seen) == chaosTasks
	})

	time.Sleep(time.Second)
	tasks, err := s.Tasks(ctx, false)
	require.NoError(t, err)
	spread := map[string]int{}
	for _, task := range tasks {
		spread[task.OwnerNode]++
	}
	t.Logf("task owners before the faults: %v", spread)

	// Jobs trickle in through the whole run, through the faults.
	enqueued := make(chan []int64, 1)
	feedFor := 20 * time.Second
	if duration > 0 {
		feedFor = duration
	}
	go func() {
		var ids []int64
		pause := feedFor / chaosJobs
		for i := range chaosJobs {
			for {
				id, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/chaos", MaxAttempts: 20, UniqueKey: "chaos-" + strconv.Itoa(i)})
				if err == nil || (id != 0 && strings.Contains(err.Error(), "exists")) {
					ids = append(ids, id)
					break
				}
				time.Sleep(100 * time.Millisecond) // the database is restarting
			}
			time.Sleep(pause)
		}
		enqueued <- ids
	}()

	deadline := time.Now().Add(duration)
	for cycle := 0; cycle == 0 || time.Now().Before(deadline); cycle++ {
		f.cycle(cycle, pg)
	}
	ids := <-enqueued

	waitFor(t, 120*time.Second, "every chaos job to finish", func() bool {
		counts, err := s.JobCounts(ctx)
		if err != nil {
			return false
		}
		return counts[store.StateDone]+counts[store.StateFailed]+counts[store.StateDead] >= len(ids)
	})
	time.Sleep(2 * chaosEvery)
	for _, n := range f.nodes {
		n.stop(t)
	}
	return f.judge(s, rec.snapshot(), ids)
}

// cycle injects one round of faults, each on a different node: the one
// holding the most tasks at that moment.
func (f *chaosFarm) cycle(i int, pg *privatePostgres) {
	t := f.t
	hit := map[string]bool{}
	victim := func(int) string { v := f.busiest(hit); hit[v] = true; return v }
	rotation := chaosNodes * chaosSlot
	crashBound := chaosTTL + rotation + chaosEvery + slack

	// kill -9, then the node comes back under a new incarnation.
	time.Sleep(2 * time.Second)
	v := victim(0)
	f.faults = append(f.faults, fault{"kill -9", v, time.Now(), crashBound})
	require.NoError(t, f.nodes[v].cmd.Process.Kill())
	_ = f.nodes[v].cmd.Wait()
	time.Sleep(3 * time.Second)
	f.start(v)

	// SIGSTOP past the TTL (a frozen process, a VM pause), then SIGCONT.
	time.Sleep(2 * time.Second)
	v = victim(1)
	pid := f.nodes[v].cmd.Process.Pid
	f.faults = append(f.faults, fault{"SIGSTOP", v, time.Now(), crashBound})
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	time.Sleep(chaosTTL + 2*time.Second)
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))

	// A graceful restart: tasks are released at once.
	time.Sleep(2 * time.Second)
	v = victim(2)
	f.faults = append(f.faults, fault{"SIGTERM", v, time.Now(), rotation + chaosHeartbeat + chaosEvery + slack})
	f.nodes[v].stop(t)
	time.Sleep(2 * time.Second)
	f.start(v)

	if pg != nil {
		time.Sleep(2 * time.Second)
		at := time.Now()
		pg.Restart()
		// Measured from the moment the server is back.
		f.faults = append(f.faults, fault{"PostgreSQL restart", "", at, time.Since(at) + crashBound})
	}
	time.Sleep(2 * time.Second)
}

// judge checks the promises against what the endpoint saw and returns a
// markdown summary.
func (f *chaosFarm) judge(s *store.Store, calls []chaosCall, ids []int64) string {
	t := f.t
	ctx := context.Background()

	// Tasks: per task, tokens never go back, and each token has one node.
	stale := 0
	tokenNode := map[string]string{}
	newest := map[string]int64{}
	for _, c := range calls {
		if c.kind != "task" {
			continue
		}
		if c.token < newest[c.key] {
			stale++
			t.Errorf("stale call: task %s called by %s with token %d after token %d was seen", c.key, c.node, c.token, newest[c.key])
		}
		newest[c.key] = max(newest[c.key], c.token)
		k := c.key + "/" + strconv.FormatInt(c.token, 10)
		if prev, ok := tokenNode[k]; ok && prev != c.node {
			t.Errorf("task %s token %d used by two nodes: %s and %s", c.key, c.token, prev, c.node)
		}
		tokenNode[k] = c.node
	}

	// Failover: after each fault, every task the victim held is called by
	// another node (or, for the database restart, by anyone) within bound.
	var failovers []time.Duration
	var rows []string
	for _, fl := range f.faults {
		owner := map[string]string{}
		for _, c := range calls {
			if c.kind == "task" && c.start.Before(fl.at) {
				owner[c.key] = c.node
			}
		}
		worst := time.Duration(0)
		moved := 0
		for task, o := range owner {
			if fl.node != "" && o != fl.node {
				continue
			}
			var first time.Time
			for _, c := range calls {
				if c.kind == "task" && c.key == task && c.start.After(fl.at) && (fl.node == "" || c.node != fl.node) {
					first = c.start
					break
				}
			}
			if first.IsZero() {
				t.Errorf("%s of %s: task %s was never called again", fl.kind, fl.node, task)
				continue
			}
			d := first.Sub(fl.at)
			if fl.node != "" {
				failovers = append(failovers, d) // node faults; the database restart has its own row
			}
			moved++
			worst = max(worst, d)
			if d > fl.bound {
				t.Errorf("%s of %s: task %s called again after %v, bound %v", fl.kind, fl.node, task, d.Round(time.Millisecond), fl.bound)
			}
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %d | %v | %v |", fl.kind, orDash(fl.node), moved, worst.Round(time.Millisecond), fl.bound.Round(time.Millisecond)))
	}

	// Jobs: none lost, none run twice at once.
	perJob := map[string][]chaosCall{}
	for _, c := range calls {
		if c.kind == "job" {
			perJob[c.key] = append(perJob[c.key], c)
		}
	}
	lost, notDone, reruns, concurrent := 0, 0, 0, 0
	for _, id := range ids {
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		if j.State != store.StateDone {
			notDone++
			t.Errorf("job %d ended %s (%s)", id, j.State, j.LastError)
		}
		cs := perJob[strconv.FormatInt(id, 10)]
		if len(cs) == 0 {
			lost++
			t.Errorf("job %d was never called", id)
		}
		reruns += max(0, len(cs)-1)
		for i := 1; i < len(cs); i++ {
			if cs[i].start.Before(cs[i-1].end) {
				concurrent++
				t.Errorf("job %d ran twice at once: %s [%v] and %s", id, cs[i-1].node, cs[i-1].end.Sub(cs[i-1].start), cs[i].node)
			}
		}
	}

	sort.Slice(failovers, func(i, j int) bool { return failovers[i] < failovers[j] })
	p50, worst := time.Duration(0), time.Duration(0)
	if len(failovers) > 0 {
		p50, worst = failovers[len(failovers)/2], failovers[len(failovers)-1]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n", f.driver)
	fmt.Fprintf(&b, "%d nodes (local clocks skewed +5s, -3s, 0), slot %v, heartbeat %v, ttl %v, %d tasks every %v, %d jobs; %d faults.\n\n",
		chaosNodes, chaosSlot, chaosHeartbeat, chaosTTL, chaosTasks, chaosEvery, len(ids), len(f.faults))
	fmt.Fprintf(&b, "| fault | node | tasks moved | slowest re-call | bound |\n|---|---|---:|---:|---:|\n%s\n\n", strings.Join(rows, "\n"))
	fmt.Fprintf(&b, "| node-fault failover p50 | max | stale task calls | jobs lost | jobs not done | jobs re-run after a crash | jobs run twice at once |\n")
	fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---:|\n| %v | %v | %d | %d | %d | %d | %d |\n",
		p50.Round(time.Millisecond), worst.Round(time.Millisecond), stale, lost, notDone, reruns, concurrent)
	t.Log("\n" + b.String())
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
