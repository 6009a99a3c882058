package schema_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/schema"
	"github.com/stretchr/testify/require"
)

// What Migrate sends to SQL Server, checked without a server (recorded by
// storetest.Trace). Whether SQL Server accepts it is for the conformance
// suite with SLOTPOLLER_TEST_SQLSERVER_DSN set.

func TestSQLServerMigrateSends(t *testing.T) {
	d, err := store.NewSQLServer("farm_jobs")
	require.NoError(t, err)
	s, tr := storetest.NewTrace(t, d, func(c storetest.Call) storetest.Reply {
		if strings.HasPrefix(c.Query, "SELECT COALESCE(MAX(version), 0)") {
			return storetest.Reply{Columns: []string{""}, Rows: [][]any{{int64(0)}}}
		}
		return storetest.Reply{Affected: 0}
	})
	applied, err := schema.Migrate(context.Background(), s)
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21}, applied)

	calls := tr.Calls()
	for _, c := range calls {
		require.True(t, c.InTx, "every statement runs in the migration's transaction:\n%s", c.Query)
		require.NotContains(t, c.Query, "{", "every marker is expanded:\n%s", c.Query)
		require.NotContains(t, c.Query, "--", "comments are dropped:\n%s", c.Query)
		require.NotRegexp(t, `(?i)\bslotpoller_|\bMERGE\b|\bLIMIT\b|\bRETURNING\b|\bIF\s+NOT\s+EXISTS\b|\bTIMESTAMPTZ\b|\bTEXT\b|\bBYTEA\b|\bBLOB\b|\bBOOLEAN\b`, c.Query)
	}
	q := func(i int) string { return strings.TrimSpace(calls[i].Query) }

	// The lock first, checked: sp_getapplock reports failure by its return code.
	require.Contains(t, q(0), "EXEC @lock = sp_getapplock @Resource = N'slotpoller-migrate:farm_jobs', @LockMode = N'Exclusive', @LockOwner = N'Transaction'")
	require.Contains(t, q(0), "IF @lock < 0 RAISERROR(")
	// The schema, created if missing, alone in its batch.
	require.Equal(t, "IF SCHEMA_ID(N'farm_jobs') IS NULL EXEC(N'CREATE SCHEMA [farm_jobs]');", q(1))
	require.True(t, strings.HasPrefix(q(2), "IF OBJECT_ID(N'[farm_jobs].[schema_version]', N'U') IS NULL\nCREATE TABLE [farm_jobs].[schema_version] ("), q(2))
	require.Equal(t, "SELECT COALESCE(MAX(version), 0) FROM [farm_jobs].[schema_version]", q(3))

	var creates, indexes, alters, procs []string
	var versions [][]any
	for _, c := range calls[4:] {
		switch {
		case strings.HasPrefix(c.Query, "ALTER TABLE"):
			// One column per ADD: several in one are a syntax error on
			// Babelfish (Aurora's T-SQL layer).
			f := strings.Fields(c.Query)
			require.Equal(t, "ADD", f[3], c.Query)
			require.NotContains(t, withoutParentheses(c.Query), ",", "one column per ALTER TABLE ... ADD:\n%s", c.Query)
			alters = append(alters, f[2]+" "+f[4])
		case strings.HasPrefix(c.Query, "CREATE PROCEDURE"), strings.HasPrefix(c.Query, "ALTER PROCEDURE"):
			// A batch of its own, whole: its body holds semicolons.
			require.True(t, strings.HasSuffix(strings.TrimSpace(c.Query), "SELECT @id AS id;\nEND;"), c.Query)
			procs = append(procs, strings.Fields(c.Query)[2])
		case strings.HasPrefix(c.Query, "CREATE TABLE"):
			creates = append(creates, strings.Fields(c.Query)[2])
		case strings.Contains(c.Query, "INDEX"):
			indexes = append(indexes, strings.TrimSpace(c.Query))
		case strings.TrimSpace(c.Query) == "SELECT 1;": // 0004_reserved, h-client's 0004 takes its place
		case strings.HasPrefix(c.Query, "INSERT INTO [farm_jobs].[schema_version]"):
			require.Equal(t, "INSERT INTO [farm_jobs].[schema_version] (version, description, applied_at) VALUES (@p1, @p2, SYSUTCDATETIME())", c.Query)
			versions = append(versions, c.Args)
		default:
			t.Errorf("unexpected statement:\n%s", c.Query)
		}
	}
	require.Equal(t, []string{"[farm_jobs].[nodes]", "[farm_jobs].[jobs]", "[farm_jobs].[tasks]", "[farm_jobs].[schedules]", "[farm_jobs].[queues]", "[farm_jobs].[queue_routes]", "[farm_jobs].[audit]"}, creates)
	require.Equal(t, [][]any{{1, "init"}, {2, "tasks"}, {3, "schedules"}, {4, "history"}, {5, "retention"}, {6, "enqueue"},
		{7, "placeholder"}, {8, "turns"}, {9, "liveness"}, {10, "admin_reads"}, {11, "odd_rows"}, {12, "queues"}, {13, "cancel_running"}, {14, "queue_limits"}, {15, "push"}, {16, "claim_plan"}, {17, "trace_context"}, {18, "audit"}, {19, "search"}, {20, "claim_seek"}, {21, "leaseless_running"}}, versions)
	require.Equal(t, []string{"[farm_jobs].[enqueue_v1]", "[farm_jobs].[enqueue_v1]", "[farm_jobs].[enqueue_v1]", "[farm_jobs].[enqueue_v1]"}, procs, "created (6), then altered (11, 12, 17)")
	require.Equal(t, []string{"[farm_jobs].[jobs] schedule", "[farm_jobs].[jobs] scheduled_for", "[farm_jobs].[jobs] start_by",
		"[farm_jobs].[jobs] exclusive", "[farm_jobs].[jobs] history", "[farm_jobs].[nodes] turns", "[farm_jobs].[nodes] live_until", "[farm_jobs].[nodes] lock_key",
		"[farm_jobs].[jobs] endpoint_head", "[farm_jobs].[jobs] queue", "[farm_jobs].[jobs] cancel_requested_by", "[farm_jobs].[jobs] cancel_requested_at",
		"[farm_jobs].[queues] managed", "[farm_jobs].[queues] priority", "[farm_jobs].[queues] max_running", "[farm_jobs].[queues] max_per_node",
		"[farm_jobs].[queues] rate_limit", "[farm_jobs].[queues] rate_period_ms", "[farm_jobs].[queues] rate_window", "[farm_jobs].[queues] rate_used",
		"[farm_jobs].[jobs] trace_parent", "[farm_jobs].[jobs] idem_key_200"}, alters,
		"schedules, then the history, add their columns to jobs, then the dashboard's turns to nodes, then the admin reads' endpoint key, the queue, the cancel request, the queues' limits, the trace parent, the search's idempotency key, one per ALTER")
	require.Equal(t, []string{
		// Unique among the jobs that have a key (a plain unique index would allow one NULL).
		"CREATE UNIQUE NONCLUSTERED INDEX jobs_unique_key ON [farm_jobs].[jobs] (unique_key) WHERE unique_key IS NOT NULL;",
		// The claim's seek, in claim order.
		"CREATE NONCLUSTERED INDEX jobs_due ON [farm_jobs].[jobs] (state, run_at, id);",
		// Expired leases and an owner's renewal.
		"CREATE NONCLUSTERED INDEX jobs_lease ON [farm_jobs].[jobs] (state, lease_until) INCLUDE (owner);",
		"CREATE NONCLUSTERED INDEX tasks_owner ON [farm_jobs].[tasks] (owner);",
		"CREATE NONCLUSTERED INDEX tasks_state ON [farm_jobs].[tasks] (state);",
		// Due schedules, and a schedule's occurrences.
		"CREATE NONCLUSTERED INDEX schedules_next ON [farm_jobs].[schedules] (enabled, next_fire_at);",
		"CREATE NONCLUSTERED INDEX jobs_schedule ON [farm_jobs].[jobs] (schedule, state) WHERE schedule IS NOT NULL;",
		"CREATE NONCLUSTERED INDEX jobs_start_by ON [farm_jobs].[jobs] (state, start_by) WHERE start_by IS NOT NULL;",
		// Retention's delete, oldest first per state; the capped count of retrying jobs.
		"CREATE NONCLUSTERED INDEX jobs_finished ON [farm_jobs].[jobs] (state, finished_at);",
		"CREATE NONCLUSTERED INDEX jobs_retrying ON [farm_jobs].[jobs] (run_at) WHERE state = 'ready' AND attempt > 0;",
		// The admin reads: a list by state newest first, by endpoint
		// prefix, by creation time.
		"CREATE NONCLUSTERED INDEX jobs_state ON [farm_jobs].[jobs] (state, id);",
		"CREATE NONCLUSTERED INDEX jobs_endpoint ON [farm_jobs].[jobs] (endpoint_head);",
		"CREATE NONCLUSTERED INDEX jobs_created ON [farm_jobs].[jobs] (created_at);",
		// A managed claim: a queue's due jobs in order, its running ones.
		"CREATE NONCLUSTERED INDEX jobs_queue ON [farm_jobs].[jobs] (queue, state, run_at, id);",
		// The audit log's retention, oldest first.
		"CREATE NONCLUSTERED INDEX audit_at ON [farm_jobs].[audit] (at);",
		// The search's exact lookup by idempotency key, newest first.
		"CREATE NONCLUSTERED INDEX jobs_idem_key ON [farm_jobs].[jobs] (idem_key_200, id);",
	}, indexes)
}

// withoutParentheses drops what parentheses hold, so that the commas of a
// computed column's expression do not count as a second column.
func withoutParentheses(q string) string {
	for {
		out := parenthesized.ReplaceAllString(q, "")
		if out == q {
			return out
		}
		q = out
	}
}

var parenthesized = regexp.MustCompile(`\([^()]*\)`)
