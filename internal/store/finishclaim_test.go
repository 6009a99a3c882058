package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// One statement records a batch of results, each fenced by its token, and
// claims as many new jobs as asked, as JobsFinish and JobsClaim would.
func TestJobsFinishAndClaimIsOneStatement(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		if driver != "postgres" {
			require.False(t, s.FusesFinishAndClaim(), "only PostgreSQL joins them")
			_, _, err := s.JobsFinishAndClaim(context.Background(), []store.Finish{{ID: 1, Token: 1}}, "o", "n", 1, store.Lease(time.Minute))
			require.Error(t, err)
			return
		}
		require.True(t, s.FusesFinishAndClaim())
		ctx := context.Background()
		for i := range 8 {
			_, err := s.JobInsert(ctx, store.NewJob{Endpoint: fmt.Sprintf("/jobs/%d", i), Method: "POST", MaxAttempts: 3})
			require.NoError(t, err)
		}
		held, err := s.JobsClaim(ctx, "owner-1", "node-1", 3, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, held, 3)

		results := []store.Finish{
			{ID: held[0].ID, Token: held[0].Token, Outcome: store.Outcome{State: store.StateDone, Status: 204}},
			{ID: held[1].ID, Token: held[1].Token, Outcome: store.Outcome{State: store.StateReady, RetryAfter: time.Hour, Status: 503, Error: "unavailable"}},
			{ID: held[2].ID, Token: held[2].Token + 1, Outcome: store.Outcome{State: store.StateDone}}, // a lost lease
		}
		before := s.Statements()
		written, claims, err := s.JobsFinishAndClaim(ctx, results, "owner-1", "node-1", 4, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Equal(t, int64(1), s.Statements()-before, "one statement")
		require.Equal(t, []bool{true, true, false}, written)
		require.Len(t, claims, 4)
		for _, c := range claims {
			require.NotContains(t, []int64{held[0].ID, held[1].ID, held[2].ID}, c.ID, "a claim takes ready jobs, not those it records")
			require.Equal(t, int64(1), c.Token)
			j, err := s.JobGet(ctx, c.ID)
			require.NoError(t, err)
			require.Equal(t, store.StateRunning, j.State)
		}
		j, err := s.JobGet(ctx, held[0].ID)
		require.NoError(t, err)
		require.Equal(t, store.StateDone, j.State)
		j, err = s.JobGet(ctx, held[1].ID)
		require.NoError(t, err)
		require.Equal(t, store.StateReady, j.State, "a retry is ready again, an hour on")
		require.Equal(t, "unavailable", j.LastError)
		j, err = s.JobGet(ctx, held[2].ID)
		require.NoError(t, err)
		require.Equal(t, store.StateRunning, j.State, "a result under another token is not written")

		// The last ready job: a claim asking for more comes back short.
		written, claims, err = s.JobsFinishAndClaim(ctx, []store.Finish{{ID: claims[0].ID, Token: claims[0].Token,
			Outcome: store.Outcome{State: store.StateDone}}}, "owner-1", "node-1", 5, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Equal(t, []bool{true}, written)
		require.Len(t, claims, 1)
	})
}
