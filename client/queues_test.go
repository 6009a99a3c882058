package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// A paused queue's job waits through polls and runs after the resume;
// the other queues' jobs run meanwhile.
func TestPauseAndResumeQueue(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		f := newFarm(t, driver)
		ctx := context.Background()
		require.NoError(t, f.c.PauseQueue(ctx, "reports"))
		id, err := f.c.Enqueue(ctx, client.Job{Endpoint: "/report", Queue: "reports"})
		require.NoError(t, err)
		other, err := f.c.Enqueue(ctx, client.Job{Endpoint: "/other"})
		require.NoError(t, err)

		require.Equal(t, 1, f.poll(t))
		require.Zero(t, f.poll(t))
		require.Zero(t, f.called("/report"))
		require.Equal(t, 1, f.called("/other"))
		j, err := f.c.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "reports", j.Queue)
		require.Equal(t, client.StateReady, j.State)
		j, err = f.c.Get(ctx, other)
		require.NoError(t, err)
		require.Equal(t, client.DefaultQueue, j.Queue)

		qs, err := f.c.Queues(ctx)
		require.NoError(t, err)
		require.Len(t, qs, 1, "the default queue has no job waiting or running, and was never paused")
		require.Equal(t, "reports", qs[0].Name)
		require.True(t, qs[0].Paused)
		require.Equal(t, "client", qs[0].PausedBy)
		require.Equal(t, 1, qs[0].Waiting)

		require.NoError(t, f.c.ResumeQueue(ctx, "reports"))
		require.Equal(t, 1, f.poll(t))
		require.Equal(t, 1, f.called("/report"))
	})
}

func TestQueueNamesAreChecked(t *testing.T) {
	f := newFarm(t, "sqlite")
	ctx := context.Background()
	var fe *client.FieldError
	require.ErrorAs(t, f.c.PauseQueue(ctx, "a/b"), &fe)
	require.Equal(t, "queue", fe.Field)
	_, err := f.c.Enqueue(ctx, client.Job{Endpoint: "/x", Queue: " lead"})
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "queue", fe.Field)
}

// A queue's cancel asks its running jobs to stop (the client's actor
// recorded) and cancels its waiting ones only when asked; another queue's
// jobs are not touched.
func TestCancelQueue(t *testing.T) {
	f := newFarm(t, "sqlite")
	ctx := context.Background()
	running, err := f.c.Enqueue(ctx, client.Job{Endpoint: "/report", Queue: "reports"})
	require.NoError(t, err)
	other, err := f.c.Enqueue(ctx, client.Job{Endpoint: "/other"})
	require.NoError(t, err)
	_, err = f.s.JobsClaim(ctx, "inc-b", "node-b", 2, store.Lease(time.Minute))
	require.NoError(t, err)
	waiting, err := f.c.Enqueue(ctx, client.Job{Endpoint: "/report", Queue: "reports", Delay: time.Hour})
	require.NoError(t, err)

	r, err := f.c.CancelQueue(ctx, "reports", false)
	require.NoError(t, err)
	require.Equal(t, client.QueueCancelled{Requested: 1}, r)
	j, err := f.c.Get(ctx, running)
	require.NoError(t, err)
	require.Equal(t, client.StateRunning, j.State)
	require.Equal(t, "client", j.CancelRequestedBy)
	j, err = f.c.Get(ctx, other)
	require.NoError(t, err)
	require.Empty(t, j.CancelRequestedBy)
	j, err = f.c.Get(ctx, waiting)
	require.NoError(t, err)
	require.Equal(t, client.StateReady, j.State)

	r, err = f.c.CancelQueue(ctx, "reports", true)
	require.NoError(t, err)
	require.Equal(t, client.QueueCancelled{Cancelled: 1}, r, "the running one was asked already")
	j, err = f.c.Get(ctx, waiting)
	require.NoError(t, err)
	require.Equal(t, client.StateCancelled, j.State)

	var fe *client.FieldError
	_, err = f.c.CancelQueue(ctx, "a/b", true)
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "queue", fe.Field)
}
