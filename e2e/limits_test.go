//go:build unix

package e2e

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// The end-to-end proofs of the queues' limits, rates and priorities
// (docs/flow-control.md), with real node processes configured by a
// config.yaml on every database. Each test runs its databases' farms side
// by side, and the tests run beside each other (t.Parallel) after the
// package's other tests: together they cost about the slowest farm's
// time, the rate test's minute, or SQL Server's where every node's
// connections first compile every statement.

// parallelFarms is how many tests that call t.Parallel run at once in
// this package unless -test.parallel says otherwise: the farms wait on
// their processes and the clock, not on the CPU, and go test's default
// (GOMAXPROCS) runs the three databases' farms of one test two at a time
// on a 2-core machine. Four tests of three farms each.
const parallelFarms = 12

// raiseParallel sets -test.parallel to parallelFarms unless the command
// line set it. TestMain calls it before m.Run, which reads it.
func raiseParallel() {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(parallelFarms))
	}
}

// eachDatabaseParallel runs fn once per database as parallel subtests.
func eachDatabaseParallel(t *testing.T, fn func(t *testing.T, driver string)) {
	for _, d := range storetest.Drivers {
		t.Run(d, func(t *testing.T) {
			switch d {
			case "postgres":
				storetest.RequirePostgres(t)
			case "sqlserver":
				storetest.RequireSQLServer(t)
			case "mysql":
				storetest.RequireMySQL(t)
			}
			t.Parallel()
			fn(t, d)
		})
	}
}

// configDir is a folder whose config.yaml is yaml, for startNodeIn.
func configDir(t *testing.T, yaml string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(yaml), 0o600))
	return dir
}

// requireSettings checks that the nodes wrote a queue's settings from
// their config: the farm claims by these.
func requireSettings(t *testing.T, s *store.Store, want store.QueueSettings) {
	t.Helper()
	var got store.QueueSettings
	var managed int
	var limit, nodeLimit, rate, periodMS sql.NullInt64
	q := store.Expand(s.Dialect(), `SELECT name, managed, priority, max_running, max_per_node, rate_limit, rate_period_ms FROM {queues} WHERE name = ?`)
	require.NoError(t, s.DB().QueryRowContext(context.Background(), q, want.Name).Scan(&got.Name, &managed, &got.Priority, &limit, &nodeLimit, &rate, &periodMS),
		"the settings of queue %s", want.Name)
	got.Limit, got.NodeLimit, got.Rate = int(limit.Int64), int(nodeLimit.Int64), int(rate.Int64)
	got.RatePeriod = time.Duration(periodMS.Int64) * time.Millisecond
	require.Equal(t, want, got, "the settings of queue %s in the database", want.Name)
	require.Equal(t, 1, managed, "queue %s is managed", want.Name)
}

// span is one call as the endpoint saw it: from the request's arrival to
// the handler's return, or to the moment its caller went away.
type span struct {
	job, node  string
	token      int64
	start, end time.Time
	cut        bool // the request's context ended first: the caller went away
}

// spanRecorder is an endpoint that works for work(job) and records every
// call's span.
type spanRecorder struct {
	work  func(job int64) time.Duration
	mu    sync.Mutex
	spans []span
	open  map[string]int // calls in progress, by node
}

func newSpanRecorder(work func(job int64) time.Duration) *spanRecorder {
	return &spanRecorder{work: work, open: map[string]int{}}
}

func (r *spanRecorder) handler(w http.ResponseWriter, req *http.Request) {
	// A server hears of a closed connection once it has read the body.
	_, _ = io.Copy(io.Discard, req.Body)
	sp := span{job: req.Header.Get("X-Slotpoller-Job"), node: req.Header.Get("X-Slotpoller-Node"), start: time.Now()}
	sp.token, _ = strconv.ParseInt(req.Header.Get("X-Slotpoller-Token"), 10, 64)
	id, _ := strconv.ParseInt(sp.job, 10, 64)
	r.mu.Lock()
	r.open[sp.node]++
	r.mu.Unlock()
	// The end is taken in a deferred call, after the status is written
	// and before the response leaves (it is sent once the handler
	// returns): the node cannot have seen the call end before it.
	defer func() {
		sp.end = time.Now()
		r.mu.Lock()
		r.open[sp.node]--
		r.spans = append(r.spans, sp)
		r.mu.Unlock()
	}()
	timer := time.NewTimer(r.work(id))
	defer timer.Stop()
	select {
	case <-timer.C:
		w.WriteHeader(http.StatusNoContent)
	case <-req.Context().Done():
		sp.cut = true
	}
}

func (r *spanRecorder) snapshot() []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// interval is a stretch of time of one holder (a node, or "" for none).
type interval struct {
	holder     string
	start, end time.Time
}

// peak is the most intervals open at one instant. An
// interval that ends at the instant another starts is not counted with
// it: the database's clock has a resolution (SQLite's milliseconds), and
// a finish and the next claim may read the same value.
func peak(ivs []interval) int {
	type edge struct {
		at    time.Time
		delta int
	}
	edges := make([]edge, 0, 2*len(ivs))
	for _, iv := range ivs {
		edges = append(edges, edge{iv.start, +1}, edge{iv.end, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // ends first
	})
	most, open := 0, 0
	for _, e := range edges {
		open += e.delta
		most = max(most, open)
	}
	return most
}

// peaks is peak of all the intervals, and of each holder's.
func peaks(ivs []interval) (int, map[string]int) {
	all := peak(ivs)
	by := map[string][]interval{}
	for _, iv := range ivs {
		by[iv.holder] = append(by[iv.holder], iv)
	}
	each := map[string]int{}
	for h, list := range by {
		each[h] = peak(list)
	}
	return all, each
}

// used is the share of the time from the first start to the last end
// that n calls could have run in that the intervals ran.
func used(ivs []interval, n int) float64 {
	if len(ivs) == 0 {
		return 0
	}
	first, last, busy := ivs[0].start, ivs[0].end, time.Duration(0)
	for _, iv := range ivs {
		first, last = minTime(first, iv.start), maxTime(last, iv.end)
		busy += iv.end.Sub(iv.start)
	}
	return float64(busy) / float64(time.Duration(n)*last.Sub(first))
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestLimitHoldsThroughAKill: 3 node processes of capacity 4 run a burst
// of 200 calls of 100-150 ms of a queue with limit 2 and node_limit 1;
// during the burst one node is killed (SIGKILL) in the middle of a call
// and another node starts. At no instant do more than 2 of the queue's
// calls run across the farm, nor more than 1 on a node: as the endpoint
// saw the calls, and as the database recorded the attempts on its clock.
// Every job ends done, and a job is called a second time only if the
// killed node called it before the kill, and only after that call ended.
//
// Without the limits this farm would run up to 12 calls at once (3 nodes
// of capacity 4, 200 calls due): the test fails if the limits are
// ignored, and it checks that 2 were reached.
func TestLimitHoldsThroughAKill(t *testing.T) {
	t.Parallel()
	eachDatabaseParallel(t, limitHoldsThroughAKill)
}

func limitHoldsThroughAKill(t *testing.T, driver string) {
	const limit, nodeLimit, capacity = 2, 1, 4
	total, work := 200, 100*time.Millisecond
	if driver == "sqlserver" {
		// The T-SQL test server takes 0.2 s and more for a claim, which
		// holds the queue's row, under CI's load: calls of 100 ms hardly
		// overlapped there (at most 1 at once, the room used 12% of the
		// time), and the limit went untested. Calls of 400 ms do.
		total, work = 120, 400*time.Millisecond
	}
	began := time.Now()
	s, db := storetest.OpenDB(t, driver)
	ctx := context.Background()
	// work to work + 50 ms, spread by the job's id: the burst takes
	// 200 × 125 ms / 2 = 12.5 s at the limit (120 × 425 ms / 2 = 25.5 s
	// on SQL Server).
	rec := newSpanRecorder(func(id int64) time.Duration { return work + time.Duration(id*7%51)*time.Millisecond })
	srv := httptest.NewServer(http.HandlerFunc(rec.handler))
	defer srv.Close()

	dir := configDir(t, fmt.Sprintf(`queues:
  - name: reports
    endpoints: ["/jobs/reports/"]
    limit: %d
    node_limit: %d
`, limit, nodeLimit))
	nodeEnv := func(name string) []string {
		return append(env(driver, db.DSN, name, srv.URL, db.ExtraEnv()...), fmt.Sprintf("SLOTPOLLER_NODE_CAPACITY=%d", capacity))
	}
	nodes := map[string]*node{}
	for _, name := range []string{"node-a", "node-b", "node-c"} {
		nodes[name] = startNodeIn(t, nodeEnv(name), name, dir)
	}
	waitSettled(t, s, 3)
	requireSettings(t, s, store.QueueSettings{Name: "reports", Limit: limit, NodeLimit: nodeLimit})

	settled := time.Since(began)
	ids := map[string]bool{}
	for i := range total {
		// A call's timeout of 2 s: a dead node's job is held for the
		// lease (3 s) rather than the default 30 s timeout, and counts
		// against the limit no longer than that.
		id, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: fmt.Sprintf("/jobs/reports/r%d", i), MaxAttempts: 3, Timeout: 2 * time.Second})
		require.NoError(t, err)
		ids[strconv.FormatInt(id, 10)] = true
	}
	enqueued := time.Since(began) - settled

	// A twentieth into the burst, kill a node while it is in a call
	// (early: the killed call's job waits out its lease, 60 s on SQL
	// Server, while the rest of the burst runs). The recorder's lock is
	// held from the look to the kill: the call seen open cannot end (its
	// end is recorded under the lock, before its response is sent) until
	// the node is dead.
	waitFor(t, 2*time.Minute, "a twentieth of the burst to be called", func() bool { return len(rec.snapshot()) >= total/20 })
	victim := ""
	waitFor(t, 30*time.Second, "a call of one of the first nodes in progress", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, name := range []string{"node-a", "node-b", "node-c"} {
			if rec.open[name] > 0 {
				victim = name
				require.NoError(t, nodes[name].cmd.Process.Kill())
				return true
			}
		}
		return false
	})
	killed := time.Now()
	enqueuedToKill := killed.Sub(began) - settled
	_ = nodes[victim].cmd.Wait()
	delete(nodes, victim)
	nodes["node-d"] = startNodeIn(t, nodeEnv("node-d"), "node-d", dir)

	// SQL Server's test nodes hold a lease of 60 s (see env): the killed
	// node's job waits that long for another node.
	waitFor(t, 3*time.Minute, "every job to be done", func() bool {
		counts, err := s.JobCounts(ctx)
		require.NoError(t, err)
		return counts[store.StateDone] == total
	})
	drained := time.Since(began)
	for _, n := range nodes {
		n.stop(t)
	}
	t.Logf("%s: the farm settled at %v, the burst was enqueued %v later, the kill came %v after the settling, every job was done at %v",
		driver, settled.Round(time.Millisecond), enqueued.Round(time.Millisecond), enqueuedToKill.Round(time.Millisecond), drained.Round(time.Millisecond))

	// The endpoint's view.
	spans := rec.snapshot()
	byJob := map[string][]span{}
	var calls []interval
	perNode := map[string]int{}
	for _, sp := range spans {
		require.True(t, ids[sp.job], "a call of an unknown job %q", sp.job)
		byJob[sp.job] = append(byJob[sp.job], sp)
		calls = append(calls, interval{sp.node, sp.start, sp.end})
		perNode[sp.node]++
	}
	require.Len(t, byJob, total, "every job was called")
	rerun, cut, gaveUp := 0, 0, 0
	for job, list := range byJob {
		slices.SortFunc(list, func(a, b span) int { return a.start.Compare(b.start) })
		for i, sp := range list[:len(list)-1] {
			// Only a call by the killed node from before the kill (cut
			// off, or answered to a node that did not live to record
			// it), or one its node cut off because it could not confirm
			// its lease in time (a claim or a renewal slowed by a loaded
			// database: the node gives the job up rather than call past
			// its hold), is followed by another, of a later claim, after
			// it.
			if sp.node != victim {
				require.True(t, sp.cut, "job %s called again after a call by %s that was not cut off: %+v", job, sp.node, list)
				gaveUp++
			} else {
				require.True(t, sp.start.Before(killed), "job %s: its call by the killed node began after the kill", job)
			}
			require.False(t, list[i+1].start.Before(sp.end), "job %s ran twice at once: %+v", job, list)
			require.Greater(t, list[i+1].token, sp.token, "job %s: a new claim calls again", job)
			if sp.node == victim {
				rerun++
			}
		}
		for _, sp := range list {
			if sp.cut {
				cut++
			}
		}
	}
	require.Positive(t, rerun, "the call the kill cut off was called again")
	most, each := peaks(calls)
	t.Logf("%s: calls per node %v; the kill of %s cut %d off, %d called again (%d given up by a live node, its lease not confirmed in time); at most %d at once, per node %v; the limit's room was used %.0f%% of the burst's time",
		driver, perNode, victim, cut, rerun, gaveUp, most, each, 100*used(calls, limit))
	require.LessOrEqual(t, most, limit, "calls of the queue at once across the farm")
	require.Equal(t, limit, most, "the limit was reached: the test could see it exceeded")
	for name, n := range each {
		require.LessOrEqual(t, n, nodeLimit, "calls of the queue at once on %s", name)
	}

	// The database's view, on its own clock: each attempt runs from its
	// claim to its end (the reclaim, for the killed call) in the job's
	// history. A claim counts the running jobs after its finished ones
	// committed, so these intervals obey the limits too.
	var attempts []interval
	for job := range ids {
		id, _ := strconv.ParseInt(job, 10, 64)
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.StateDone, j.State, "job %s", job)
		for _, e := range j.History {
			if e.Started != nil {
				attempts = append(attempts, interval{e.Node, *e.Started, e.Ended})
			}
		}
	}
	require.GreaterOrEqual(t, len(attempts), total)
	most, each = peaks(attempts)
	require.LessOrEqual(t, most, limit, "attempts running at once across the farm, on the database clock")
	for name, n := range each {
		require.LessOrEqual(t, n, nodeLimit, "attempts running at once on %s, on the database clock", name)
	}
	t.Logf("%s: on the database clock, at most %d attempts at once, per node %v; TestLimitHoldsThroughAKill took %v",
		driver, most, each, time.Since(began).Round(100*time.Millisecond))
}
