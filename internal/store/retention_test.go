package store_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// fillJobs inserts n jobs in state, finished (when finishedAgo >= 0)
// finishedAgo before the database's now, due dueIn from now, with attempt
// attempt, in one statement. Times are pinned relative to the database
// clock, the only clock retention reads.
func fillJobs(t testing.TB, s *store.Store, n int, state string, finishedAgo, dueIn time.Duration, attempt int) {
	t.Helper()
	// MariaDB stops a recursive CTE at max_recursive_iterations (1,000 by
	// default), MySQL at cte_max_recursion_depth: a statement per 1,000.
	for s.Dialect().Name() == "mysql" && n > 1000 {
		fillJobs(t, s, 1000, state, finishedAgo, dueIn, attempt)
		n -= 1000
	}
	finished := "{now+?}"
	args := []any{n, state, dueIn.Milliseconds(), attempt, -finishedAgo.Milliseconds()}
	if finishedAgo < 0 {
		finished, args = "NULL", args[:4]
	}
	with, tail := "WITH RECURSIVE", ""
	if s.Dialect().Name() == "sqlserver" {
		with, tail = "WITH", " OPTION (MAXRECURSION 0)"
	}
	seq := with + ` seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?)`
	insert := `INSERT INTO {jobs} (endpoint, method, state, run_at, attempt, max_attempts, idem_key, created_at, finished_at)`
	head := seq + "\n" + insert
	if s.Dialect().Name() == "mysql" {
		head = insert + "\n" + seq // MySQL's INSERT ... SELECT takes the WITH after the columns
	}
	q := store.Expand(s.Dialect(), head+`
SELECT '/fill', 'POST', ?, {now+?}, CAST(? AS INTEGER), 40, 'fill', {now}, `+finished+` FROM seq`+tail)
	_, err := s.DB().ExecContext(context.Background(), q, args...)
	require.NoError(t, err)
}

// with100k runs a test of 100,000 rows on SQLite, PostgreSQL and MySQL
// (not with -short), each on a new database.
//
// fn gets the divisor of its row counts: 1, or 10 on SQLite under the race
// detector (storetest.UnderRace), where 100,000 rows take minutes.
func with100k(t *testing.T, fn func(t *testing.T, s *store.Store, driver string, div int)) {
	if testing.Short() {
		t.Skip("100k rows")
	}
	for _, d := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(d, func(t *testing.T) {
			switch d {
			case "postgres":
				storetest.RequirePostgres(t)
			case "mysql":
				storetest.RequireMySQL(t)
			}
			s, _ := storetest.Open(t, d)
			div := 1
			if d == "sqlite" && storetest.UnderRace {
				div = 10
			}
			fn(t, s, d, div)
		})
	}
}

// A retention delete takes one state's jobs finished before the cutoff, at
// most the batch per statement, and nothing else.
func TestJobsPruneDeletesOneStatePastItsAgeInBatches(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		fillJobs(t, s, 1200, store.StateDone, 2*time.Hour, 0, 1)
		fillJobs(t, s, 30, store.StateDone, 10*time.Minute, 0, 1) // finished, not yet old enough
		fillJobs(t, s, 20, store.StateFailed, 2*time.Hour, 0, 1)
		fillJobs(t, s, 10, store.StateReady, -1, -3*time.Hour, 0) // old run_at, not finished

		var got []int64
		for {
			n, err := s.JobsPrune(ctx, store.StateDone, time.Hour, 500)
			require.NoError(t, err)
			got = append(got, n)
			if n < 500 {
				break
			}
		}
		require.Equal(t, []int64{500, 500, 200}, got)
		counts, err := s.JobCounts(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]int{"done": 30, "failed": 20, "ready": 10}, counts)

		n, err := s.JobsPrune(ctx, store.StateFailed, 3*time.Hour, 500)
		require.NoError(t, err)
		require.Zero(t, n, "failed jobs younger than their retention stay")
		n, err = s.JobsPrune(ctx, store.StateFailed, time.Hour, 500)
		require.NoError(t, err)
		require.EqualValues(t, 20, n)

		_, err = s.JobsPrune(ctx, store.StateReady, time.Hour, 500)
		require.ErrorContains(t, err, "not a finished state")
	})
}

func TestNodesPruneDeletesNodesNotSeenForItsAge(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		for _, name := range []string{"gone", "left", "live"} {
			require.NoError(t, s.NodeCheckIn(ctx, store.NodeState{Name: name, Incarnation: "inc-" + name, Capacity: 1}, time.Hour))
		}
		require.NoError(t, s.NodeLeave(ctx, "left", "inc-left"))
		age := store.Expand(s.Dialect(), `UPDATE {nodes} SET last_seen = {now+?} WHERE name <> ?`)
		_, err := s.DB().ExecContext(ctx, age, -(25 * time.Hour).Milliseconds(), "live")
		require.NoError(t, err)

		n, err := s.NodesPrune(ctx, 24*time.Hour)
		require.NoError(t, err)
		require.EqualValues(t, 2, n)
		nodes, _, err := s.Nodes(ctx, time.Hour)
		require.NoError(t, err)
		require.Len(t, nodes, 1)
		require.Equal(t, "live", nodes[0].Name)
	})
}

// Counts stop at the cap; retrying counts the ready jobs backing off.
func TestJobCountsCapped(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		fillJobs(t, s, 25, store.StateDone, time.Minute, 0, 1)
		fillJobs(t, s, 3, store.StateReady, -1, time.Hour, 2)    // backing off
		fillJobs(t, s, 2, store.StateReady, -1, -time.Second, 1) // failed once, due again: not backing off
		fillJobs(t, s, 4, store.StateReady, -1, time.Hour, 0)    // first attempt later
		fillJobs(t, s, 1, store.StateDead, time.Minute, 0, 40)

		tally, err := s.JobCountsCapped(ctx, 10)
		require.NoError(t, err)
		require.Equal(t, map[string]int{"ready": 9, "retrying": 3, "running": 0, "done": 10, "failed": 0, "dead": 1,
			"cancelled": 0, "missed": 0}, tally.Counts)
		require.True(t, tally.AtCap("done"))
		require.Equal(t, "10+", tally.Show("done"))
		require.Equal(t, "9", tally.Show("ready"))

		now, err := s.Now(ctx)
		require.NoError(t, err)
		listed, err := s.JobsList(ctx, store.JobFilter{States: []string{store.StateReady}, Limit: 100})
		require.NoError(t, err)
		backingOff := 0
		for _, j := range listed {
			if j.BackingOff(now) {
				backingOff++
			}
		}
		require.Equal(t, 3, backingOff, "a listing tells the same jobs apart")

		tally, err = s.JobCountsCapped(ctx, 100)
		require.NoError(t, err)
		require.Equal(t, 25, tally.Counts["done"])
		require.False(t, tally.AtCap("done"))
	})
}

// 100,000 finished jobs are deleted in statements of at most the batch,
// while claims go on: a claim touches ready rows only, which no retention
// delete locks. The claim latency while pruning is logged (run with -v);
// docs/benchmarks.md records it.
func TestJobsPrune100kWhileClaiming(t *testing.T) {
	with100k(t, func(t *testing.T, s *store.Store, driver string, div int) {
		ctx := context.Background()
		const batch = 500
		total := 100_000 / div
		fillJobs(t, s, total, store.StateDone, 48*time.Hour, 0, 1)
		fillJobs(t, s, 2500, store.StateReady, -1, -time.Second, 0)

		// Claim latency without pruning first, for comparison.
		var base []time.Duration
		for range 100 {
			t0 := time.Now()
			_, err := s.JobsClaim(ctx, "inc-a", "node-a", 5, store.Lease(time.Minute))
			require.NoError(t, err)
			base = append(base, time.Since(t0))
			time.Sleep(2 * time.Millisecond)
		}
		sortDurations(base)

		var lat []time.Duration
		var claimed int
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				cs, err := s.JobsClaim(ctx, "inc-a", "node-a", 5, store.Lease(time.Minute))
				if err != nil {
					t.Errorf("claim while pruning: %v", err)
					return
				}
				lat = append(lat, time.Since(t0))
				claimed += len(cs)
				time.Sleep(2 * time.Millisecond)
			}
		}()

		start := time.Now()
		var deleted int64
		var statements, maxStmt time.Duration
		count := 0
		for {
			t0 := time.Now()
			n, err := s.JobsPrune(ctx, store.StateDone, 24*time.Hour, batch)
			require.NoError(t, err)
			d := time.Since(t0)
			statements += d
			maxStmt = max(maxStmt, d)
			count++
			require.LessOrEqual(t, n, int64(batch), "one statement deletes at most a batch")
			deleted += n
			if n < batch {
				break
			}
		}
		elapsed := time.Since(start)
		close(stop)
		wg.Wait()

		require.EqualValues(t, total, deleted)
		require.Equal(t, total/batch+1, count, "statements: full batches and one short one")
		counts, err := s.JobCounts(ctx)
		require.NoError(t, err)
		require.Zero(t, counts["done"])
		require.Equal(t, 2500, counts["ready"]+counts["running"])
		require.NotEmpty(t, lat)
		sortDurations(lat)
		t.Logf("%s: claims of 5 before pruning: p50 %v, p99 %v, max %v", driver, base[len(base)/2].Round(time.Microsecond),
			base[len(base)*99/100].Round(time.Microsecond), base[len(base)-1].Round(time.Microsecond))
		t.Logf("%s: deleted %d rows in %d statements of <= %d in %v (mean %v, max %v per statement); %d claims (%d jobs) meanwhile: p50 %v, p99 %v, max %v",
			driver, deleted, count, batch, elapsed.Round(time.Millisecond), (statements / time.Duration(count)).Round(time.Microsecond),
			maxStmt.Round(time.Microsecond), len(lat), claimed, lat[len(lat)/2].Round(time.Microsecond),
			lat[len(lat)*99/100].Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	})
}

// The capped count costs the same at 100,000 rows as at a few: it reads at
// most the cap per state. The figures (run with -v) are in
// docs/benchmarks.md.
func TestJobCountsCapped100k(t *testing.T) {
	with100k(t, func(t *testing.T, s *store.Store, driver string, div int) {
		ctx := context.Background()
		fillJobs(t, s, 80_000/div, store.StateDone, time.Hour, 0, 1)
		fillJobs(t, s, 15_000/div, store.StateDead, time.Hour, 0, 40)
		fillJobs(t, s, 5_000/div, store.StateReady, -1, time.Hour, 3)
		if driver == "postgres" {
			_, err := s.DB().ExecContext(ctx, "VACUUM ANALYZE slotpoller_jobs")
			require.NoError(t, err)
		}
		timeIt := func(f func() error) time.Duration {
			best := time.Hour
			for range 5 {
				t0 := time.Now()
				require.NoError(t, f())
				best = min(best, time.Since(t0))
			}
			return best
		}
		full := timeIt(func() error { _, err := s.JobCounts(ctx); return err })
		var tally store.JobTally
		capped := timeIt(func() (err error) { tally, err = s.JobCountsCapped(ctx, 10_000/div); return err })
		require.Equal(t, 10_000/div, tally.Counts["done"])
		require.Equal(t, 5_000/div, tally.Counts["retrying"])
		t.Logf("%s, %d rows: GROUP BY count %v, capped count (%d per state) %v (best of 5)", driver, 100_000/div,
			full.Round(time.Microsecond), 10_000/div, capped.Round(time.Microsecond))
	})
}

func sortDurations(d []time.Duration) { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }) }

// A ready job due further ahead than any door writes (a run time of
// infinity, or years ahead, written directly) is never claimed: it is set
// aside, dead, with its reason, and a job due within reach is left alone.
func TestUnreachableJobsAreSetAside(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		fillJobs(t, s, 3, store.StateReady, -1, 2*366*24*time.Hour, 0) // two years ahead
		fillJobs(t, s, 2, store.StateReady, -1, 300*24*time.Hour, 0)   // within reach
		n, err := s.JobsSetAsideUnreachable(ctx, 367*24*time.Hour, 2)
		require.NoError(t, err)
		require.EqualValues(t, 2, n, "at most the limit at a time")
		n, err = s.JobsSetAsideUnreachable(ctx, 367*24*time.Hour, 2)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		all, err := s.JobsList(ctx, store.JobFilter{Limit: 10})
		require.NoError(t, err)
		dead := 0
		for _, j := range all {
			if j.State == store.StateDead {
				dead++
				require.Contains(t, j.LastError, store.CannotRun+"run_at is more than")
				continue
			}
			require.Equal(t, store.StateReady, j.State)
		}
		require.Equal(t, 3, dead)
		n, err = s.JobsSetAsideUnreachable(ctx, 367*24*time.Hour, 2)
		require.NoError(t, err)
		require.Zero(t, n)
	})
}
