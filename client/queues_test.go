package client_test

import (
	"context"
	"testing"

	"github.com/slotpoller/slotpoller/client"
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
