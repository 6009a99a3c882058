package jobs_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func everySecond(name, misfire string) store.Schedule {
	return store.Schedule{Name: name, Every: time.Second, Endpoint: "/jobs/" + name, Method: "POST", MaxAttempts: 3,
		Tolerance: 2 * time.Second, Misfire: misfire, Overlap: store.OverlapAllow, Enabled: true, Source: store.SourceCommand}
}

// outage moves a schedule's next occurrence 10s into the past on the
// database clock, as if no node had run for 10s, and returns it.
func outage(t *testing.T, s *store.Store, name string) time.Time {
	_, err := s.DB().ExecContext(context.Background(),
		store.Expand(s.Dialect(), `UPDATE {schedules} SET next_fire_at = {now+?} WHERE name = ?`), -10_000, name)
	require.NoError(t, err)
	// Align to the every-second grid like a real occurrence.
	sc, err := s.ScheduleGet(context.Background(), name)
	require.NoError(t, err)
	aligned := sc.NextFireAt.Truncate(time.Second)
	setNext(t, s, name, aligned)
	return aligned
}

func setNext(t *testing.T, s *store.Store, name string, next time.Time) {
	_, err := s.DB().ExecContext(context.Background(),
		store.Expand(s.Dialect(), `UPDATE {schedules} SET next_fire_at = ? WHERE name = ?`), s.Dialect().TimeArg(next), name)
	require.NoError(t, err)
}

func occurrences(t *testing.T, s *store.Store, name string) []store.Job {
	all, err := s.JobsList(context.Background(), store.JobFilter{Limit: 10000})
	require.NoError(t, err)
	var out []store.Job
	for _, j := range all {
		if j.Schedule == name {
			out = append(out, j)
		}
	}
	return out
}

func TestMisfirePolicies(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		for _, p := range []string{store.MisfireSkip, store.MisfireOnce, store.MisfireAll} {
			require.NoError(t, jobs.AddSchedule(ctx, s, everySecond("s-"+p, p)))
		}
		// One outage for all three, so that they are compared on one grid
		// (three outages could straddle a second).
		outage(t, s, "s-skip")
		start, err := s.ScheduleGet(ctx, "s-skip")
		require.NoError(t, err)
		setNext(t, s, "s-once", *start.NextFireAt)
		setNext(t, s, "s-all", *start.NextFireAt)
		before, err := s.Now(ctx)
		require.NoError(t, err)
		res, err := jobs.Materialize(ctx, s, 500*time.Millisecond, quiet)
		require.NoError(t, err)
		require.Equal(t, 3, res.Schedules)

		skip, _ := s.ScheduleGet(ctx, "s-skip")
		once, _ := s.ScheduleGet(ctx, "s-once")
		all, _ := s.ScheduleGet(ctx, "s-all")
		nSkip, nOnce, nAll := len(occurrences(t, s, "s-skip")), len(occurrences(t, s, "s-once")), len(occurrences(t, s, "s-all"))

		// 10s of outage with a 2s tolerance: at least 8 occurrences can no
		// longer start in time (more if the machine is slow to get from the
		// outage to the materializing step: the database clock runs on).
		require.GreaterOrEqual(t, skip.Missed, int64(7), "skip records the late ones as missed")
		require.LessOrEqual(t, skip.Missed, int64(14), "skip records the late ones as missed")
		require.InDelta(t, 3, nSkip, 1, "skip runs only those still within tolerance")
		require.Equal(t, skip.Missed-1, once.Missed, "once runs the latest late one instead of counting it")
		require.Equal(t, nSkip+1, nOnce)
		require.Zero(t, all.Missed)
		require.Equal(t, int(skip.Missed)+nSkip, nAll, "all runs every occurrence")

		// Every occurrence is on its grid, once, with its fire time.
		for _, j := range occurrences(t, s, "s-all") {
			require.NotNil(t, j.ScheduledFor)
			require.Equal(t, j.ScheduledFor.Truncate(time.Second), *j.ScheduledFor)
			require.Equal(t, "slotpoller-schedule:s-all:"+j.ScheduledFor.UTC().Format(time.RFC3339Nano), j.IdempotencyKey)
		}
		// The grid resumes: the next occurrence was in the future when the
		// materializing began, and is at most an interval and the look-ahead past the clock
		// now (on the slow T-SQL test server the reads above take long
		// enough for it to come due meanwhile).
		now, err := s.Now(ctx)
		require.NoError(t, err)
		require.True(t, skip.NextFireAt.After(before), "next %v, before materializing %v", skip.NextFireAt, before)
		require.False(t, skip.NextFireAt.After(now.Add(2*time.Second)), "next %v, now %v", skip.NextFireAt, now)
	})
}

func TestRacingMaterializersCreateEachOccurrenceOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, db := storetest.OpenDB(t, driver)
		ctx := context.Background()
		require.NoError(t, jobs.AddSchedule(ctx, s, everySecond("race", store.MisfireAll)))
		outage(t, s, "race")
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				other, err := db.Open(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				defer other.Close()
				if _, err := jobs.Materialize(ctx, other, 500*time.Millisecond, quiet); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		seen := map[time.Time]bool{}
		for _, j := range occurrences(t, s, "race") {
			require.False(t, seen[*j.ScheduledFor], "occurrence %v exists twice", j.ScheduledFor)
			seen[*j.ScheduledFor] = true
		}
		require.GreaterOrEqual(t, len(seen), 10)
	})
}

func TestOverlapForbidRunsOccurrencesOneAtATime(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		sc := everySecond("serial", store.MisfireAll)
		sc.Overlap = store.OverlapForbid
		require.NoError(t, jobs.AddSchedule(ctx, s, sc))
		outage(t, s, "serial")
		_, err := jobs.Materialize(ctx, s, 0, quiet)
		require.NoError(t, err)
		require.Greater(t, len(occurrences(t, s, "serial")), 5)

		claims, err := s.JobsClaim(ctx, "inc-a", "node-a", 100, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, claims, 1, "one claim statement takes only the earliest occurrence")
		more, err := s.JobsClaim(ctx, "inc-b", "node-b", 100, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Empty(t, more, "nothing more while it runs")
		ok, err := s.JobFinishIfRunning(ctx, claims[0].ID, claims[0].Token, store.Outcome{State: store.StateDone})
		require.NoError(t, err)
		require.True(t, ok)
		next, err := s.JobsClaim(ctx, "inc-b", "node-b", 100, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, next, 1)
		require.True(t, next[0].ScheduledFor.After(*claims[0].ScheduledFor), "then the next one in fire order")
	})
}

func TestOccurrenceNotStartedWithinToleranceIsMissed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		fire := time.Now().UTC().Add(-time.Hour)
		by := fire.Add(time.Minute)
		id, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/x", Method: "POST", RunAt: &fire, MaxAttempts: 1,
			IdempotencyKey: "k", Schedule: "nightly", ScheduledFor: &fire, StartBy: &by})
		require.NoError(t, err)
		_, err = s.JobsReclaimExpired(ctx, time.Time{})
		require.NoError(t, err)
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.StateMissed, j.State)
		out, err := s.ScheduleOutcomes(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), out["nightly"].MissedJobs)
	})
}

func TestScheduleValidation(t *testing.T) {
	good := everySecond("ok", store.MisfireOnce)
	_, err := jobs.CompileSchedule(good)
	require.NoError(t, err)
	for _, mutate := range []func(*store.Schedule){
		func(s *store.Schedule) { s.Name = "" },
		func(s *store.Schedule) { s.Every, s.Cron = 0, "" },
		func(s *store.Schedule) { s.Cron = "0 2 * * *" }, // both
		func(s *store.Schedule) { s.Endpoint = "//evil/x" },
		func(s *store.Schedule) { s.Misfire = "sometimes" },
		func(s *store.Schedule) { s.Overlap = "maybe" },
		func(s *store.Schedule) { s.Tolerance = 0 },
		func(s *store.Schedule) { s.Every, s.Cron = 0, "61 * * * *" },
	} {
		bad := good
		mutate(&bad)
		_, err := jobs.CompileSchedule(bad)
		require.Error(t, err, "%+v", bad)
	}
}

func TestPutScheduleKeepsOrMovesTheGrid(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	sc := everySecond("cfg", store.MisfireOnce)
	sc.Every, sc.Source = time.Hour, store.SourceConfig
	what, err := jobs.PutSchedule(ctx, s, sc)
	require.NoError(t, err)
	require.Equal(t, "created", what)
	first, _ := s.ScheduleGet(ctx, "cfg")
	what, err = jobs.PutSchedule(ctx, s, sc)
	require.NoError(t, err)
	require.Equal(t, "unchanged", what)
	sc.Tolerance = time.Minute
	what, err = jobs.PutSchedule(ctx, s, sc)
	require.NoError(t, err)
	require.Equal(t, "updated", what)
	second, _ := s.ScheduleGet(ctx, "cfg")
	require.Equal(t, *first.NextFireAt, *second.NextFireAt, "a new tolerance keeps the grid")
	sc.Every = 2 * time.Hour
	_, err = jobs.PutSchedule(ctx, s, sc)
	require.NoError(t, err)
	third, _ := s.ScheduleGet(ctx, "cfg")
	require.Equal(t, third.NextFireAt.Truncate(2*time.Hour), *third.NextFireAt, "a new interval moves to its own grid")
}

func TestLongOutageWithAWideToleranceNeverMovesTheGridBack(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	sc := everySecond("wide", store.MisfireSkip)
	sc.Tolerance = 30 * time.Minute
	require.NoError(t, jobs.AddSchedule(ctx, s, sc))
	_, err := s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {schedules} SET next_fire_at = {now+?} WHERE name = ?`), -20*60*1000, "wide")
	require.NoError(t, err)
	first, err := s.ScheduleGet(ctx, "wide")
	require.NoError(t, err)
	start := first.NextFireAt.Truncate(time.Second)
	_, err = s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {schedules} SET next_fire_at = ? WHERE name = ?`), s.Dialect().TimeArg(start), "wide")
	require.NoError(t, err)
	prev := start
	for range 3 {
		_, err := jobs.Materialize(ctx, s, 0, quiet)
		require.NoError(t, err)
		cur, err := s.ScheduleGet(ctx, "wide")
		require.NoError(t, err)
		require.False(t, cur.NextFireAt.Before(prev), "next fire time went back from %v to %v", prev, cur.NextFireAt)
		prev = *cur.NextFireAt
	}
	for _, j := range occurrences(t, s, "wide") {
		require.False(t, j.ScheduledFor.Before(start), "occurrence %v from before the outage began", j.ScheduledFor)
	}
	require.Zero(t, func() int64 { sc, _ := s.ScheduleGet(ctx, "wide"); return sc.Missed }(), "within a 30m tolerance nothing is late")
}

func TestPauseSurvivesConfigAndResumeOnlyResumes(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	sc := everySecond("cfg", store.MisfireOnce)
	sc.Source = store.SourceConfig
	_, err := jobs.PutSchedule(ctx, s, sc)
	require.NoError(t, err)
	ok, err := s.ScheduleSetEnabled(ctx, "cfg", false, nil)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = jobs.PutSchedule(ctx, s, sc) // a node restarts with the same config
	require.NoError(t, err)
	cur, _ := s.ScheduleGet(ctx, "cfg")
	require.False(t, cur.Enabled, "an operator's pause survives a restart")

	require.NoError(t, jobs.ResumeSchedule(ctx, s, "cfg"))
	cur, _ = s.ScheduleGet(ctx, "cfg")
	require.True(t, cur.Enabled)
	version := cur.Version
	require.NoError(t, jobs.ResumeSchedule(ctx, s, "cfg"))
	cur, _ = s.ScheduleGet(ctx, "cfg")
	require.Equal(t, version, cur.Version, "resuming a running schedule changes nothing")
}

func hourly(name string) store.Schedule {
	sc := everySecond(name, store.MisfireOnce)
	sc.Every, sc.Tolerance = time.Hour, time.Minute
	return sc
}

// A node that read a schedule just before it was removed must not write an
// occurrence after the removal cancelled the waiting ones; nor after a
// pause.
func TestRemovedOrPausedScheduleGetsNoOccurrenceFromAnEarlierRead(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		lookahead := 2 * time.Hour
		require.NoError(t, jobs.AddSchedule(ctx, s, hourly("gone")))
		require.NoError(t, jobs.AddSchedule(ctx, s, hourly("paused")))
		due, now, err := s.SchedulesDue(ctx, lookahead) // the materializer reads them
		require.NoError(t, err)
		require.Len(t, due, 2)

		ok, err := s.ScheduleDelete(ctx, "gone") // an operator removes one
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.ScheduleSetEnabled(ctx, "paused", false, nil) // and pauses the other
		require.NoError(t, err)
		require.True(t, ok)

		res, err := jobs.MaterializeDue(ctx, s, due, now, lookahead, false, quiet) // then the materializer writes
		require.NoError(t, err)
		require.Zero(t, res.Created)
		for _, name := range []string{"gone", "paused"} {
			for _, j := range occurrences(t, s, name) {
				require.NotEqual(t, store.StateReady, j.State, "schedule %q got occurrence %v after it was stopped", name, j.ScheduledFor)
			}
		}
	})
}

// Removing a schedule and adding it again before its next occurrence: the
// removed schedule's cancelled occurrence must not take the new one's
// place.
func TestReaddedScheduleGetsItsOccurrence(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		lookahead := 2 * time.Hour
		require.NoError(t, jobs.AddSchedule(ctx, s, hourly("again")))
		_, err := jobs.Materialize(ctx, s, lookahead, quiet)
		require.NoError(t, err)
		first := occurrences(t, s, "again")
		require.NotEmpty(t, first)

		_, err = s.ScheduleDelete(ctx, "again")
		require.NoError(t, err)
		require.NoError(t, jobs.AddSchedule(ctx, s, hourly("again")))
		_, err = jobs.Materialize(ctx, s, lookahead, quiet)
		require.NoError(t, err)

		ready := map[time.Time]int{}
		for _, j := range occurrences(t, s, "again") {
			if j.State == store.StateReady {
				ready[*j.ScheduledFor]++
			}
		}
		for _, j := range first {
			require.Equal(t, 1, ready[*j.ScheduledFor], "occurrence %v of the re-added schedule", j.ScheduledFor)
		}

		// Once per occurrence still holds for the live schedule.
		sc, err := s.ScheduleGet(ctx, "again")
		require.NoError(t, err)
		_, err = s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {schedules} SET next_fire_at = ? WHERE name = ?`),
			s.Dialect().TimeArg(*first[len(first)-1].ScheduledFor), "again")
		require.NoError(t, err)
		res, err := jobs.Materialize(ctx, s, lookahead, quiet)
		require.NoError(t, err)
		require.Zero(t, res.Created, "an occurrence of a live schedule is written once (next was %v)", sc.NextFireAt)
	})
}

// A step of the database clock ahead makes every fire time it jumped over
// look late, though no time went by for the farm: the materializer across
// a step runs none of them and counts none as missed, whatever the
// misfire policy, and goes on from the first occurrence that can still
// start in time. Without the step the same hour is an outage, counted by
// the policy.
func TestAStepOfTheDatabaseClockIsNotAnOutage(t *testing.T) {
	for _, misfire := range []string{store.MisfireOnce, store.MisfireSkip, store.MisfireAll} {
		t.Run(misfire, func(t *testing.T) {
			s, _ := storetest.Open(t, "sqlite")
			ctx := context.Background()
			sc := everySecond("tick", misfire)
			sc.Every, sc.Tolerance = time.Minute, time.Second
			require.NoError(t, jobs.AddSchedule(ctx, s, sc))
			due, now, err := s.SchedulesDue(ctx, time.Hour)
			require.NoError(t, err)
			require.Len(t, due, 1)
			stepped := now.Add(time.Hour) // the clock as it reads after a step of an hour ahead

			res, err := jobs.MaterializeDue(ctx, s, due, stepped, 2*time.Second, true, quiet)
			require.NoError(t, err)
			require.Zero(t, res.Missed, "no occurrence is missed across a step")
			require.LessOrEqual(t, res.Created, 1, "only what can still start in time runs")
			for _, j := range occurrences(t, s, "tick") {
				require.False(t, j.ScheduledFor.Add(sc.Tolerance).Before(stepped), "an occurrence the step jumped over was written: %v", j.ScheduledFor)
			}
			got, err := s.ScheduleGet(ctx, "tick")
			require.NoError(t, err)
			require.Zero(t, got.Missed)
			require.True(t, got.NextFireAt.After(stepped.Add(-sc.Tolerance)), "the schedule goes on from after the step: next %v", got.NextFireAt)

			// The same hour without a step is an outage.
			if misfire == store.MisfireAll {
				return // every occurrence runs, none is missed
			}
			s2, _ := storetest.Open(t, "sqlite")
			require.NoError(t, jobs.AddSchedule(ctx, s2, sc))
			due, now, err = s2.SchedulesDue(ctx, time.Hour)
			require.NoError(t, err)
			res, err = jobs.MaterializeDue(ctx, s2, due, now.Add(time.Hour), 2*time.Second, false, quiet)
			require.NoError(t, err)
			require.Positive(t, res.Missed, "an outage is counted by the misfire policy")
		})
	}
}
