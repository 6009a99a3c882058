package checkin_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/checkin"
	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// A locking node hears each enqueue's note (Options.Due) without a
// statement, and enqueues every few hundred milliseconds do not put off
// the write Run makes when the node's turns stop coming.
func TestLockingNodeHearsEnqueuesAndTheyDoNotPutOffItsBeat(t *testing.T) {
	storetest.RequirePostgres(t)
	se, dsn := storetest.Open(t, "postgres")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := open.Store(ctx, "postgres", dsn) // the node's own, to count only its statements
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	c := clock.NewFake(t0)
	var heard atomic.Int64
	a := checkin.New(s, checkin.Options{Name: "a", Capacity: 1, Heartbeat: time.Second, TTL: 3 * time.Second,
		Slot: time.Second, Clock: c, Due: func() { heard.Add(1) }})
	require.True(t, a.Locking())
	require.NoError(t, a.Join(ctx))
	t.Cleanup(func() { _ = a.Leave(context.Background()) })
	_, err = a.Turn(ctx)
	require.NoError(t, err)
	done := make(chan error, 1)
	runCtx, stop := context.WithCancel(ctx)
	go func() { done <- a.Run(runCtx) }()

	before := s.Statements()
	wrote := false
	for i := range int64(20) {
		require.NoError(t, c.BlockUntil(ctx, 1))
		_, err := se.JobInsert(ctx, store.NewJob{Endpoint: "/x"})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return heard.Load() == i+1 }, 5*time.Second, time.Millisecond, "note %d heard", i+1)
		if i == 0 {
			require.NoError(t, c.BlockUntil(ctx, 1))
			require.Equal(t, before, s.Statements(), "a note costs the node no statement")
		}
		require.NoError(t, c.BlockUntil(ctx, 1))
		c.Advance(600 * time.Millisecond)
		if s.Statements() > before {
			wrote = true
			break
		}
	}
	require.True(t, wrote, "no turn for 12 s, and Run never wrote: the notes put its beat off")
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
}
