package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// Queues on every database: routes resolve a job's queue in every door,
// and a paused queue's jobs are neither claimed, nor started now, nor
// counted as due.

// queueOfJob reads a job's queue as JobGet shows it.
func queueOfJob(t *testing.T, s *store.Store, id int64) string {
	t.Helper()
	j, err := s.JobGet(context.Background(), id)
	require.NoError(t, err)
	return j.Queue
}

// enqueueByEntryPoint enqueues through the database's own entry point, as
// an application in another language would, with a queue unless "".
func enqueueByEntryPoint(t *testing.T, s *store.Store, endpoint, queue string) int64 {
	t.Helper()
	id, err := callEntryPoint(s, endpoint, queue)
	require.NoError(t, err)
	return id
}

func callEntryPoint(s *store.Store, endpoint, queue string) (int64, error) {
	ctx := context.Background()
	db := s.DB()
	var id int64
	switch d := s.Dialect().(type) {
	case store.Postgres:
		q, args := "SELECT slotpoller_enqueue_v1(endpoint => $1)", []any{endpoint}
		if queue != "" {
			q, args = "SELECT slotpoller_enqueue_v1(endpoint => $1, queue => $2)", []any{endpoint, queue}
		}
		return id, db.QueryRowContext(ctx, q, args...).Scan(&id)
	case store.MySQL:
		return id, db.QueryRowContext(ctx, "CALL slotpoller_enqueue_v1(?, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, ?)",
			endpoint, queue).Scan(&id)
	case store.SQLServer:
		q, args := "EXEC ["+d.Schema()+"].[enqueue_v1] @endpoint = @p1", []any{endpoint}
		if queue != "" {
			q, args = "EXEC ["+d.Schema()+"].[enqueue_v1] @endpoint = @p1, @queue = @p2", []any{endpoint, queue}
		}
		return id, db.QueryRowContext(ctx, q, args...).Scan(&id)
	}
	q, args := "INSERT INTO slotpoller_enqueue_v1 (endpoint) VALUES (?)", []any{endpoint}
	if queue != "" {
		q, args = "INSERT INTO slotpoller_enqueue_v1 (endpoint, queue) VALUES (?, ?)", []any{endpoint, queue}
	}
	if _, err := db.ExecContext(ctx, q, args...); err != nil {
		return 0, err
	}
	return id, db.QueryRowContext(ctx, "SELECT MAX(id) FROM slotpoller_jobs").Scan(&id)
}

func TestQueueRoutes(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		require.NoError(t, s.QueueRoutesPut(ctx, []store.QueueRoute{
			{Prefix: "/jobs/reports/", Queue: "reports"},
			{Prefix: "/jobs/reports/big/", Queue: "big-reports"},
			{Prefix: "/jobs/mail", Queue: "mail"},
		}))
		routes, err := s.QueueRoutes(ctx)
		require.NoError(t, err)
		require.Equal(t, "/jobs/reports/big/", routes[0].Prefix, "longest first")
		require.Len(t, routes, 3)

		cases := []struct{ endpoint, given, want string }{
			{"/jobs/reports/daily", "", "reports"},
			{"/jobs/reports/big/yearly?x=1", "", "big-reports"}, // the longest prefix wins
			{"/jobs/mailer", "", "mail"},                        // a prefix, not a path segment
			{"/jobs/Reports/daily", "", store.DefaultQueue},     // prefixes compare exactly
			{"/jobs/report", "", store.DefaultQueue},            // shorter than the prefix
			{"/other", "", store.DefaultQueue},
			{"/jobs/reports/daily", "urgent", "urgent"}, // a given queue beats the routes
		}
		for _, c := range cases {
			id, err := s.JobInsert(ctx, store.NewJob{Endpoint: c.endpoint, Method: "POST", MaxAttempts: 1, IdempotencyKey: "k", Queue: c.given})
			require.NoError(t, err)
			require.Equal(t, c.want, queueOfJob(t, s, id), "JobInsert %s (given %q)", c.endpoint, c.given)
			id = enqueueByEntryPoint(t, s, c.endpoint, c.given)
			require.Equal(t, c.want, queueOfJob(t, s, id), "entry point %s (given %q)", c.endpoint, c.given)
		}
		ids, err := s.JobInsertMany(ctx, []store.NewJob{
			{Endpoint: "/jobs/mail/1", Method: "POST", MaxAttempts: 1, IdempotencyKey: "m1"},
			{Endpoint: "/x", Method: "POST", MaxAttempts: 1, IdempotencyKey: "m2", Queue: "q2"},
		})
		require.NoError(t, err)
		require.Equal(t, "mail", queueOfJob(t, s, ids[0]))
		require.Equal(t, "q2", queueOfJob(t, s, ids[1]))

		// The entry points check a queue's name as the Go client does.
		for _, bad := range []string{" lead", "a/b", "caf\u00e9", strings.Repeat("q", 101)} {
			_, err := callEntryPoint(s, "/x", bad)
			require.ErrorContains(t, err, "queue", "queue %q", bad)
		}

		// Replacing the routes changes new jobs only.
		require.NoError(t, s.QueueRoutesPut(ctx, nil))
		id, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/jobs/reports/daily", Method: "POST", MaxAttempts: 1, IdempotencyKey: "k"})
		require.NoError(t, err)
		require.Equal(t, store.DefaultQueue, queueOfJob(t, s, id))
		require.Equal(t, "mail", queueOfJob(t, s, ids[0]))
	})
}

func TestQueuePause(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		hold := store.Lease(time.Minute)
		insert := func(endpoint, queue string) int64 {
			id, err := s.JobInsert(ctx, store.NewJob{Endpoint: endpoint, Method: "POST", MaxAttempts: 3, IdempotencyKey: "k", Queue: queue})
			require.NoError(t, err)
			return id
		}
		// Pausing a queue no job names yet is allowed.
		require.NoError(t, s.QueuePause(ctx, "reports", "alice", true))
		paused := insert("/r1", "reports")
		other := insert("/o1", "")

		load, err := s.JobsLoad(ctx, time.Hour, 0, 100)
		require.NoError(t, err)
		require.Equal(t, 1, load.Due, "the paused queue's job is not due work")

		claims, err := s.JobsClaim(ctx, "inc-a", "node-a", 10, hold)
		require.NoError(t, err)
		require.Len(t, claims, 1)
		require.Equal(t, other, claims[0].ID, "only the job of the queue not paused is claimed")

		// Start-now refuses a paused queue, given or routed, and writes nothing.
		_, err = s.JobInsertClaimed(ctx, store.NewJob{Endpoint: "/r2", Method: "POST", MaxAttempts: 1, IdempotencyKey: "k", Queue: "reports"}, "inc-a", "node-a", hold)
		require.ErrorIs(t, err, store.ErrQueueHeld)
		require.NoError(t, s.QueueRoutesPut(ctx, []store.QueueRoute{{Prefix: "/r", Queue: "reports"}}))
		_, err = s.JobInsertClaimed(ctx, store.NewJob{Endpoint: "/r3", Method: "POST", MaxAttempts: 1, IdempotencyKey: "k"}, "inc-a", "node-a", hold)
		require.ErrorIs(t, err, store.ErrQueueHeld)
		started, err := s.JobInsertClaimed(ctx, store.NewJob{Endpoint: "/o2", Method: "POST", MaxAttempts: 1, IdempotencyKey: "k"}, "inc-a", "node-a", hold)
		require.NoError(t, err, "a queue not paused starts now")
		require.Equal(t, int64(1), started.Token)
		require.Equal(t, store.DefaultQueue, queueOfJob(t, s, started.ID))

		qs, err := s.Queues(ctx)
		require.NoError(t, err)
		byName := map[string]store.QueueState{}
		for _, q := range qs {
			byName[q.Name] = q
		}
		r := byName["reports"]
		pausedOnly, err := s.QueuesPaused(ctx)
		require.NoError(t, err)
		require.Equal(t, []store.QueueState{{Name: "reports", Paused: true, PausedBy: "alice", PausedAt: r.PausedAt}}, pausedOnly)
		require.True(t, r.Paused)
		require.Equal(t, "alice", r.PausedBy)
		require.NotNil(t, r.PausedAt)
		require.Equal(t, 1, r.Waiting)
		require.Equal(t, store.QueueState{Name: store.DefaultQueue, Running: 2}, byName[store.DefaultQueue])

		// Pausing again keeps it paused; resuming lets the next claim take it.
		require.NoError(t, s.QueuePause(ctx, "reports", "bob", true))
		require.NoError(t, s.QueuePause(ctx, "reports", "bob", false))
		claims, err = s.JobsClaim(ctx, "inc-a", "node-a", 10, hold)
		require.NoError(t, err)
		require.Len(t, claims, 1)
		require.Equal(t, paused, claims[0].ID, "a resumed queue's job is claimed")
		qs, err = s.Queues(ctx)
		require.NoError(t, err)
		for _, q := range qs {
			if q.Name == "reports" {
				require.False(t, q.Paused)
				require.Empty(t, q.PausedBy)
				require.Nil(t, q.PausedAt)
				require.Equal(t, 1, q.Running)
			}
		}
		// Resuming a queue never paused is harmless and lists it.
		require.NoError(t, s.QueuePause(ctx, "idle", "carol", false))
		qs, err = s.Queues(ctx)
		require.NoError(t, err)
		require.Contains(t, qs, store.QueueState{Name: "idle"})
	})
}
