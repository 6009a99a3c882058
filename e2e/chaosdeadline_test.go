//go:build unix

package e2e

// Chaos scenarios on calls bounded by what the endpoint can see: job calls
// longer than the lease on a node that freezes. The endpoint honours
// X-Slotpoller-Deadline (it stops there, done or not) and is stubborn: it
// works on when its caller goes away, as an endpoint that does not watch
// its connection does. A call is judged by the interval in which the
// endpoint worked for it, from its arrival to the earlier of its work's
// end and its deadline header: two such intervals of one job or task,
// under different tokens, must never overlap. The deadline header is the
// only promise the endpoint gets, so it must never lie past the moment
// another node may run the same work.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/callproto"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// newScenarioFarm starts the three nodes of a chaos scenario on db, with
// the chaos timing of its database and extra settings (a later value
// wins), and waits until they are live.
func newScenarioFarm(t *testing.T, s *store.Store, db storetest.DB, rec *chaosRecorder, extra ...string) *chaosFarm {
	srv := httptest.NewServer(http.HandlerFunc(rec.handler))
	t.Cleanup(srv.Close)
	p := fastChaos
	if db.Driver == "sqlserver" {
		p = sqlServerChaos
	}
	f := &chaosFarm{t: t, driver: db.Driver, db: db, profile: p, base: srv.URL, store: s,
		nodes: map[string]*node{}, env: map[string][]string{}, rec: rec}
	for _, name := range []string{"node-a", "node-b", "node-c"} {
		e := append(db.ExtraEnv(), "SLOTPOLLER_ROTATION_SLOT="+p.slot.String(),
			"SLOTPOLLER_CHECKIN_HEARTBEAT="+p.heartbeat.String(), "SLOTPOLLER_JOBS_MAX_ATTEMPTS=20",
			"SLOTPOLLER_JOBS_BACKOFF_MAX=1s", "SLOTPOLLER_LOG_LEVEL=info")
		f.env[name] = env(db.Driver, db.DSN, name, srv.URL, append(e, extra...)...)
		f.start(name)
	}
	waitFor(t, 60*time.Second, "3 live nodes", func() bool { return liveNodes(t, s) == chaosNodes })
	return f
}

// addSlowTasks adds n tasks whose calls outlast a heartbeat, and one whose
// calls would outlast any task call's deadline (so each of its calls ends
// at its deadline header), and waits until each has been called.
func (f *chaosFarm) addSlowTasks(n int) {
	t := f.t
	added := map[string]bool{"long-0": true}
	for i := range n {
		name := fmt.Sprintf("slow-%d", i)
		added[name] = true
		require.NoError(t, jobs.AddTask(context.Background(), f.store, store.NewTask{Name: name, Endpoint: "/tasks/slow", Every: f.profile.every}))
	}
	require.NoError(t, jobs.AddTask(context.Background(), f.store, store.NewTask{Name: "long-0", Endpoint: "/tasks/long", Every: f.profile.every}))
	waitFor(t, 60*time.Second, "every task to be called", func() bool {
		seen := map[string]bool{}
		for _, c := range f.rec.snapshot() {
			if c.kind == "task" && added[c.key] {
				seen[c.key] = true
			}
		}
		return len(seen) == len(added)
	})
}

// overlapFigures are what the endpoint saw of calls that overlapped.
type overlapFigures struct {
	jobs, tasks          int           // calls that began while an earlier one of the same job or task worked on
	worstJob, worstTask  time.Duration // the longest such overlap
	pastDeadline, cutOff int           // calls that arrived past their deadline; calls their deadline cut short
}

// overlaps counts, per job and per task, the calls that began while an
// earlier call of the same job or task was still being worked on by the
// endpoint, failing the test for each.
func overlaps(t *testing.T, calls []chaosCall) overlapFigures {
	var o overlapFigures
	per := map[string][]chaosCall{}
	for _, c := range calls {
		per[c.kind+" "+c.key] = append(per[c.kind+" "+c.key], c)
		if !c.deadline.IsZero() && !c.start.Before(c.deadline) {
			o.pastDeadline++
			t.Errorf("%s %s: call by %s (token %d) arrived at %s, past its deadline header %s", c.kind, c.key, c.node, c.token,
				c.start.UTC().Format(callproto.DeadlineFormat), c.deadline.Format(callproto.DeadlineFormat))
		}
		if c.cut {
			o.cutOff++
		}
	}
	for what, cs := range per {
		n := countOverlaps(cs, func(a, b chaosCall) {
			d := a.end.Sub(b.start)
			if a.kind == "job" {
				o.worstJob = max(o.worstJob, d)
			} else {
				o.worstTask = max(o.worstTask, d)
			}
			t.Errorf("%s: call by %s (token %d, %s..%s, deadline %s) and call by %s (token %d, from %s) overlapped by %v at the endpoint",
				what, a.node, a.token, a.start.Format("15:04:05.000"), a.end.Format("15:04:05.000"), a.deadline.Local().Format("15:04:05.000"),
				b.node, b.token, b.start.Format("15:04:05.000"), d.Round(time.Millisecond))
		})
		if strings.HasPrefix(what, "job ") {
			o.jobs += n
		} else {
			o.tasks += n
		}
	}
	return o
}

// frozen is one freeze of the frozen-node scenario.
type frozen struct {
	node string
	held int // long job calls in flight on it when it froze
}

// TestChaosFrozenNodeLongCalls freezes (SIGSTOP) the node running the most
// job calls that are longer than the lease, for longer than the lease
// (3 nodes on PostgreSQL and on MySQL, jobs.lease 3s, jobs.timeout 60s or a job's own
// 45 s, 12 s calls, a 9 s freeze), then thaws it (SIGCONT). The endpoint
// honours its deadline header. No job may be called again while the
// endpoint still works on an earlier call of it, and every job ends done.
// A lease that ends before the deadline the endpoint was given breaks it:
// another node re-runs the job while the first call goes on.
//
// SLOTPOLLER_CHAOS_DURATION repeats the freeze until it has passed. The
// two databases' farms run side by side, each in a database of its own.
func TestChaosFrozenNodeLongCalls(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		storetest.RequirePostgres(t)
		t.Parallel()
		frozenNodeLongCalls(t, "postgres")
	})
	t.Run("mysql", func(t *testing.T) {
		storetest.RequireMySQL(t)
		t.Parallel()
		frozenNodeLongCalls(t, "mysql")
	})
}

func frozenNodeLongCalls(t *testing.T, driver string) {
	s, db := storetest.OpenDB(t, driver)
	const (
		lease      = 3 * time.Second
		jobTimeout = 45 * time.Second // half the jobs; the rest take jobs.timeout (60 s)
		call       = 12 * time.Second
		freeze     = 9 * time.Second
		longJobs   = 12
	)
	began := time.Now()
	rec := &chaosRecorder{slowCall: fastChaos.slowCall, longCall: call, stubborn: true}
	f := newScenarioFarm(t, s, db, rec, "SLOTPOLLER_JOBS_LEASE="+lease.String(), "SLOTPOLLER_JOBS_TIMEOUT=60s")
	f.addSlowTasks(chaosSlowTasks)

	ctx := context.Background()
	var ids []int64
	var freezes []frozen
	until := time.Now().Add(chaosDuration(t))
	for round := 0; round == 0 || time.Now().Before(until); round++ {
		var batch []int64
		for i := range longJobs {
			j := store.NewJob{Endpoint: "/jobs/long", MaxAttempts: 20, UniqueKey: fmt.Sprintf("frozen-%d-%d", round, i)}
			if i%2 == 0 {
				j.Timeout = jobTimeout
			}
			id, err := jobs.Enqueue(ctx, s, j)
			require.NoError(t, err)
			batch = append(batch, id)
		}
		ids = append(ids, batch...)
		waitFor(t, 30*time.Second, "every long job to be called", func() bool {
			n := 0
			for _, c := range f.inFlight() {
				n += c
			}
			return n == longJobs
		})
		time.Sleep(time.Second) // a renewal has confirmed each lease since its claim
		busy := f.inFlight()
		v, most := "", -1
		for _, name := range []string{"node-a", "node-b", "node-c"} {
			if busy[name] > most {
				v, most = name, busy[name]
			}
		}
		freezes = append(freezes, frozen{v, most})
		pid := f.nodes[v].cmd.Process.Pid
		require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
		time.Sleep(freeze)
		require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
		// Long enough for a job given up by the frozen node to be run
		// again after a lease that covers its 60 s deadline.
		waitFor(t, 2*time.Minute, "every long job to finish", func() bool {
			for _, id := range batch {
				j, err := s.JobGet(ctx, id)
				require.NoError(t, err)
				if j.State == store.StateReady || j.State == store.StateRunning {
					return false
				}
			}
			return true
		})
	}
	for _, n := range f.nodes {
		n.stop(t)
	}

	calls := rec.snapshot()
	o := overlaps(t, calls)
	perJob := map[string]int{}
	for _, c := range calls {
		if c.kind == "job" {
			perJob[c.key]++
		}
	}
	reruns, notDone := 0, 0
	for _, id := range ids {
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		if j.State != store.StateDone {
			notDone++
			t.Errorf("job %d ended %s after %d attempts (%s)", id, j.State, j.Attempt, j.LastError)
		}
		reruns += max(0, perJob[strconv.FormatInt(id, 10)]-1)
	}
	var rows []string
	for _, fr := range freezes {
		rows = append(rows, fmt.Sprintf("%s (%d calls)", fr.node, fr.held))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### frozen node, long job calls (%s)\n\n3 nodes, job lease %v, jobs.timeout 60s (half the jobs %v), %d jobs of %v calls, "+
		"the busiest node frozen %v: %s; %d slow tasks (%v calls) and one whose calls end at their deadline; the endpoint stops at its deadline header and works on when its caller goes away. %v in all.\n\n",
		driver, lease, jobTimeout, len(ids), call, freeze, strings.Join(rows, ", "), chaosSlowTasks, fastChaos.slowCall, time.Since(began).Round(time.Second))
	fmt.Fprintf(&b, "| overlapping job calls | longest | overlapping task calls | longest | calls past their deadline | calls cut at their deadline | jobs called again | jobs not done |\n")
	fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---:|---:|\n| %d | %v | %d | %v | %d | %d | %d | %d |\n",
		o.jobs, o.worstJob.Round(time.Millisecond), o.tasks, o.worstTask.Round(time.Millisecond), o.pastDeadline, o.cutOff, reruns, notDone)
	t.Log("\n" + b.String())
	appendChaosReport(t, b.String())
}
