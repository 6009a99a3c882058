package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// A claim of a few jobs reads about those jobs, not the backlog, even when
// the table's statistics were taken before the burst: they count its ready
// rows as a handful, and on PostgreSQL the planner then read and sorted
// every ready row for each claim (14 ms a claim over 20,000 ready jobs,
// half a millisecond in index order). The rows the claim's transaction
// read from the jobs table are counted by the database itself.
func TestAClaimReadsItsJobsNotTheBacklog(t *testing.T) {
	const backlog = 20_000
	for _, driver := range []string{"postgres", "mysql"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			s, _ := storetest.Open(t, driver)
			ctx := context.Background()
			_, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/jobs/first", Method: "POST", MaxAttempts: 1})
			require.NoError(t, err)
			// Statistics of a table with one job, as autovacuum or
			// InnoDB leave them until a tenth of the table has changed.
			analyze := map[string]string{"postgres": "ANALYZE slotpoller_jobs", "mysql": "ANALYZE TABLE slotpoller_jobs"}[driver]
			_, err = s.DB().ExecContext(ctx, analyze)
			require.NoError(t, err)
			burst := make([]store.NewJob, backlog)
			for i := range burst {
				burst[i] = store.NewJob{Endpoint: fmt.Sprintf("/jobs/%d", i), Method: "POST", MaxAttempts: 1}
			}
			_, err = s.JobInsertMany(ctx, burst)
			require.NoError(t, err)

			for round := range 3 {
				tx, err := s.DB().BeginTx(ctx, nil)
				require.NoError(t, err)
				before := jobsRowsRead(t, tx, driver)
				claims, err := s.WithTx(tx).JobsClaim(ctx, "owner", "node", 8, store.Lease(time.Minute))
				require.NoError(t, err)
				read := jobsRowsRead(t, tx, driver) - before
				require.NoError(t, tx.Commit())
				require.Len(t, claims, 8)
				t.Logf("claim %d: %d rows of the jobs table read for 8 claimed, %d ready", round+1, read, backlog+1-8*round)
				require.Positive(t, read, "the claim's reads are counted in its transaction")
				require.Less(t, read, int64(1000), "a claim of 8 reads its jobs, not the %d ready ones", backlog)
			}
		})
	}
}

// jobsRowsRead is how many rows tx's session has read so far: on
// PostgreSQL, the tuples this transaction's scans took from the jobs
// table and from its indexes (an index scan's are counted on the index); on MySQL, the rows InnoDB handed the
// server (Handler_read_*, for every table: the claim reads only jobs).
func jobsRowsRead(t *testing.T, tx *sql.Tx, driver string) int64 {
	t.Helper()
	ctx := context.Background()
	var n int64
	switch driver {
	case "postgres":
		require.NoError(t, tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(pg_stat_get_xact_tuples_returned(r.oid) + pg_stat_get_xact_tuples_fetched(r.oid)), 0)
FROM pg_class r WHERE r.oid = 'slotpoller_jobs'::regclass
  OR r.oid IN (SELECT i.indexrelid FROM pg_index i WHERE i.indrelid = 'slotpoller_jobs'::regclass)`).Scan(&n))
	case "mysql":
		n = mysqlRowsRead(t, tx)
	}
	return n
}

// mysqlRowsRead is how many rows InnoDB has handed the server in the
// session of q (a transaction's or a connection's): the session's
// Handler_read_* counters, which do not tell one table or scan from
// another.
func mysqlRowsRead(t *testing.T, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}) int64 {
	t.Helper()
	rows, err := q.QueryContext(context.Background(), "SHOW SESSION STATUS LIKE 'Handler_read%'")
	require.NoError(t, err)
	defer rows.Close()
	var n int64
	for rows.Next() {
		var name string
		var v int64
		require.NoError(t, rows.Scan(&name, &v))
		n += v
	}
	require.NoError(t, rows.Err())
	return n
}
