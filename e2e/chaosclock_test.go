//go:build unix

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// clockStep is one step of the database clock.
type clockStep struct {
	offset   time.Duration // of the database clock from real time, after the step
	at       time.Time
	inFlight int // long job calls in progress when it stepped
}

// TestChaosDatabaseClockSteps steps the clock of the database an hour
// forward, back, and an hour back (a private PostgreSQL or MariaDB under
// libfaketime: clock_timestamp() or UTC_TIMESTAMP(6) moves, every node's
// own clock does not), while 3 nodes
// run job calls longer than the lease, endless tasks, and a recurring
// schedule whose next occurrences wait ready, and one-off jobs trickle in.
// No node died and no endpoint failed, so a step must not turn into a
// reclaim: no job or task may be called while an earlier call of it is
// still worked on, no attempt may be spent (a job's attempt beyond its
// first that no endpoint failure explains, or a reclaim in its history),
// and no occurrence may be marked missed.
//
// SLOTPOLLER_CHAOS_DURATION repeats the steps (back to the real time, an
// hour forward, back, an hour back) until it has passed.
//
// The two servers' farms run side by side: each server is the farm's own.
func TestChaosDatabaseClockSteps(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		storetest.RequirePostgres(t) // the suite's switch for the PostgreSQL tests
		t.Parallel()
		pg := startPrivatePostgresWithFakeClock(t)
		databaseClockSteps(t, storetest.DB{Driver: "postgres", DSN: pg.DSN()}, pg)
	})
	t.Run("mysql", func(t *testing.T) {
		storetest.RequireMySQL(t) // the suite's switch for the MySQL tests
		t.Parallel()
		my := startPrivateMariaDBWithFakeClock(t)
		databaseClockSteps(t, storetest.DB{Driver: "mysql", DSN: my.DSN()}, my)
	})
}

// steppable is a private database server whose clock the test steps.
type steppable interface {
	SetClockOffset(offset time.Duration)
}

func databaseClockSteps(t *testing.T, db storetest.DB, server steppable) {
	began := time.Now()
	ctx := context.Background()
	s := storetest.OpenMigrated(t, db)

	const (
		lease    = 3 * time.Second
		longCall = 5 * time.Second // longer than the lease: each step meets calls that need renewals
		longJobs = 6
		settle   = 8 * time.Second // after each step: the long calls in flight end, new ones start
	)
	rec := &chaosRecorder{slowCall: fastChaos.slowCall, longCall: longCall, stubborn: true}
	f := newScenarioFarm(t, s, db, rec, "SLOTPOLLER_JOBS_LEASE="+lease.String())
	f.addSlowTasks(chaosSlowTasks)
	for i := range chaosTasks / 2 {
		require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: fmt.Sprintf("feed-%d", i), Endpoint: "/tasks/feed", Every: fastChaos.every}))
	}
	// Occurrences every second, materialized ahead and waiting ready, with
	// a tolerance no healthy farm comes near.
	require.NoError(t, jobs.AddSchedule(ctx, s, store.Schedule{Name: "tick", Every: time.Second, Endpoint: "/schedules/tick",
		Method: "POST", MaxAttempts: 3, Tolerance: 5 * time.Second, Misfire: store.MisfireSkip, Overlap: store.OverlapAllow,
		Enabled: true, Source: store.SourceCommand}))
	waitFor(t, 30*time.Second, "the schedule's first occurrences to run", func() bool {
		n, err := s.JobCounts(ctx)
		require.NoError(t, err)
		return n[store.StateDone] >= 2
	})

	// One-off jobs trickle in through the steps.
	stop := make(chan struct{})
	var trickle sync.WaitGroup
	trickle.Add(1)
	go func() {
		defer trickle.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			_, _ = jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/short", MaxAttempts: 20, UniqueKey: "short-" + strconv.Itoa(i)})
		}
	}()

	offsets := []time.Duration{time.Hour, 0, -time.Hour}
	until := time.Now().Add(chaosDuration(t))
	var steps []clockStep
	var long []int64
	for i := 0; i < len(offsets) || time.Now().Before(until); i++ {
		if i >= len(offsets) {
			offsets = append(offsets, 0, time.Hour, 0, -time.Hour)
		}
		for j := range longJobs {
			id, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/long", MaxAttempts: 20, UniqueKey: fmt.Sprintf("long-%d-%d", i, j)})
			require.NoError(t, err)
			long = append(long, id)
		}
		waitFor(t, 30*time.Second, "long job calls in flight", func() bool {
			n := 0
			for _, c := range f.inFlight() {
				n += c
			}
			return n >= longJobs*2/3
		})
		time.Sleep(time.Second) // a renewal has confirmed each lease since its claim
		n := 0
		for _, c := range f.inFlight() {
			n += c
		}
		// Three quarters into a second: the schedule's next occurrence is
		// written (two 250 ms slots ahead) and waits ready for its fire
		// time, the whole second.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 750*time.Millisecond)))
		server.SetClockOffset(offsets[i])
		steps = append(steps, clockStep{offsets[i], time.Now(), n})
		time.Sleep(settle)
	}
	close(stop)
	trickle.Wait()
	// The long jobs' last calls end; one the farm gave up on is left
	// waiting (a figure, not a wait that fails the test).
	for end := time.Now().Add(2 * longCall); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if len(f.inFlight()) == 0 {
			break
		}
	}
	for _, n := range f.nodes {
		n.stop(t)
	}

	calls := rec.snapshot()
	o := overlaps(t, calls)
	failures := map[string]int{} // answers that were not a success, per job
	for _, c := range calls {
		if c.kind == "job" && c.cut {
			failures[c.key]++
		}
	}
	var ids []int64
	rows, err := s.DB().QueryContext(ctx, store.Expand(s.Dialect(), `SELECT id FROM {jobs} ORDER BY id`))
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	rows.Close()
	burned, missed, waiting, longWaiting := 0, 0, 0, 0
	isLong := map[int64]bool{}
	for _, id := range long {
		isLong[id] = true
	}
	for _, id := range ids {
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		reclaims := 0
		for _, e := range j.History {
			if e.Outcome == store.OutcomeReclaimed {
				reclaims++
			}
		}
		if b := max(j.Attempt-1-failures[strconv.FormatInt(id, 10)], reclaims); b > 0 {
			burned += b
			t.Errorf("job %d (%s) %s at attempt %d with %d reclaims and no endpoint failure: %d attempts burned; history %+v",
				id, j.Endpoint, j.State, j.Attempt, reclaims, b, j.History)
		}
		switch j.State {
		case store.StateMissed:
			missed++
			t.Errorf("occurrence %d of %s for %v marked missed: %s", id, j.Schedule, j.ScheduledFor, j.LastError)
		case store.StateReady, store.StateRunning:
			waiting++
			if isLong[id] {
				longWaiting++
			}
		}
	}
	sc, err := s.ScheduleGet(ctx, "tick")
	require.NoError(t, err)
	if sc.Missed != 0 {
		t.Errorf("schedule tick counts %d occurrences skipped as missed", sc.Missed)
	}
	// Every reclaim a node logged is a spurious one: no node died.
	reclaimed := 0
	countRE := regexp.MustCompile(`reclaimed jobs whose lease expired.*count=(\d+)`)
	for _, n := range f.nodes {
		for _, m := range countRE.FindAllStringSubmatch(n.output(), -1) {
			c, _ := strconv.Atoi(m[1])
			reclaimed += c
		}
	}

	// The schedule after the last step: a figure (the schedule's next fire
	// time lies in the database's own time).
	lastStep := steps[len(steps)-1].at
	firedAfter := 0
	for _, c := range calls {
		if c.path == "/schedules/tick" && c.start.After(lastStep) {
			firedAfter++
		}
	}
	var stepList []string
	for _, st := range steps {
		stepList = append(stepList, fmt.Sprintf("%+v (%d long calls in flight)", st.offset, st.inFlight))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### database clock steps (%s under libfaketime)\n\n3 nodes, job lease %v, %d long jobs of %v calls per step, %d tasks (%d with %v calls, one ending each call at its deadline), "+
		"a schedule every 1s (tolerance 5s, misfire skip), a job enqueued every 100 ms; the database clock set to real time %s, %v apart; "+
		"%d jobs in all. %v in all.\n\n", db.Driver, lease, longJobs, longCall, chaosTasks/2+chaosSlowTasks+1, chaosSlowTasks+1, fastChaos.slowCall,
		strings.Join(stepList, ", then "), settle, len(ids), time.Since(began).Round(time.Second))
	fmt.Fprintf(&b, "| overlapping job calls | longest | overlapping task calls | longest | attempts burned by a step | rows reclaimed or missed (node logs) | occurrences missed | schedule's missed count | calls past their deadline | jobs left waiting (long ones) | schedule calls in the %v after the last step |\n", settle)
	fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n| %d | %v | %d | %v | %d | %d | %d | %d | %d | %d (%d) | %d |\n",
		o.jobs, o.worstJob.Round(time.Millisecond), o.tasks, o.worstTask.Round(time.Millisecond), burned, reclaimed, missed, sc.Missed,
		o.pastDeadline, waiting, longWaiting, firedAfter)
	t.Log("\n" + b.String())
	appendChaosReport(t, b.String())
}
