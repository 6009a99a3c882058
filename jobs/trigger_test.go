package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// Trigger now adds exactly one occurrence, due now, beside the grid (which
// does not move), also on a paused schedule; a removed schedule cancels it;
// an unknown one is not found.
func TestTriggerScheduleAddsOneOccurrenceNow(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		sc := everySecond("nightly", store.MisfireOnce)
		sc.Every, sc.Overlap = time.Hour, store.OverlapForbid
		require.NoError(t, jobs.AddSchedule(ctx, s, sc))
		before, err := s.ScheduleGet(ctx, "nightly")
		require.NoError(t, err)

		id, err := jobs.TriggerSchedule(ctx, s, "nightly")
		require.NoError(t, err)
		occ := occurrences(t, s, "nightly")
		require.Len(t, occ, 1)
		j := occ[0]
		require.Equal(t, id, j.ID)
		require.Equal(t, store.StateReady, j.State)
		require.Equal(t, "/jobs/nightly", j.Endpoint)
		require.NotNil(t, j.ScheduledFor)
		now, err := s.Now(ctx)
		require.NoError(t, err)
		require.WithinDuration(t, now, j.RunAt, 5*time.Second, "due now")
		require.Contains(t, j.UniqueKey, ":manual:")

		after, err := s.ScheduleGet(ctx, "nightly")
		require.NoError(t, err)
		require.Equal(t, before.NextFireAt, after.NextFireAt, "the grid does not move")
		require.Equal(t, before.Version, after.Version, "a materializer's fenced advance is not disturbed")

		require.NoError(t, jobs.PauseSchedule(ctx, s, "nightly"))
		_, err = jobs.TriggerSchedule(ctx, s, "nightly")
		require.NoError(t, err, "a paused schedule may be run by hand")
		require.Len(t, occurrences(t, s, "nightly"), 2)
		// Pressed twice within a millisecond: two occurrences, not an error.
		for range 3 {
			_, err = jobs.TriggerSchedule(ctx, s, "nightly")
			require.NoError(t, err, "triggers in quick succession")
		}
		require.Len(t, occurrences(t, s, "nightly"), 5)

		ok, err := s.ScheduleDelete(ctx, "nightly")
		require.NoError(t, err)
		require.True(t, ok)
		for _, j := range occurrences(t, s, "nightly") {
			require.Equal(t, store.StateCancelled, j.State, "a removed schedule's manual occurrence is cancelled")
		}
		_, err = jobs.TriggerSchedule(ctx, s, "nightly")
		require.True(t, errors.Is(err, store.ErrNotFound), "%v", err)
		require.True(t, errors.Is(jobs.PauseSchedule(ctx, s, "nightly"), store.ErrNotFound))
	})
}
