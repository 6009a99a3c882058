package benchkit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Side is one job system under test.
type Side interface {
	// Name is the column heading, e.g. "River v0.51.1".
	Name() string
	// Slotted says whether Spec.Slot means anything to the side; the
	// latency scenario runs once per slot only for a slotted side.
	Slotted() bool
	// Migrate creates the side's tables in a fresh database, as the feeder.
	Migrate(ctx context.Context, db *Database) error
	// Start runs a farm as FarmRole and returns once it is ready for work.
	Start(ctx context.Context, db *Database, spec Spec) (Farm, error)
}

// Spec is the shape of a farm.
type Spec struct {
	Nodes       int
	Concurrency int           // concurrent endpoint calls per node
	Slot        time.Duration // slotpoller's rotation.slot
	Endpoint    string        // base URL of the endpoint
}

// Farm is a running farm plus its feeder, which enqueues as FeederRole so
// that the enqueues are not counted.
type Farm interface {
	// PrepareBurst gets a burst of jobs with these keys ready; release
	// enqueues all of them, due now, in one transaction whose commit makes
	// them visible at once (both sides insert there, so that both run on
	// rows freshly written).
	PrepareBurst(ctx context.Context, keys []string) (release func(context.Context) error, err error)
	// Enqueue enqueues jobs due now, in as few statements as the side's API
	// allows. One job alone goes the way an application enqueues one for
	// now: River's Client.Insert (its LISTEN/NOTIFY wakes a producer);
	// slotpoller's node API on one of the nodes in turn (the local fast
	// path: a node with room inserts the job already claimed and calls it
	// at once). The latency scenario measures that path.
	Enqueue(ctx context.Context, keys []string) error
	// Finished is the number of jobs the database records as done.
	Finished(ctx context.Context) (int, error)
	Stop(ctx context.Context) error
}

// AppEnqueuer is a side whose application's door differs from Enqueue's
// one-job path. slotpoller's Go client inserts a job through the store, as
// the web request that enqueues it does on whichever node it landed, and
// the farm hears of it by a note (PostgreSQL) or at its next turn; River
// has one door, Client.Insert, which Enqueue measures already.
type AppEnqueuer interface {
	EnqueueByApp(ctx context.Context, key string) error
}

// Burn is one burn-down: Jobs due at once, Nodes × Concurrency calls.
type Burn struct{ Jobs, Nodes, Concurrency int }

// Params are the scenarios' settings, the same flags on both sides.
type Params struct {
	Only         string
	IdleNodes    string
	IdleWindow   time.Duration
	IdleSettle   bool
	Burns        string
	LatencyJobs  int
	LatencyGap   time.Duration
	LatencyNodes int
	LatencySlots string
	SteadyRate   int
	SteadyFor    time.Duration
	SteadyNodes  int
	SteadyCalls  int
	Work         time.Duration
	// StatementKinds logs, after each burn-down and steady load, the
	// farm's statements by kind (a server that tells them apart).
	StatementKinds bool
}

// Flags registers the parameters on fs.
func (p *Params) Flags(fs *flag.FlagSet) {
	fs.StringVar(&p.Only, "only", "idle,burn,latency,steady", "scenarios to run")
	fs.StringVar(&p.IdleNodes, "idle-nodes", "1,4,16,64", "node counts of the idle scenario")
	fs.DurationVar(&p.IdleWindow, "idle-window", 10*time.Second, "measurement window of each idle farm")
	fs.BoolVar(&p.IdleSettle, "idle-settle", true, "let each idle farm of N nodes run N+3 slots before the window opens (its steady state; a farm started at once costs more over its first rotation)")
	fs.StringVar(&p.Burns, "burns", "2000x4x16,20000x4x1000", "burn-downs: jobs x nodes x concurrent calls per node")
	fs.IntVar(&p.LatencyJobs, "latency-jobs", 200, "jobs of the latency trickle, enqueued one by one")
	fs.DurationVar(&p.LatencyGap, "latency-gap", 20*time.Millisecond, "time between two enqueues of the trickle")
	fs.IntVar(&p.LatencyNodes, "latency-nodes", 3, "nodes of the latency scenario")
	fs.StringVar(&p.LatencySlots, "latency-slots", "1s,250ms", "slots of the latency scenario (slotpoller only)")
	fs.IntVar(&p.SteadyRate, "steady-rate", 1000, "jobs/s offered in the steady scenario")
	fs.DurationVar(&p.SteadyFor, "steady-for", 10*time.Second, "how long the steady load is offered")
	fs.IntVar(&p.SteadyNodes, "steady-nodes", 4, "nodes of the steady scenario")
	fs.IntVar(&p.SteadyCalls, "steady-calls", 250, "concurrent calls per node in the steady scenario")
	fs.DurationVar(&p.Work, "work", time.Millisecond, "time the endpoint takes per call")
	fs.BoolVar(&p.StatementKinds, "statement-kinds", false, "log the farm's statements by kind (calls, rows, server time) after each burn-down and steady load: where the statements per job go")
}

// Args renders p as flags, to hand the same parameters to the other side.
func (p Params) Args() []string {
	return []string{
		"-only=" + p.Only, "-idle-nodes=" + p.IdleNodes, "-idle-window=" + p.IdleWindow.String(),
		"-idle-settle=" + strconv.FormatBool(p.IdleSettle),
		"-burns=" + p.Burns, "-latency-jobs=" + strconv.Itoa(p.LatencyJobs), "-latency-gap=" + p.LatencyGap.String(),
		"-latency-nodes=" + strconv.Itoa(p.LatencyNodes), "-latency-slots=" + p.LatencySlots,
		"-steady-rate=" + strconv.Itoa(p.SteadyRate), "-steady-for=" + p.SteadyFor.String(),
		"-steady-nodes=" + strconv.Itoa(p.SteadyNodes), "-steady-calls=" + strconv.Itoa(p.SteadyCalls),
		"-work=" + p.Work.String(), "-statement-kinds=" + strconv.FormatBool(p.StatementKinds),
	}
}

type parsed struct {
	only      map[string]bool
	idleNodes []int
	burns     []Burn
	slots     []time.Duration
}

func (p Params) parse() (parsed, error) {
	var r parsed
	r.only = map[string]bool{}
	for _, s := range strings.Split(p.Only, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains([]string{"idle", "burn", "latency", "steady"}, s) {
			return r, fmt.Errorf("-only: %q is not a scenario (idle, burn, latency, steady)", s)
		}
		r.only[s] = true
	}
	for _, s := range strings.Split(p.IdleNodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return r, fmt.Errorf("-idle-nodes: %q is not a node count", s)
		}
		r.idleNodes = append(r.idleNodes, n)
	}
	for _, s := range strings.Split(p.Burns, ",") {
		f := strings.Split(strings.TrimSpace(s), "x")
		var b Burn
		var err error
		if len(f) == 3 {
			b.Jobs, err = strconv.Atoi(f[0])
			if err == nil {
				b.Nodes, err = strconv.Atoi(f[1])
			}
			if err == nil {
				b.Concurrency, err = strconv.Atoi(f[2])
			}
		}
		if len(f) != 3 || err != nil || b.Jobs < 1 || b.Nodes < 1 || b.Concurrency < 1 {
			return r, fmt.Errorf("-burns: %q is not jobs x nodes x calls", s)
		}
		r.burns = append(r.burns, b)
	}
	for _, s := range strings.Split(p.LatencySlots, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d <= 0 {
			return r, fmt.Errorf("-latency-slots: %q is not a duration", s)
		}
		r.slots = append(r.slots, d)
	}
	if p.LatencyJobs < 1 || p.LatencyNodes < 1 || p.SteadyRate < 1 || p.SteadyNodes < 1 || p.SteadyCalls < 1 ||
		p.IdleWindow <= 0 || p.SteadyFor <= 0 || p.LatencyGap <= 0 || p.Work < 0 {
		return r, errors.New("scenario sizes and durations must be positive")
	}
	return r, nil
}

// DefaultSlot is slotpoller's default rotation.slot, used wherever a
// scenario does not vary the slot.
const DefaultSlot = time.Second

// DefaultCalls is the concurrency of the idle and latency farms
// (slotpoller's default node.capacity).
const DefaultCalls = 16

// Run runs the scenarios of p for one side, emitting a result as soon as it
// is measured.
func Run(ctx context.Context, srv DBServer, side Side, p Params, emit func(Result), logf func(string, ...any)) error {
	pp, err := p.parse()
	if err != nil {
		return err
	}
	ep := NewEndpoint(p.Work)
	defer ep.Close()
	r := &runner{srv: srv, side: side, p: p, ep: ep, emit: emit, logf: logf}
	if pp.only["idle"] {
		for _, n := range pp.idleNodes {
			if err := r.idle(ctx, n); err != nil {
				return fmt.Errorf("%s, idle, %d nodes: %w", side.Name(), n, err)
			}
		}
	}
	if pp.only["burn"] {
		for _, b := range pp.burns {
			if err := r.burn(ctx, b); err != nil {
				return fmt.Errorf("%s, burn-down of %d jobs: %w", side.Name(), b.Jobs, err)
			}
		}
	}
	if pp.only["latency"] {
		slots := pp.slots
		if !side.Slotted() {
			slots = slots[:1]
		}
		for _, slot := range slots {
			if err := r.latency(ctx, slot, pp.slots); err != nil {
				return fmt.Errorf("%s, latency: %w", side.Name(), err)
			}
		}
	}
	if pp.only["steady"] {
		if err := r.steady(ctx); err != nil {
			return fmt.Errorf("%s, steady load: %w", side.Name(), err)
		}
	}
	return nil
}

type runner struct {
	srv  DBServer
	side Side
	p    Params
	ep   *Endpoint
	emit func(Result)
	logf func(string, ...any)
}

func (r *runner) result(table, row string, v float64, better string) {
	r.emit(Result{Side: r.side.Name(), Table: table, Row: row, Value: v, Better: better})
}

// withFarm runs fn against a farm of spec in a fresh database, then stops
// the farm and drops the database.
func (r *runner) withFarm(ctx context.Context, spec Spec, fn func(db *Database, f Farm) error) (err error) {
	db, err := r.srv.FreshDatabase(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if derr := db.Drop(context.WithoutCancel(ctx)); derr != nil && err == nil {
			err = fmt.Errorf("drop database: %w", derr)
		}
	}()
	if err := r.side.Migrate(ctx, db); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	spec.Endpoint = r.ep.URL()
	f, err := r.side.Start(ctx, db, spec)
	if err != nil {
		return fmt.Errorf("start the farm: %w", err)
	}
	defer func() {
		if serr := f.Stop(context.WithoutCancel(ctx)); serr != nil && err == nil {
			err = fmt.Errorf("stop the farm: %w", serr)
		}
	}()
	// One more second for start-up work (leader election, clock samples,
	// first heartbeats) to pass before anything is measured.
	if err := Sleep(ctx, time.Second); err != nil {
		return err
	}
	r.ep.Reset()
	return fn(db, f)
}

func (r *runner) idle(ctx context.Context, n int) error {
	r.logf("%s: idle farm of %d nodes", r.side.Name(), n)
	title := fmt.Sprintf("idle farm: statements/s over %v, slot %v", r.p.IdleWindow, DefaultSlot)
	if r.p.IdleSettle {
		title = fmt.Sprintf("idle farm: statements/s over %v after N+3 slots, slot %v", r.p.IdleWindow, DefaultSlot)
	}
	return r.withFarm(ctx, Spec{Nodes: n, Concurrency: DefaultCalls, Slot: DefaultSlot}, func(db *Database, f Farm) error {
		if r.p.IdleSettle {
			if err := Sleep(ctx, time.Duration(n+3)*DefaultSlot); err != nil {
				return err
			}
		}
		if err := r.srv.ResetStatements(ctx); err != nil {
			return err
		}
		t0 := time.Now()
		if err := Sleep(ctx, r.p.IdleWindow); err != nil {
			return err
		}
		stmts, err := r.srv.FarmStatements(ctx, db)
		if err != nil {
			return err
		}
		window := time.Since(t0).Seconds()
		r.result(title, fmt.Sprintf("%d node(s)", n), float64(stmts)/window, Lower)
		return r.otherCommands(ctx, db, title, func(name string) string { return fmt.Sprintf("%d node(s): %s/s", n, name) }, window)
	})
}

func (r *runner) burn(ctx context.Context, b Burn) error {
	r.logf("%s: burn-down of %d jobs, %d nodes × %d calls", r.side.Name(), b.Jobs, b.Nodes, b.Concurrency)
	table := fmt.Sprintf("burn-down of %d due jobs, %d nodes × %d concurrent calls", b.Jobs, b.Nodes, b.Concurrency)
	return r.withFarm(ctx, Spec{Nodes: b.Nodes, Concurrency: b.Concurrency, Slot: DefaultSlot}, func(db *Database, f Farm) error {
		keys := keys("b", b.Jobs)
		release, err := f.PrepareBurst(ctx, keys)
		if err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		if err := r.srv.ResetStatements(ctx); err != nil {
			return err
		}
		conns0 := r.ep.Connections()
		if err := release(ctx); err != nil {
			return fmt.Errorf("release the jobs: %w", err)
		}
		cpu0, cpuErr := r.srv.CPU()
		heap0 := ReadHeap()
		calls, repeats, stmts, err := r.drain(ctx, db, f, b.Jobs, 5*time.Minute)
		if err != nil {
			return err
		}
		cpu1, err := r.srv.CPU()
		heap1 := ReadHeap()
		first, last := span(calls)
		r.result(table, "jobs/s, first start to last finish", float64(b.Jobs)/last.Sub(first).Seconds(), Higher)
		r.result(table, "statements per job", float64(stmts)/float64(b.Jobs), Lower)
		if err := r.otherCommands(ctx, db, table, perJob, float64(b.Jobs)); err != nil {
			return err
		}
		r.result(table, "connections opened to the endpoint", float64(r.ep.Connections()-conns0), Lower)
		// From the release's commit (its inserts are the feeder's, not the
		// farm's) until the database records every job done: the work of
		// running the burst, on whichever side of the wire it falls.
		if cpuErr == nil && err == nil {
			perK := func(d time.Duration) float64 { return ms(d) * 1000 / float64(b.Jobs) }
			side, database := cpu1.Since(cpu0)
			r.result(table, "CPU ms per 1,000 jobs: the side's process (nodes, endpoint)", perK(side), Lower)
			r.result(table, "CPU ms per 1,000 jobs: the database server", perK(database), Lower)
		} else {
			r.logf("%s: no CPU times: %v", r.side.Name(), errors.Join(cpuErr, err))
		}
		r.result(table, "heap objects allocated per job: the side's process", float64(heap1.Objects-heap0.Objects)/float64(b.Jobs), Lower)
		r.result(table, "heap KB allocated per job: the side's process", float64(heap1.Bytes-heap0.Bytes)/1024/float64(b.Jobs), Lower)
		r.result(table, "garbage collections per 10,000 jobs", float64(heap1.Cycles-heap0.Cycles)*10000/float64(b.Jobs), Lower)
		lo, hi := spread(calls, b.Nodes)
		r.result(table, "fewest jobs on a node ÷ fair share (≥ 0.5 wanted)", lo, Higher)
		r.result(table, "most jobs on a node ÷ fair share", hi, Lower)
		r.result(table, "calls repeating a job", float64(repeats), Lower)
		return nil
	})
}

// latency enqueues a trickle of jobs due now, one by one, and reports the
// delay from each enqueue to its call's start: through Farm.Enqueue of
// one job (a node's fast path), and, on a side with another door for the
// application (AppEnqueuer), through that too.
func (r *runner) latency(ctx context.Context, slot time.Duration, all []time.Duration) error {
	r.logf("%s: latency trickle of %d jobs, %d nodes, slot %v", r.side.Name(), r.p.LatencyJobs, r.p.LatencyNodes, slot)
	tables := []string{
		fmt.Sprintf("start delay of jobs enqueued for now, %d jobs %v apart, %d nodes × %d calls (ms)",
			r.p.LatencyJobs, r.p.LatencyGap, r.p.LatencyNodes, DefaultCalls),
		fmt.Sprintf("start delay of jobs enqueued for now by the application (its own insert, on no node), %d jobs %v apart, %d nodes × %d calls (ms)",
			r.p.LatencyJobs, r.p.LatencyGap, r.p.LatencyNodes, DefaultCalls),
	}
	return r.withFarm(ctx, Spec{Nodes: r.p.LatencyNodes, Concurrency: DefaultCalls, Slot: slot}, func(db *Database, f Farm) error {
		doors := []func(ctx context.Context, key string) error{
			func(ctx context.Context, key string) error { return f.Enqueue(ctx, []string{key}) },
		}
		if a, ok := f.(AppEnqueuer); ok {
			doors = append(doors, a.EnqueueByApp)
		}
		// A side without slots runs once; its figures stand on every slot's
		// rows so that the table lines up, and a side with one door's on
		// both tables.
		slots := []time.Duration{slot}
		if !r.side.Slotted() {
			slots = all
		}
		done := 0
		for d, enqueue := range doors {
			sent := map[string]time.Time{}
			keys := keys(fmt.Sprintf("l%d-", d), r.p.LatencyJobs)
			t0 := time.Now()
			for i, k := range keys {
				if err := Sleep(ctx, time.Until(t0.Add(time.Duration(i)*r.p.LatencyGap))); err != nil {
					return err
				}
				sent[k] = time.Now()
				if err := enqueue(ctx, k); err != nil {
					return fmt.Errorf("enqueue: %w", err)
				}
			}
			done += len(keys)
			calls, _, _, err := r.drain(ctx, db, f, done, time.Minute)
			if err != nil {
				return err
			}
			var delays []time.Duration
			for _, c := range calls {
				if at, ok := sent[c.Key]; ok {
					delays = append(delays, c.Start.Sub(at))
				}
			}
			slices.Sort(delays)
			on := tables[d:]
			if len(doors) == 2 {
				on = tables[d : d+1]
			}
			for _, table := range on {
				for _, s := range slots {
					r.result(table, "p50, slot "+s.String(), ms(Percentile(delays, 0.50)), Lower)
					r.result(table, "p99, slot "+s.String(), ms(Percentile(delays, 0.99)), Lower)
					r.result(table, "max, slot "+s.String(), ms(delays[len(delays)-1]), Lower)
				}
			}
		}
		return nil
	})
}

// steady offers a steady load from the feeder (not counted) in batches
// every 10 ms and reports the farm's statements per job: claims, results,
// renewals, turns and heartbeats, all it sent while the load lasted.
func (r *runner) steady(ctx context.Context) error {
	r.logf("%s: steady load of %d jobs/s for %v", r.side.Name(), r.p.SteadyRate, r.p.SteadyFor)
	table := fmt.Sprintf("steady load: %d jobs/s offered for %v, %d nodes × %d concurrent calls",
		r.p.SteadyRate, r.p.SteadyFor, r.p.SteadyNodes, r.p.SteadyCalls)
	return r.withFarm(ctx, Spec{Nodes: r.p.SteadyNodes, Concurrency: r.p.SteadyCalls, Slot: DefaultSlot}, func(db *Database, f Farm) error {
		if err := r.srv.ResetStatements(ctx); err != nil {
			return err
		}
		sent := map[string]time.Time{}
		want := int(float64(r.p.SteadyRate) * r.p.SteadyFor.Seconds())
		t0 := time.Now()
		// Every 10 ms, enqueue what the rate owes by now in one batch.
		for n := 0; n < want; {
			if err := Sleep(ctx, 10*time.Millisecond); err != nil {
				return err
			}
			owed := min(want, int(time.Since(t0).Seconds()*float64(r.p.SteadyRate))) - n
			if owed <= 0 {
				continue
			}
			batch := make([]string, owed)
			now := time.Now()
			for i := range batch {
				batch[i] = "s" + strconv.Itoa(n+i)
				sent[batch[i]] = now
			}
			if err := f.Enqueue(ctx, batch); err != nil {
				return fmt.Errorf("enqueue: %w", err)
			}
			n += owed
		}
		fed := time.Since(t0)
		calls, _, stmts, err := r.drain(ctx, db, f, want, 3*time.Minute)
		if err != nil {
			return err
		}
		_, last := span(calls)
		var delays []time.Duration
		for _, c := range calls {
			delays = append(delays, c.Start.Sub(sent[c.Key]))
		}
		slices.Sort(delays)
		r.result(table, "jobs/s offered (as the feeder managed)", float64(want)/fed.Seconds(), Higher)
		r.result(table, "jobs/s done, first enqueue to last finish", float64(want)/last.Sub(t0).Seconds(), Higher)
		r.result(table, "statements per job", float64(stmts)/float64(want), Lower)
		if err := r.otherCommands(ctx, db, table, perJob, float64(want)); err != nil {
			return err
		}
		r.result(table, "start delay p50 (ms)", ms(Percentile(delays, 0.50)), Lower)
		r.result(table, "start delay p99 (ms)", ms(Percentile(delays, 0.99)), Lower)
		return nil
	})
}

// otherCommands reports, on a server that counts them (OtherCommands),
// the farm's round trips other than statements since the last reset, each
// divided by per, in the rows row names.
func (r *runner) otherCommands(ctx context.Context, db *Database, table string, row func(name string) string, per float64) error {
	oc, ok := r.srv.(OtherCommands)
	if !ok {
		return nil
	}
	counts, err := oc.FarmOtherCommands(ctx, db)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		r.result(table, row(name), float64(counts[name])/per, Lower)
	}
	return nil
}

func perJob(name string) string { return name + " per job (not statements)" }

// drain waits until n jobs have been called and the database records them
// done, then reads the farm's statement count.
func (r *runner) drain(ctx context.Context, db *Database, f Farm, n int, timeout time.Duration) ([]Call, int, int64, error) {
	if err := r.ep.Wait(ctx, n, timeout); err != nil {
		return nil, 0, 0, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		done, err := f.Finished(ctx)
		if err != nil {
			return nil, 0, 0, err
		}
		if done >= n {
			break
		}
		if time.Now().After(deadline) {
			return nil, 0, 0, fmt.Errorf("all %d jobs called, but only %d recorded done after 30s", n, done)
		}
		if err := Sleep(ctx, 10*time.Millisecond); err != nil {
			return nil, 0, 0, err
		}
	}
	stmts, err := r.srv.FarmStatements(ctx, db)
	if err != nil {
		return nil, 0, 0, err
	}
	if err := r.logStatementKinds(ctx, db, n); err != nil {
		return nil, 0, 0, err
	}
	calls, repeats := r.ep.Calls()
	return calls, repeats, stmts, nil
}

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

func span(calls []Call) (first, last time.Time) {
	for i, c := range calls {
		if i == 0 || c.Start.Before(first) {
			first = c.Start
		}
		if c.Finish.After(last) {
			last = c.Finish
		}
	}
	return first, last
}

// spread is the fewest and the most jobs any of the nodes ran, each divided
// by the fair share (jobs ÷ nodes); a node that ran none counts as 0.
func spread(calls []Call, nodes int) (lo, hi float64) {
	per := map[string]int{}
	for _, c := range calls {
		per[c.Node]++
	}
	counts := make([]int, 0, nodes)
	for _, v := range per {
		counts = append(counts, v)
	}
	for len(counts) < nodes {
		counts = append(counts, 0)
	}
	share := float64(len(calls)) / float64(nodes)
	return float64(slices.Min(counts)) / share, float64(slices.Max(counts)) / share
}

// Percentile is the nearest-rank percentile of sorted.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Sleep waits d or until ctx is done.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// logStatementKinds logs the farm's statements by kind, per 1,000 jobs,
// when asked to and the server tells them apart (StatementKinds).
func (r *runner) logStatementKinds(ctx context.Context, db *Database, jobs int) error {
	sk, ok := r.srv.(StatementKinds)
	if !r.p.StatementKinds || !ok {
		return nil
	}
	kinds, err := sk.FarmStatementKinds(ctx, db)
	if err != nil {
		return err
	}
	per := 1000 / float64(jobs)
	r.logf("%s: statements per 1,000 jobs by kind (calls, rows, server ms):", r.side.Name())
	for _, k := range kinds {
		r.logf("  %8.1f %9.1f %8.2f  %s", float64(k.Calls)*per, float64(k.Rows)*per, k.Millis*per, k.Query)
	}
	return nil
}
