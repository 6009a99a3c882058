package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// A job's trace parent is written by every insert and handed back by
// every claim (the plain one, the managed one, the insert already
// claimed, and on PostgreSQL the claim joined to results) and by JobGet;
// none is NULL, read as "". A row holding what is not a traceparent (an
// application wrote it) is still claimed: the trace is the caller's to
// judge, never a reason not to run the job.
func TestJobsCarryTheirTraceparent(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		job := func(endpoint, trace string) store.NewJob {
			return store.NewJob{Endpoint: endpoint, Method: "POST", MaxAttempts: 3, IdempotencyKey: "k" + endpoint, Traceparent: trace}
		}
		traced, err := s.JobInsert(ctx, job("/traced", tp))
		require.NoError(t, err)
		plain, err := s.JobInsert(ctx, job("/plain", ""))
		require.NoError(t, err)
		many, err := s.JobInsertMany(ctx, []store.NewJob{job("/many-a", tp), job("/many-b", "")})
		require.NoError(t, err)
		odd, err := s.JobInsert(ctx, job("/odd", ""))
		require.NoError(t, err)
		_, err = s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {jobs} SET trace_parent = ? WHERE id = ?`), "not a trace", odd)
		require.NoError(t, err)

		want := map[int64]string{traced: tp, plain: "", many[0]: tp, many[1]: "", odd: "not a trace"}
		for id, w := range want {
			j, err := s.JobGet(ctx, id)
			require.NoError(t, err)
			require.Equal(t, w, j.Traceparent, "job %d", id)
		}
		claims, err := s.JobsClaim(ctx, "inc-a", "node-a", 10, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, claims, len(want), "the odd row is claimed like the others")
		for _, c := range claims {
			require.Equal(t, want[c.ID], c.Traceparent, "claim of job %d", c.ID)
		}

		c, err := s.JobInsertClaimed(ctx, job("/now", tp), "inc-a", "node-a", store.Lease(time.Minute))
		require.NoError(t, err)
		require.Equal(t, tp, c.Traceparent, "an insert already claimed")

		require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{{Name: "reports", Limit: 5}}))
		managed, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/r", Method: "POST", MaxAttempts: 3, IdempotencyKey: "kr", Queue: "reports", Traceparent: tp})
		require.NoError(t, err)
		claims, err = s.JobsClaimManaged(ctx, "inc-a", "node-a", 10, store.Lease(time.Minute), true)
		require.NoError(t, err)
		require.Len(t, claims, 1)
		require.Equal(t, managed, claims[0].ID)
		require.Equal(t, tp, claims[0].Traceparent, "the managed claim")

		if s.FusesFinishAndClaim() {
			last, err := s.JobInsert(ctx, job("/joined", tp))
			require.NoError(t, err)
			_, claims, err := s.JobsFinishAndClaim(ctx, []store.Finish{{ID: c.ID, Token: c.Token, Outcome: store.Outcome{State: store.StateDone}}},
				"inc-a", "node-a", 5, store.Lease(time.Minute))
			require.NoError(t, err)
			require.Len(t, claims, 1)
			require.Equal(t, last, claims[0].ID)
			require.Equal(t, tp, claims[0].Traceparent, "the claim joined to results")
		}
	})
}
