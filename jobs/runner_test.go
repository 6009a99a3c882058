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

var t0 = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

type seen struct {
	mu    sync.Mutex
	calls []http.Header
	paths []string
}

func (s *seen) add(r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, r.Header.Clone())
	s.paths = append(s.paths, r.URL.Path)
}

func (s *seen) all() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.calls...)
}

// endpoint answers each path with its status; /block waits until the call
// is cancelled.
func endpoint(t *testing.T, rec *seen) *url.URL {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		switch r.URL.Path {
		case "/block":
			select {
			case <-r.Context().Done():
			case <-stop: // the test is over, failed or not
			}
			return
		case "/slow":
			time.Sleep(200 * time.Millisecond) // longer than the job's 20ms timeout
		}
		code, err := strconv.Atoi(r.URL.Query().Get("status"))
		if err != nil {
			code = 200
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })
	u, _ := url.Parse(srv.URL)
	return u
}

func newRunner(t *testing.T, s *store.Store, base *url.URL, c clock.Clock, capacity int) *jobs.Runner {
	opts := jobs.Options{Node: "node-a", Incarnation: "inc-a", Capacity: capacity,
		Lease: 3 * time.Second, Timeout: 5 * time.Second, Backoff: 0, BackoffMax: 0, Clock: c, Rand: func() float64 { return 0 }}
	if s.Dialect().Name() == "sqlserver" {
		// The T-SQL test server parses a statement afresh on each new
		// connection, seconds on a busy machine: more than a 3 s lease's
		// statement deadline. Beside the e2e suite's SQL Server tests (the
		// examples' among them) one count took over 15 s in CI; these
		// tests judge what happens, not how fast.
		opts.StatementTimeout = time.Minute
	}
	return jobs.NewRunner(s, &jobs.Invoker{Base: base}, opts)
}

func enqueue(t *testing.T, s *store.Store, endpoint string, maxAttempts int) int64 {
	id, err := jobs.Enqueue(context.Background(), s, store.NewJob{Endpoint: endpoint, Payload: []byte(`{"a":1}`), MaxAttempts: maxAttempts})
	require.NoError(t, err)
	return id
}

func get(t *testing.T, s *store.Store, id int64) store.Job {
	j, err := s.JobGet(context.Background(), id)
	require.NoError(t, err)
	return j
}

func TestRunOutcomes(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		rec := &seen{}
		r := newRunner(t, s, endpoint(t, rec), clock.NewFake(t0), 16)
		ok := enqueue(t, s, "/ok", 3)
		missing := enqueue(t, s, "/missing?status=404", 3)
		down := enqueue(t, s, "/down?status=500", 1)
		retry := enqueue(t, s, "/busy?status=503", 3)
		slow, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/slow", MaxAttempts: 1, Timeout: 20 * time.Millisecond})
		require.NoError(t, err)

		res, err := r.Poll(ctx, alone(16))
		require.NoError(t, err)
		require.Equal(t, 5, res.Claimed)
		r.Wait()

		require.Equal(t, store.StateDone, get(t, s, ok).State)
		j := get(t, s, missing)
		require.Equal(t, store.StateFailed, j.State, "a 404 fails at once")
		require.Equal(t, 404, j.LastStatus)
		j = get(t, s, down)
		require.Equal(t, store.StateDead, j.State, "a 500 on the last attempt is dead")
		require.Equal(t, 500, j.LastStatus)
		require.Contains(t, j.LastError, "500")
		j = get(t, s, slow)
		require.Equal(t, store.StateDead, j.State)
		require.Contains(t, j.LastError, "timed out")
		j = get(t, s, retry)
		require.Equal(t, store.StateReady, j.State, "a 503 with attempts left is retried")
		require.Equal(t, 1, j.Attempt)

		// The retry is due at once (zero backoff): same idempotency key,
		// next attempt, new token.
		res, err = r.Poll(ctx, alone(16))
		require.NoError(t, err)
		require.Equal(t, 1, res.Claimed)
		r.Wait()
		var busy []http.Header
		for _, h := range rec.all() {
			if h.Get("X-Slotpoller-Job") == strconv.FormatInt(retry, 10) {
				busy = append(busy, h)
			}
		}
		require.Len(t, busy, 2)
		require.Equal(t, busy[0].Get("Idempotency-Key"), busy[1].Get("Idempotency-Key"))
		require.NotEmpty(t, busy[0].Get("Idempotency-Key"))
		require.Equal(t, "1", busy[0].Get("X-Slotpoller-Attempt"))
		require.Equal(t, "2", busy[1].Get("X-Slotpoller-Attempt"))
		require.Equal(t, "1", busy[0].Get("X-Slotpoller-Token"))
		require.Equal(t, "2", busy[1].Get("X-Slotpoller-Token"))
		require.Equal(t, "node-a", busy[1].Get("X-Slotpoller-Node"))
		require.NotEmpty(t, busy[1].Get("X-Slotpoller-Deadline"))
		st := r.Stats()
		require.Equal(t, int64(1), st.Succeeded)
		require.Equal(t, int64(1), st.Failed)
		require.Equal(t, int64(2), st.Dead)
		require.Equal(t, int64(2), st.Retried)
	})
}

func TestFairShare(t *testing.T) {
	cases := []struct {
		name                                     string
		load                                     store.QueueLoad
		mine, capacity, farmCapacity, free, want int
	}{
		{"alone takes all it can", store.QueueLoad{Due: 10}, 0, 16, 16, 16, 10},
		{"a third of a burst", store.QueueLoad{Due: 300}, 0, 100, 300, 100, 100},
		{"next poller counts the running share", store.QueueLoad{Due: 200, Running: 100}, 0, 100, 300, 100, 100},
		{"capped by free capacity", store.QueueLoad{Due: 300}, 0, 16, 48, 16, 16},
		{"already running its share", store.QueueLoad{Due: 3, Running: 6}, 6, 16, 48, 10, 0},
		{"weighted by capacity", store.QueueLoad{Due: 40}, 0, 30, 40, 30, 30},
		{"nothing due", store.QueueLoad{Running: 5}, 5, 16, 32, 11, 0},
		{"unknown farm counts as alone", store.QueueLoad{Due: 4}, 0, 8, 0, 8, 4},
		{"urgent jobs beat the share", store.QueueLoad{Due: 300, Urgent: 200}, 0, 100, 300, 250, 200},
		{"urgent jobs still capped by free", store.QueueLoad{Due: 300, Urgent: 300}, 0, 100, 300, 120, 120},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, jobs.FairShare(c.load, c.mine, c.capacity, c.farmCapacity, c.free))
		})
	}
}

// A turn counts due jobs only up to LoadLimit. A count at the limit must
// leave every node all it has free now, as any deeper queue would, and at
// least three rounds of its calls more to refill with before the farm has
// heard of the backlog (a deeper count gave more). A limit below the
// farm's capacity would leave nodes idle in a deep backlog; this fails if
// it is ever lowered so.
func TestACountAtTheLoadLimitFillsEveryNode(t *testing.T) {
	for _, capacity := range []int{1, 16, 1000} {
		for _, nodes := range []int{1, 4, 64, 1000} {
			farm := capacity * nodes
			limit := jobs.LoadLimit(farm, capacity)
			require.GreaterOrEqual(t, limit, jobs.MinLoadCount)
			for _, running := range []int{0, farm / 2, farm} {
				for _, mine := range []int{0, capacity / 2, capacity} {
					load := store.QueueLoad{Due: limit, Running: running}
					for _, ahead := range []int{capacity, farm} {
						require.Equal(t, capacity-mine, jobs.FairShare(load, mine, capacity, ahead, capacity-mine),
							"capacity %d, %d nodes, %d running, %d mine, %d ahead", capacity, nodes, running, mine, ahead)
					}
					// The refill budget: the share against the whole farm
					// beyond what the node runs and claims now.
					share := jobs.CapacityShare(load, mine, capacity, farm)
					require.GreaterOrEqual(t, share-(capacity-mine), 3*capacity,
						"capacity %d, %d nodes, %d mine", capacity, nodes, mine)
				}
			}
		}
	}
	require.Equal(t, jobs.MinLoadCount, jobs.LoadLimit(64, 16), "a small farm's burst of up to MinLoadCount is counted exactly")
}

// alone is a turn of a node that is the whole farm; its next poll is a
// slot away, so every due job is urgent.
func alone(capacity int) jobs.Turn {
	return jobs.Turn{FarmCapacity: capacity, NextPoll: time.Second, StartWindow: time.Second}
}

func TestPollTakesOnlyItsShareWhenTheNextPollIsInTime(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	rec := &seen{}
	r := newRunner(t, s, endpoint(t, rec), clock.NewFake(t0), 100)
	for range 30 {
		enqueue(t, s, "/ok", 1)
	}
	// A widened rotation of 3: the next node polls a third of a slot from
	// now, well inside the jobs' start window.
	res, err := r.Poll(context.Background(), jobs.Turn{FarmCapacity: 300, NextPoll: 333 * time.Millisecond, StartWindow: time.Second})
	require.NoError(t, err)
	require.Equal(t, 10, res.Claimed, "a third of the farm's capacity takes a third")
	require.Equal(t, 20, res.Left)
	r.Wait()
}

func TestPollTakesEveryJobThatWouldMissItsWindow(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	rec := &seen{}
	r := newRunner(t, s, endpoint(t, rec), clock.NewFake(t0), 100)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	late := now.Add(-2 * time.Second)
	for range 30 {
		_, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/ok", MaxAttempts: 1, RunAt: &late})
		require.NoError(t, err)
	}
	res, err := r.Poll(ctx, jobs.Turn{FarmCapacity: 300, NextPoll: 333 * time.Millisecond, StartWindow: time.Second})
	require.NoError(t, err)
	require.Equal(t, 30, res.Claimed, "jobs already 2s late cannot wait for the next poller")
	r.Wait()

	// The next slot is a whole slot away: jobs due now would start more
	// than a slot late if left, so this poller takes them all.
	for range 30 {
		enqueue(t, s, "/ok", 1)
	}
	res, err = r.Poll(ctx, jobs.Turn{FarmCapacity: 300, NextPoll: time.Second, StartWindow: time.Second})
	require.NoError(t, err)
	require.Equal(t, 30, res.Claimed)
	r.Wait()
}

func TestLeaseLostCancelsTheCallAndFencesTheResult(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		rec := &seen{}
		c := clock.NewFake(t0)
		r := newRunner(t, s, endpoint(t, rec), c, 4)
		id := enqueue(t, s, "/block", 3)
		_, err := r.Poll(ctx, alone(4))
		require.NoError(t, err)
		require.Equal(t, 1, r.Running())

		// The farm takes the job away (as after a freeze past the lease) and
		// another node claims it under a new token.
		_, err = s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {jobs} SET lease_until = {now+?} WHERE id = ?`), -1000, id)
		require.NoError(t, err)
		_, err = s.JobsReclaimExpired(ctx, time.Time{})
		require.NoError(t, err)
		other, err := s.JobsClaim(ctx, "inc-b", "node-b", 1, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, other, 1)

		c.Advance(time.Second)
		r.RenewOnce(ctx)
		r.Wait() // returns only because the blocked call was cancelled
		require.Equal(t, int64(1), r.Stats().LeasesLost)
		j := get(t, s, id)
		require.Equal(t, store.StateRunning, j.State)
		require.Equal(t, "node-b", j.OwnerNode, "the old owner's result must not overwrite the new claim")
		require.Equal(t, other[0].Token, j.Token)
	})
}

func TestUnconfirmedLeaseCancelsInTime(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	rec := &seen{}
	c := clock.NewFake(t0)
	r := newRunner(t, s, endpoint(t, rec), c, 4)
	enqueue(t, s, "/block", 3)
	_, err := r.Poll(ctx, alone(4))
	require.NoError(t, err)
	called(t, rec, 1)

	require.NoError(t, s.Close()) // the database is gone
	c.Advance(time.Second)
	r.RenewOnce(ctx)
	c.Advance(time.Second)
	r.RenewOnce(ctx)
	// The claim holds the job for its call's length (the 5 s timeout) and
	// the margin, lease/12: 5.25 s.
	c.Advance(2999 * time.Millisecond)
	require.Equal(t, int64(0), r.Stats().Cancelled, "failed renewals cancel nothing while the hold lasts")
	c.Advance(time.Millisecond) // the margin before the hold ends
	r.Wait()                    // returns only because the call was cut off, before its hold ran out
	require.Equal(t, int64(1), r.Stats().Cancelled)
	require.Equal(t, 0, r.Running())
}

func TestOrphanedClaimIsReleasedNotRenewedForEver(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		rec := &seen{}
		c := clock.NewFake(t0)
		r := newRunner(t, s, endpoint(t, rec), c, 4)
		enqueue(t, s, "/block", 3)
		_, err := r.Poll(ctx, alone(4))
		require.NoError(t, err)
		// A claim under this node's incarnation whose answer never arrived
		// (the connection dropped after the commit).
		orphan := enqueue(t, s, "/ok", 3)
		lost, err := s.JobsClaim(ctx, "inc-a", "node-a", 1, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, lost, 1)

		c.Advance(time.Second)
		r.RenewOnce(ctx)
		require.Eventually(t, func() bool { return get(t, s, orphan).State == store.StateReady }, 5*time.Second, 10*time.Millisecond,
			"the orphan goes back to the queue")
		require.Equal(t, 1, r.Running(), "the tracked call is untouched")
		r.Drain(0)
	})
}

func TestRenewalsKeepLongCallsAlive(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		rec := &seen{}
		c := clock.NewFake(t0)
		r := newRunner(t, s, endpoint(t, rec), c, 4)
		id := enqueue(t, s, "/block", 3)
		_, err := r.Poll(ctx, alone(4))
		require.NoError(t, err)
		// Shorten the lease so that a renewal visibly moves it, even on a
		// millisecond clock.
		_, err = s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {jobs} SET lease_until = {now+?} WHERE id = ?`), 500, id)
		require.NoError(t, err)
		before := get(t, s, id).LeaseUntil
		for range 5 {
			c.Advance(time.Second)
			r.RenewOnce(ctx)
		}
		require.Equal(t, 1, r.Running())
		require.Equal(t, int64(5), r.Stats().Renewals)
		after := get(t, s, id).LeaseUntil
		require.True(t, after.After(*before), "lease moved from %v to %v", before, after)
		r.Drain(0)
	})
}

func TestDrainReleasesUnfinishedJobs(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		rec := &seen{}
		c := clock.NewFake(t0)
		r := newRunner(t, s, endpoint(t, rec), c, 4)
		id := enqueue(t, s, "/block", 3)
		_, err := r.Poll(ctx, alone(4))
		require.NoError(t, err)
		done := make(chan struct{})
		go func() { r.Drain(2 * time.Second); close(done) }()
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, c.BlockUntil(tctx, 2)) // the call's lease watchdog and the drain's timer
		c.Advance(2 * time.Second)                // within the lease: the drain, not the watchdog, cuts the call off
		<-done
		j := get(t, s, id)
		require.Equal(t, store.StateReady, j.State, "an unfinished job goes back to the queue")
		require.Equal(t, 0, j.Attempt, "the interrupted attempt is not counted")
		require.Equal(t, int64(1), r.Stats().Released)
	})
}

func TestEnqueueRefusesBadJobs(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	for _, ep := range []string{"http://evil.example/x", "//evil/x", "/a/../../etc", "relative"} {
		_, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: ep, MaxAttempts: 1})
		require.Error(t, err, ep)
	}
	_, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/x", Method: "TRACE", MaxAttempts: 1})
	require.ErrorContains(t, err, "TRACE")
	_, err = jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/x", MaxAttempts: 0})
	require.ErrorContains(t, err, "max attempts")
	counts, err := s.JobCounts(ctx)
	require.NoError(t, err)
	require.Empty(t, counts, "nothing refused reached the queue")
}

func TestNoCallOnALeaseThatRanOutBeforeTheCall(t *testing.T) {
	s, f := openFaulty(t)
	ctx := context.Background()
	rec := &seen{}
	c := clock.NewFake(t0)
	r := jobs.NewRunner(s, &jobs.Invoker{Base: endpoint(t, rec)}, jobs.Options{Node: "node-a", Incarnation: "inc-a", Capacity: 4,
		Lease: 3 * time.Second, Timeout: time.Second, Clock: c})
	// The node freezes while its claim's answer is on the way, past the
	// claim's hold (the lease).
	f.set(func(_ context.Context, query string) fault {
		if !isClaim(query) {
			return fault{}
		}
		return fault{hold: func() { c.Advance(4 * time.Second) }}
	})
	id := enqueue(t, s, "/ok", 3)
	_, err := r.Poll(ctx, alone(4))
	require.NoError(t, err)
	r.Wait()
	require.Empty(t, rec.all(), "no call without a live lease")
	j := get(t, s, id)
	require.Equal(t, store.StateReady, j.State, "given back unrun")
	require.Equal(t, 0, j.Attempt)
}
