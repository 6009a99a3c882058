package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

func checkIn(t *testing.T, s *store.Store, name, inc string) {
	require.NoError(t, s.NodeCheckIn(context.Background(), store.NodeState{Name: name, Incarnation: inc, Capacity: 4, Free: 4}, time.Hour))
}

func TestTaskOwnership(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		checkIn(t, s, "node-a", "inc-a")
		checkIn(t, s, "node-b", "inc-b")
		require.NoError(t, s.TaskInsert(ctx, store.NewTask{Name: "feed", Endpoint: "/feed", Method: "POST", Every: 5 * time.Second}))
		require.ErrorIs(t, s.TaskInsert(ctx, store.NewTask{Name: "feed", Endpoint: "/other", Method: "POST", Every: time.Second}), store.ErrDuplicate)

		// Only a live node can be given a task.
		ok, err := s.TaskAssignIfUnowned(ctx, "feed", "inc-ghost", "ghost", store.Lease(time.Minute), time.Hour)
		require.NoError(t, err)
		require.False(t, ok, "a node that is not in the registry gets nothing")
		ok, err = s.TaskAssignIfUnowned(ctx, "feed", "inc-a", "node-a", store.Lease(time.Minute), time.Hour)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.TaskAssignIfUnowned(ctx, "feed", "inc-b", "node-b", store.Lease(time.Minute), time.Hour)
		require.NoError(t, err)
		require.False(t, ok, "a held task is never taken")

		nodes, _, err := s.Nodes(ctx, time.Hour)
		require.NoError(t, err)
		require.Equal(t, 1, nodes[0].Tasks, "the membership read tells node-a it holds a task")
		require.Equal(t, 0, nodes[1].Tasks)

		held, err := s.TasksRenew(ctx, "inc-a", store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, held, 1)
		require.Equal(t, "feed", held[0].Name)
		require.Equal(t, int64(1), held[0].Token)
		require.Equal(t, 5*time.Second, held[0].Every)
		held, err = s.TasksRenew(ctx, "inc-b", store.Lease(time.Minute))
		require.NoError(t, err)
		require.Empty(t, held)

		ok, err = s.TaskRecordCall(ctx, "feed", 1, false, 503, "unavailable")
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.TaskRecordCall(ctx, "feed", 7, true, 200, "")
		require.NoError(t, err)
		require.False(t, ok, "a wrong token records nothing")
		task, err := s.TaskGet(ctx, "feed")
		require.NoError(t, err)
		require.Equal(t, int64(1), task.Calls)
		require.Equal(t, 1, task.Failures)
		require.Equal(t, 503, task.LastStatus)
		require.True(t, task.Held)
		require.Equal(t, "node-a", task.OwnerNode)

		// The owner's lease runs out (it froze): the task goes to b under a
		// new token, and a's renewal no longer returns it.
		_, err = s.TasksRenew(ctx, "inc-a", store.Lease(-time.Second))
		require.NoError(t, err)
		ok, err = s.TaskAssignIfUnowned(ctx, "feed", "inc-b", "node-b", store.Lease(time.Minute), time.Hour)
		require.NoError(t, err)
		require.True(t, ok)
		held, err = s.TasksRenew(ctx, "inc-a", store.Lease(time.Minute))
		require.NoError(t, err)
		require.Empty(t, held, "the old owner learns it lost the task")
		held, err = s.TasksRenew(ctx, "inc-b", store.Lease(time.Minute))
		require.NoError(t, err)
		require.Equal(t, int64(2), held[0].Token)
		ok, err = s.TaskRecordCall(ctx, "feed", 1, true, 200, "")
		require.NoError(t, err)
		require.False(t, ok, "the old token is fenced out")

		// Handoff: asked, then released by the owner itself.
		ok, err = s.TaskRequestHandoff(ctx, "feed", 2)
		require.NoError(t, err)
		require.True(t, ok)
		held, err = s.TasksRenew(ctx, "inc-b", store.Lease(time.Minute))
		require.NoError(t, err)
		require.True(t, held[0].Handoff)
		ok, err = s.TaskReleaseIfHeld(ctx, "feed", 2)
		require.NoError(t, err)
		require.True(t, ok)
		task, err = s.TaskGet(ctx, "feed")
		require.NoError(t, err)
		require.Equal(t, store.TaskCreated, task.State)
		require.False(t, task.Held)
		require.False(t, task.Handoff)
	})
}

func TestTaskDelete(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		checkIn(t, s, "node-a", "inc-a")
		for _, n := range []string{"idle", "owned", "orphan"} {
			require.NoError(t, s.TaskInsert(ctx, store.NewTask{Name: n, Endpoint: "/t", Method: "POST", Every: time.Second}))
		}
		state, err := s.TaskRequestDelete(ctx, "idle")
		require.NoError(t, err)
		require.Equal(t, store.TaskDeleted, state, "a task with no owner is deleted at once")

		_, err = s.TaskAssignIfUnowned(ctx, "owned", "inc-a", "node-a", store.Lease(time.Minute), time.Hour)
		require.NoError(t, err)
		state, err = s.TaskRequestDelete(ctx, "owned")
		require.NoError(t, err)
		require.Equal(t, store.TaskDeleting, state)
		held, err := s.TasksRenew(ctx, "inc-a", store.Lease(time.Minute))
		require.NoError(t, err)
		require.Equal(t, store.TaskDeleting, held[0].State, "the owner learns of the delete at its renewal")
		ok, err := s.TaskMarkDeleted(ctx, "owned", held[0].Token)
		require.NoError(t, err)
		require.True(t, ok)

		// An owner that died before confirming: the farm finishes the delete.
		_, err = s.TaskAssignIfUnowned(ctx, "orphan", "inc-a", "node-a", store.Lease(-time.Second), time.Hour)
		require.NoError(t, err)
		_, err = s.TaskRequestDelete(ctx, "orphan")
		require.NoError(t, err)
		n, err := s.TasksFinishOrphanedDeletes(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), n)

		live, err := s.Tasks(ctx, false)
		require.NoError(t, err)
		require.Empty(t, live)
		all, err := s.Tasks(ctx, true)
		require.NoError(t, err)
		require.Len(t, all, 3)

		// A deleted name can be used again; its token keeps counting.
		require.NoError(t, s.TaskInsert(ctx, store.NewTask{Name: "owned", Endpoint: "/new", Method: "POST", Every: time.Second}))
		ok, err = s.TaskAssignIfUnowned(ctx, "owned", "inc-a", "node-a", store.Lease(time.Minute), time.Hour)
		require.NoError(t, err)
		require.True(t, ok)
		task, err := s.TaskGet(ctx, "owned")
		require.NoError(t, err)
		require.Equal(t, int64(2), task.Token)
		require.Equal(t, "/new", task.Endpoint)
		_, err = s.TaskGet(ctx, "nope")
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}

func TestTasksReleaseAll(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		checkIn(t, s, "node-a", "inc-a")
		for _, n := range []string{"t1", "t2"} {
			require.NoError(t, s.TaskInsert(ctx, store.NewTask{Name: n, Endpoint: "/t", Method: "POST", Every: time.Second}))
			_, err := s.TaskAssignIfUnowned(ctx, n, "inc-a", "node-a", store.Lease(time.Minute), time.Hour)
			require.NoError(t, err)
		}
		_, err := s.TaskRequestDelete(ctx, "t2")
		require.NoError(t, err)
		n, err := s.TasksReleaseAll(ctx, "inc-a")
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
		t1, err := s.TaskGet(ctx, "t1")
		require.NoError(t, err)
		require.Equal(t, store.TaskCreated, t1.State)
		t2, err := s.TaskGet(ctx, "t2")
		require.NoError(t, err)
		require.Equal(t, store.TaskDeleted, t2.State)
	})
}
