package jobs_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

type taskCall struct {
	task, node string
	token      int64
}

// taskEndpoint reports every call on a channel; /fail answers 503.
func taskEndpoint(t *testing.T) (*url.URL, chan taskCall) {
	calls := make(chan taskCall, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strconv.ParseInt(r.Header.Get("X-Slotpoller-Token"), 10, 64)
		calls <- taskCall{r.Header.Get("X-Slotpoller-Task"), r.Header.Get("X-Slotpoller-Node"), tok}
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u, calls
}

func newKeeper(s *store.Store, base *url.URL, c clock.Clock, node string) *jobs.Keeper {
	return jobs.NewKeeper(s, &jobs.Invoker{Base: base}, jobs.TaskOptions{Node: node, Incarnation: "inc-" + node,
		Lease: 3 * time.Second, Heartbeat: time.Second, Margin: 500 * time.Millisecond, Timeout: 5 * time.Second,
		BackoffMax: time.Minute, MinHold: 10 * time.Second, Clock: c, Rand: func() float64 { return 0 }})
}

// heldTask adds the task name (endpoint, every) and gives it to node-a,
// whose keeper, on a fake clock, renews and makes the task's first call.
func heldTask(t *testing.T, ctx context.Context, s *store.Store, name, endpoint string, every time.Duration) (*jobs.Keeper, *clock.Fake, chan taskCall) {
	t.Helper()
	base, calls := taskEndpoint(t)
	c := clock.NewFake(t0)
	k := newKeeper(s, base, c, "node-a")
	require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: name, Endpoint: endpoint, Every: every}))
	assign(t, s, name, "node-a")
	require.NoError(t, k.Renew(ctx))
	nextCall(t, calls)
	return k, c, calls
}

func nextCall(t *testing.T, calls chan taskCall) taskCall {
	t.Helper()
	select {
	case c := <-calls:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no task call arrived")
		return taskCall{}
	}
}

func noCall(t *testing.T, calls chan taskCall) {
	t.Helper()
	select {
	case c := <-calls:
		t.Fatalf("unexpected task call %+v", c)
	case <-time.After(100 * time.Millisecond):
	}
}

func assign(t *testing.T, s *store.Store, task, node string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, s.NodeCheckIn(ctx, store.NodeState{Name: node, Incarnation: "inc-" + node, Capacity: 4, Free: 4}, time.Hour))
	ok, err := s.TaskAssignIfUnowned(ctx, task, "inc-"+node, node, store.Lease(3*time.Second), time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
}

func TestTaskIsCalledEveryIntervalWhileHeld(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		base, calls := taskEndpoint(t)
		c := clock.NewFake(t0)
		k := newKeeper(s, base, c, "node-a")
		require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "feed", Endpoint: "/feed", Every: 2 * time.Second}))
		assign(t, s, "feed", "node-a")

		require.NoError(t, k.Renew(ctx))
		require.Equal(t, []string{"feed"}, k.Held())
		first := nextCall(t, calls)
		require.Equal(t, taskCall{"feed", "node-a", 1}, first, "the first call comes at once, with the task's headers")
		for range 3 {
			// Heartbeats keep the lease; the task is called every 2s.
			require.NoError(t, c.BlockUntil(ctx, 1))
			c.Advance(time.Second)
			require.NoError(t, k.Renew(ctx))
			noCall(t, calls)
			c.Advance(time.Second)
			require.NoError(t, k.Renew(ctx))
			require.Equal(t, "feed", nextCall(t, calls).task)
		}
		// The endpoint answers before the node records the call.
		require.Eventually(t, func() bool {
			task, err := s.TaskGet(ctx, "feed")
			return err == nil && task.Calls == 4
		}, 5*time.Second, 10*time.Millisecond)
		n, err := k.Release(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
	})
}

// wallSteps are the steps of the local wall clock the lease tests run
// under: none, and an hour back. A node judges its leases on its monotonic
// clock: a lease confirmed before a step back must not look an hour longer
// after it, when the farm moves the task at its end by the database clock.
var wallSteps = []struct {
	name string
	step time.Duration
}{{"no wall step", 0}, {"wall clock stepped back an hour", -time.Hour}}

func TestFrozenOwnerDoesNotCallAfterItsLease(t *testing.T) {
	for _, ws := range wallSteps {
		t.Run(ws.name, func(t *testing.T) {
			s, _ := storetest.Open(t, "sqlite")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			k, c, calls := heldTask(t, ctx, s, "feed", "/feed", time.Second)

			// The node freezes (no heartbeats) for 5s; its 3s lease ran out on its
			// own monotonic clock. When it wakes, the worker must not call.
			require.NoError(t, c.BlockUntil(ctx, 1))
			c.StepWall(ws.step)
			c.Advance(5 * time.Second)
			noCall(t, calls)
			require.Eventually(t, func() bool { return k.Stats().StaleStops == 1 }, 5*time.Second, 10*time.Millisecond)

			// Meanwhile the farm gave the task to another node.
			_, err := s.TasksRenew(ctx, "inc-node-a", store.Lease(-time.Second))
			require.NoError(t, err)
			assign(t, s, "feed", "node-b")
			require.NoError(t, k.Renew(ctx))
			require.Empty(t, k.Held(), "the woken node learns the task is gone")
			noCall(t, calls)
			require.Equal(t, int64(1), k.Stats().Lost)
			_, err = k.Release(ctx)
			require.NoError(t, err)
		})
	}
}

func TestUnreachableDatabaseStopsCallsBeforeTheLeaseEnds(t *testing.T) {
	for _, ws := range wallSteps {
		t.Run(ws.name, func(t *testing.T) {
			s, _ := storetest.Open(t, "sqlite")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			k, c, _ := heldTask(t, ctx, s, "feed", "/feed", 10*time.Second)
			require.NoError(t, s.Close())

			c.StepWall(ws.step)
			c.Advance(time.Second)
			require.Error(t, k.Renew(ctx))
			require.Equal(t, []string{"feed"}, k.Held(), "2s of lease left: keep the worker")
			c.Advance(time.Second)
			require.Error(t, k.Renew(ctx))
			require.Empty(t, k.Held(), "1s left, less than a heartbeat and the margin: stop now")
		})
	}
}

func TestDeleteAndHandoffStopTheWorker(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		base, calls := taskEndpoint(t)
		c := clock.NewFake(t0)
		k := newKeeper(s, base, c, "node-a")
		for _, n := range []string{"gone", "moving"} {
			require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: n, Endpoint: "/" + n, Every: time.Second}))
			assign(t, s, n, "node-a")
		}
		require.NoError(t, k.Renew(ctx))
		nextCall(t, calls)
		nextCall(t, calls)

		state, err := s.TaskRequestDelete(ctx, "gone")
		require.NoError(t, err)
		require.Equal(t, store.TaskDeleting, state)
		ok, err := s.TaskRequestHandoff(ctx, "moving", 1)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, k.Renew(ctx))
		require.Empty(t, k.Held())
		require.Eventually(t, func() bool {
			g, _ := s.TaskGet(ctx, "gone")
			m, _ := s.TaskGet(ctx, "moving")
			return g.State == store.TaskDeleted && m.State == store.TaskCreated
		}, 5*time.Second, 10*time.Millisecond)
		c.Advance(5 * time.Second)
		noCall(t, calls)
		_, err = k.Release(ctx)
		require.NoError(t, err)
	})
}

func TestFailingTaskBacksOffAndKeepsItsOwner(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, c, calls := heldTask(t, ctx, s, "flaky", "/fail", time.Second)
	// Failures: next calls after 1s, then 2s, then 4s (jitter source 0
	// gives the lower half: 0.5s, 1s, 2s).
	var gaps []time.Duration
	for range 3 {
		require.NoError(t, c.BlockUntil(ctx, 1))
		start := c.Now()
		for {
			c.Advance(100 * time.Millisecond)
			require.NoError(t, k.Renew(ctx))
			select {
			case <-calls:
			case <-time.After(20 * time.Millisecond):
				continue
			}
			break
		}
		gaps = append(gaps, c.Now().Sub(start))
		require.NoError(t, c.BlockUntil(ctx, 1))
	}
	require.Less(t, gaps[0], gaps[1])
	require.Less(t, gaps[1], gaps[2], "back-off grows: %v", gaps)
	task, err := s.TaskGet(ctx, "flaky")
	require.NoError(t, err)
	require.Equal(t, "node-a", task.OwnerNode, "its own errors never move a task")
	require.Equal(t, int64(1), task.Token)
	require.Equal(t, 4, task.Failures)
	_, err = k.Release(ctx)
	require.NoError(t, err)
}

func TestBalanceSpreadsAndRebalancesWithHysteresis(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		c := clock.NewFake(t0)
		k := newKeeper(s, &url.URL{Scheme: "http", Host: "localhost"}, c, "node-a")
		var members []jobs.Member
		for _, n := range []string{"node-a", "node-b", "node-c"} {
			require.NoError(t, s.NodeCheckIn(ctx, store.NodeState{Name: n, Incarnation: "inc-" + n, Capacity: 4, Free: 4}, time.Hour))
			members = append(members, jobs.Member{Name: n, Incarnation: "inc-" + n, Capacity: 4})
		}
		for i := range 6 {
			require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "t" + strconv.Itoa(i), Endpoint: "/t", Every: time.Second}))
		}
		res, err := k.Balance(ctx, members, time.Hour, false)
		require.NoError(t, err)
		require.Equal(t, 6, res.Assigned)
		require.Equal(t, 2, res.AssignedToMe)
		require.Equal(t, map[string]int{"node-a": 2, "node-b": 2, "node-c": 2}, owners(t, s))

		// A fourth node joins. Nothing moves before the tasks were held for
		// MinHold (10s)...
		require.NoError(t, s.NodeCheckIn(ctx, store.NodeState{Name: "node-d", Incarnation: "inc-node-d", Capacity: 4, Free: 4}, time.Hour))
		members = append(members, jobs.Member{Name: "node-d", Incarnation: "inc-node-d", Capacity: 4})
		res, err = k.Balance(ctx, members, time.Hour, false)
		require.NoError(t, err)
		require.Empty(t, res.HandoffAsked, "tasks held for less than MinHold stay put")

		// ...so age them on the database clock, then one handoff at a time.
		_, err = s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {tasks} SET since = {now+?}`), -60_000)
		require.NoError(t, err)
		res, err = k.Balance(ctx, members, time.Hour, false)
		require.NoError(t, err)
		require.NotEmpty(t, res.HandoffAsked)
		res, err = k.Balance(ctx, members, time.Hour, false)
		require.NoError(t, err)
		require.Empty(t, res.HandoffAsked, "one move at a time")

		// The owner releases it; the next balance gives it to node-d.
		moved, err := s.Tasks(ctx, false)
		require.NoError(t, err)
		for _, m := range moved {
			if m.Handoff {
				ok, err := s.TaskReleaseIfHeld(ctx, m.Name, m.Token)
				require.NoError(t, err)
				require.True(t, ok)
			}
		}
		res, err = k.Balance(ctx, members, time.Hour, false)
		require.NoError(t, err)
		require.Equal(t, 1, res.Assigned)
		got := owners(t, s)
		require.Equal(t, 1, got["node-d"])
		// Spread is now 2,2,1,1 (or similar): within one task, so nothing
		// more moves however often the balancer runs.
		_, err = s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {tasks} SET since = {now+?}`), -60_000)
		require.NoError(t, err)
		for range 3 {
			res, err = k.Balance(ctx, members, time.Hour, false)
			require.NoError(t, err)
			require.Empty(t, res.HandoffAsked, "no flapping once within one task: %v", owners(t, s))
		}
	})
}

func owners(t *testing.T, s *store.Store) map[string]int {
	tasks, err := s.Tasks(context.Background(), false)
	require.NoError(t, err)
	out := map[string]int{}
	for _, task := range tasks {
		if task.Held {
			out[task.OwnerNode]++
		}
	}
	return out
}

func TestAddTaskRefusesBadInput(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	require.Error(t, jobs.AddTask(ctx, s, store.NewTask{Name: "", Endpoint: "/x", Every: time.Second}))
	require.Error(t, jobs.AddTask(ctx, s, store.NewTask{Name: "a", Endpoint: "http://evil/x", Every: time.Second}))
	require.Error(t, jobs.AddTask(ctx, s, store.NewTask{Name: "a", Endpoint: "/x", Every: time.Millisecond}))
	require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "a", Endpoint: "/x", Every: time.Second}))
	require.ErrorIs(t, jobs.AddTask(ctx, s, store.NewTask{Name: "a", Endpoint: "/y", Every: time.Second}), store.ErrDuplicate)
}

func TestBalanceSkipsAMemberTheDatabaseNoLongerCountsLive(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	k := newKeeper(s, &url.URL{Scheme: "http", Host: "localhost"}, clock.NewFake(t0), "node-a")
	require.NoError(t, s.NodeCheckIn(ctx, store.NodeState{Name: "node-a", Incarnation: "inc-node-a", Capacity: 4}, time.Hour))
	require.NoError(t, s.NodeCheckIn(ctx, store.NodeState{Name: "node-b", Incarnation: "inc-node-b", Capacity: 4}, time.Hour))
	require.NoError(t, s.NodeLeave(ctx, "node-b", "inc-node-b")) // gone, but still in this node's cached membership
	require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "t1", Endpoint: "/t", Every: time.Second}))
	require.NoError(t, s.TaskInsert(ctx, store.NewTask{Name: "t0", Endpoint: "/t", Method: "POST", Every: time.Second}))
	// node-a already holds one task, so node-b looks emptiest.
	ok, err := s.TaskAssignIfUnowned(ctx, "t0", "inc-node-a", "node-a", store.Lease(time.Minute), time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	res, err := k.Balance(ctx, []jobs.Member{{Name: "node-a", Incarnation: "inc-node-a", Capacity: 4}, {Name: "node-b", Incarnation: "inc-node-b", Capacity: 4}}, time.Hour, false)
	require.NoError(t, err)
	require.Equal(t, 1, res.Assigned, "the task goes to the next member instead of waiting a slot")
	require.Equal(t, map[string]int{"node-a": 2}, owners(t, s))
}

func TestHandoffLetsTheCallInFlightFinishFirst(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL)
	k := newKeeper(s, base, clock.NewFake(t0), "node-a")
	require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "slow", Endpoint: "/slow", Every: time.Second}))
	assign(t, s, "slow", "node-a")
	require.NoError(t, k.Renew(ctx))
	<-started // a call is in flight

	requestHandoff(ctx, t, s, "slow")
	require.NoError(t, k.Renew(ctx))
	task, err := s.TaskGet(ctx, "slow")
	require.NoError(t, err)
	require.Equal(t, store.TaskRunning, task.State, "not released while its call runs: the next owner would overlap it")
	close(release)
	require.Eventually(t, func() bool {
		task, err := s.TaskGet(ctx, "slow")
		return err == nil && task.State == store.TaskCreated
	}, 5*time.Second, 10*time.Millisecond, "released once the call ended")
	_, err = k.Release(ctx)
	require.NoError(t, err)
}

// callLog is a task endpoint that records every call as an interval
// [start, end] on one logical clock (a counter, so order is exact), with
// the calling node. Calls are held open until letGo.
type callLog struct {
	base    *url.URL
	mu      sync.Mutex
	seq     int
	calls   []callInterval
	started chan string // the node of each call, as it starts
	hold    chan struct{}
	once    sync.Once
}

type callInterval struct {
	node       string
	start, end int // end 0: still running
}

func holdingEndpoint(t *testing.T) *callLog {
	l := &callLog{started: make(chan string, 100), hold: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.seq++
		i := len(l.calls)
		l.calls = append(l.calls, callInterval{node: r.Header.Get("X-Slotpoller-Node"), start: l.seq})
		l.mu.Unlock()
		l.started <- r.Header.Get("X-Slotpoller-Node")
		<-l.hold
		l.mu.Lock()
		l.seq++
		l.calls[i].end = l.seq
		l.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(l.letGo) // before srv.Close, which waits for the handlers
	l.base, _ = url.Parse(srv.URL)
	return l
}

// letGo ends the calls held open and lets later calls answer at once.
func (l *callLog) letGo() { l.once.Do(func() { close(l.hold) }) }

func (l *callLog) next(t *testing.T) string {
	t.Helper()
	select {
	case n := <-l.started:
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no task call arrived")
		return ""
	}
}

// overlaps returns every pair of calls that ran at the same time.
func (l *callLog) overlaps() [][2]callInterval {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out [][2]callInterval
	for i, a := range l.calls {
		for _, b := range l.calls[i+1:] {
			if (a.end == 0 || b.start < a.end) && (b.end == 0 || a.start < b.end) {
				out = append(out, [2]callInterval{a, b})
			}
		}
	}
	return out
}

func (l *callLog) nodes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, c := range l.calls {
		out = append(out, c.node)
	}
	return out
}

// newLongLeaseKeeper is newKeeper with a lease long enough that a call held
// open by the test never reaches its lease-bound deadline in real time.
func newLongLeaseKeeper(s *store.Store, base *url.URL, c clock.Clock, node string) *jobs.Keeper {
	return jobs.NewKeeper(s, &jobs.Invoker{Base: base}, jobs.TaskOptions{Node: node, Incarnation: "inc-" + node,
		Lease: 30 * time.Second, Heartbeat: time.Second, Margin: 500 * time.Millisecond, Timeout: time.Minute,
		BackoffMax: time.Minute, MinHold: 10 * time.Second, Clock: c, Rand: func() float64 { return 0 }})
}

// slowCallInFlight gives node-a's keeper (long lease) a task "slow" and
// returns once its first call is in flight, held open by the endpoint.
func slowCallInFlight(t *testing.T) (context.Context, *store.Store, *clock.Fake, *jobs.Keeper, *callLog) {
	s, _ := storetest.Open(t, "sqlite")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	calls := holdingEndpoint(t)
	c := clock.NewFake(t0)
	k := newLongLeaseKeeper(s, calls.base, c, "node-a")
	require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "slow", Endpoint: "/slow", Every: time.Second}))
	assign(t, s, "slow", "node-a")
	require.NoError(t, k.Renew(ctx))
	require.Equal(t, "node-a", calls.next(t))
	return ctx, s, c, k, calls
}

func requestHandoff(ctx context.Context, t *testing.T, s *store.Store, task string) {
	t.Helper()
	cur, err := s.TaskGet(ctx, task)
	require.NoError(t, err)
	ok, err := s.TaskRequestHandoff(ctx, task, cur.Token)
	require.NoError(t, err)
	require.True(t, ok)
}

// slotOwnerTries plays the next slot owner for a while: it gives the task
// to node-b whenever it is unowned (the Balance path) and lets node-b's
// keeper renew, as it would at its heartbeats.
func slotOwnerTries(ctx context.Context, t *testing.T, kb *jobs.Keeper) {
	t.Helper()
	members := []jobs.Member{{Name: "node-b", Incarnation: "inc-node-b", Capacity: 4}}
	for range 10 {
		_, err := kb.Balance(ctx, members, time.Hour, false)
		require.NoError(t, err)
		require.NoError(t, kb.Renew(ctx))
		time.Sleep(20 * time.Millisecond) // real time for an early release write to land
	}
}

// A call in flight outlives several heartbeats of its owner, which was
// asked to hand the task off: the task must not move (and node-b must not
// call) before that call ended.
func TestHandoffWaitsForTheCallAcrossHeartbeats(t *testing.T) {
	ctx, s, c, ka, calls := slowCallInFlight(t)
	kb := newLongLeaseKeeper(s, calls.base, c, "node-b")
	require.NoError(t, s.NodeCheckIn(ctx, store.NodeState{Name: "node-b", Incarnation: "inc-node-b", Capacity: 4, Free: 4}, time.Hour))

	requestHandoff(ctx, t, s, "slow")
	for hb := range 3 {
		c.Advance(time.Second)
		require.NoError(t, ka.Renew(ctx))
		slotOwnerTries(ctx, t, kb)
		require.Empty(t, calls.overlaps(), "heartbeat %d: two owners called at once", hb+1)
		task, err := s.TaskGet(ctx, "slow")
		require.NoError(t, err)
		require.Equal(t, "node-a", task.OwnerNode, "heartbeat %d: the task moved while its call ran", hb+1)
		require.True(t, task.Held, "heartbeat %d: the lease of a task being handed off is still renewed", hb+1)
	}
	calls.letGo()
	require.Eventually(t, func() bool {
		slotOwnerTries(ctx, t, kb)
		return len(calls.nodes()) == 2
	}, 10*time.Second, 10*time.Millisecond, "the task moves once its call ended")
	require.Equal(t, []string{"node-a", "node-b"}, calls.nodes())
	require.Empty(t, calls.overlaps())
	_, err := ka.Release(ctx)
	require.NoError(t, err)
	_, err = kb.Release(ctx)
	require.NoError(t, err)
}

// The same for a delete: it is confirmed only after the call in flight.
func TestDeleteWaitsForTheCallAcrossHeartbeats(t *testing.T) {
	ctx, s, c, k, calls := slowCallInFlight(t)

	state, err := s.TaskRequestDelete(ctx, "slow")
	require.NoError(t, err)
	require.Equal(t, store.TaskDeleting, state)
	for hb := range 3 {
		c.Advance(time.Second)
		require.NoError(t, k.Renew(ctx))
		for range 10 {
			task, err := s.TaskGet(ctx, "slow")
			require.NoError(t, err)
			require.Equal(t, store.TaskDeleting, task.State, "heartbeat %d: deleted while its call ran", hb+1)
			require.True(t, task.Held, "heartbeat %d: the lease of a task being deleted is still renewed", hb+1)
			time.Sleep(20 * time.Millisecond)
		}
	}
	calls.letGo()
	require.Eventually(t, func() bool {
		task, err := s.TaskGet(ctx, "slow")
		return err == nil && task.State == store.TaskDeleted
	}, 10*time.Second, 10*time.Millisecond, "deleted once its call ended")
	require.Equal(t, []string{"node-a"}, calls.nodes())
	_, err = k.Release(ctx)
	require.NoError(t, err)
}

// A graceful stop while a handoff is pending waits for the call too, and
// gives the task up only after it.
func TestReleaseDuringAPendingHandoffWaitsForTheCall(t *testing.T) {
	ctx, s, c, k, calls := slowCallInFlight(t)
	requestHandoff(ctx, t, s, "slow")
	for range 2 {
		c.Advance(time.Second)
		require.NoError(t, k.Renew(ctx))
	}

	released := make(chan error, 1)
	go func() {
		_, err := k.Release(ctx)
		released <- err
	}()
	for range 10 {
		select {
		case err := <-released:
			t.Fatalf("Release returned (%v) while a call was in flight", err)
		case <-time.After(20 * time.Millisecond):
		}
		task, err := s.TaskGet(ctx, "slow")
		require.NoError(t, err)
		require.Equal(t, store.TaskRunning, task.State, "given up while its call ran")
		require.Equal(t, "node-a", task.OwnerNode, "given up while its call ran")
	}
	calls.letGo()
	select {
	case err := <-released:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Release did not return once the call ended")
	}
	task, err := s.TaskGet(ctx, "slow")
	require.NoError(t, err)
	require.Equal(t, store.TaskCreated, task.State)
	require.Equal(t, []string{"node-a"}, calls.nodes())
}

// A worker stopped because its lease could not be confirmed keeps its call
// in flight (that call's deadline is within the lease); when the renewals
// come back, the restarted worker waits for that call before its own.
func TestRestartedWorkerWaitsForThePreviousCall(t *testing.T) {
	ctx, _, c, k, calls := slowCallInFlight(t)

	// The renewals fail until less than a heartbeat and the margin of the
	// 30s lease is left: the worker is stopped.
	failed, fail := context.WithCancel(ctx)
	fail()
	c.Advance(29 * time.Second)
	require.Error(t, k.Renew(failed))
	require.Empty(t, k.Held())
	// The database answers again, the task is still this node's.
	require.NoError(t, k.Renew(ctx))
	require.Equal(t, []string{"slow"}, k.Held())
	select {
	case n := <-calls.started:
		t.Fatalf("%s called again while its previous call ran: %v", n, calls.overlaps())
	case <-time.After(200 * time.Millisecond):
	}
	calls.letGo()
	require.Equal(t, "node-a", calls.next(t), "the restarted worker calls once the previous call ended")
	require.Empty(t, calls.overlaps())
	_, err := k.Release(ctx)
	require.NoError(t, err)
}

// A task lost while being handed off (its lease ran out and the farm gave
// it to another node) has its call cut, and the pending release does not
// touch the new owner's task.
func TestTaskLostWhileHandedOffStaysWithItsNewOwner(t *testing.T) {
	ctx, s, _, k, _ := slowCallInFlight(t)
	requestHandoff(ctx, t, s, "slow")
	require.NoError(t, k.Renew(ctx))
	require.Equal(t, 1, k.Stats().Stopping)

	_, err := s.TasksRenew(ctx, "inc-node-a", store.Lease(-time.Second)) // the lease ran out
	require.NoError(t, err)
	assign(t, s, "slow", "node-b")
	require.NoError(t, k.Renew(ctx))
	require.Eventually(t, func() bool { return k.Stats().Stopping == 0 }, 10*time.Second, 10*time.Millisecond,
		"the lost task's call is cut and its give-up ends")
	require.Equal(t, int64(1), k.Stats().Lost)
	task, err := s.TaskGet(ctx, "slow")
	require.NoError(t, err)
	require.Equal(t, store.TaskRunning, task.State)
	require.Equal(t, "node-b", task.OwnerNode)
	require.Equal(t, int64(2), task.Token)
	_, err = k.Release(ctx)
	require.NoError(t, err)
}

// A task whose owner's lease ran out never goes back to the owner that
// stopped renewing (frozen, or cut off from the database), though the
// registry still counts it live and it now holds the fewest tasks.
func TestBalanceNeverGivesAnOrphanBackToTheOwnerThatStoppedRenewing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		k := newKeeper(s, &url.URL{Scheme: "http", Host: "localhost"}, clock.NewFake(t0), "node-a")
		members := orphansOfAStoppedOwner(t, s)
		res, err := k.Balance(ctx, members, time.Hour, false)
		require.NoError(t, err)
		require.Equal(t, 3, res.Assigned)
		got := owners(t, s)
		require.Zero(t, got["node-b"], "not back to the node that stopped renewing: %v", got)
		require.Equal(t, map[string]int{"node-a": 2, "node-c": 1, "node-d": 1}, got, "the emptiest of the others")
		require.Equal(t, []string{"inc-node-d"}, res.GivenTo, "who may be told at once")
	})
}

// Where no note can wake a node between its turns (SQL Server), the
// balancing node takes a dead owner's tasks itself, so they are called
// again at once; a new task still goes to the emptiest member.
func TestBalanceTakesOverOrphansWhereNodesCannotBeWoken(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		k := jobs.NewKeeper(s, &jobs.Invoker{Base: &url.URL{Scheme: "http", Host: "localhost"}}, jobs.TaskOptions{
			Node: "node-a", Incarnation: "inc-node-a", Lease: 3 * time.Second, Heartbeat: time.Second,
			Margin: 500 * time.Millisecond, Timeout: 5 * time.Second, BackoffMax: time.Minute, MinHold: 10 * time.Second,
			Clock: clock.NewFake(t0), Rand: func() float64 { return 0 }, TakeOverOrphans: true})
		members := orphansOfAStoppedOwner(t, s)
		require.NoError(t, s.TaskInsert(ctx, store.NewTask{Name: "zz-new", Endpoint: "/t", Method: "POST", Every: time.Second}))
		res, err := k.Balance(ctx, members, time.Hour, false)
		require.NoError(t, err)
		require.Equal(t, 4, res.Assigned)
		require.Equal(t, 3, res.AssignedToMe, "node-b's three tasks")
		require.Equal(t, map[string]int{"node-a": 3, "node-c": 1, "node-d": 1}, owners(t, s))
		task, err := s.TaskGet(ctx, "zz-new") // balanced after t0-t2, which are by name
		require.NoError(t, err)
		require.Equal(t, "node-d", task.OwnerNode, "a task nobody held goes to the emptiest")
	})
}

// orphansOfAStoppedOwner sets up four live nodes: node-b held three tasks
// (t0-t2) and stopped renewing; node-c holds one (t3) and renews; node-a
// and node-d hold none. It returns the members.
func orphansOfAStoppedOwner(t *testing.T, s *store.Store) []jobs.Member {
	ctx := context.Background()
	for _, n := range []string{"node-a", "node-b", "node-c", "node-d"} {
		require.NoError(t, s.NodeCheckIn(ctx, store.NodeState{Name: n, Incarnation: "inc-" + n, Capacity: 4}, time.Hour))
	}
	for i := range 4 {
		name := "t" + strconv.Itoa(i)
		require.NoError(t, s.TaskInsert(ctx, store.NewTask{Name: name, Endpoint: "/t", Method: "POST", Every: time.Second}))
		owner, lease := "node-b", time.Millisecond
		if i == 3 {
			owner, lease = "node-c", time.Hour
		}
		ok, err := s.TaskAssignIfUnowned(ctx, name, "inc-"+owner, owner, store.Lease(lease), time.Hour)
		require.NoError(t, err)
		require.True(t, ok)
	}
	time.Sleep(10 * time.Millisecond) // the database clock passes node-b's leases
	var members []jobs.Member
	for _, n := range []string{"node-a", "node-b", "node-c", "node-d"} {
		members = append(members, jobs.Member{Name: n, Incarnation: "inc-" + n, Capacity: 4})
	}
	return members
}

// Uneven is the balancer's move test, for a turn to tell whether balancing
// has anything to do.
func TestUnevenIsTheBalancersMoveTest(t *testing.T) {
	ms := []jobs.Member{{Name: "a", Incarnation: "a", Capacity: 4}, {Name: "b", Incarnation: "b", Capacity: 4}}
	require.False(t, jobs.Uneven(nil, nil))
	require.False(t, jobs.Uneven(ms, map[string]int{"a": 1, "b": 0}), "moving the one task would only swap")
	require.False(t, jobs.Uneven(ms, map[string]int{"a": 2, "b": 1}))
	require.True(t, jobs.Uneven(ms, map[string]int{"a": 2, "b": 0}))
	ms[1].Capacity = 8 // per capacity: 2/4 > (1+1)/8
	require.True(t, jobs.Uneven(ms, map[string]int{"a": 2, "b": 1}))
}
