package schema_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/schema"
)

// An application's role that was granted the PostgreSQL entry point keeps
// it across the migrations that replace the function (versions 12 and 17
// each gave it a trailing parameter, queue and traceparent: a drop and a
// create), and PUBLIC, revoked before, stays revoked: from version 11
// through both, and from version 16 through 17.
func TestPostgresEntryPointGrantsSurviveItsReplacement(t *testing.T) {
	for _, from := range []struct {
		version int
		fn      string
	}{
		{11, "slotpoller_enqueue_v1(text, bytea, text, bigint, timestamptz, integer, bigint, text, text)"},
		{16, "slotpoller_enqueue_v1(text, bytea, text, bigint, timestamptz, integer, bigint, text, text, text)"},
	} {
		t.Run(fmt.Sprintf("from %d", from.version), func(t *testing.T) {
			db := storetest.New(t, "postgres")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, err := db.Open(ctx)
			require.NoError(t, err)
			defer s.Close()
			_, err = schema.MigrateTo(ctx, s, from.version)
			require.NoError(t, err)

			b := make([]byte, 4)
			_, _ = rand.Read(b)
			role := "sp_app_" + hex.EncodeToString(b)
			_, err = s.DB().ExecContext(ctx, "CREATE ROLE "+role+" NOLOGIN")
			require.NoError(t, err)
			t.Cleanup(func() {
				_, _ = s.DB().ExecContext(context.Background(), "DROP OWNED BY "+role)
				_, _ = s.DB().ExecContext(context.Background(), "DROP ROLE "+role)
			})
			_, err = s.DB().ExecContext(ctx, "REVOKE EXECUTE ON FUNCTION "+from.fn+" FROM PUBLIC")
			require.NoError(t, err)
			_, err = s.DB().ExecContext(ctx, "GRANT EXECUTE ON FUNCTION "+from.fn+" TO "+role)
			require.NoError(t, err)

			applied, err := schema.Migrate(ctx, s)
			require.NoError(t, err)
			require.Contains(t, applied, 17)

			const current = "slotpoller_enqueue_v1(text, bytea, text, bigint, timestamptz, integer, bigint, text, text, text, text)"
			var roleMay, publicMay bool
			require.NoError(t, s.DB().QueryRowContext(ctx,
				`SELECT EXISTS (SELECT 1 FROM pg_proc p, aclexplode(p.proacl) a
				 WHERE p.oid = $2::regprocedure AND a.grantee = $1::regrole AND a.privilege_type = 'EXECUTE')`, role, current).Scan(&roleMay))
			require.True(t, roleMay, "the application's role is granted the new entry point")
			require.NoError(t, s.DB().QueryRowContext(ctx,
				// A NULL ACL is the default: PUBLIC may execute.
				`SELECT p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
				 FROM pg_proc p WHERE p.oid = $1::regprocedure`,
				current).Scan(&publicMay))
			require.False(t, publicMay, "PUBLIC, revoked from the old entry point, is not granted the new one")
			var n int
			require.NoError(t, s.DB().QueryRowContext(ctx, // Other tests' farms, each in a schema of its own, have theirs.
				`SELECT COUNT(*) FROM pg_proc WHERE proname = 'slotpoller_enqueue_v1' AND pronamespace = current_schema()::regnamespace`).Scan(&n))
			require.Equal(t, 1, n, "one entry point, no overload left beside it")
		})
	}
}

// MySQL's version 17 runs again without harm (its DDL commits statement by
// statement: a migration cut short is finished by running it again), a
// job enqueued before it reads no trace parent, and v1, which it leaves
// as it was, and the new v2 both enqueue.
func TestMySQLTraceContextUpgrade(t *testing.T) {
	db := storetest.New(t, "mysql")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := db.Open(ctx)
	require.NoError(t, err)
	defer s.Close()
	_, err = schema.MigrateTo(ctx, s, 16)
	require.NoError(t, err)
	var before int64
	require.NoError(t, s.DB().QueryRowContext(ctx, "CALL slotpoller_enqueue_v1('/before', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)").Scan(&before))

	applied, err := schema.Migrate(ctx, s)
	require.NoError(t, err)
	require.Equal(t, []int{17, 18, 19, 20, 21}, applied)
	require.NoError(t, schema.RunVersion(ctx, s, 17), "version 17 again, as after a migration cut short")

	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var v1, v2 int64
	require.NoError(t, s.DB().QueryRowContext(ctx, "CALL slotpoller_enqueue_v1('/v1', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)").Scan(&v1))
	require.NoError(t, s.DB().QueryRowContext(ctx, "CALL slotpoller_enqueue_v2('/v2', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, ?)", tp).Scan(&v2))
	got := map[int64]sql.NullString{}
	rows, err := s.DB().QueryContext(ctx, "SELECT id, trace_parent FROM slotpoller_jobs")
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		var trace sql.NullString
		require.NoError(t, rows.Scan(&id, &trace))
		got[id] = trace
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[int64]sql.NullString{before: {}, v1: {}, v2: {String: tp, Valid: true}}, got)
}

// MySQL's version 18 runs again without harm (a migration cut short is
// finished by running it again, its DDL having committed statement by
// statement), and leaves the audit entries written before the rerun.
func TestMySQLAuditUpgrade(t *testing.T) {
	db := storetest.New(t, "mysql")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := db.Open(ctx)
	require.NoError(t, err)
	defer s.Close()
	_, err = schema.MigrateTo(ctx, s, 17)
	require.NoError(t, err)

	applied, err := schema.Migrate(ctx, s)
	require.NoError(t, err)
	require.Equal(t, []int{18, 19, 20, 21}, applied)
	id, err := s.AuditAdd(ctx, store.AuditEntry{Actor: "alice", Origin: "host", Action: "queue.pause", Target: "reports"})
	require.NoError(t, err)
	require.NoError(t, schema.RunVersion(ctx, s, 18), "version 18 again, as after a migration cut short")

	got, err := s.AuditList(ctx, store.AuditFilter{Limit: 10})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, id, got[0].ID)
}

// MySQL's version 19 runs again without harm (its index is created only
// when information_schema does not list it), and the exact lookup by
// idempotency key finds its job after the rerun.
func TestMySQLSearchUpgrade(t *testing.T) {
	db := storetest.New(t, "mysql")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := db.Open(ctx)
	require.NoError(t, err)
	defer s.Close()
	_, err = schema.MigrateTo(ctx, s, 18)
	require.NoError(t, err)
	id, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/before", Method: "POST", MaxAttempts: 1, IdempotencyKey: "idem-before"})
	require.NoError(t, err)

	applied, err := schema.Migrate(ctx, s)
	require.NoError(t, err)
	require.Equal(t, []int{19, 20, 21}, applied)
	require.NoError(t, schema.RunVersion(ctx, s, 19), "version 19 again, as after a migration cut short")
	var n int
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT COUNT(DISTINCT index_name) FROM information_schema.statistics
WHERE table_schema = DATABASE() AND table_name = 'slotpoller_jobs' AND index_name = 'slotpoller_jobs_idem_key'`).Scan(&n))
	require.Equal(t, 1, n)

	got, err := s.JobsSearch(ctx, store.JobSearch{Text: "idem-before", Limit: 10})
	require.NoError(t, err)
	require.Len(t, got.Hits, 1)
	require.Equal(t, id, got.Hits[0].Job.ID)
	require.Equal(t, "idempotency_key", got.Hits[0].Matched)
}
