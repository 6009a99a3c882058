// Command bench measures a slotpoller farm of in-process nodes against a
// real PostgreSQL database and prints the results as markdown tables.
//
//	go run ./bench -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//
// Scenario A (idle farm): for each node count N, start N nodes, wait until
// all are live and one more slot has passed, then measure over the -idle
// window how often the farm polls the queue and how many statements it
// sends to the database. The design's promise is that the farm polls about
// once per slot whatever N is.
//
// Scenario B (burst): -burst-nodes nodes with free capacity (500 each) and
// an in-process endpoint that answers 204 at once; -jobs jobs all due at
// the same database instant (-burst-lead after the farm is live). Start
// delay (started_at - run_at, both database times), throughput and jobs
// per node are read back from the jobs table. The design's target is a p99
// start delay of at most one slot plus 100 ms while nodes have free
// capacity.
//
// Scenario C (schedules): -schedule-nodes nodes with the default capacity
// (-schedule-capacity) and the same endpoint as B; -schedules schedules all
// firing at the same second, -firings times 20 s apart (a cron with a
// seconds field, "S1,S2 * * * * *"). For each firing, lateness (started_at -
// scheduled_for, both database times), the nodes that ran the occurrences,
// and the polls and slots it took are read back from the jobs table. The
// issue's target: occurrences due at the same moment are spread over the
// live nodes by capacity and start within their tolerance.
//
// -only picks the scenarios to run (default A,B,C). Every scenario runs in a
// fresh schema (bench_<random>) of the database the DSN names, dropped at
// the end.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, for schema set-up

	"github.com/slotpoller/slotpoller/install"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/rotation"
	"github.com/slotpoller/slotpoller/service"
)

const dsnEnv = "SLOTPOLLER_TEST_POSTGRES_DSN"

type options struct {
	dsn        string
	idle       time.Duration
	nodes      []int
	jobs       int
	burstNodes int
	capacity   int
	burstLead  time.Duration
	slot       time.Duration
	logLevel   string
	only       map[string]bool

	schedules        int
	scheduleNodes    int
	scheduleCapacity int
	firings          int
	tolerance        time.Duration
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var nodes string
	fs.StringVar(&o.dsn, "dsn", os.Getenv(dsnEnv), "PostgreSQL DSN (default $"+dsnEnv+")")
	fs.DurationVar(&o.idle, "idle", 10*time.Second, "measurement window of the idle scenario")
	fs.StringVar(&nodes, "nodes", "1,4,16", "comma-separated node counts of the idle scenario")
	fs.IntVar(&o.jobs, "jobs", 1000, "jobs in the burst scenario")
	fs.IntVar(&o.burstNodes, "burst-nodes", 4, "nodes in the burst scenario")
	fs.IntVar(&o.capacity, "burst-capacity", 500, "node.capacity of each node in the burst scenario")
	fs.DurationVar(&o.burstLead, "burst-lead", 3*time.Second, "run_at of the burst = database now + this, once the farm is live (moves run_at against the nodes' heartbeats)")
	fs.DurationVar(&o.slot, "slot", time.Second, "rotation.slot of every node")
	fs.StringVar(&o.logLevel, "log", "warn", "node log level on stderr: debug, info, warn, error or off")
	var only string
	fs.StringVar(&only, "only", "A,B,C", "comma-separated scenarios to run: A (idle), B (burst), C (schedules)")
	fs.IntVar(&o.schedules, "schedules", 200, "schedules firing at the same second in the schedule scenario")
	fs.IntVar(&o.scheduleNodes, "schedule-nodes", 4, "nodes in the schedule scenario")
	fs.IntVar(&o.scheduleCapacity, "schedule-capacity", service.DefaultConfig().Node.Capacity, "node.capacity of each node in the schedule scenario")
	fs.IntVar(&o.firings, "firings", 2, "firings of the schedules, 20s apart (1 to 3)")
	fs.DurationVar(&o.tolerance, "tolerance", 5*time.Minute, "tolerance of each schedule in the schedule scenario")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.only = map[string]bool{}
	for _, f := range strings.Split(only, ",") {
		f = strings.ToUpper(strings.TrimSpace(f))
		if f != "A" && f != "B" && f != "C" {
			return fmt.Errorf("-only: %q is not a scenario (A, B or C)", f)
		}
		o.only[f] = true
	}
	if o.schedules < 1 || o.scheduleNodes < 1 || o.scheduleCapacity < 1 || o.tolerance <= 0 {
		return errors.New("-schedules, -schedule-nodes, -schedule-capacity and -tolerance must be positive")
	}
	if o.firings < 1 || o.firings > 3 {
		return errors.New("-firings must be 1, 2 or 3")
	}
	if o.dsn == "" {
		return fmt.Errorf("no DSN: pass -dsn or set %s", dsnEnv)
	}
	for _, f := range strings.Split(nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-nodes: %q is not a positive node count", f)
		}
		o.nodes = append(o.nodes, n)
	}
	if o.jobs < 1 || o.burstNodes < 1 || o.capacity < 1 || o.idle <= 0 || o.slot <= 0 || o.burstLead <= 0 {
		return errors.New("-jobs, -burst-nodes, -burst-capacity, -burst-lead, -idle and -slot must be positive")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	logger := slog.New(slog.DiscardHandler)
	if o.logLevel != "off" {
		var lvl slog.Level
		if err := lvl.UnmarshalText([]byte(o.logLevel)); err != nil {
			return fmt.Errorf("-log: %w", err)
		}
		logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	}

	pgVersion := "unknown"
	if db, err := sql.Open("pgx", o.dsn); err == nil {
		_ = db.QueryRowContext(ctx, "SHOW server_version").Scan(&pgVersion)
		db.Close()
	}

	out := bufio.NewWriter(stdout)
	defer out.Flush()
	fmt.Fprintf(out, "# slotpoller benchmark\n\n")
	fmt.Fprintf(out, "- command: `%s`\n", commandLine(args, o.dsn))
	fmt.Fprintf(out, "- date: %s\n", time.Now().Format(time.RFC3339))
	fmt.Fprintf(out, "- go: %s, %s/%s, %d CPUs (%s)\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel())
	fmt.Fprintf(out, "- database: PostgreSQL %s at %s\n", pgVersion, hostOf(o.dsn))
	fmt.Fprintf(out, "- nodes: in-process, service.DefaultConfig() with rotation.slot=%v (heartbeat %v, ttl %v, clock resync %v)\n\n",
		o.slot, time.Duration(service.DefaultConfig().Checkin.Heartbeat), time.Duration(service.DefaultConfig().Checkin.TTL),
		time.Duration(service.DefaultConfig().Clock.Resync))
	out.Flush()

	if o.only["A"] {
		var idle []idleResult
		for _, n := range o.nodes {
			r, err := idleScenario(ctx, o, n, logger)
			if err != nil {
				return fmt.Errorf("idle scenario, %d nodes: %w", n, err)
			}
			idle = append(idle, r)
			fmt.Fprintf(stderr, "bench: idle %d nodes: %.2f polls/s, %.1f statements/s\n", n, r.pollsPerSec(), r.stmtsPerSec())
		}
		printIdle(out, o, idle)
		out.Flush()
	}

	if o.only["B"] {
		b, err := burstScenario(ctx, o, logger, stderr)
		if err != nil {
			return fmt.Errorf("burst scenario: %w", err)
		}
		printBurst(out, o, b)
		out.Flush()
	}

	if o.only["C"] {
		c, err := scheduleScenario(ctx, o, logger, stderr)
		if err != nil {
			return fmt.Errorf("schedule scenario: %w", err)
		}
		printSchedules(out, o, c)
	}
	return nil
}

// commandLine is the command as run, with the DSN's password masked.
func commandLine(args []string, dsn string) string {
	parts := []string{"go", "run", "./bench"}
	hasDSN := false
	for _, a := range args {
		if strings.HasPrefix(a, "-dsn") || strings.HasPrefix(a, "--dsn") {
			hasDSN = true
		}
		parts = append(parts, shellQuote(service.MaskDSN(a)))
	}
	cmd := strings.Join(parts, " ")
	if !hasDSN {
		cmd = dsnEnv + "=" + shellQuote(service.MaskDSN(dsn)) + " " + cmd
	}
	return cmd
}

func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`!*?&;|<>()[]{}#~") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func hostOf(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Host != "" {
		return u.Host + u.Path
	}
	return "(key=value DSN)"
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "model unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "model unknown"
}

// ---------------------------------------------------------------------------
// Schema and farm plumbing

// schema is a fresh PostgreSQL schema with slotpoller's tables.
type schema struct {
	name  string
	dsn   string // the base DSN with search_path set to the schema
	admin *sql.DB
	store *store.Store // the bench's own store: not counted in any node's statements
}

func newSchema(ctx context.Context, base string) (*schema, error) {
	admin, err := sql.Open("pgx", base)
	if err != nil {
		return nil, err
	}
	sc := &schema{name: "bench_" + randomHex(6), admin: admin}
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+sc.name); err != nil {
		admin.Close()
		return nil, fmt.Errorf("create schema: %w", err)
	}
	sc.dsn = store.PostgresWithSchema(base, sc.name)
	sc.store, err = store.Open(ctx, "postgres", sc.dsn)
	if err != nil {
		sc.drop()
		return nil, err
	}
	if _, err := install.Migrate(ctx, sc.store); err != nil {
		sc.drop()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return sc, nil
}

// drop removes the schema; it runs even when the bench was interrupted.
func (sc *schema) drop() {
	if sc.store != nil {
		sc.store.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := sc.admin.ExecContext(ctx, "DROP SCHEMA "+sc.name+" CASCADE"); err != nil {
		fmt.Fprintf(os.Stderr, "bench: could not drop schema %s: %v\n", sc.name, err)
	}
	sc.admin.Close()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// farm is a set of running in-process nodes.
type farm struct {
	names  []string // sorted: the rotation order
	nodes  []*service.Node
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

func nodeConfig(o options, dsn, name string) service.Config {
	cfg := service.DefaultConfig()
	cfg.Database.Driver = "postgres"
	cfg.Database.DSN = dsn
	cfg.Node.Name = name
	cfg.Rotation.Slot = service.Duration(o.slot)
	return cfg
}

func startFarm(cfgs []service.Config, logger *slog.Logger) (*farm, error) {
	for _, c := range cfgs {
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("config of %s: %w", c.Node.Name, err)
		}
	}
	rctx, cancel := context.WithCancel(context.Background())
	f := &farm{cancel: cancel}
	for _, c := range cfgs {
		n := service.NewNode(c, logger, nil)
		f.names = append(f.names, c.Node.Name)
		f.nodes = append(f.nodes, n)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			if err := n.Run(rctx); err != nil {
				f.mu.Lock()
				f.errs = append(f.errs, fmt.Errorf("node %s: %w", c.Node.Name, err))
				f.mu.Unlock()
			}
		}()
	}
	if !slices.IsSorted(f.names) {
		f.stop()
		return nil, errors.New("node names must be given in rotation order")
	}
	return f, nil
}

// stop cancels every node and waits for Run to return.
func (f *farm) stop() error {
	f.cancel()
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

func (f *farm) failed() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

// waitLive waits until every node of the farm is live in the registry, as
// the database judges it.
func (f *farm) waitLive(ctx context.Context, s *store.Store, ttl time.Duration) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		nodes, _, err := s.Nodes(ctx, ttl)
		if err != nil {
			return err
		}
		live := 0
		for _, n := range nodes {
			if n.Live && slices.Contains(f.names, n.Name) {
				live++
			}
		}
		if live == len(f.names) {
			return nil
		}
		if err := f.failed(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d nodes live after 60s", live, len(f.names))
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

func (f *farm) stats() []service.Stats {
	out := make([]service.Stats, len(f.nodes))
	for i, n := range f.nodes {
		out[i] = n.Stats()
	}
	return out
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func nodeNames(n int) []string {
	width := len(strconv.Itoa(n - 1))
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%0*d", width, i)
	}
	return out
}

// ---------------------------------------------------------------------------
// Scenario A: idle farm

type idleResult struct {
	nodes        int
	window       time.Duration // measured wall time
	polls, stmts int64         // farm totals over the window
	nodePolls    []int64       // per node, rotation order
	nodeStmts    []int64
}

func (r idleResult) pollsPerSec() float64 { return float64(r.polls) / r.window.Seconds() }
func (r idleResult) stmtsPerSec() float64 { return float64(r.stmts) / r.window.Seconds() }

func idleScenario(ctx context.Context, o options, n int, logger *slog.Logger) (res idleResult, err error) {
	sc, err := newSchema(ctx, o.dsn)
	if err != nil {
		return res, err
	}
	defer sc.drop()
	var cfgs []service.Config
	for _, name := range nodeNames(n) {
		cfgs = append(cfgs, nodeConfig(o, sc.dsn, name))
	}
	f, err := startFarm(cfgs, logger)
	if err != nil {
		return res, err
	}
	defer func() {
		if serr := f.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	if err := f.waitLive(ctx, sc.store, time.Duration(cfgs[0].Checkin.TTL)); err != nil {
		return res, err
	}
	if err := sleep(ctx, o.slot); err != nil {
		return res, err
	}
	before, t0 := f.stats(), time.Now()
	if err := sleep(ctx, o.idle); err != nil {
		return res, err
	}
	after, t1 := f.stats(), time.Now()
	res = idleResult{nodes: n, window: t1.Sub(t0)}
	for i := range after {
		p := after[i].Jobs.Polls - before[i].Jobs.Polls
		s := after[i].Statements - before[i].Statements
		res.nodePolls = append(res.nodePolls, p)
		res.nodeStmts = append(res.nodeStmts, s)
		res.polls += p
		res.stmts += s
	}
	return res, f.failed()
}

func printIdle(w io.Writer, o options, rs []idleResult) {
	fmt.Fprintf(w, "## A. Idle farm (slot %v, window %v)\n\n", o.slot, o.idle)
	fmt.Fprintf(w, "Target: the farm polls ≈ 1/slot = %.2f/s whatever the node count.\n\n", 1/o.slot.Seconds())
	fmt.Fprintln(w, "| nodes | farm polls/s | polls/s ÷ target | polls per node (min–max) | farm statements/s | statements/s per node |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		fmt.Fprintf(w, "| %d | %.2f | %.2f× | %d–%d | %.1f | %.2f |\n",
			r.nodes, r.pollsPerSec(), r.pollsPerSec()*o.slot.Seconds(), slices.Min(r.nodePolls), slices.Max(r.nodePolls),
			r.stmtsPerSec(), r.stmtsPerSec()/float64(r.nodes))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Measured window per run (wall clock):", func() string {
		var s []string
		for _, r := range rs {
			s = append(s, fmt.Sprintf("%d nodes %.2fs", r.nodes, r.window.Seconds()))
		}
		return strings.Join(s, ", ")
	}())
	fmt.Fprintln(w)
}

// ---------------------------------------------------------------------------
// Scenario B: burst

type jobRow struct {
	run, started, finished time.Time
	node                   string
}

type burstResult struct {
	names      []string
	jobs       int
	enqueue    time.Duration // wall time to enqueue all jobs
	lead       time.Duration // database time left before run_at when enqueueing ended
	runAt      time.Time
	counts     map[string]int
	rows       []jobRow
	stats      []service.Stats
	statsDelta []service.Stats // from just before run_at to the end
}

func burstScenario(ctx context.Context, o options, logger *slog.Logger, stderr io.Writer) (res burstResult, err error) {
	sc, err := newSchema(ctx, o.dsn)
	if err != nil {
		return res, err
	}
	defer sc.drop()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	var cfgs []service.Config
	for _, name := range nodeNames(o.burstNodes) {
		c := nodeConfig(o, sc.dsn, name)
		c.Node.Capacity = o.capacity
		c.Jobs.BaseURL = srv.URL
		cfgs = append(cfgs, c)
	}
	f, err := startFarm(cfgs, logger)
	if err != nil {
		return res, err
	}
	defer func() {
		if serr := f.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	res.names, res.jobs = f.names, o.jobs
	if err := f.waitLive(ctx, sc.store, time.Duration(cfgs[0].Checkin.TTL)); err != nil {
		return res, err
	}
	// Give every node one heartbeat to see the whole farm, as in scenario A.
	if err := sleep(ctx, o.slot); err != nil {
		return res, err
	}

	now, err := sc.store.Now(ctx)
	if err != nil {
		return res, err
	}
	runAt := now.Add(o.burstLead)
	res.runAt = runAt
	t0 := time.Now()
	if err := enqueueAll(ctx, sc.store, o.jobs, runAt); err != nil {
		return res, err
	}
	res.enqueue = time.Since(t0)
	after, err := sc.store.Now(ctx)
	if err != nil {
		return res, err
	}
	res.lead = runAt.Sub(after)
	if res.lead <= 0 {
		fmt.Fprintf(stderr, "bench: warning: enqueueing took %v, past run_at; start delays include it\n", res.enqueue)
	}
	// Counters from just before the jobs fall due.
	if err := sleep(ctx, max(0, res.lead-100*time.Millisecond)); err != nil {
		return res, err
	}
	before := f.stats()

	deadline := time.Now().Add(o.burstLead + 2*time.Minute)
	for {
		counts, err := sc.store.JobCounts(ctx)
		if err != nil {
			return res, err
		}
		if counts[store.StateReady] == 0 && counts[store.StateRunning] == 0 {
			res.counts = counts
			break
		}
		if err := f.failed(); err != nil {
			return res, err
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("jobs not finished after 2 minutes: %v", counts)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return res, err
		}
	}
	res.stats = f.stats()
	for i := range res.stats {
		a, b := res.stats[i], before[i]
		res.statsDelta = append(res.statsDelta, service.Stats{Statements: a.Statements - b.Statements,
			Jobs: jobs.Stats{Polls: a.Jobs.Polls - b.Jobs.Polls, Claimed: a.Jobs.Claimed - b.Jobs.Claimed}})
	}

	rows, err := sc.store.DB().QueryContext(ctx,
		`SELECT run_at, started_at, finished_at, COALESCE(owner_node, '') FROM slotpoller_jobs WHERE started_at IS NOT NULL`)
	if err != nil {
		return res, err
	}
	defer rows.Close()
	for rows.Next() {
		var r jobRow
		var fin sql.NullTime
		if err := rows.Scan(&r.run, &r.started, &fin, &r.node); err != nil {
			return res, err
		}
		r.run, r.started, r.finished = r.run.UTC(), r.started.UTC(), fin.Time.UTC()
		res.rows = append(res.rows, r)
	}
	return res, rows.Err()
}

// enqueueAll inserts n jobs due at runAt through jobs.Enqueue, from a few
// connections at once so that the burst is in place well before it is due.
func enqueueAll(ctx context.Context, s *store.Store, n int, runAt time.Time) error {
	return parallel(n, func(i int) error {
		t := runAt
		_, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/bench/" + strconv.Itoa(i), Method: "POST", RunAt: &t, MaxAttempts: 1})
		return err
	})
}

// parallel runs op(0) … op(n-1) on 8 goroutines (the bench store's
// connections) and returns the first error; after one, no new op starts.
func parallel(n int, op func(i int) error) error {
	const workers = 8
	next := make(chan int)
	errc := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := op(i); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	var err error
feed:
	for i := range n {
		select {
		case next <- i:
		case err = <-errc:
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errc:
		default:
		}
	}
	return err
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	// nearest rank
	i := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func printBurst(w io.Writer, o options, b burstResult) {
	fmt.Fprintf(w, "## B. Burst (%d jobs due at one instant, %d nodes × capacity %d, slot %v, endpoint answers 204 at once)\n\n",
		b.jobs, len(b.names), o.capacity, o.slot)
	fmt.Fprintf(w, "Target: p99 start delay ≤ slot + 100 ms = %s while nodes have free capacity.\n\n", ms(o.slot+100*time.Millisecond))
	fmt.Fprintf(w, "run_at = database now + %v once the farm was live. Enqueued in %s (through jobs.Enqueue, 8 connections); %s of database time to spare before run_at. Final states: %v.\n\n",
		o.burstLead, ms(b.enqueue), ms(b.lead), b.counts)

	var delays []time.Duration
	var lastFinish time.Time
	for _, r := range b.rows {
		delays = append(delays, r.started.Sub(r.run))
		if r.finished.After(lastFinish) {
			lastFinish = r.finished
		}
	}
	slices.Sort(delays)
	span := lastFinish.Sub(b.runAt)
	fmt.Fprintln(w, "| jobs | start delay p50 | p99 | max | min | last finish − run_at | throughput |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|")
	fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %.0f jobs/s |\n\n", len(b.rows),
		ms(percentile(delays, 0.50)), ms(percentile(delays, 0.99)), ms(percentile(delays, 1)), ms(percentile(delays, 0)),
		ms(span), float64(len(b.rows))/span.Seconds())

	perNode := map[string]int{}
	for _, r := range b.rows {
		perNode[r.node]++
	}
	fmt.Fprintln(w, "| node | jobs run | polls during burst | statements during burst |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for i, name := range b.names {
		fmt.Fprintf(w, "| %s | %d | %d | %d |\n", name, perNode[name], b.statsDelta[i].Jobs.Polls, b.statsDelta[i].Statements)
	}
	fmt.Fprintln(w)

	fmt.Fprintf(w, "Claims by slot (slot 0 is the slot run_at falls in; run_at is %s into it):\n\n",
		ms(b.runAt.Sub(rotation.Start(rotation.Slot(b.runAt, o.slot), o.slot))))
	printClaims(w, b.rows, b.runAt, o.slot, b.names)
}

// claimBatch is the jobs one node took in one claim.
type claimBatch struct {
	slot        int64 // the slot the batch's first start fell in
	node        string
	n           int
	first, last time.Duration // start delays, from the job's run time
}

// claimGap splits a node's starts into claims. One claim stamps its rows
// within a few milliseconds of each other (about 0.1 ms per row here); a
// node's next claim comes at its next turn, a quarter slot or more later.
const claimGap = 25 * time.Millisecond

// claimBatches groups jobs into claims: per node, starts no more than
// claimGap apart. A claim that straddles a slot boundary counts in the slot
// of its first start. They come in order of slot and then of start.
func claimBatches(rows []jobRow, slot time.Duration) []*claimBatch {
	byNode := map[string][]jobRow{}
	for _, r := range rows {
		byNode[r.node] = append(byNode[r.node], r)
	}
	var out []*claimBatch
	for node, rs := range byNode {
		sort.Slice(rs, func(i, j int) bool { return rs[i].started.Before(rs[j].started) })
		var bt *claimBatch
		var prev time.Time
		for _, r := range rs {
			d := r.started.Sub(r.run)
			if bt == nil || r.started.Sub(prev) > claimGap {
				bt = &claimBatch{slot: rotation.Slot(r.started, slot), node: node, first: d, last: d}
				out = append(out, bt)
			}
			bt.n++
			bt.first, bt.last = min(bt.first, d), max(bt.last, d)
			prev = r.started
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].slot != out[j].slot {
			return out[i].slot < out[j].slot
		}
		return out[i].first < out[j].first
	})
	return out
}

// printClaims prints which slot each claim was made in, counted from the
// slot ref falls in, with the slot's owner and the claimer's rank in it (0 =
// owner; >0 = a widened turn).
func printClaims(w io.Writer, rows []jobRow, ref time.Time, slot time.Duration, names []string) {
	k0 := rotation.Slot(ref, slot)
	fmt.Fprintln(w, "| slot | slot owner | claimed by | rank | jobs | start delay of the batch | cumulative |")
	fmt.Fprintln(w, "|---:|---|---|---:|---:|---:|---:|")
	cum := 0
	for _, bt := range claimBatches(rows, slot) {
		cum += bt.n
		delay := ms(bt.first)
		if bt.last-bt.first >= time.Millisecond {
			delay += " – " + ms(bt.last)
		}
		fmt.Fprintf(w, "| %d | %s | %s | %d | %d | %s | %d (%.1f%%) |\n", bt.slot-k0, rotation.Owner(bt.slot, names), bt.node,
			rotation.Rank(bt.slot, bt.node, names), bt.n, delay, cum, 100*float64(cum)/float64(len(rows)))
	}
	fmt.Fprintln(w)
}

// ---------------------------------------------------------------------------
// Scenario C: schedules firing at the same second

// firingGap is the time between two firings of scenario C: long enough for
// a firing's backlog signal (held 3 heartbeats or slots) to have ended
// before the next one.
const firingGap = 20 * time.Second

// scheduleLead is how far ahead of the database clock the first firing is
// put: the schedules must all exist before the slot owner writes the
// occurrences, two slots before they are due.
const scheduleLead = 8 * time.Second

type occurrenceRow struct {
	jobRow   // run = scheduled_for
	schedule string
	state    string
	created  time.Time
}

type firingResult struct {
	fire   time.Time
	rows   []occurrenceRow
	total  int            // occurrences of this fire time in the jobs table
	states map[string]int // their states when the last one started
	calls  int            // endpoint calls that carried this fire time, counted at the end
	dupes  int            // schedules whose occurrence was called more than once
	// Counters 2.5 s before the fire time (before the occurrences are
	// written), just before it, and when the last occurrence started (or
	// was missed).
	s0, s1, s2 []service.Stats
}

type scheduleResult struct {
	names       []string
	capacity    int
	cron        string
	maxAttempts int
	create      time.Duration // wall time to add the schedules
	lead        time.Duration // database time left before the first firing when adding ended
	firings     []firingResult
	missed      int64 // schedules' missed counters at the end
	other       int   // endpoint calls without the fire-time header
}

// dbClock converts database times to local ones for the bench's sleeps.
type dbClock struct{ offset time.Duration } // database minus local

func measureDB(ctx context.Context, s *store.Store) (dbClock, error) {
	best := time.Duration(-1)
	var c dbClock
	for range 5 {
		t0 := time.Now()
		db, err := s.Now(ctx)
		t1 := time.Now()
		if err != nil {
			return c, err
		}
		if rtt := t1.Sub(t0); best < 0 || rtt < best {
			best = rtt
			c.offset = db.Sub(t0.Add(rtt / 2))
		}
	}
	return c, nil
}

func (c dbClock) sleepUntil(ctx context.Context, db time.Time) error {
	return sleep(ctx, time.Until(db.Add(-c.offset)))
}

func scheduleScenario(ctx context.Context, o options, logger *slog.Logger, stderr io.Writer) (res scheduleResult, err error) {
	sc, err := newSchema(ctx, o.dsn)
	if err != nil {
		return res, err
	}
	defer sc.drop()
	var callsMu sync.Mutex
	calls := map[string]map[string]int{} // fire time -> endpoint -> calls
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		callsMu.Lock()
		f := r.Header.Get(jobs.HeaderScheduledFor)
		if calls[f] == nil {
			calls[f] = map[string]int{}
		}
		calls[f][r.URL.Path]++
		callsMu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	var cfgs []service.Config
	for _, name := range nodeNames(o.scheduleNodes) {
		c := nodeConfig(o, sc.dsn, name)
		c.Node.Capacity = o.scheduleCapacity
		c.Jobs.BaseURL = srv.URL
		cfgs = append(cfgs, c)
	}
	f, err := startFarm(cfgs, logger)
	if err != nil {
		return res, err
	}
	defer func() {
		if serr := f.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	res.names, res.capacity, res.maxAttempts = f.names, o.scheduleCapacity, cfgs[0].Jobs.MaxAttempts
	if err := f.waitLive(ctx, sc.store, time.Duration(cfgs[0].Checkin.TTL)); err != nil {
		return res, err
	}
	if err := sleep(ctx, o.slot); err != nil {
		return res, err
	}
	clk, err := measureDB(ctx, sc.store)
	if err != nil {
		return res, err
	}

	// Every schedule fires at the same seconds: a cron with a seconds field
	// listing the firings, 20 s apart, the first scheduleLead ahead.
	now, err := sc.store.Now(ctx)
	if err != nil {
		return res, err
	}
	first := now.Add(scheduleLead).Truncate(time.Second).Add(time.Second)
	var fires []time.Time
	var secs []string
	for i := range o.firings {
		t := first.Add(time.Duration(i) * firingGap)
		fires = append(fires, t)
		secs = append(secs, strconv.Itoa(t.Second()))
	}
	res.cron = strings.Join(secs, ",") + " * * * * *"
	t0 := time.Now()
	err = parallel(o.schedules, func(i int) error {
		return jobs.AddSchedule(ctx, sc.store, store.Schedule{
			Name: fmt.Sprintf("bench-%04d", i), Cron: res.cron, Endpoint: fmt.Sprintf("/schedule/%04d", i), Method: "POST",
			MaxAttempts: res.maxAttempts, Tolerance: o.tolerance, Misfire: store.MisfireOnce, Overlap: store.OverlapForbid,
			Enabled: true, Source: store.SourceCommand,
		})
	})
	if err != nil {
		return res, err
	}
	res.create = time.Since(t0)
	after, err := sc.store.Now(ctx)
	if err != nil {
		return res, err
	}
	res.lead = first.Sub(after)
	all, _, err := sc.store.Schedules(ctx)
	if err != nil {
		return res, err
	}
	for _, s := range all {
		if s.NextFireAt == nil || !s.NextFireAt.Equal(first) {
			return res, fmt.Errorf("schedule %s: next fire time %v, want %v", s.Name, s.NextFireAt, first)
		}
	}
	if res.lead < 2*o.slot+500*time.Millisecond {
		fmt.Fprintf(stderr, "bench: warning: adding the schedules took %v; only %v left before the first firing\n", res.create, res.lead)
	}

	for _, fire := range fires {
		fr, err := measureFiring(ctx, o, clk, sc, f, fire)
		if err != nil {
			return res, err
		}
		res.firings = append(res.firings, fr)
		fmt.Fprintf(stderr, "bench: schedules: firing at %s: %d occurrences started, %d polls\n",
			fire.Format(time.TimeOnly), len(fr.rows), sumPolls(fr.s1, fr.s2))
	}

	// Wait for the last calls to be recorded, then count what the endpoint saw.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var busy int
		if err := sc.store.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM slotpoller_jobs WHERE schedule IS NOT NULL AND state IN ('ready', 'running') AND scheduled_for <= $1`,
			fires[len(fires)-1]).Scan(&busy); err != nil {
			return res, err
		}
		if busy == 0 {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("%d occurrences still ready or running 30s after the last one started", busy)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return res, err
		}
	}
	if err := sc.store.DB().QueryRowContext(ctx, `SELECT COALESCE(SUM(missed), 0) FROM slotpoller_schedules`).Scan(&res.missed); err != nil {
		return res, err
	}
	callsMu.Lock()
	defer callsMu.Unlock()
	for i := range res.firings {
		fr := &res.firings[i]
		for _, n := range calls[fr.fire.UTC().Format(time.RFC3339Nano)] {
			fr.calls += n
			if n > 1 {
				fr.dupes++
			}
		}
	}
	for _, n := range calls[""] {
		res.other += n
	}
	return res, f.failed()
}

// measureFiring waits for one firing and reads back its occurrences once
// every one has started or been missed.
func measureFiring(ctx context.Context, o options, clk dbClock, sc *schema, f *farm, fire time.Time) (fr firingResult, err error) {
	fr.fire = fire
	if err := clk.sleepUntil(ctx, fire.Add(-2*o.slot-500*time.Millisecond)); err != nil {
		return fr, err
	}
	fr.s0 = f.stats()
	if err := clk.sleepUntil(ctx, fire.Add(-100*time.Millisecond)); err != nil {
		return fr, err
	}
	fr.s1 = f.stats()
	deadline := time.Now().Add(time.Until(fire.Add(-clk.offset)) + 2*time.Minute)
	for {
		var total, started, missed int
		err := sc.store.DB().QueryRowContext(ctx, `SELECT COUNT(*), COUNT(started_at), COUNT(*) FILTER (WHERE state = 'missed')
FROM slotpoller_jobs WHERE schedule IS NOT NULL AND scheduled_for = $1`, fire).Scan(&total, &started, &missed)
		if err != nil {
			return fr, err
		}
		if started+missed >= o.schedules { // a short -tolerance can make some miss
			fr.total = total
			break
		}
		if err := f.failed(); err != nil {
			return fr, err
		}
		if time.Now().After(deadline) {
			return fr, fmt.Errorf("firing at %v: %d of %d occurrences written, %d started after 2 minutes", fire, total, o.schedules, started)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return fr, err
		}
	}
	fr.s2 = f.stats()
	rows, err := sc.store.DB().QueryContext(ctx, `SELECT schedule, scheduled_for, created_at, started_at, COALESCE(owner_node, ''), state
FROM slotpoller_jobs WHERE schedule IS NOT NULL AND scheduled_for = $1`, fire)
	if err != nil {
		return fr, err
	}
	defer rows.Close()
	fr.states = map[string]int{}
	for rows.Next() {
		var r occurrenceRow
		var started sql.NullTime
		if err := rows.Scan(&r.schedule, &r.run, &r.created, &started, &r.node, &r.state); err != nil {
			return fr, err
		}
		r.run, r.created, r.started = r.run.UTC(), r.created.UTC(), started.Time.UTC()
		fr.states[r.state]++
		if started.Valid {
			fr.rows = append(fr.rows, r)
		}
	}
	return fr, rows.Err()
}

func sumPolls(a, b []service.Stats) int64 {
	var n int64
	for i := range b {
		n += b[i].Jobs.Polls - a[i].Jobs.Polls
	}
	return n
}

func printSchedules(w io.Writer, o options, r scheduleResult) {
	fmt.Fprintf(w, "## C. Schedules (%d schedules firing at the same second, %d nodes × capacity %d, slot %v, endpoint answers 204 at once)\n\n",
		o.schedules, len(r.names), r.capacity, o.slot)
	fmt.Fprintf(w, "Target (issue 5): occurrences due at the same moment are spread over the live nodes by capacity (here %.0f each) and start within their tolerance (%v).\n\n",
		float64(o.schedules)/float64(len(r.names)), o.tolerance)
	fmt.Fprintf(w, "Every schedule: cron `%s` (UTC), tolerance %v, misfire once, overlap forbid, max attempts %d. "+
		"Added in %s (through jobs.AddSchedule, 8 connections); %s of database time to spare before the first firing. "+
		"Occurrences the misfire policy skipped (the schedules' missed counters) at the end: %d. Endpoint calls without a fire time: %d.\n\n",
		r.cron, o.tolerance, r.maxAttempts, ms(r.create), ms(r.lead), r.missed, r.other)

	fmt.Fprintln(w, "| fire time (UTC) | occurrences started | missed | lateness p50 | p99 | max | min | nodes used | occurrences per node | polls that claimed | farm polls | slots | calls (repeated) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
	for _, fr := range r.firings {
		var late []time.Duration
		perNode := map[string]int{}
		var last time.Time
		for _, row := range fr.rows {
			late = append(late, row.started.Sub(row.run))
			perNode[row.node]++
			if row.started.After(last) {
				last = row.started
			}
		}
		slices.Sort(late)
		var counts []string
		for _, name := range r.names {
			counts = append(counts, strconv.Itoa(perNode[name]))
		}
		var jr []jobRow
		for _, row := range fr.rows {
			jr = append(jr, row.jobRow)
		}
		slots := rotation.Slot(last, o.slot) - rotation.Slot(fr.fire, o.slot) + 1
		fmt.Fprintf(w, "| %s | %d of %d | %d | %s | %s | %s | %s | %d of %d | %s | %d | %d | %d | %d (%d) |\n",
			fr.fire.Format(time.TimeOnly), len(fr.rows), fr.total, fr.states[store.StateMissed], ms(percentile(late, 0.50)), ms(percentile(late, 0.99)),
			ms(percentile(late, 1)), ms(percentile(late, 0)), len(perNode), len(r.names), strings.Join(counts, " / "),
			len(claimBatches(jr, o.slot)), sumPolls(fr.s1, fr.s2), slots, fr.calls, fr.dupes)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Occurrences per node are in rotation order (%s). \"Farm polls\" are all polls from 100 ms before the fire time until the last occurrence started; "+
		"\"slots\" counts the slots from the one the fire time opens to the one the last start fell in.\n\n", strings.Join(r.names, ", "))

	for i, fr := range r.firings {
		var first, last time.Time
		for j, row := range fr.rows {
			if j == 0 || row.created.Before(first) {
				first = row.created
			}
			if row.created.After(last) {
				last = row.created
			}
		}
		fmt.Fprintf(w, "### Firing %d at %s\n\n", i+1, fr.fire.Format(time.TimeOnly))
		if len(fr.rows) > 0 {
			ws := rotation.Slot(first, o.slot)
			fmt.Fprintf(w, "Occurrences written (created_at) from %s to %s before the fire time, in slot %d (owner %s). States when the last one started: %v.\n\n",
				ms(fr.fire.Sub(first)), ms(fr.fire.Sub(last)), ws-rotation.Slot(fr.fire, o.slot), rotation.Owner(ws, r.names), fr.states)
		}
		perNode := map[string]int{}
		for _, row := range fr.rows {
			perNode[row.node]++
		}
		fmt.Fprintln(w, "| node | occurrences run | share by capacity | polls from fire time to last start | claimed | statements while writing (−2.5 s … −0.1 s) | statements from fire time to last start |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
		for j, name := range r.names {
			fmt.Fprintf(w, "| %s | %d | %.0f | %d | %d | %d | %d |\n", name, perNode[name], float64(o.schedules)/float64(len(r.names)),
				fr.s2[j].Jobs.Polls-fr.s1[j].Jobs.Polls, fr.s2[j].Jobs.Claimed-fr.s1[j].Jobs.Claimed,
				fr.s1[j].Statements-fr.s0[j].Statements, fr.s2[j].Statements-fr.s1[j].Statements)
		}
		fmt.Fprintln(w)
		var jr []jobRow
		for _, row := range fr.rows {
			jr = append(jr, row.jobRow)
		}
		fmt.Fprintf(w, "Claims by slot (slot 0 is the slot the fire time opens; start delay = lateness):\n\n")
		printClaims(w, jr, fr.fire, o.slot, r.names)
	}
}
