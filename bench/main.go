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
// the same database instant. Start delay (started_at - run_at, both
// database times), throughput and jobs per node are read back from the
// jobs table. The design's target is a p99 start delay of at most one slot
// plus 100 ms while nodes have free capacity.
//
// Every scenario runs in a fresh schema (bench_<random>) of the database
// the DSN names, dropped at the end.
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
	slot       time.Duration
	logLevel   string
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
	fs.DurationVar(&o.slot, "slot", time.Second, "rotation.slot of every node")
	fs.StringVar(&o.logLevel, "log", "warn", "node log level on stderr: debug, info, warn, error or off")
	if err := fs.Parse(args); err != nil {
		return err
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
	if o.jobs < 1 || o.burstNodes < 1 || o.capacity < 1 || o.idle <= 0 || o.slot <= 0 {
		return errors.New("-jobs, -burst-nodes, -burst-capacity, -idle and -slot must be positive")
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

	b, err := burstScenario(ctx, o, logger, stderr)
	if err != nil {
		return fmt.Errorf("burst scenario: %w", err)
	}
	printBurst(out, o, b)
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
	runAt := now.Add(3 * time.Second)
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

	deadline := time.Now().Add(3*time.Second + 2*time.Minute)
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
	const workers = 8
	next := make(chan int)
	errc := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t := runAt
				_, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/bench/" + strconv.Itoa(i), Method: "POST", RunAt: &t, MaxAttempts: 1})
				if err != nil {
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
	fmt.Fprintf(w, "Enqueued in %s (through jobs.Enqueue, 8 connections); %s of database time to spare before run_at. Final states: %v.\n\n",
		ms(b.enqueue), ms(b.lead), b.counts)

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

	// Which slot each batch was claimed in: jobs claimed by one node in one
	// slot, with the slot counted from the one run_at falls in, the slot's
	// owner, and the claimer's rank in it (0 = owner; >0 = a widened turn).
	type key struct {
		slot int64
		node string
	}
	type batch struct {
		n           int
		first, last time.Duration
	}
	batches := map[key]*batch{}
	k0 := rotation.Slot(b.runAt, o.slot)
	for _, r := range b.rows {
		k := key{rotation.Slot(r.started, o.slot), r.node}
		d := r.started.Sub(r.run)
		bt := batches[k]
		if bt == nil {
			bt = &batch{first: d, last: d}
			batches[k] = bt
		}
		bt.n++
		bt.first, bt.last = min(bt.first, d), max(bt.last, d)
	}
	keys := make([]key, 0, len(batches))
	for k := range batches {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].slot != keys[j].slot {
			return keys[i].slot < keys[j].slot
		}
		return batches[keys[i]].first < batches[keys[j]].first
	})
	fmt.Fprintf(w, "Claims by slot (slot 0 is the slot run_at falls in; run_at is %s into it):\n\n",
		ms(b.runAt.Sub(rotation.Start(k0, o.slot))))
	fmt.Fprintln(w, "| slot | slot owner | claimed by | rank | jobs | start delay of the batch | cumulative |")
	fmt.Fprintln(w, "|---:|---|---|---:|---:|---:|---:|")
	cum := 0
	for _, k := range keys {
		bt := batches[k]
		cum += bt.n
		delay := ms(bt.first)
		if bt.last-bt.first >= time.Millisecond {
			delay += " – " + ms(bt.last)
		}
		fmt.Fprintf(w, "| %d | %s | %s | %d | %d | %s | %d (%.1f%%) |\n", k.slot-k0, rotation.Owner(k.slot, b.names), k.node,
			rotation.Rank(k.slot, k.node, b.names), bt.n, delay, cum, 100*float64(cum)/float64(len(b.rows)))
	}
	fmt.Fprintln(w)
}
