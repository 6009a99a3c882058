package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/slotpoller/slotpoller/bench/benchkit"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
)

// soakResult is everything a soak measured, for its report.
type soakResult struct {
	o                          soakOptions
	command, load, commit      string
	database                   string
	privateServer              bool
	t0, fedAt, drainedAt       time.Time
	drained                    bool
	states                     map[string]int // jobs by state after the drain
	feed                       *feed
	marks                      []statementMark
	dealloc                    int64
	calls                      *callLog
	nodes                      []soakNodeResult
	deaths                     []death // in time order
	dbCPU                      time.Duration
	dbCPUNote                  string // why the database's CPU was not read
	nodeCPU                    *time.Duration
	notDone                    map[string]string // key → state, of the jobs not done after the drain
	lost, doneUncalled, missed int
	lostKeys                   []string
}

type soakNodeResult struct {
	name  string
	lives []*incarnation
}

// maxLookups bounds the jobs looked up one by one when the run went
// badly: past it, the report says so.
const maxLookups = 1000

// readNotDone finds the jobs not done after the drain, and of the jobs
// enqueued, those never called: lost unless the database has them done.
func (r *soakResult) readNotDone(ctx context.Context, st *store.Store) error {
	rows, err := st.DB().QueryContext(ctx, "SELECT endpoint, state FROM slotpoller_jobs WHERE state <> 'done'")
	if err != nil {
		return fmt.Errorf("read the jobs not done: %w", err)
	}
	defer rows.Close()
	r.notDone = map[string]string{}
	for rows.Next() {
		var endpoint, state string
		if err := rows.Scan(&endpoint, &state); err != nil {
			return fmt.Errorf("read the jobs not done: %w", err)
		}
		r.notDone[strings.TrimPrefix(endpoint, "/job/")] = state
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the jobs not done: %w", err)
	}
	lookups := 0
	for i, t := range r.feed.sent {
		if t.IsZero() {
			continue
		}
		key := soakKey(i)
		if _, called := r.calls.keys[key]; called {
			continue
		}
		if _, ok := r.notDone[key]; ok {
			r.lost++
			r.lostKeys = append(r.lostKeys, key)
			continue
		}
		if lookups++; lookups > maxLookups {
			r.missed++
			continue
		}
		var state string
		err := st.DB().QueryRowContext(ctx, "SELECT state FROM slotpoller_jobs WHERE endpoint = $1", "/job/"+key).Scan(&state)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			r.lost++ // enqueued, and no row: gone
			r.lostKeys = append(r.lostKeys, key)
		case err != nil:
			return fmt.Errorf("look up job %s: %w", key, err)
		default:
			r.doneUncalled++
		}
	}
	return nil
}

// windowIndex is the window of bounds (ascending; window i is
// [bounds[i], bounds[i+1])) that holds t, -1 when none does.
func windowIndex(bounds []time.Time, t time.Time) int {
	i := sort.Search(len(bounds), func(i int) bool { return bounds[i].After(t) }) - 1
	if i < 0 || i >= len(bounds)-1 {
		return -1
	}
	return i
}

// soakWindow is one row of the statements table.
type soakWindow struct {
	from, to         time.Time
	enqueued, called int
	deaths           int
	stmts            int64
	delays           []time.Duration // of the jobs enqueued in the window
	drain            bool
}

func (r *soakResult) windows() []soakWindow {
	bounds := make([]time.Time, len(r.marks))
	for i, m := range r.marks {
		bounds[i] = m.at
	}
	if len(bounds) < 2 {
		return nil
	}
	ws := make([]soakWindow, len(bounds)-1)
	for i := range ws {
		ws[i] = soakWindow{from: bounds[i], to: bounds[i+1], stmts: r.marks[i+1].stmts - r.marks[i].stmts, drain: !bounds[i].Before(r.fedAt)}
	}
	for i, t := range r.feed.sent {
		if t.IsZero() {
			continue
		}
		w := windowIndex(bounds, t)
		if w < 0 {
			continue
		}
		ws[w].enqueued++
		if first, ok := r.calls.firstStart(soakKey(i)); ok {
			ws[w].delays = append(ws[w].delays, first.Sub(t))
		}
	}
	for key := range r.calls.keys {
		first, _ := r.calls.firstStart(key)
		if w := windowIndex(bounds, first); w >= 0 {
			ws[w].called++
		}
	}
	for _, d := range r.deaths {
		if w := windowIndex(bounds, d.at); w >= 0 {
			ws[w].deaths++
		}
	}
	for i := range ws {
		slices.Sort(ws[i].delays)
	}
	return ws
}

func (r *soakResult) print(w io.Writer) {
	o := r.o
	def := config.Default()
	lease, timeout := time.Duration(def.Jobs.Lease), time.Duration(def.Jobs.Timeout)
	// The node's hold of a claimed job (jobs.Runner.hold): the longer of
	// the lease and the call's timeout plus a twelfth of the lease.
	hold := store.Hold{Lease: lease, Calls: true, DefaultTimeout: timeout, Margin: lease / 12}.For(0)
	kills := "no node killed"
	if o.killEvery > 0 {
		kills = "a node killed every " + shortDur(o.killEvery)
	}
	fmt.Fprintf(w, "## Soak: %d nodes, %d jobs/s for %s, %s\n\n", o.nodes, o.rate, shortDur(o.duration), kills)
	fmt.Fprintf(w, "- command: `%s`\n", r.command)
	fmt.Fprintf(w, "- date: %s\n", r.t0.Format(time.RFC3339))
	fmt.Fprintf(w, "- machine: %s, %d CPUs, %s/%s, %s; load average at the start %s\n",
		cpuModel(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), r.load)
	fmt.Fprintf(w, "- database: PostgreSQL %s (%s), statements counted by pg_stat_statements for the farm's login only (the feeder's inserts and the bench's reads not counted)\n",
		r.database, map[bool]string{true: "private cluster, fsync off", false: "given by -dsn"}[r.privateServer])
	fmt.Fprintf(w, "- nodes: %d `slotpoller run` processes built from %s, node.capacity %d, the rest the defaults (slot %v, heartbeat %v, ttl %v, lease %v, call timeout %v): a killed node's claimed jobs wait for their hold to run out (%v) before another node runs them again\n",
		o.nodes, r.commit, o.calls, time.Duration(def.Rotation.Slot), time.Duration(def.Checkin.Heartbeat), time.Duration(def.Checkin.TTL), lease, timeout, hold)
	fmt.Fprintf(w, "- load: %d jobs/s enqueued every 10 ms in one transaction (store.JobInsertMany, as client.EnqueueMany), max_attempts %d; the endpoint runs in the bench's process and takes %v\n",
		o.rate, o.attempts, o.work)
	if o.killEvery > 0 {
		fmt.Fprintf(w, "- kills: SIGKILL every %s, the nodes in turn, each at the node's first call in flight from then (waiting at most two rotations), started again under its name %v later; none in the drain\n", shortDur(o.killEvery), o.restartAfter)
	}
	fmt.Fprintln(w)

	enqueued := r.feed.enqueued()
	per1000 := func(d time.Duration) string {
		if enqueued == 0 {
			return "—"
		}
		return benchkit.Num(float64(d.Milliseconds()) * 1000 / float64(enqueued))
	}
	atOnce, afterDeath, unexplained, perDeath := repeatKinds(r.calls.repeats, r.deaths)
	var delays []time.Duration
	for i, t := range r.feed.sent {
		if first, ok := r.calls.firstStart(soakKey(i)); ok && !t.IsZero() {
			delays = append(delays, first.Sub(t))
		}
	}
	slices.Sort(delays)

	fmt.Fprintf(w, "| jobs | |\n|---|---:|\n")
	fed := fmt.Sprintf("%d (%s jobs/s over %s)", enqueued, benchkit.Num(float64(enqueued)/r.feed.took.Seconds()), shortDur(r.feed.took))
	if r.feed.failed > 0 {
		fed += fmt.Sprintf("; %d batches failed and left out, the last: %v", r.feed.failed, r.feed.lastErr)
	}
	fmt.Fprintf(w, "| enqueued | %s |\n", fed)
	if r.o.prefill > 0 {
		fmt.Fprintf(w, "| done (database) | %d, besides the %d written before the load |\n", r.states[store.StateDone]-r.o.prefill, r.o.prefill)
	} else {
		fmt.Fprintf(w, "| done (database) | %d |\n", r.states[store.StateDone])
	}
	drain := fmt.Sprintf("drained in %s", shortDur(r.drainedAt.Sub(r.fedAt)))
	if !r.drained {
		drain = fmt.Sprintf("not drained within %s", shortDur(o.drain))
	}
	fmt.Fprintf(w, "| not done after the drain | %d (%s%s) |\n", len(r.notDone), drain, stateList(r.notDone))
	lost := fmt.Sprint(r.lost)
	if len(r.lostKeys) > 0 {
		lost += " (" + strings.Join(r.lostKeys[:min(10, len(r.lostKeys))], ", ") + ")"
	}
	if r.missed > 0 {
		lost += fmt.Sprintf("; %d more never called, not looked up", r.missed)
	}
	fmt.Fprintf(w, "| lost: enqueued, never called, not done | %s |\n", lost)
	if r.doneUncalled > 0 {
		fmt.Fprintf(w, "| done in the database, never called | %d |\n", r.doneUncalled)
	}
	fmt.Fprintf(w, "| run twice at once | %d |\n", atOnce)
	fmt.Fprintf(w, "| re-run after a kill (at-least-once) | %d |\n", afterDeath)
	fmt.Fprintf(w, "| repeated with no kill before | %d |\n", unexplained)
	fmt.Fprintf(w, "| calls | %d |\n", r.calls.calls)
	fmt.Fprintf(w, "| jobs by node (its last call's) | %s |\n", r.byNode())
	if len(delays) > 0 {
		fmt.Fprintf(w, "| start delay p50 / p99 / max (enqueue to first call) | %s / %s / %s ms |\n",
			benchkit.Num(msOf(benchkit.Percentile(delays, 0.5))), benchkit.Num(msOf(benchkit.Percentile(delays, 0.99))), benchkit.Num(msOf(delays[len(delays)-1])))
	}
	if len(r.marks) >= 2 && enqueued > 0 {
		stmts := r.marks[len(r.marks)-1].stmts - r.marks[0].stmts
		fmt.Fprintf(w, "| statements per job (load and drain) | %s (%d statements) |\n", benchkit.Num(float64(stmts)/float64(enqueued)), stmts)
	}
	if r.dbCPUNote == "" {
		fmt.Fprintf(w, "| database server CPU ms / 1,000 jobs (feeder's inserts included) | %s |\n", per1000(r.dbCPU))
	} else {
		fmt.Fprintf(w, "| database server CPU ms / 1,000 jobs | not read: %s |\n", r.dbCPUNote)
	}
	if r.nodeCPU != nil {
		fmt.Fprintf(w, "| node processes' CPU ms / 1,000 jobs (every process, load and drain) | %s |\n", per1000(*r.nodeCPU))
	}
	fmt.Fprintln(w)
	if r.dealloc != 0 {
		fmt.Fprintf(w, "pg_stat_statements evicted entries %d times (-1: could not tell): the statement counts are low.\n\n", r.dealloc)
	}

	fmt.Fprintf(w, "| window | jobs enqueued | jobs first called | kills | statements | statements per job called | start delay p50 / p99 (jobs enqueued in it) |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|\n")
	for _, win := range r.windows() {
		label := shortDur(win.from.Sub(r.t0)) + "–" + shortDur(win.to.Sub(r.t0))
		if win.drain {
			label = "drain, " + shortDur(win.to.Sub(win.from))
		}
		perJob, delay := "—", "—"
		if win.called > 0 {
			perJob = benchkit.Num(float64(win.stmts) / float64(win.called))
		}
		if len(win.delays) > 0 {
			delay = fmt.Sprintf("%s / %s ms", benchkit.Num(msOf(benchkit.Percentile(win.delays, 0.5))), benchkit.Num(msOf(benchkit.Percentile(win.delays, 0.99))))
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %s | %s |\n", label, win.enqueued, win.called, win.deaths, win.stmts, perJob, delay)
	}
	fmt.Fprintln(w)

	if len(r.deaths) > 0 {
		fmt.Fprintf(w, "| # | at | node | pid | how | calls in flight at the endpoint | jobs left running under its name (run once their holds run out) | next process started | calls repeated after it |\n")
		fmt.Fprintf(w, "|---:|---:|---|---:|---|---:|---:|---:|---:|\n")
		for i, d := range r.deaths {
			inFlight, held, back := "—", "—", "—"
			if d.inFlight >= 0 {
				inFlight = fmt.Sprint(d.inFlight)
			}
			if d.held >= 0 {
				held = fmt.Sprint(d.held)
			}
			if !d.until.IsZero() {
				back = fmt.Sprintf("%s later", shortDur(d.until.Sub(d.at)))
			}
			fmt.Fprintf(w, "| %d | %s | %s | %d | %s | %s | %s | %s | %d |\n", i+1, shortDur(d.at.Sub(r.t0)), d.node, d.pid, d.how, inFlight, held, back, perDeath[i])
		}
		fmt.Fprintf(w, "\nA job the dead node had claimed and not yet called is called once its hold runs out: a first call, late (the start delay's max), not a repeat.\n\n")
	}

	fmt.Fprintf(w, "| node | process | lived (from the load's start) | RSS at %s of its life | at its end | max | slope after %s, MiB / 10 min (samples) |\n", shortDur(o.settle), shortDur(o.settle))
	fmt.Fprintf(w, "|---|---|---|---:|---:|---:|---:|\n")
	for _, n := range r.nodes {
		for i, inc := range n.lives {
			s := summarizeRSS(inc.rss, o.settle)
			atSettle, slope := "—", "—"
			if s.atSettle > 0 {
				atSettle = fmt.Sprintf("%.1f MiB", mib(s.atSettle))
			}
			if s.fitted > 0 {
				slope = fmt.Sprintf("%+.2f (%d)", s.slope/(1<<20), s.fitted)
			}
			ended, how := inc.ended, inc.how
			if ended.IsZero() || ended.After(r.drainedAt) {
				ended, how = r.drainedAt, "until the drain's end"
			}
			fmt.Fprintf(w, "| %s | %d (pid %d) | %s–%s, %s (%s) | %s | %.1f MiB | %.1f MiB | %s |\n",
				n.name, i+1, inc.cmd.Process.Pid, signedDur(inc.started.Sub(r.t0)), shortDur(ended.Sub(r.t0)), shortDur(ended.Sub(inc.started)), how,
				atSettle, mib(s.atEnd), mib(s.max), slope)
		}
	}
	fmt.Fprintf(w, "\nRSS is VmRSS of each node process, sampled every %v. A process started again after a kill is a new series: its "+
		"RSS at %s is its first sample at that age of its own, and its slope the least-squares line through its samples from then "+
		"on, in MiB per 10 minutes (—: fewer than %d samples from then on); the longest-lived processes say most about growth.\n",
		rssEvery, shortDur(o.settle), minFitted)
}

// byNode counts the jobs by the node of their last call, in the nodes'
// order.
func (r *soakResult) byNode() string {
	counts := map[string]int{}
	for _, k := range r.calls.keys {
		counts[k.lastNode]++
	}
	var parts []string
	for _, n := range r.nodes {
		parts = append(parts, fmt.Sprintf("%s %d", n.name, counts[n.name]))
		delete(counts, n.name)
	}
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%q %d", name, counts[name]))
	}
	return strings.Join(parts, ", ")
}

func stateList(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	counts := map[string]int{}
	for _, s := range m {
		counts[s]++
	}
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", s, counts[s]))
	}
	return "; " + strings.Join(parts, ", ")
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// shortDur writes a duration to the second, without empty units: 5m,
// 30m42s, 1h.
func shortDur(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// signedDur is shortDur of a moment that may come before the load's start
// (a process started before it).
func signedDur(d time.Duration) string {
	if d < 0 {
		return "−" + shortDur(-d)
	}
	return shortDur(d)
}
