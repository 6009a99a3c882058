package jobs_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// An operator's cancel of a running job reaches its call at the next lease
// renewal: the endpoint sees its request cancelled, and the job ends
// cancelled, its attempt budget unused, never claimed again.
func TestCancelRequestCutsTheCallOff(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		var calls atomic.Int32
		started, disconnected := make(chan struct{}, 1), make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			// A server hears of a closed connection once it has read the
			// request's body.
			_, _ = io.Copy(io.Discard, r.Body)
			started <- struct{}{}
			select {
			case <-r.Context().Done():
				close(disconnected)
			case <-time.After(30 * time.Second): // the test failed; end anyway
				w.WriteHeader(http.StatusOK)
			}
		}))
		t.Cleanup(srv.Close)
		base, _ := url.Parse(srv.URL)
		c := clock.NewFake(t0)
		r := newRunner(t, s, base, c, 4) // lease 3s: renewals every 1s
		id := enqueue(t, s, "/long", 5)
		res, err := r.Poll(ctx, alone(4))
		require.NoError(t, err)
		require.Equal(t, 1, res.Claimed)
		within(t, started, "the endpoint was never called")

		// A renewal with no request leaves the call alone.
		c.Advance(time.Second)
		require.NoError(t, r.RenewOnce(ctx))
		require.Equal(t, 1, r.Running())

		got, err := s.JobCancel(ctx, id, "operator ann")
		require.NoError(t, err)
		require.Equal(t, store.CancelRequested, got)
		require.Equal(t, store.StateRunning, get(t, s, id).State, "the call stays until its node acts")
		select {
		case <-disconnected:
			t.Fatal("the call was cut off before a renewal reported the request")
		case <-time.After(50 * time.Millisecond):
		}

		c.Advance(time.Second)
		require.NoError(t, r.RenewOnce(ctx))
		within(t, disconnected, "the endpoint never saw its request cancelled")
		within(t, waitAll(r), "the cancelled call never ended")

		j := get(t, s, id)
		require.Equal(t, store.StateCancelled, j.State)
		require.Equal(t, "cancelled by operator ann while running", j.LastError)
		require.Equal(t, 1, j.Attempt, "no further attempt")
		require.NotNil(t, j.Finished)
		require.Equal(t, store.StateCancelled, j.History[len(j.History)-1].Outcome)
		require.Zero(t, r.Stats().Retried)
		require.Zero(t, r.Stats().Cancelled, "not counted as a lease lost")

		c.Advance(time.Minute)
		res, err = r.Poll(ctx, alone(4))
		require.NoError(t, err)
		require.Zero(t, res.Claimed, "a cancelled job is not claimed again")
		require.Equal(t, int32(1), calls.Load())
	})
}

// A call that succeeds before its node hears of the cancel ends done.
func TestCancelRequestAfterSuccessIsDone(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	base, letGo := holdEndpoint(t)
	c := clock.NewFake(t0)
	r := newRunner(t, s, base, c, 4)
	id := enqueue(t, s, "/long", 5)
	_, err := r.Poll(ctx, alone(4))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return get(t, s, id).State == store.StateRunning }, 5*time.Second, time.Millisecond)
	got, err := s.JobCancel(ctx, id, "ops")
	require.NoError(t, err)
	require.Equal(t, store.CancelRequested, got)
	letGo()
	within(t, waitAll(r), "the call never ended")
	c.Advance(time.Second)
	require.NoError(t, r.RenewOnce(ctx))
	require.Equal(t, store.StateDone, get(t, s, id).State)
}
