package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/slotpoller/slotpoller/bench/benchkit"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/jobs"
)

// soakOptions are the flags of `bench soak`.
type soakOptions struct {
	nodes        int
	rate         int
	duration     time.Duration
	killEvery    time.Duration
	restartAfter time.Duration
	calls        int
	work         time.Duration
	attempts     int
	settle       time.Duration
	window       time.Duration
	drain        time.Duration
	dsn          string
	logLevel     string
	logs         string
	kinds        bool
	prefill      int
}

// rssEvery is how often each node's resident set (and the database's CPU)
// is sampled.
const rssEvery = 10 * time.Second

// soak runs a farm of node processes under a steady load for a long
// time, killing one node with SIGKILL and starting it again at every
// -kill-every, and reports whether memory stays flat, whether any job was
// lost or run twice at once, and what the farm's statements per job were
// window by window. It runs outside CI: a 30-minute soak is the goal
// (docs/benchmarks.md, "Soak").
func soak(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o soakOptions
	fs.IntVar(&o.nodes, "nodes", 4, "node processes in the farm")
	fs.IntVar(&o.rate, "rate", 500, "jobs/s offered, in batches every 10 ms")
	fs.DurationVar(&o.duration, "for", 30*time.Minute, "how long the load is offered")
	fs.DurationVar(&o.killEvery, "kill-every", 5*time.Minute, "kill one node with SIGKILL this often (round robin) and start it again; 0: never")
	fs.DurationVar(&o.restartAfter, "restart-after", 2*time.Second, "pause between a kill and the node's restart under the same name")
	fs.IntVar(&o.calls, "calls", 250, "node.capacity: concurrent calls per node (250, as in the steady scenario of compare)")
	fs.DurationVar(&o.work, "work", time.Millisecond, "how long the endpoint takes to answer a call")
	fs.IntVar(&o.attempts, "attempts", 5, "max_attempts of each job: a job caught in a kill spends an attempt")
	fs.DurationVar(&o.settle, "settle", 5*time.Minute, "a node process's warm-up: its RSS is read at this age and its slope drawn through the samples after it")
	fs.DurationVar(&o.window, "window", 5*time.Minute, "statements per job are reported per window of this length")
	fs.DurationVar(&o.drain, "drain", 3*time.Minute, "how long to wait, once the load stops, for the queue to drain")
	fs.StringVar(&o.dsn, "dsn", "", "administrator DSN of a PostgreSQL server that loads pg_stat_statements (default: start a private server)")
	fs.StringVar(&o.logLevel, "log", "warn", "the nodes' log.level: debug, info, warn or error")
	fs.StringVar(&o.logs, "logs", "", "folder for the nodes' logs, kept (default: a temporary folder, removed at the end)")
	fs.BoolVar(&o.kinds, "statement-kinds", false, "log, at each window's end, the database's CPU and the statements it spent most time on in the window: where a cost that grows goes")
	fs.IntVar(&o.prefill, "prefill", 0, "done jobs written before the load, as retention keeps them (finished within jobs.retention_done): the table a long run fills, from the start")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.nodes < 1 || o.rate < 1 || o.duration <= 0 || o.killEvery < 0 || o.restartAfter < 0 || o.calls < 1 ||
		o.work < 0 || o.attempts < 1 || o.settle < 0 || o.window <= 0 || o.drain <= 0 || o.prefill < 0 {
		return errors.New("-nodes, -rate, -for, -calls, -attempts, -window and -drain must be positive; -kill-every, -restart-after, -work, -settle and -prefill not negative")
	}
	logf := func(f string, a ...any) { fmt.Fprintf(stderr, "bench: soak: "+f+"\n", a...) }

	tmp, err := os.MkdirTemp("", "slotpoller-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if o.logs == "" {
		o.logs = filepath.Join(tmp, "logs")
	}
	if err := os.MkdirAll(o.logs, 0o755); err != nil {
		return fmt.Errorf("-logs: %w", err)
	}
	logf("building slotpoller")
	// The commit the nodes are built from, read now: the checkout may
	// move on during a half-hour run.
	commit := gitCommit(ctx)
	bin, err := buildSlotpoller(ctx, tmp, stderr)
	if err != nil {
		return err
	}

	admin := o.dsn
	if admin == "" {
		pg, err := startPrivatePostgres(ctx)
		if err != nil {
			return err
		}
		defer pg.stop()
		admin = pg.DSN()
		logf("private PostgreSQL at %s", admin)
	}
	srv, err := benchkit.OpenServer(ctx, admin)
	if err != nil {
		return err
	}
	db, err := srv.FreshDatabase(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err := db.Drop(context.WithoutCancel(ctx)); err != nil {
			logf("drop database %s: %v", db.Name, err)
		}
	}()
	// The schema is the feeder's to write, so that the count starts on a
	// farm that only runs jobs; a node still checks it at every start.
	if err := (slotSide{}).Migrate(ctx, db); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	feeder, err := open.Store(ctx, db.Driver, db.FeederDSN)
	if err != nil {
		return err
	}
	defer feeder.Close()
	if o.prefill > 0 {
		logf("writing %d done jobs", o.prefill)
		if err := prefillDone(ctx, feeder, o.prefill); err != nil {
			return err
		}
	}

	// The machine may be shared: say how busy it was.
	load := "unknown"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(b))[:3], " ")
	}

	ep := newSoakEndpoint(o.work)
	defer ep.Close()
	s := &soakRun{o: o, admin: admin, srv: srv, db: db, feeder: feeder, ep: ep, logf: logf}
	for _, name := range nodeNames(o.nodes) {
		n := &soakNode{
			name: name, bin: bin, dir: tmp, logPath: filepath.Join(o.logs, name+".log"),
			env: nodeEnv(name, db.Driver, db.FarmDSN, ep.URL(), o.calls, o.logLevel),
		}
		n.onDeath = func(n *soakNode) { s.restartDead(ctx, n) }
		s.nodes = append(s.nodes, n)
	}
	defer s.stopNodes()
	for _, n := range s.nodes {
		if err := n.start(); err != nil {
			return err
		}
	}
	if err := s.waitLive(ctx); err != nil {
		return err
	}
	// One slot for every node to see the whole farm.
	if err := benchkit.Sleep(ctx, time.Duration(config.Default().Rotation.Slot)); err != nil {
		return err
	}
	res, err := s.run(ctx)
	if err != nil {
		return err
	}
	res.command = commandLine(append([]string{"soak"}, args...), admin)
	if o.dsn == "" {
		// The private server's DSN means nothing once it is gone.
		res.command = strings.Join(append([]string{"go run ./bench soak"}, args...), " ")
	}
	res.load = load
	res.commit = commit
	res.privateServer = o.dsn == ""
	res.print(stdout)
	if o.logs != filepath.Join(tmp, "logs") {
		logf("node logs kept in %s", o.logs)
	}
	return nil
}

// soakRun is one soak in progress.
type soakRun struct {
	o      soakOptions
	admin  string
	srv    *benchkit.Server
	db     *benchkit.Database
	feeder *store.Store
	ep     *soakEndpoint
	nodes  []*soakNode
	logf   func(string, ...any)

	// kinds logs each window's statements by text (-statement-kinds).
	kinds *kindLog

	// stopping turns restarts of nodes that exited by themselves off.
	stopping atomic.Bool

	mu    sync.Mutex
	marks []statementMark
}

// statementMark is the farm's statement count read at a moment.
type statementMark struct {
	at    time.Time
	stmts int64
}

// waitLive waits until every node is live in the registry, as the
// database judges it.
func (s *soakRun) waitLive(ctx context.Context) error {
	ttl := time.Duration(config.Default().Checkin.TTL)
	deadline := time.Now().Add(60 * time.Second)
	for {
		nodes, _, err := s.feeder.Nodes(ctx, ttl)
		if err != nil {
			return err
		}
		live := 0
		for _, n := range nodes {
			if n.Live {
				live++
			}
		}
		if live == len(s.nodes) {
			return nil
		}
		for _, n := range s.nodes {
			if len(n.deathList()) > 0 {
				return fmt.Errorf("node %s exited at start (its log: %s)", n.name, n.logPath)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d nodes live after 60s (logs in %s)", live, len(s.nodes), s.o.logs)
		}
		if err := benchkit.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// restartDead starts again a node whose process exited by itself, after
// the same pause as a kill's: the farm is to keep its size.
func (s *soakRun) restartDead(ctx context.Context, n *soakNode) {
	if s.stopping.Load() {
		return
	}
	s.logf("node %s exited by itself (its log: %s); starting it again", n.name, n.logPath)
	if err := benchkit.Sleep(ctx, s.o.restartAfter); err != nil || s.stopping.Load() {
		return
	}
	if err := n.start(); err != nil {
		s.logf("%v", err)
	}
}

// stopNodes stops every node gracefully, at once.
func (s *soakRun) stopNodes() {
	s.stopping.Store(true)
	var wg sync.WaitGroup
	for _, n := range s.nodes {
		wg.Go(func() {
			// drain_timeout + ttl + 17 s is the product's bound.
			if err := n.stop(60 * time.Second); err != nil {
				s.logf("%v", err)
			}
		})
	}
	wg.Wait()
}

// run offers the load, kills and restarts nodes, samples, drains and
// gathers the figures.
func (s *soakRun) run(ctx context.Context) (*soakResult, error) {
	if err := s.srv.ResetStatements(ctx); err != nil {
		return nil, err
	}
	res := &soakResult{o: s.o, database: s.srv.Version}
	var dbCPU cpuTally
	readDBCPU := s.srv.Postmaster != 0
	if readDBCPU {
		c, err := s.srv.CPU()
		if err != nil {
			readDBCPU = false
			res.dbCPUNote = err.Error()
		} else {
			dbCPU.add(c.Database)
		}
	} else {
		res.dbCPUNote = "the server runs on another machine (no postmaster in /proc)"
	}
	nodeCPU := true
	for _, n := range s.nodes {
		inc := n.current()
		if inc == nil {
			continue
		}
		c, err := benchkit.ReadProcessCPU(inc.cmd.Process.Pid)
		if err != nil {
			nodeCPU = false
			break
		}
		inc.cpuAtLoad = c.Database[inc.cmd.Process.Pid]
	}

	t0 := time.Now()
	end := t0.Add(s.o.duration)
	s.mark(ctx, t0)
	if s.o.kinds {
		s.kinds = &kindLog{srv: s.srv, db: s.db, logf: s.logf}
		s.kinds.start(ctx, t0)
	}
	s.logf("load of %d jobs/s for %v on %d nodes, a node killed every %v", s.o.rate, s.o.duration, s.o.nodes, s.o.killEvery)

	var wg sync.WaitGroup
	var fd *feed
	wg.Go(func() { fd = runFeeder(ctx, s.feeder, s.o, t0, s.logf) })
	wg.Go(func() { s.killer(ctx, t0, end) })
	wg.Go(func() { s.windows(ctx, t0, end) })
	sampling, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	var sampler sync.WaitGroup
	sampler.Go(func() {
		s.sampler(sampling, t0, func() {
			if readDBCPU {
				if c, err := s.srv.CPU(); err == nil {
					dbCPU.add(c.Database)
					if s.kinds != nil {
						s.kinds.setCPU(dbCPU.total())
					}
				}
			}
		})
	})
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fedAt := time.Now()
	s.mark(ctx, fedAt)
	if s.kinds != nil {
		s.kinds.window(ctx, fedAt)
	}

	enqueued := fd.enqueued()
	s.logf("load stopped: %d jobs enqueued; draining (at most %v)", enqueued, s.o.drain)
	states, drained, err := s.drainQueue(ctx, enqueued)
	if err != nil {
		return nil, err
	}
	drainedAt := time.Now()
	s.mark(ctx, drainedAt)
	stopSampling()
	sampler.Wait()
	if readDBCPU {
		if c, err := s.srv.CPU(); err == nil {
			dbCPU.add(c.Database)
		}
		res.dbCPU = dbCPU.total()
	}
	// The running processes' CPU up to the drain's end, before the stop
	// adds its own.
	for _, n := range s.nodes {
		if inc := n.current(); inc != nil && nodeCPU {
			c, err := benchkit.ReadProcessCPU(inc.cmd.Process.Pid)
			if err != nil {
				nodeCPU = false
				continue
			}
			inc.cpuAtDrain, inc.drainRead = c.Database[inc.cmd.Process.Pid], true
		}
	}
	dealloc := s.evicted(ctx)
	s.stopNodes()

	res.t0, res.fedAt, res.drainedAt, res.drained = t0, fedAt, drainedAt, drained
	res.states = states
	res.feed = fd
	res.marks = s.statementMarks()
	res.dealloc = dealloc
	res.calls = s.ep.record()
	for _, n := range s.nodes {
		res.nodes = append(res.nodes, soakNodeResult{name: n.name, lives: n.incarnations()})
		res.deaths = append(res.deaths, n.deathList()...)
	}
	slices.SortFunc(res.deaths, func(a, b death) int { return a.at.Compare(b.at) })
	if nodeCPU {
		res.nodeCPU = new(time.Duration)
		for _, n := range res.nodes {
			for _, inc := range n.lives {
				*res.nodeCPU += inc.cpuUntilDrain() - inc.cpuAtLoad
			}
		}
	}
	if err := res.readNotDone(ctx, s.feeder); err != nil {
		return nil, err
	}
	return res, nil
}

// mark reads the farm's statement count now.
func (s *soakRun) mark(ctx context.Context, at time.Time) {
	n, err := s.srv.FarmStatements(ctx, s.db)
	if err != nil {
		s.logf("statement count: %v", err)
		return
	}
	s.mu.Lock()
	s.marks = append(s.marks, statementMark{at: at, stmts: n})
	s.mu.Unlock()
}

func (s *soakRun) statementMarks() []statementMark {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]statementMark(nil), s.marks...)
}

// windows reads the statement count at every window's end while the load
// runs.
func (s *soakRun) windows(ctx context.Context, t0, end time.Time) {
	for k := 1; ; k++ {
		at := t0.Add(time.Duration(k) * s.o.window)
		if !at.Before(end) {
			return
		}
		if benchkit.Sleep(ctx, time.Until(at)) != nil {
			return
		}
		now := time.Now()
		s.mark(ctx, now)
		if s.kinds != nil {
			s.kinds.window(ctx, now)
		}
	}
}

// killer kills a node every -kill-every, round robin, and starts it again
// after -restart-after. No kill falls on the load's end: the drain needs
// the whole farm.
//
// A kill waits for the node to have a call in flight, for at most two
// rotations: a node holds jobs for the few milliseconds from its claim to
// its results, mostly around its own slot, and kills at whole minutes
// after the start fell where the node held nothing, every time, so that
// the path a crash leaves (jobs re-run once their holds run out) went
// untried.
func (s *soakRun) killer(ctx context.Context, t0, end time.Time) {
	if s.o.killEvery == 0 {
		return
	}
	wait := 2 * time.Duration(len(s.nodes)) * time.Duration(config.Default().Rotation.Slot)
	for k := 1; ; k++ {
		at := t0.Add(time.Duration(k) * s.o.killEvery)
		if !at.Before(end) {
			return
		}
		if benchkit.Sleep(ctx, time.Until(at)) != nil {
			return
		}
		n := s.nodes[(k-1)%len(s.nodes)]
		inFlight, err := s.waitForCall(ctx, n.name, wait)
		if err != nil {
			return
		}
		if err := n.kill(ctx, inFlight); err != nil {
			s.logf("%v", err)
			continue
		}
		// Its rows stay running under its name until their holds run
		// out: these are the jobs the farm must run again.
		held := s.heldBy(ctx, n.name)
		n.noteHeld(held)
		s.logf("%v: killed %s with %d calls in flight, %d jobs held", time.Since(t0).Round(time.Second), n.name, inFlight, held)
		if benchkit.Sleep(ctx, s.o.restartAfter) != nil {
			return
		}
		if err := n.start(); err != nil {
			s.logf("%v", err)
		}
	}
}

// waitForCall waits until node has a call in flight at the endpoint, or
// limit has passed, and returns how many it has.
func (s *soakRun) waitForCall(ctx context.Context, node string, limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	for {
		if n := s.ep.inFlight(node); n > 0 || time.Now().After(deadline) {
			return n, nil
		}
		if err := benchkit.Sleep(ctx, time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// heldBy is how many jobs the database has running under node's name,
// -1 when it cannot say.
func (s *soakRun) heldBy(ctx context.Context, node string) int {
	var n int
	err := s.feeder.DB().QueryRowContext(ctx, "SELECT count(*) FROM slotpoller_jobs WHERE state = 'running' AND owner_node = $1", node).Scan(&n)
	if err != nil {
		s.logf("jobs held by %s: %v", node, err)
		return -1
	}
	return n
}

// sampler samples every node's resident set (and, through also, the
// database's CPU) every rssEvery, and says how the soak goes once a
// minute.
func (s *soakRun) sampler(ctx context.Context, t0 time.Time, also func()) {
	tick := time.NewTicker(rssEvery)
	defer tick.Stop()
	complained := map[string]bool{}
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			var rss []string
			for _, n := range s.nodes {
				err := n.sampleRSS(now)
				// A kill between the look and the read ends a process
				// under the reader; anything else is said once.
				if err != nil && !complained[n.name] && n.current() != nil {
					complained[n.name] = true
					s.logf("%s: %v", n.name, err)
				}
				if r := n.lastRSS(); r > 0 {
					rss = append(rss, fmt.Sprintf("%s %.0f MiB", n.name, mib(r)))
				}
			}
			also()
			if i%6 == 0 {
				s.logf("%v: %d jobs called, RSS %s", now.Sub(t0).Round(time.Second), s.ep.distinct(), strings.Join(rss, ", "))
			}
		}
	}
}

// drainQueue waits until every enqueued job is done, or none is left
// ready or running (a dead job waits for nothing), or -drain has passed.
// It returns the count of jobs by state at the end.
func (s *soakRun) drainQueue(ctx context.Context, enqueued int) (map[string]int, bool, error) {
	deadline := time.Now().Add(s.o.drain)
	for {
		states, err := jobStates(ctx, s.feeder)
		if err != nil {
			return nil, false, err
		}
		// The done jobs -prefill wrote are not the load's.
		if states[store.StateDone]-s.o.prefill >= enqueued || states[store.StateReady]+states[store.StateRunning] == 0 {
			return states, true, nil
		}
		if time.Now().After(deadline) {
			return states, false, nil
		}
		if err := benchkit.Sleep(ctx, 200*time.Millisecond); err != nil {
			return nil, false, err
		}
	}
}

func jobStates(ctx context.Context, st *store.Store) (map[string]int, error) {
	rows, err := st.DB().QueryContext(ctx, "SELECT state, count(*) FROM slotpoller_jobs GROUP BY state")
	if err != nil {
		return nil, fmt.Errorf("count jobs by state: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var state string
		var n int
		if err := rows.Scan(&state, &n); err != nil {
			return nil, fmt.Errorf("count jobs by state: %w", err)
		}
		out[state] = n
	}
	return out, rows.Err()
}

// evicted is how many times pg_stat_statements threw entries out since
// the reset (its counts are then short), -1 when it cannot say.
func (s *soakRun) evicted(ctx context.Context) int64 {
	c, err := pgx.Connect(ctx, s.admin)
	if err != nil {
		return -1
	}
	defer c.Close(ctx)
	var n int64
	if err := c.QueryRow(ctx, "SELECT dealloc FROM pg_stat_statements_info").Scan(&n); err != nil {
		return -1
	}
	return n
}

// feed is what the feeder enqueued.
type feed struct {
	// sent is when each job's batch was sent, by job number (key
	// "s<number>"); zero for a job whose batch failed.
	sent    []time.Time
	failed  int // batches that failed
	lastErr error
	took    time.Duration
}

func (f *feed) enqueued() int {
	n := 0
	for _, t := range f.sent {
		if !t.IsZero() {
			n++
		}
	}
	return n
}

func soakKey(i int) string { return "s" + strconv.Itoa(i) }

// runFeeder enqueues, every 10 ms, what the rate owes by then in one
// transaction (store.JobInsertMany, the client's EnqueueMany, from the
// feeder's login: not counted), as the steady scenario of compare does.
// A batch that fails is counted and its jobs left out; the load goes on.
func runFeeder(ctx context.Context, st *store.Store, o soakOptions, t0 time.Time, logf func(string, ...any)) *feed {
	f := &feed{}
	want := int(float64(o.rate) * o.duration.Seconds())
	for n := 0; n < want; {
		if benchkit.Sleep(ctx, 10*time.Millisecond) != nil {
			break
		}
		owed := min(want, int(time.Since(t0).Seconds()*float64(o.rate))) - n
		if owed <= 0 {
			continue
		}
		// Each checked as the client checks it, which gives it its own
		// idempotency key: jobs written with none (which no door
		// writes) share one key in the hash index on keys, where each
		// insert walks the whole bucket of the equal keys before it, a
		// cost that grew with every job the soak wrote.
		batch := make([]store.NewJob, owed)
		for i := range batch {
			batch[i] = store.NewJob{Endpoint: "/job/" + soakKey(n+i), Method: "POST", MaxAttempts: o.attempts}
			if err := jobs.CheckNewJob(&batch[i]); err != nil {
				logf("check a job: %v", err)
				f.failed, f.lastErr, f.took = f.failed+1, err, time.Since(t0)
				return f
			}
		}
		now := time.Now()
		_, err := st.JobInsertMany(ctx, batch)
		for range batch {
			if err != nil {
				f.sent = append(f.sent, time.Time{})
			} else {
				f.sent = append(f.sent, now)
			}
		}
		if err != nil && ctx.Err() == nil {
			f.failed++
			f.lastErr = err
			if f.failed <= 3 {
				logf("enqueue a batch of %d: %v", owed, err)
			}
		}
		n += owed
	}
	f.took = time.Since(t0)
	return f
}
