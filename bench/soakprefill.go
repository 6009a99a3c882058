package main

import (
	"context"
	"fmt"

	"github.com/slotpoller/slotpoller/internal/store"
)

// prefillBatch is how many rows one statement of prefillDone writes.
const prefillBatch = 100_000

// prefillDone writes n done jobs, finished now, as a farm holds the jobs
// it finished within jobs.retention_done (24 h by default: 43 million at
// 500 jobs/s), and vacuums and analyzes the table as autovacuum would
// have: a soak of minutes then runs on the table a long run fills. The
// soak's server is PostgreSQL.
func prefillDone(ctx context.Context, st *store.Store, n int) error {
	for from := 1; from <= n; from += prefillBatch {
		to := min(n, from+prefillBatch-1)
		_, err := st.DB().ExecContext(ctx, `INSERT INTO slotpoller_jobs (endpoint, method, state, run_at, attempt,
  max_attempts, idem_key, owner_node, token, created_at, started_at, finished_at, last_status)
SELECT '/job/p' || g, 'POST', 'done', clock_timestamp(), 1, 1, md5('p' || g), 'prefill', 1,
  clock_timestamp(), clock_timestamp(), clock_timestamp(), 204
FROM generate_series(CAST($1 AS bigint), CAST($2 AS bigint)) AS g`, from, to)
		if err != nil {
			return fmt.Errorf("-prefill: write done jobs %d to %d: %w", from, to, err)
		}
	}
	if _, err := st.DB().ExecContext(ctx, "VACUUM ANALYZE slotpoller_jobs"); err != nil {
		return fmt.Errorf("-prefill: vacuum the jobs table: %w", err)
	}
	return nil
}
