package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

func TestJobsFinishWritesEachHeldRowAndNoStaleOne(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		var ids []int64
		for i := range 5 {
			id, err := s.JobInsert(ctx, store.NewJob{Endpoint: fmt.Sprintf("/f%d", i), Method: "POST", MaxAttempts: 3, IdempotencyKey: "k"})
			require.NoError(t, err)
			ids = append(ids, id)
		}
		cs, err := s.JobsClaim(ctx, "inc-a", "node-a", 5, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, cs, 5)
		tokens := map[int64]int64{}
		for _, c := range cs {
			tokens[c.ID] = c.Token
		}
		// The last job's lease ran out and another node holds it now, under
		// a new token: node-a's result for it is stale.
		other := storetest.TakeOver(t, s, ids[4])

		before, err := s.Now(ctx)
		require.NoError(t, err)
		long := string(make([]byte, 0)) + "boom\twith a tab"
		written, err := s.JobsFinish(ctx, []store.Finish{
			{ID: ids[4], Token: tokens[ids[4]], Outcome: store.Outcome{State: store.StateDone, Status: 200}},
			{ID: ids[0], Token: tokens[ids[0]], Outcome: store.Outcome{State: store.StateDone, Status: 204}},
			{ID: ids[1], Token: tokens[ids[1]], Outcome: store.Outcome{State: store.StateReady, RetryAfter: time.Hour, Status: 503, Error: "unavailable"}},
			{ID: ids[2], Token: tokens[ids[2]], Outcome: store.Outcome{State: store.StateFailed, Status: 404, Error: "not found"}},
			{ID: ids[3], Token: tokens[ids[3]], Outcome: store.Outcome{State: store.StateDead, Error: long}},
		})
		require.NoError(t, err)
		require.Equal(t, []bool{false, true, true, true, true}, written, "per row, in the order given")
		after, err := s.Now(ctx)
		require.NoError(t, err)

		stale, err := s.JobGet(ctx, ids[4])
		require.NoError(t, err)
		require.Equal(t, store.StateRunning, stale.State, "a stale token writes nothing")
		require.Equal(t, "node-b", stale.OwnerNode)
		require.Equal(t, other.Token, stale.Token)
		require.NotNil(t, stale.LeaseUntil)

		done, err := s.JobGet(ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, store.StateDone, done.State)
		require.Equal(t, 204, done.LastStatus)
		require.Empty(t, done.Owner)
		require.Nil(t, done.LeaseUntil)
		require.NotNil(t, done.Finished)
		require.Len(t, done.History, 1)
		require.Equal(t, "node-a", done.History[0].Node)
		require.Equal(t, store.StateDone, done.History[0].Outcome)

		retry, err := s.JobGet(ctx, ids[1])
		require.NoError(t, err)
		require.Equal(t, store.StateReady, retry.State)
		require.Nil(t, retry.Finished, "a retry has not finished")
		require.Equal(t, "unavailable", retry.LastError)
		require.Equal(t, 503, retry.LastStatus)
		require.WithinRange(t, retry.RunAt, before.Add(time.Hour-time.Second), after.Add(time.Hour+time.Second), "due again after its delay, on the database clock")
		require.Len(t, retry.History, 1)
		require.Equal(t, store.OutcomeRetry, retry.History[0].Outcome)
		require.Equal(t, "unavailable", retry.History[0].Error)

		failed, err := s.JobGet(ctx, ids[2])
		require.NoError(t, err)
		require.Equal(t, store.StateFailed, failed.State)
		require.Equal(t, "not found", failed.LastError)
		require.Equal(t, store.StateFailed, failed.History[0].Outcome)

		// A zero status and an empty error are NULL in the table, not 0
		// and '': the batch's arrays (PostgreSQL) and its VALUES rows
		// (SQLite, SQL Server) write them alike.
		nulls := func(id int64) []int {
			var status, errText int
			require.NoError(t, s.DB().QueryRowContext(ctx, store.Expand(s.Dialect(),
				`SELECT CASE WHEN last_status IS NULL THEN 1 ELSE 0 END, CASE WHEN last_error IS NULL THEN 1 ELSE 0 END FROM {jobs} WHERE id = ?`),
				id).Scan(&status, &errText))
			return []int{status, errText}
		}
		require.Equal(t, []int{0, 1}, nulls(ids[0]), "done with status 204 and no error")
		require.Equal(t, []int{1, 0}, nulls(ids[3]), "dead with no status and an error")

		dead, err := s.JobGet(ctx, ids[3])
		require.NoError(t, err)
		require.Equal(t, store.StateDead, dead.State)
		require.Zero(t, dead.LastStatus)
		require.Equal(t, "boom with a tab", dead.History[0].Error)
	})
}

func TestJobsFinishTakesAFullBatch(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		var batch []store.NewJob
		for range store.MaxFinishBatch {
			batch = append(batch, store.NewJob{Endpoint: "/f", Method: "POST", MaxAttempts: 1, IdempotencyKey: "k"})
		}
		for _, j := range batch {
			_, err := s.JobInsert(ctx, j)
			require.NoError(t, err)
		}
		cs, err := s.JobsClaim(ctx, "inc-a", "node-a", store.MaxFinishBatch, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, cs, store.MaxFinishBatch)
		fs := make([]store.Finish, len(cs))
		for i, c := range cs {
			fs[i] = store.Finish{ID: c.ID, Token: c.Token, Outcome: store.Outcome{State: store.StateDone, Status: 200}}
		}
		written, err := s.JobsFinish(ctx, fs)
		require.NoError(t, err)
		for i, w := range written {
			require.True(t, w, "row %d", i)
		}
		counts, err := s.JobCounts(ctx)
		require.NoError(t, err)
		require.Equal(t, store.MaxFinishBatch, counts[store.StateDone])
		_, err = s.JobsFinish(ctx, make([]store.Finish, store.MaxFinishBatch+1))
		require.Error(t, err)
	})
}
