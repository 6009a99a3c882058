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

// The statements a node sends again and again (its turn, a claim, the
// reclaim, the count of due jobs, retention and the look for jobs due
// beyond reach) read about the rows they touch, not the jobs retained
// after they finished, those due later nor those running under live
// leases, however many the table holds.
// On PostgreSQL the database's clock, clock_timestamp(), is read anew for
// every row, and a bound on it is no index condition: retention walked
// every retained done job each time (a third of a second at a million),
// and a claim, a count of due jobs and the look beyond reach walked every
// job due later; the reclaim and the turn's look for leases run out
// walked every running job's lease. The turn's test for a due job let the planner, which
// takes the retained jobs' past run times for the ready ones', walk the
// table. The rows each statement's transaction read from the jobs table
// are counted by the database itself.
func TestRoutineStatementsReadNeitherHistoryNorLaterJobs(t *testing.T) {
	const retained, later, running = 10_000, 10_000, 5_000
	for _, driver := range []string{"postgres", "mysql"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			s, _ := storetest.Open(t, driver)
			ctx := context.Background()
			jobs := make([]store.NewJob, retained)
			for i := range jobs {
				jobs[i] = store.NewJob{Endpoint: fmt.Sprintf("/jobs/done/%d", i), Method: "POST", MaxAttempts: 1}
			}
			_, err := s.JobInsertMany(ctx, jobs)
			require.NoError(t, err)
			// Done a moment ago: within any retention.
			_, err = s.DB().ExecContext(ctx, `UPDATE slotpoller_jobs SET state = 'done', attempt = 1, started_at = run_at, finished_at = run_at, last_status = 204`)
			require.NoError(t, err)
			for i := range jobs {
				jobs[i] = store.NewJob{Endpoint: fmt.Sprintf("/jobs/later/%d", i), Method: "POST", MaxAttempts: 1, Delay: time.Hour}
			}
			_, err = s.JobInsertMany(ctx, jobs)
			require.NoError(t, err)
			// Running on another node, under leases it renews.
			for i := range jobs[:running] {
				jobs[i] = store.NewJob{Endpoint: fmt.Sprintf("/jobs/running/%d", i), Method: "POST", MaxAttempts: 1}
			}
			_, err = s.JobInsertMany(ctx, jobs[:running])
			require.NoError(t, err)
			_, err = s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {jobs} SET state = 'running', attempt = 1, token = 1,
  owner = 'inc-b', owner_node = 'node-b', started_at = run_at, lease_until = {now+?} WHERE endpoint LIKE '/jobs/running/%'`), time.Hour.Milliseconds())
			require.NoError(t, err)
			// As autovacuum leaves a table that keeps its finished jobs:
			// the index entries of their earlier states gone.
			analyze := map[string]string{"postgres": "VACUUM ANALYZE slotpoller_jobs", "mysql": "ANALYZE TABLE slotpoller_jobs"}[driver]
			_, err = s.DB().ExecContext(ctx, analyze)
			require.NoError(t, err)
			node := store.NodeState{Name: "node-a", Incarnation: "inc-a", Capacity: 8, Free: 8}
			require.NoError(t, s.NodeCheckIn(ctx, node, time.Hour))

			statements := []struct {
				name string
				run  func(tx *store.Store) error
			}{
				{"retention of done jobs", func(tx *store.Store) error {
					n, err := tx.JobsPrune(ctx, store.StateDone, 24*time.Hour, 1000)
					if err == nil && n != 0 {
						err = fmt.Errorf("deleted %d jobs within their retention", n)
					}
					return err
				}},
				{"setting aside jobs due beyond reach", func(tx *store.Store) error {
					n, err := tx.JobsSetAsideUnreachable(ctx, 400*24*time.Hour, 1000)
					if err == nil && n != 0 {
						err = fmt.Errorf("set aside %d jobs due within reach", n)
					}
					return err
				}},
				{"the turn", func(tx *store.Store) error {
					r, err := tx.NodeTurn(ctx, node, time.Hour, 2*time.Second, time.Second)
					if err == nil && r.Jobs {
						err = fmt.Errorf("the turn's hint says a job has work: %+v", r)
					}
					return err
				}},
				{"a claim", func(tx *store.Store) error {
					c, err := tx.JobsClaim(ctx, "inc-a", "node-a", 8, store.Lease(time.Minute))
					if err == nil && len(c) != 0 {
						err = fmt.Errorf("claimed %d jobs due later", len(c))
					}
					return err
				}},
				{"the reclaim", func(tx *store.Store) error {
					n, err := tx.JobsReclaimExpired(ctx, time.Time{})
					if err == nil && n != 0 {
						err = fmt.Errorf("reclaimed %d jobs under live leases", n)
					}
					return err
				}},
				{"the count of due jobs", func(tx *store.Store) error {
					_, err := tx.JobsLoad(ctx, time.Second, 100*time.Millisecond, 1000)
					return err
				}},
			}
			for _, st := range statements {
				// Six times: PostgreSQL gives a statement prepared five
				// times a generic plan; the first reads are cold.
				for round := range 6 {
					tx, err := s.DB().BeginTx(ctx, nil)
					require.NoError(t, err)
					before := jobsRowsRead(t, tx, driver)
					require.NoError(t, st.run(s.WithTx(tx)), st.name)
					read := jobsRowsRead(t, tx, driver) - before
					require.NoError(t, tx.Rollback())
					if round == 0 || round == 5 {
						t.Logf("%s (call %d): %d rows of the jobs table read; %d retained, %d due later", st.name, round+1, read, retained, later)
					}
					// The count of due jobs counts the running ones too: at
					// most what the farm holds.
					allowed := int64(1000)
					if st.name == "the count of due jobs" {
						allowed += running
					}
					require.Less(t, read, allowed, "%s (call %d) reads the rows it touches, not the %d retained jobs, the %d due later nor the %d running", st.name, round+1, retained, later, running)
				}
			}
		})
	}
}
