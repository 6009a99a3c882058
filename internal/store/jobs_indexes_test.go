package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/storetest"
)

// On PostgreSQL a claim and a finish change a job's state, which is
// indexed, so neither update is HOT: each writes an entry into every index
// of the jobs table whose predicate the new row meets, whatever columns
// the index covers. An index without a predicate is written three times a
// job (insert, claim, finish): the btree on idempotency keys that search
// first added cost the database 41% more CPU per job in the 100,000-job
// burn-down (78.5 against 55.5 ms per 1,000 jobs; River 56.5), and a hash
// index brought it back near River's (go run ./bench compare -only burn
// -burns 100000x4x1000 -rounds 4). The other databases write a secondary
// index only when its columns change.
//
// So every index without a predicate is named here with why it is worth
// its three writes a job, and a new one fails this test until it is
// measured so and added.
func TestEveryJobsIndexWrittenByEachUpdateIsChosen(t *testing.T) {
	storetest.RequirePostgres(t)
	t.Parallel()
	s, _ := storetest.Open(t, "postgres")
	chosen := map[string]string{
		"slotpoller_jobs_pkey":     "btree: the primary key",
		"slotpoller_jobs_state_id": "btree: counts by state and the pages of jobs by state (status, metrics, dashboard, API)",
		"slotpoller_jobs_endpoint": "btree: jobs by endpoint, by prefix",
		"slotpoller_jobs_created":  "btree: jobs by the time they were enqueued",
		"slotpoller_jobs_idem_key": "hash: search by idempotency key (a hash entry is a fraction of a btree's on random keys)",
	}
	rows, err := s.DB().QueryContext(context.Background(), `SELECT i.relname, am.amname
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_am am ON am.oid = i.relam
WHERE t.relname = 'slotpoller_jobs' AND t.relnamespace = to_regnamespace(current_schema()) AND x.indpred IS NULL`)
	require.NoError(t, err)
	defer rows.Close()
	got := map[string]string{}
	for rows.Next() {
		var name, method string
		require.NoError(t, rows.Scan(&name, &method))
		got[name] = method
	}
	require.NoError(t, rows.Err())
	for name, method := range got {
		why, ok := chosen[name]
		require.True(t, ok, "index %s (%s) on the jobs table has no predicate: every claim and finish writes it on PostgreSQL; measure the burn-down with and without it, then name it here", name, method)
		require.Contains(t, why, method+":", "index %s is a %s index", name, method)
	}
	for name := range chosen {
		require.Contains(t, got, name, "an index this test names is gone: take it out of the list")
	}
}
