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

	"github.com/slotpoller/slotpoller/callproto"
	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// timeoutOf is the X-Slotpoller-Timeout-Ms of a call.
func timeoutOf(t *testing.T, h http.Header) time.Duration {
	t.Helper()
	ms, err := strconv.ParseInt(h.Get(callproto.HeaderTimeoutMs), 10, 64)
	require.NoError(t, err, "X-Slotpoller-Timeout-Ms %q", h.Get(callproto.HeaderTimeoutMs))
	return time.Duration(ms) * time.Millisecond
}

// A job's call may run until the deadline its endpoint is told, and a node
// that froze cannot cut it off: the claim must keep the job from every
// other node until then. Each claimed row is held for the longer of the
// lease and its call's length plus the margin, by the database clock, at
// the claim and at every renewal; the call is told no later a deadline.
func TestAJobIsHeldUntilItsCallsDeadline(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		rec := &seen{}
		c := clock.NewFake(t0)
		r := newRunner(t, s, endpoint(t, rec), c, 4) // lease 3s (margin 250ms), timeout 5s
		long, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/block", MaxAttempts: 3, Timeout: time.Minute})
		require.NoError(t, err)
		short, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/block", MaxAttempts: 3, Timeout: time.Second})
		require.NoError(t, err)
		plain := enqueue(t, s, "/block", 3) // the node's 5 s
		_, err = r.Poll(ctx, alone(4))
		require.NoError(t, err)
		called(t, rec, 3)

		want := map[int64]struct{ call, hold time.Duration }{
			long:  {time.Minute, time.Minute + 250*time.Millisecond},
			short: {time.Second, 3 * time.Second},
			plain: {5 * time.Second, 5*time.Second + 250*time.Millisecond},
		}
		check := func(when string) {
			for id, w := range want {
				j := get(t, s, id)
				require.Equal(t, store.StateRunning, j.State)
				// Both ends on the database clock, written by one statement.
				held := j.LeaseUntil.Sub(*j.Started)
				if when == "renewed" {
					held = j.LeaseUntil.Sub(nowOf(t, s))
				}
				require.InDelta(t, w.hold.Seconds(), held.Seconds(), 1.5, "job %d %s: held %v, want %v", id, when, held, w.hold)
			}
		}
		check("claimed")
		for _, h := range rec.all() {
			id, err := strconv.ParseInt(h.Get(callproto.HeaderJob), 10, 64)
			require.NoError(t, err)
			require.Equal(t, want[id].call, timeoutOf(t, h), "job %d: the call gets its whole timeout", id)
		}
		c.Advance(time.Second)
		require.NoError(t, r.RenewOnce(ctx))
		check("renewed")
		r.Drain(0)
	})
}

func nowOf(t *testing.T, s *store.Store) time.Time {
	t.Helper()
	now, err := s.Now(context.Background())
	require.NoError(t, err)
	return now
}

// A node that freezes after its claim committed and before it calls (its
// answer held up, a paused VM) calls with what is left of the claim's
// hold, not with the whole timeout: the deadline the endpoint is told
// never lies past the hold, however long the freeze.
func TestAFrozenNodeCallsWithWhatIsLeftOfItsHold(t *testing.T) {
	s, f := openFaulty(t)
	ctx := context.Background()
	rec := &seen{}
	c := clock.NewFake(t0)
	r := newRunner(t, s, endpoint(t, rec), c, 4) // lease 3s, timeout 5s: held 5.25s
	f.set(func(_ context.Context, query string) fault {
		if !isClaim(query) {
			return fault{}
		}
		return fault{hold: func() { c.Advance(2 * time.Second) }}
	})
	enqueue(t, s, "/ok", 3)
	_, err := r.Poll(ctx, alone(4))
	require.NoError(t, err)
	r.Wait()
	calls := rec.all()
	require.Len(t, calls, 1)
	// 5.25 s of hold from the claim's send, 2 s frozen, the margin kept.
	require.Equal(t, 3*time.Second, timeoutOf(t, calls[0]))
}

// The invoker reads a call's budget after it takes the call's start, so
// that a freeze between the two shortens the deadline, and a budget spent
// before the call is sent sends nothing.
func TestInvokeKeepsACallWithinItsBudget(t *testing.T) {
	var mu sync.Mutex
	var got []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	base, _ := url.Parse(srv.URL)
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	inv := &jobs.Invoker{Base: base, Now: func() time.Time { return at }}
	res := inv.Invoke(context.Background(), jobs.Call{JobID: 1, Token: 1, Attempt: 1, Endpoint: "/x", Timeout: time.Minute,
		Budget: func() time.Duration { return 1500 * time.Millisecond }})
	require.Equal(t, jobs.Succeeded, res.Verdict, res.Err)
	res = inv.Invoke(context.Background(), jobs.Call{JobID: 2, Token: 1, Attempt: 1, Endpoint: "/x", Timeout: time.Minute,
		Budget: func() time.Duration { return 0 }})
	require.Equal(t, jobs.Retry, res.Verdict)
	require.Contains(t, res.Err, "hold ran out")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 1, "a spent budget sends nothing")
	require.Equal(t, 1500*time.Millisecond, timeoutOf(t, got[0]))
	require.Equal(t, at.Add(1500*time.Millisecond).Format(callproto.DeadlineFormat), got[0].Get(callproto.HeaderDeadline))
}

// A task that declares how long its calls may run is held for that, the
// margin and a heartbeat (so that a call started just before a renewal
// still gets all of it), and its calls get the whole timeout; a task that
// declares nothing is held for the TTL and its calls fit in the lease.
func TestATaskDeclaringItsCallLengthIsHeldForIt(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var mu sync.Mutex
		timeouts := map[string]time.Duration{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := timeouts[r.Header.Get(callproto.HeaderTask)]; !ok {
				timeouts[r.Header.Get(callproto.HeaderTask)] = timeoutOf(t, r.Header)
			}
		}))
		t.Cleanup(srv.Close)
		base, _ := url.Parse(srv.URL)
		require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "feed", Endpoint: "/feed", Every: time.Hour, Timeout: 10 * time.Second}))
		require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "tick", Endpoint: "/tick", Every: time.Hour}))
		c := clock.NewFake(t0)
		k := newKeeper(s, base, c, "node-a") // ttl 3s, heartbeat 1s, margin 500ms, timeout 5s
		require.NoError(t, s.NodeCheckIn(ctx, store.NodeState{Name: "node-a", Incarnation: "inc-node-a", Capacity: 4, Free: 4}, time.Hour))
		// A hold is read as lease_until less the database's now at the
		// read, which comes after the write by however long the database
		// took (seconds on the loaded T-SQL test server): it lies between
		// the hold less the time since before the write, and the hold.
		requireHeld := func(name string, want time.Duration, since time.Time, what string) {
			t.Helper()
			var ms int64
			require.NoError(t, s.DB().QueryRowContext(ctx, store.Expand(s.Dialect(),
				`SELECT `+s.Dialect().MillisBetween(s.Dialect().Now(), "lease_until")+` FROM {tasks} WHERE name = ?`), name).Scan(&ms))
			now, err := s.Now(ctx)
			require.NoError(t, err)
			held, slack := time.Duration(ms)*time.Millisecond, 500*time.Millisecond
			require.LessOrEqual(t, held, want+slack, "%s %s: held %v", what, name, held)
			require.GreaterOrEqual(t, held, want-now.Sub(since)-slack, "%s %s: held %v, %v after the write began", what, name, held, now.Sub(since))
		}
		before, err := s.Now(ctx)
		require.NoError(t, err)
		_, err = k.Balance(ctx, []jobs.Member{{Name: "node-a", Incarnation: "inc-node-a", Capacity: 4}}, time.Hour, false)
		require.NoError(t, err)
		requireHeld("feed", 11500*time.Millisecond, before, "assigned: 10 s calls, the margin and a heartbeat;")
		requireHeld("tick", 3*time.Second, before, "assigned: the TTL;")
		before, err = s.Now(ctx)
		require.NoError(t, err)
		require.NoError(t, k.Renew(ctx))
		requireHeld("feed", 11500*time.Millisecond, before, "renewed")
		requireHeld("tick", 3*time.Second, before, "renewed")
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(timeouts) == 2
		}, 10*time.Second, 10*time.Millisecond, "both tasks called")
		mu.Lock()
		require.Equal(t, 10*time.Second, timeouts["feed"], "the declared call length, whole")
		require.Equal(t, 2500*time.Millisecond, timeouts["tick"], "within the TTL's lease, less the margin")
		mu.Unlock()
		_, err = k.Release(ctx)
		require.NoError(t, err)
	})
}

// A stop waits for task calls only as long as it can. A call of a task
// that declares long calls and is still running then is cut here, and its
// task is not given back: its endpoint may work on until the deadline it
// was told, so the task moves only when its hold ends. The other tasks are
// given back at once.
func TestReleaseLeavesATaskWhoseCallRunsOnHeldUntilItsHoldEnds(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		started := make(chan string, 10)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			started <- r.Header.Get(callproto.HeaderTask)
			if r.URL.Path == "/long" {
				<-r.Context().Done() // works until the caller goes away
			}
		}))
		t.Cleanup(srv.Close)
		base, _ := url.Parse(srv.URL)
		require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "long", Endpoint: "/long", Every: time.Hour, Timeout: time.Minute}))
		require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "short", Endpoint: "/short", Every: time.Hour}))
		k := newKeeper(s, base, clock.NewFake(t0), "node-a")
		require.NoError(t, s.NodeCheckIn(ctx, store.NodeState{Name: "node-a", Incarnation: "inc-node-a", Capacity: 4, Free: 4}, time.Hour))
		_, err := k.Balance(ctx, []jobs.Member{{Name: "node-a", Incarnation: "inc-node-a", Capacity: 4}}, time.Hour, false)
		require.NoError(t, err)
		require.NoError(t, k.Renew(ctx))
		seen := map[string]bool{}
		for len(seen) < 2 {
			select {
			case name := <-started:
				seen[name] = true
			case <-time.After(10 * time.Second):
				t.Fatalf("tasks called: %v", seen)
			}
		}

		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		begun := time.Now()
		released, err := k.Release(rctx)
		require.NoError(t, err)
		require.Less(t, time.Since(begun), 3*time.Second, "the stop's bound holds")
		require.EqualValues(t, 1, released, "only the task whose call ended")
		long, err := s.TaskGet(ctx, "long")
		require.NoError(t, err)
		require.Equal(t, "node-a", long.OwnerNode, "held until its hold ends")
		require.True(t, long.Held)
		short, err := s.TaskGet(ctx, "short")
		require.NoError(t, err)
		require.Equal(t, store.TaskCreated, short.State, "given back")
	})
}
