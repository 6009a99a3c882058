package jobs_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// holdEndpoint answers 200 once the test lets go (or the call is cut off).
func holdEndpoint(t *testing.T) (base *url.URL, letGo func()) {
	release := make(chan struct{})
	var once sync.Once
	letGo = func() { once.Do(func() { close(release) }) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
			w.WriteHeader(http.StatusOK)
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(letGo)
	base, _ = url.Parse(srv.URL)
	return base, letGo
}

// within fails the test unless done closes within a (real) few seconds.
func within(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal(what)
	}
}

// called waits until the endpoint has seen n calls: a call cut off
// before it started is given back unrun instead.
func called(t *testing.T, rec *seen, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return len(rec.all()) == n }, 5*time.Second, time.Millisecond)
}

func waitAll(r *jobs.Runner) <-chan struct{} {
	done := make(chan struct{})
	go func() { r.Wait(); close(done) }()
	return done
}

// A claim statement that stalls (a half-open connection, a lock wait, an
// exhausted pool) must neither hold up the renewal of the leases of calls
// in flight nor let those calls run past their lease.
func TestStalledClaimNeitherBlocksRenewalNorOutlivesTheLease(t *testing.T) {
	s, f := openFaulty(t)
	ctx := context.Background()
	rec := &seen{}
	c := clock.NewFake(t0)
	r := newRunner(t, s, endpoint(t, rec), c, 4) // lease 3s
	id := enqueue(t, s, "/block", 3)
	res, err := r.Poll(ctx, alone(4))
	require.NoError(t, err)
	require.Equal(t, 1, res.Claimed)
	called(t, rec, 1)
	enqueue(t, s, "/ok", 3)

	stalled := make(chan struct{})
	var once sync.Once
	unstall := make(chan struct{})
	t.Cleanup(func() { close(unstall) })
	f.set(func(ctx context.Context, query string) fault {
		if !isClaim(query) {
			return fault{}
		}
		once.Do(func() { close(stalled) })
		select {
		case <-ctx.Done():
			return fault{err: ctx.Err()}
		case <-unstall:
			return fault{err: errAnswerLost}
		}
	})
	polled := make(chan error, 1)
	go func() {
		_, err := r.Poll(context.Background(), alone(4)) // the poll loop's context has no deadline
		polled <- err
	}()
	within(t, stalled, "the second poll never sent its claim")

	c.Advance(time.Second)
	renewed := make(chan struct{})
	go func() { r.RenewOnce(ctx); close(renewed) }()
	within(t, renewed, "the lease renewal waited for the stalled claim")
	require.Equal(t, int64(1), r.Stats().Renewals)

	// No renewal confirms the lease any more: the call is cut off when
	// the hold confirmed at t0+1s (its 5 s timeout and the margin, lease/12:
	// until t0+6.25s) has the margin left.
	c.Advance(4999 * time.Millisecond)
	require.Equal(t, int64(0), r.Stats().Cancelled, "cut off before the margin")
	c.Advance(time.Millisecond)
	within(t, waitAll(r), "the call ran on past its lease")
	require.Equal(t, int64(1), r.Stats().Cancelled)
	require.Contains(t, get(t, s, id).LastError, "could not be confirmed")

	select {
	case err := <-polled:
		require.Error(t, err, "the stalled claim gives up at its deadline")
	case <-time.After(5 * time.Second):
		t.Fatal("the claim statement had no deadline")
	}
}

// A database that stalls for half a renewal interval (2.5s with the
// default 15s lease) makes one renewal fail; the leases confirmed before
// still have most of their time, so no call may be cut off.
func TestRenewalBlipCancelsNothing(t *testing.T) {
	s, f := openFaulty(t)
	ctx := context.Background()
	c := clock.NewFake(t0)
	base, letGo := holdEndpoint(t)
	r := newRunner(t, s, base, c, 4) // lease 3s: renewals every 1s
	a, b := enqueue(t, s, "/a", 1), enqueue(t, s, "/b", 1)
	res, err := r.Poll(ctx, alone(4))
	require.NoError(t, err)
	require.Equal(t, 2, res.Claimed)

	c.Advance(time.Second)
	r.RenewOnce(ctx) // confirms the leases until t0+4s
	require.Equal(t, int64(1), r.Stats().Renewals)

	c.Advance(time.Second)
	f.set(func(context.Context, string) fault {
		c.Advance(500 * time.Millisecond) // the statement hangs for half a tick...
		return fault{err: context.DeadlineExceeded}
	})
	r.RenewOnce(ctx) // ...and times out at t0+2.5s, 1.5s before the leases end
	f.set(nil)
	require.Equal(t, int64(0), r.Stats().Cancelled, "a blip shorter than the lease left cancels nothing")

	c.Advance(500 * time.Millisecond)
	r.RenewOnce(ctx)
	require.Equal(t, int64(2), r.Stats().Renewals)
	letGo()
	within(t, waitAll(r), "the calls did not finish")
	require.Equal(t, int64(0), r.Stats().Cancelled)
	require.Equal(t, store.StateDone, get(t, s, a).State)
	require.Equal(t, store.StateDone, get(t, s, b).State)
}

// isRenewal tells the job lease renewal apart from the other statements.
func isRenewal(query string) bool {
	return strings.Contains(query, "SET lease_until =") && strings.Contains(query, "WHERE owner = ?")
}

// Renewal rounds keep their cadence from each one's send time: a round
// that hung for its whole interval and failed is followed at once, not an
// interval later, when the lease confirmed two rounds back would be cut
// off by its watchdog (as a 15 s lease's calls were when one renewal
// timed out on a loaded server and a database blip came next). A round
// that failed fast is tried again within a quarter of the interval.
func TestFailedRenewalIsRetriedWithinTheInterval(t *testing.T) {
	s, f := openFaulty(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := clock.NewFake(t0)
	base, letGo := holdEndpoint(t)
	r := newRunner(t, s, base, c, 4) // lease 3s: renewals every 1s; the watchdog cuts at lease - 250ms
	id := enqueue(t, s, "/a", 1)
	res, err := r.Poll(ctx, alone(4))
	require.NoError(t, err)
	require.Equal(t, 1, res.Claimed) // lease until t0+3s

	var rounds atomic.Int32
	f.set(func(_ context.Context, query string) fault {
		if !isRenewal(query) {
			return fault{}
		}
		switch rounds.Add(1) {
		case 1:
			c.Advance(time.Second) // hangs the whole interval, then times out
			return fault{err: context.DeadlineExceeded}
		case 3:
			return fault{err: errAnswerLost} // fails at once
		}
		return fault{}
	})
	done := make(chan error, 1)
	go func() { done <- r.RenewLeases(ctx) }()
	require.NoError(t, c.BlockUntil(ctx, 2)) // the call's watchdog and the renewal's timer
	c.Advance(time.Second)                   // t0+1s: round 1 is sent, fails at t0+2s
	require.Eventually(t, func() bool { return r.Stats().Renewals == 1 }, 5*time.Second, time.Millisecond,
		"the round after one that timed out is sent at once (t0+2s), confirming the lease until t0+5s")
	require.Equal(t, int32(2), rounds.Load())

	// Past the watchdog of the lease confirmed at t0 (t0+2.75s): nothing cut.
	require.NoError(t, c.BlockUntil(ctx, 2))
	c.Advance(time.Second) // t0+3s: round 3 fails at once
	require.Eventually(t, func() bool { return rounds.Load() == 3 }, 5*time.Second, time.Millisecond)
	require.NoError(t, c.BlockUntil(ctx, 2))
	c.Advance(250 * time.Millisecond) // a quarter interval later, round 4
	require.Eventually(t, func() bool { return r.Stats().Renewals == 2 }, 5*time.Second, time.Millisecond,
		"a round that failed fast is tried again a quarter interval later")
	require.Equal(t, int64(0), r.Stats().Cancelled)

	letGo()
	within(t, waitAll(r), "the call did not finish")
	require.Equal(t, int64(0), r.Stats().Cancelled)
	require.Equal(t, store.StateDone, get(t, s, id).State)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

// A claim committed in the database whose answer never reached the node
// leaves jobs held by a node that does not know it has them. An idle node
// gives them back at its next renewal round, and sends nothing at all when
// it has no such doubt.
func TestIdleNodeReleasesTheJobsOfALostClaimAnswer(t *testing.T) {
	s, f := openFaulty(t)
	ctx := context.Background()
	rec := &seen{}
	c := clock.NewFake(t0)
	r := newRunner(t, s, endpoint(t, rec), c, 4)
	id := enqueue(t, s, "/ok", 1)

	sent := s.Statements()
	c.Advance(time.Second)
	r.RenewOnce(ctx)
	require.Equal(t, sent, s.Statements(), "an idle node with nothing in doubt sends no renewal")

	f.set(func(_ context.Context, query string) fault {
		if isClaim(query) {
			return fault{err: errAnswerLost, lost: true}
		}
		return fault{}
	})
	_, err := r.Poll(ctx, alone(4))
	require.ErrorIs(t, err, errAnswerLost)
	f.set(nil)
	j := get(t, s, id)
	require.Equal(t, store.StateRunning, j.State, "the claim committed")
	require.Equal(t, 0, r.Running())

	c.Advance(time.Second)
	r.RenewOnce(ctx)
	require.Eventually(t, func() bool { return r.Stats().Released == 1 }, 5*time.Second, 5*time.Millisecond,
		"the orphan is given back at the next renewal round")
	j = get(t, s, id)
	require.Equal(t, store.StateReady, j.State)
	require.Equal(t, 0, j.Attempt, "an attempt that never called is not counted")

	// Rounds that find nothing unknown go on for a lease (3s) after the
	// failed claim, which might still commit late; then the node is silent.
	for range 2 {
		c.Advance(time.Second)
		sent = s.Statements()
		r.RenewOnce(ctx)
		require.Greater(t, s.Statements(), sent, "within a lease of the failed claim the node still checks")
	}
	sent = s.Statements()
	c.Advance(time.Second)
	r.RenewOnce(ctx)
	require.Equal(t, sent, s.Statements(), "the doubt is over: no more renewals on an idle node")

	// With max_attempts 1 the job still gets its one call.
	res, err := r.Poll(ctx, alone(4))
	require.NoError(t, err)
	require.Equal(t, 1, res.Claimed)
	r.Wait()
	require.Equal(t, store.StateDone, get(t, s, id).State)
	require.Len(t, rec.all(), 1)
}

// Left is work the node left behind on purpose. When the claim finds fewer
// claimable rows than it asked for (another node was quicker), nothing is
// left: that is no backlog to widen the rotation for.
func TestPollLeftCountsOnlyWorkLeftOnPurpose(t *testing.T) {
	s, f := openFaulty(t)
	ctx := context.Background()
	rec := &seen{}
	r := newRunner(t, s, endpoint(t, rec), clock.NewFake(t0), 16)
	for range 5 {
		enqueue(t, s, "/ok", 1)
	}
	var raced atomic.Bool
	f.set(func(ctx context.Context, query string) fault {
		if isClaim(query) && raced.CompareAndSwap(false, true) {
			other, err := s.JobsClaim(ctx, "inc-b", "node-b", 3, store.Lease(time.Minute))
			require.NoError(t, err)
			require.Len(t, other, 3)
		}
		return fault{}
	})
	res, err := r.Poll(ctx, alone(16))
	require.NoError(t, err)
	require.Equal(t, 5, res.Due)
	require.Equal(t, 2, res.Claimed)
	require.Equal(t, 0, res.Left, "the claimable jobs ran out: another node took them")
	r.Wait()
	f.set(nil)

	// A node with no room leaves all that is due.
	full := newRunner(t, s, endpoint(t, rec), clock.NewFake(t0), 1)
	enqueue(t, s, "/block", 1)
	res, err = full.Poll(ctx, alone(1))
	require.NoError(t, err)
	require.Equal(t, 1, res.Claimed)
	enqueue(t, s, "/ok", 1)
	enqueue(t, s, "/ok", 1)
	res, err = full.Poll(ctx, alone(1))
	require.NoError(t, err)
	require.Equal(t, 0, res.Claimed)
	require.Equal(t, 2, res.Left)
	full.Drain(0)
}

// isFinish tells the statement that records results.
func isFinish(query string) bool {
	return strings.Contains(query, "v.v_suffix")
}

// A renewal that reads the leases after a call's result was committed but
// before its answer reached the node finds the job no longer running: the
// call is over and its result is the judge (a result fenced off by a new
// token counts as a lease lost). Such a renewal once took every call whose
// result was on its way for a lost lease: hundreds of false warnings a
// second on a busy node, each counted as a cancelled call.
func TestARenewalWhileResultsAreWrittenCancelsNothing(t *testing.T) {
	s, f := openFaulty(t)
	ctx := context.Background()
	c := clock.NewFake(t0)
	rec := &seen{}
	r := newRunner(t, s, endpoint(t, rec), c, 4)
	id := enqueue(t, s, "/ok", 1)

	written, answer := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.set(func(_ context.Context, query string) fault {
		if !isFinish(query) {
			return fault{}
		}
		return fault{hold: func() { once.Do(func() { close(written); <-answer }) }}
	})
	res, err := r.Poll(ctx, alone(4))
	require.NoError(t, err)
	require.Equal(t, 1, res.Claimed)
	within(t, written, "the result was never written")

	c.Advance(time.Second)
	require.NoError(t, r.RenewOnce(ctx)) // reads the leases between the commit and its answer
	close(answer)
	within(t, waitAll(r), "the call did not end")
	st := r.Stats()
	require.Equal(t, int64(0), st.Cancelled, "a call whose result was being written was taken for one whose lease was lost")
	require.Equal(t, int64(0), st.LeasesLost)
	require.Equal(t, int64(1), st.Succeeded)
	require.Equal(t, store.StateDone, get(t, s, id).State)
}
