package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slotpoller/slotpoller/internal/tracing"
	"go.opentelemetry.io/otel/attribute"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
)

// errTaskLost is why a worker's calls are cut short, read back with
// context.Cause.
var errTaskLost = errors.New("task lost: the farm gave it to another node")

// TaskOptions configure a Keeper.
type TaskOptions struct {
	Node        string
	Incarnation string
	// Lease is how long a task stays held without renewal: the TTL, so a
	// dead owner's tasks free up when the registry counts the owner out.
	Lease time.Duration
	// Heartbeat is how often Renew runs; with Lease it sets how early a
	// worker stops when renewals fail.
	Heartbeat time.Duration
	// Margin is kept between the last moment the lease is known to hold
	// (on this node's monotonic clock) and any call: a call starts only
	// while more than Margin of the lease is left, and must end by then.
	Margin     time.Duration
	Timeout    time.Duration // call deadline when the task has none
	BackoffMax time.Duration // cap of a failing task's back-off
	// MinHold is the hysteresis of rebalancing: a task held for less is
	// never asked to move.
	MinHold time.Duration
	// TakeOverOrphans: the farm cannot wake a node between its turns (no
	// notes: SQL Server, MySQL, SQLite), so the balancer gives a dead owner's task to its
	// own node, which calls it at once, rather than to one that would find
	// it only at its next turn.
	TakeOverOrphans bool
	// Tracer, when set, records a span for every task call; each call is
	// a trace of its own.
	Tracer tracing.Tracer
	Clock  clock.Clock
	Logger *slog.Logger
	Rand   func() float64
}

// Keeper holds this node's endless tasks: it learns at every heartbeat
// which tasks are its own (one renewal statement), runs a worker for each,
// stops workers whose task it lost, was asked to hand off or to delete,
// and, in the node's slot, assigns unowned tasks over the farm.
type Keeper struct {
	store *store.Store
	inv   *Invoker
	opts  TaskOptions

	base   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool                   // Release ran: no more workers or stops
	workers map[string]*taskWorker // working tasks, by name
	// stops are the tasks being given up (handoff, delete): their call in
	// flight runs to its end, then a fenced write releases or deletes them.
	// A task stays here until that write is done, so that a renewal that
	// still returns it (its lease is renewed meanwhile) neither restarts it
	// nor gives it up a second time without waiting for the call.
	stops map[taskKey]*taskWorker
	// last is the latest worker started per task, whatever became of it: a
	// new worker or a give-up for the same task waits for its goroutine, so
	// no two calls of a task ever run at once from this node.
	last map[string]*taskWorker

	calls, failures, lost, stale atomic.Int64
}

// taskKey names one ownership of a task: a new token is a new ownership.
type taskKey struct {
	name  string
	token int64
}

type taskWorker struct {
	task   store.HeldTask
	cancel context.CancelCauseFunc // hard stop: the task was lost
	// done is closed once the worker's goroutine, and every earlier
	// worker's for the same task, has exited: no call of theirs runs.
	done chan struct{}
	// stop asks for a soft stop (handoff, delete, node stop, a lease that
	// cannot be confirmed): no new call,
	// but the one in flight ends on its own, within its lease, so that the
	// next owner's first call never overlaps it at the endpoint.
	stop     chan struct{}
	stopOnce sync.Once

	mu         sync.Mutex
	leaseUntil clock.Instant // send time of the last confirmation + lease
}

func (w *taskWorker) lease() clock.Instant {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.leaseUntil
}

func (w *taskWorker) confirm(until clock.Instant) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if until.After(w.leaseUntil) {
		w.leaseUntil = until
	}
}

func (w *taskWorker) finishAndStop() { w.stopOnce.Do(func() { close(w.stop) }) }

func (w *taskWorker) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// NewKeeper returns a keeper; Release stops it.
func NewKeeper(s *store.Store, inv *Invoker, opts TaskOptions) *Keeper {
	if opts.Clock == nil {
		opts.Clock = clock.Real()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	base, cancel := context.WithCancel(context.Background())
	return &Keeper{store: s, inv: inv, opts: opts, base: base, cancel: cancel,
		workers: map[string]*taskWorker{}, stops: map[taskKey]*taskWorker{}, last: map[string]*taskWorker{}}
}

// TaskStats are the keeper's counters.
type TaskStats struct {
	Held int // tasks being worked
	// Stopping are tasks being handed off or deleted: still held (their
	// leases renewed) until their call in flight ended and they were
	// given up.
	Stopping         int
	Calls, Failures  int64
	Lost, StaleStops int64
}

// Stats returns the counters.
func (k *Keeper) Stats() TaskStats {
	k.mu.Lock()
	held, stopping := len(k.workers), len(k.stops)
	k.mu.Unlock()
	return TaskStats{Held: held, Stopping: stopping, Calls: k.calls.Load(), Failures: k.failures.Load(),
		Lost: k.lost.Load(), StaleStops: k.stale.Load()}
}

// Held returns the names of the tasks this node is working, sorted.
func (k *Keeper) Held() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]string, 0, len(k.workers))
	for n, w := range k.workers {
		if !w.exited() {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Renew renews every lease this node holds in one statement and brings the
// workers in line with the answer. Call it at every heartbeat.
func (k *Keeper) Renew(ctx context.Context) error {
	sent := clock.Mono(k.opts.Clock)
	hold := k.hold()
	held, err := k.store.TasksRenew(ctx, k.opts.Incarnation, hold)
	if err != nil {
		k.stopUnconfirmed()
		return err
	}
	byName := make(map[string]store.HeldTask, len(held))
	for _, h := range held {
		byName[h.Name] = h
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil
	}
	for name, w := range k.workers {
		h, ok := byName[name]
		if !ok || h.Token != w.task.Token {
			k.lost.Add(1)
			k.opts.Logger.Warn("task lost: stopping its calls", "task", name, "token", w.task.Token)
			w.cancel(errTaskLost)
			delete(k.workers, name)
			continue
		}
		if w.exited() {
			delete(k.workers, name) // stopped on its own (lease unconfirmed); restarted below if still ours
		}
	}
	for key, w := range k.stops {
		if h, ok := byName[key.name]; (!ok || h.Token != key.token) && w != nil && !w.exited() {
			// Lost while being given up (its lease ran out): the farm may
			// have moved it, so its call must not run on. The fenced
			// write that follows finds the token moved on and does nothing.
			k.lost.Add(1)
			k.opts.Logger.Warn("task lost while being given up: stopping its call", "task", key.name, "token", key.token)
			w.cancel(errTaskLost)
		}
	}
	for _, h := range held {
		key := taskKey{h.Name, h.Token}
		until := sent.Add(hold.For(h.Timeout))
		if w, ok := k.stops[key]; ok {
			// Being given up: the renewal above kept its lease while its
			// call runs; it gets neither a worker nor a second give-up.
			if w != nil {
				w.confirm(until)
			}
			continue
		}
		w := k.workers[h.Name]
		switch {
		case h.State == store.TaskDeleting:
			k.stopThen(key, "delete", func(ctx context.Context) (bool, error) { return k.store.TaskMarkDeleted(ctx, h.Name, h.Token) })
		case h.Handoff:
			k.stopThen(key, "hand off", func(ctx context.Context) (bool, error) { return k.store.TaskReleaseIfHeld(ctx, h.Name, h.Token) })
		case w != nil:
			w.confirm(until)
		default:
			k.start(h, until)
		}
	}
	for name, w := range k.last {
		if w.exited() && k.workers[name] != w {
			delete(k.last, name) // nothing left to wait for
		}
	}
	return nil
}

// stopUnconfirmed stops, while there is still time, every worker whose
// lease would run out before the next renewal could confirm it. The stop
// is soft: a call in flight already has a deadline within the lease it
// started under, and cutting it short would leave the endpoint working on
// while a restarted worker calls again. Tasks being given up are left
// alone for the same reason.
func (k *Keeper) stopUnconfirmed() {
	now := clock.Mono(k.opts.Clock)
	k.mu.Lock()
	defer k.mu.Unlock()
	for name, w := range k.workers {
		if !now.Add(k.opts.Heartbeat + k.opts.Margin).Before(w.lease()) {
			k.opts.Logger.Warn("task lease cannot be confirmed: stopping its calls", "task", name)
			w.finishAndStop()
			delete(k.workers, name)
		}
	}
}

// stopThen gives a task up: it soft-stops the task's worker, if working,
// waits until no call of the task runs on this node any more, then runs
// the fenced write that releases or deletes it. The task stays in k.stops
// until that write is done. Holds k.mu.
func (k *Keeper) stopThen(key taskKey, what string, write func(context.Context) (bool, error)) {
	if w := k.workers[key.name]; w != nil {
		w.finishAndStop()
		delete(k.workers, key.name)
	}
	w := k.last[key.name] // the working one, or one stopped earlier whose call may still run
	k.stops[key] = w
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		if w != nil {
			<-w.done
		}
		ctx, cancel := context.WithTimeout(context.Background(), k.opts.Lease)
		defer cancel()
		ok, err := write(ctx)
		switch {
		case err != nil:
			k.opts.Logger.Error("could not "+what+" task; trying again at the next renewal", "task", key.name, "err", err)
		case ok:
			k.opts.Logger.Info("task "+what+" done", "task", key.name, "token", key.token)
		}
		// Only now may a renewal that still returns the task (its answer
		// read before the write) act on it again; the write is fenced, so
		// a second one does nothing once the task moved on.
		k.mu.Lock()
		delete(k.stops, key)
		k.mu.Unlock()
	}()
}

func (k *Keeper) start(h store.HeldTask, until clock.Instant) {
	ctx, cancel := context.WithCancelCause(k.base)
	w := &taskWorker{task: h, cancel: cancel, done: make(chan struct{}), stop: make(chan struct{}), leaseUntil: until}
	prev := k.last[h.Name]
	k.workers[h.Name], k.last[h.Name] = w, w
	k.opts.Logger.Info("task taken", "task", h.Name, "token", h.Token, "every", h.Every)
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		defer close(w.done)
		if prev != nil {
			// A restarted worker never calls while the previous one's call
			// runs; waiting here, even when stopped, also keeps done
			// closing only after every earlier worker has exited.
			<-prev.done
		}
		defer cancel(nil)
		k.work(ctx, w)
	}()
}

// hold is how long this node's task leases keep a task from the rest of
// the farm: the lease (the TTL), or, for a task that declares how long
// its calls may run, that plus the margin and a heartbeat when longer, so
// that every call started between two renewals gets the whole of it and
// no other node calls the task before the deadline its endpoint was told.
// A task that declares nothing keeps its calls within the lease.
func (k *Keeper) hold() store.Hold {
	return store.Hold{Lease: k.opts.Lease, Calls: true, Margin: k.opts.Margin + k.opts.Heartbeat}
}

// work calls the task's endpoint once per interval while the lease holds.
func (k *Keeper) work(ctx context.Context, w *taskWorker) {
	task := w.task
	log := k.opts.Logger.With("task", task.Name, "token", task.Token)
	failures := task.Failures
	next := clock.Mono(k.opts.Clock)
	for seq := 1; ; seq++ {
		t := k.opts.Clock.NewTimer(next.Sub(clock.Mono(k.opts.Clock)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-w.stop:
			t.Stop()
			return
		case <-t.C():
		}
		// A timer and a stop that are both ready are picked at random:
		// check the stop again, a stopped worker makes no new call.
		select {
		case <-w.stop:
			return
		default:
		}
		// The lease is judged on this node's own monotonic clock: a node
		// that froze or lost the database past its lease stops here, before
		// it can call with a token the farm may have moved past.
		now := clock.Mono(k.opts.Clock)
		left := w.lease().Sub(now) - k.opts.Margin
		if left <= 0 {
			k.stale.Add(1)
			log.Warn("lease not confirmed in time: no more calls until it is renewed")
			return
		}
		timeout := task.Timeout
		if timeout <= 0 {
			timeout = k.opts.Timeout
		}
		timeout = min(timeout, left)
		end := now.Add(left)
		var attrs []attribute.KeyValue // built only for a span that records them
		if k.opts.Tracer != nil {
			attrs = []attribute.KeyValue{attribute.String("slotpoller.task", task.Name), attribute.Int64("slotpoller.token", task.Token),
				attribute.String("slotpoller.node", k.opts.Node)}
		}
		callCtx, tc := tracing.StartCall(ctx, k.opts.Tracer, tracing.NewTrace(), "slotpoller task", attrs...)
		res := k.inv.Invoke(callCtx, Call{Task: task.Name, Node: k.opts.Node, Token: task.Token, Attempt: failures + 1,
			IdempotencyKey: fmt.Sprintf("slotpoller-task-%s-%d-%d", task.Name, task.Token, seq),
			Method:         task.Method, Endpoint: task.Endpoint, Payload: task.Payload, Timeout: timeout,
			Budget: func() time.Duration { return end.Sub(clock.Mono(k.opts.Clock)) }, Traceparent: tc.Traceparent})
		tc.End(res.Status, res.Err)
		if ctx.Err() != nil {
			return
		}
		k.calls.Add(1)
		ok := res.Verdict == Succeeded
		wctx, cancel := context.WithTimeout(ctx, k.opts.Heartbeat)
		recorded, err := k.store.TaskRecordCall(wctx, task.Name, task.Token, ok, res.Status, res.Err)
		cancel()
		if err == nil && !recorded {
			log.Warn("task no longer ours: stopping its calls")
			return
		}
		if err != nil {
			log.Warn("could not record task call", "err", err)
		}
		select {
		case <-w.stop:
			return // the call in flight has ended: the task can move
		default:
		}
		if ok {
			failures = 0
			next = now.Add(task.Every)
			continue
		}
		// A failing endpoint keeps its owner and backs off; it never
		// moves the task.
		failures++
		k.failures.Add(1)
		delay := Backoff(failures, task.Every, max(task.Every, k.opts.BackoffMax), k.opts.Rand)
		log.Warn("task call failed; backing off", "status", res.Status, "error", res.Err, "failures", failures, "next_in", delay)
		next = clock.Mono(k.opts.Clock).Add(delay)
	}
}

// Release stops every worker, waits for the calls in flight to end, and
// gives the tasks back to the farm so they are re-owned within one slot.
// For a graceful stop.
//
// A call ends within its hold, which for a task that declares long calls
// may be longer than a stop can wait. If ctx has a deadline, Release waits
// for the calls until releaseBudget before it, then cuts those still
// running; it does not give their tasks back, since their endpoints may
// work on until the deadlines they were told: those tasks move when their
// holds end, and no call of theirs overlaps the next owner's.
func (k *Keeper) Release(ctx context.Context) (int64, error) {
	k.mu.Lock()
	k.closed = true
	for name, w := range k.workers {
		w.finishAndStop() // a call in flight ends within its hold
		delete(k.workers, name)
	}
	k.mu.Unlock()
	done := make(chan struct{})
	go func() { k.wg.Wait(); close(done) }()
	wait := ctx
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		wait, cancel = context.WithDeadline(ctx, d.Add(-releaseBudget))
		defer cancel()
	}
	var cut []string
	select {
	case <-done:
	case <-wait.Done():
		k.mu.Lock()
		for name, w := range k.last {
			if !w.exited() {
				cut = append(cut, name)
			}
		}
		k.mu.Unlock()
		sort.Strings(cut)
		k.opts.Logger.Warn("stopping: task calls still running are cut; their tasks move when their holds end", "tasks", cut)
		k.cancel()
		<-done
	}
	k.cancel()
	return k.store.TasksReleaseAll(ctx, k.opts.Incarnation, cut...)
}

// releaseBudget is what Release keeps of its deadline for the statement
// that gives the tasks back.
const releaseBudget = 2 * time.Second

// AddTask validates and adds an endless task.
func AddTask(ctx context.Context, s *store.Store, t store.NewTask) error {
	if err := ValidateName("task", t.Name); err != nil {
		return fmt.Errorf("add task: %w", err)
	}
	if err := ValidateEndpoint(t.Endpoint); err != nil {
		return fmt.Errorf("add task %q: %w", t.Name, err)
	}
	if t.Method == "" {
		t.Method = "POST"
	}
	switch t.Method {
	case "GET", "POST", "PUT", "PATCH", "DELETE":
	default:
		return fmt.Errorf("add task %q: method %q is not one of GET, POST, PUT, PATCH, DELETE", t.Name, t.Method)
	}
	if t.Every < 10*time.Millisecond {
		return fmt.Errorf("add task %q: every %v is too short (at least 10ms)", t.Name, t.Every)
	}
	if err := ValidateTimeout(t.Timeout); err != nil {
		return fmt.Errorf("add task %q: %w", t.Name, err)
	}
	return s.TaskInsert(ctx, t)
}
