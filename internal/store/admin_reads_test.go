package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// adminRows is the table the admin reads are planned on: a farm that has
// run for a week at about 1.7 jobs a second and kept every row.
const adminRows = 1_000_000

// adminRead is one read of the HTTP API or the dashboard, as the store
// sends it. walk: an ordered walk of the table (newest first) that stops
// at the LIMIT is a good plan, because the filter keeps most rows; for
// the others the database must seek.
type adminRead struct {
	name string
	walk bool
	// byState: SQLite reads a large time window with a state filter
	// through the index on state, newest first, the window a filter.
	byState bool
	stmt    func(s *store.Store, mid int64) (string, []any, error)
}

func list(f store.JobFilter) func(*store.Store, int64) (string, []any, error) {
	return func(s *store.Store, mid int64) (string, []any, error) {
		if f.Limit == 0 {
			f.Limit = 100 // the API's default page
		}
		if f.Before < 0 {
			f.Before = mid
		}
		return s.ListStatement(context.Background(), f)
	}
}

var (
	retrying = store.JobFilter{States: []string{store.StateReady}, Retrying: true}
	hour     = time.Hour
)

// adminReads are every filter the API's job list and retry accept
// (state, retrying, endpoint prefix, since, until, cursor, id), alone and
// in the combinations the dashboard makes, and the dashboard's counts and
// throughput. Before: -1 is a cursor halfway down the table.
var adminReads = []adminRead{
	{name: "list", walk: true, stmt: list(store.JobFilter{})},
	{name: "list cursor", walk: true, stmt: list(store.JobFilter{Before: -1})},
	{name: "list state=ready", stmt: list(store.JobFilter{States: []string{store.StateReady}})},
	{name: "list state=running", stmt: list(store.JobFilter{States: []string{store.StateRunning}})},
	{name: "list state=done", stmt: list(store.JobFilter{States: []string{store.StateDone}})},
	{name: "list state=failed", stmt: list(store.JobFilter{States: []string{store.StateFailed}})},
	{name: "list state=dead", stmt: list(store.JobFilter{States: []string{store.StateDead}})},
	{name: "list state=cancelled", stmt: list(store.JobFilter{States: []string{store.StateCancelled}})},
	{name: "list state=missed", stmt: list(store.JobFilter{States: []string{store.StateMissed}})},
	{name: "list state=missed cursor", stmt: list(store.JobFilter{States: []string{store.StateMissed}, Before: -1})},
	{name: "list state=retrying", stmt: list(retrying)},
	{name: "list endpoint=/jobs/7", walk: true, stmt: list(store.JobFilter{EndpointPrefix: "/jobs/7"})},
	{name: "list endpoint=/nomatch", stmt: list(store.JobFilter{EndpointPrefix: "/nomatch"})},
	{name: "list endpoint=/nomatch cursor", stmt: list(store.JobFilter{EndpointPrefix: "/nomatch", Before: -1})},
	{name: "list since=10s", stmt: list(store.JobFilter{Since: 10 * time.Second})},
	{name: "list since=1h", stmt: list(store.JobFilter{Since: hour})},
	{name: "list since=30d", walk: true, stmt: list(store.JobFilter{Since: 30 * 24 * hour})},
	{name: "list until=1h", walk: true, stmt: list(store.JobFilter{Until: hour})},
	{name: "list until=30d", stmt: list(store.JobFilter{Until: 30 * 24 * hour})},
	{name: "list since=2h until=1h", stmt: list(store.JobFilter{Since: 2 * hour, Until: hour})},
	{name: "list state=dead endpoint=/nomatch", stmt: list(store.JobFilter{States: []string{store.StateDead}, EndpointPrefix: "/nomatch"})},
	{name: "list state=done since=10s", stmt: list(store.JobFilter{States: []string{store.StateDone}, Since: 10 * time.Second})},
	// A rare state in a window holding most rows: its own rows, newest
	// first, not a walk of the whole window.
	{name: "list state=missed since=30d", byState: true, stmt: list(store.JobFilter{States: []string{store.StateMissed}, Since: 30 * 24 * hour})},
	{name: "list state=retrying endpoint=/jobs/7", stmt: list(store.JobFilter{States: retrying.States, Retrying: true, EndpointPrefix: "/jobs/7"})},
	{name: "list endpoint=/nomatch since=1h", stmt: list(store.JobFilter{EndpointPrefix: "/nomatch", Since: hour})},
	{name: "list max page", walk: true, stmt: list(store.JobFilter{Limit: 1000})},
	{name: "retry id", stmt: func(s *store.Store, mid int64) (string, []any, error) {
		return s.RetryStatement(context.Background(), store.JobFilter{ID: mid, Limit: 1}, "op")
	}},
	{name: "retry state=dead endpoint=/nomatch", stmt: func(s *store.Store, _ int64) (string, []any, error) {
		return s.RetryStatement(context.Background(), store.JobFilter{States: []string{store.StateDead}, EndpointPrefix: "/nomatch", Limit: 1000}, "op")
	}},
	{name: "retry state=missed since=1h", stmt: func(s *store.Store, _ int64) (string, []any, error) {
		return s.RetryStatement(context.Background(), store.JobFilter{States: []string{store.StateMissed}, Since: hour, Limit: 1000}, "op")
	}},
	// Each count stops at its cap: a walk of a state that holds many
	// rows stops there (Babelfish walks the table for done).
	{name: "counts", walk: true, stmt: func(s *store.Store, _ int64) (string, []any, error) {
		q, args := s.CountsStatement(10_000)
		return q, args, nil
	}},
	{name: "throughput", stmt: func(s *store.Store, _ int64) (string, []any, error) {
		return s.ThroughputStatement(context.Background(), hour, 50_000)
	}},
}

// Every read the API and the dashboard make of the jobs table seeks, or
// walks the table in an order that stops early, at a million rows: none
// scans the table. The plan is the assertion; the times are measured and
// logged (docs/benchmarks.md has them), not asserted.
//
// On PostgreSQL each read runs under EXPLAIN ANALYZE, planned for its
// arguments as the store has it planned on every call, and no scan may
// read more than a twentieth of the table. On SQLite EXPLAIN QUERY PLAN
// must seek where a walk is no good plan. On SQL Server (Babelfish here,
// whose planner is PostgreSQL's) the plan and its row counts come from
// Babelfish's own settings and are held to PostgreSQL's bounds, on a fifth
// of the rows; on real SQL Server the test checks only that the reads run.
func TestAdminReadsAtAMillionRows(t *testing.T) {
	if testing.Short() {
		t.Skip("loads a million jobs into each database (about a minute): not under -short")
	}
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, dsn := storetest.Open(t, driver)
		n := adminRows
		switch {
		case driver == "sqlserver" || driver == "mysql":
			// Babelfish writes a million rows in 70 s, MariaDB in three
			// minutes: the plans are checked on a fifth of them.
			n = adminRows / 5
		case driver == "sqlite" && storetest.UnderRace:
			// Five minutes under the race detector: a tenth.
			n = adminRows / 10
		}
		start := time.Now()
		loadJobs(t, s, driver, n)
		t.Logf("%s: %d jobs loaded and analysed in %v", driver, n, time.Since(start).Round(time.Millisecond))
		mid := int64(n / 2)
		checkAdminReads(t, s, driver, mid, n)

		if driver == "sqlite" {
			// Nobody runs ANALYZE on a node's SQLite file: the plans must
			// be as good without the statistics, which SQLite reads when
			// a connection opens.
			for _, q := range []string{"DELETE FROM sqlite_stat1", "DELETE FROM sqlite_stat4"} {
				_, err := s.DB().ExecContext(context.Background(), q)
				require.NoError(t, err, q)
			}
			bare, err := open.Store(context.Background(), driver, dsn)
			require.NoError(t, err)
			defer bare.Close()
			t.Logf("sqlite without statistics:")
			checkAdminReads(t, bare, driver, mid, n)
		}
	})
}

// checkAdminReads checks each read's plan and logs its time.
func checkAdminReads(t *testing.T, s *store.Store, driver string, mid int64, n int) {
	t.Helper()
	for _, r := range adminReads {
		start := time.Now()
		q, args, err := r.stmt(s, mid)
		require.NoError(t, err)
		// (Building the statement reads the database's time and, for a
		// time window on SQLite, counts the window's rows.)
		built := time.Since(start)
		switch driver {
		case "postgres":
			checkPostgresPlan(t, s, r, q, args)
		case "sqlite":
			checkSQLitePlan(t, s, r, q, args)
		case "sqlserver":
			checkSQLServerPlan(t, s, r, q, args, n)
		case "mysql":
			checkMySQLReads(t, s, r, q, args, n)
		}
		if strings.HasPrefix(r.name, "retry") {
			t.Logf("%-38s plan checked (an UPDATE: not run)", r.name)
			continue
		}
		took := timeRead(t, s, q, args)
		t.Logf("%-38s %8.2f ms (best of 3), %.2f ms to build", r.name, float64(took.Microseconds())/1000, float64(built.Microseconds())/1000)
	}
}

// timeRead runs a read three times and returns its fastest run, rows
// read to the end.
func timeRead(t *testing.T, s *store.Store, q string, args []any) time.Duration {
	t.Helper()
	best := time.Duration(1 << 62)
	for range 3 {
		start := time.Now()
		rows, err := s.DB().QueryContext(context.Background(), q, args...)
		require.NoError(t, err)
		for rows.Next() {
		}
		require.NoError(t, rows.Err())
		rows.Close()
		best = min(best, time.Since(start))
	}
	return best
}

// loadJobs writes n jobs in one statement: per thousand, 900 done, 40
// dead, 20 failed, 10 cancelled, 5 missed, 5 running, 10 ready and due,
// 10 ready backing off after a failure; 20 endpoints (/jobs/0 ... 19),
// created 600 ms apart up to now, and gathers the planner's statistics.
func loadJobs(t *testing.T, s *store.Store, driver string, n int) {
	t.Helper()
	ctx := context.Background()
	const state = `CASE WHEN m < 900 THEN 'done' WHEN m < 940 THEN 'dead' WHEN m < 960 THEN 'failed'
  WHEN m < 970 THEN 'cancelled' WHEN m < 975 THEN 'missed' WHEN m < 980 THEN 'running' ELSE 'ready' END`
	const cols = `endpoint, method, state, run_at, attempt, max_attempts, idem_key, created_at, started_at, finished_at, owner, lease_until`
	var stmts []string
	switch driver {
	case "postgres":
		stmts = []string{`INSERT INTO slotpoller_jobs (` + cols + `)
SELECT '/jobs/' || (g % 20), 'POST', st,
  CASE WHEN m >= 990 THEN at + interval '1 day' ELSE at END,
  CASE WHEN m < 980 OR m >= 990 THEN 1 ELSE 0 END, 3, 'k' || g, at,
  CASE WHEN m < 980 THEN at + interval '500 milliseconds' END,
  CASE WHEN m < 975 THEN at + interval '1 second' END,
  CASE WHEN st = 'running' THEN 'inc-a' END,
  CASE WHEN st = 'running' THEN at + interval '1 hour' END
FROM (SELECT g, m, ` + state + ` AS st,
    clock_timestamp() - (` + strconv.Itoa(n) + ` - g) * interval '600 milliseconds' AS at
  FROM (SELECT g, g % 1000 AS m FROM generate_series(1, ` + strconv.Itoa(n) + `) g) x) y`,
			`VACUUM (ANALYZE) slotpoller_jobs`}
	case "sqlite":
		stmts = []string{`WITH RECURSIVE g(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM g WHERE g < ` + strconv.Itoa(n) + `)
INSERT INTO slotpoller_jobs (` + cols + `)
SELECT '/jobs/' || (g % 20), 'POST', st,
  CASE WHEN m >= 990 THEN at + 86400000 ELSE at END,
  CASE WHEN m < 980 OR m >= 990 THEN 1 ELSE 0 END, 3, 'k' || g, at,
  CASE WHEN m < 980 THEN at + 500 END,
  CASE WHEN m < 975 THEN at + 1000 END,
  CASE WHEN st = 'running' THEN 'inc-a' END,
  CASE WHEN st = 'running' THEN at + 3600000 END
FROM (SELECT g, m, ` + state + ` AS st,
    CAST(unixepoch('now','subsec')*1000 AS INTEGER) - (` + strconv.Itoa(n) + ` - g) * 600 AS at
  FROM (SELECT g, g % 1000 AS m FROM g))`,
			`ANALYZE`}
	case "sqlserver":
		// Six digits crossed: 0 ... 999,999, plus one.
		digits := `(VALUES (0),(1),(2),(3),(4),(5),(6),(7),(8),(9))`
		gen := `SELECT 1 + d0.n + 10*d1.n + 100*d2.n + 1000*d3.n + 10000*d4.n + 100000*d5.n AS g FROM ` +
			digits + ` d0(n) CROSS JOIN ` + digits + ` d1(n) CROSS JOIN ` + digits + ` d2(n) CROSS JOIN ` +
			digits + ` d3(n) CROSS JOIN ` + digits + ` d4(n) CROSS JOIN ` + digits + ` d5(n)`
		stmts = []string{store.Expand(s.Dialect(), `INSERT INTO {jobs} (`+cols+`)
SELECT CONCAT(N'/jobs/', g % 20), N'POST', st,
  CASE WHEN m >= 990 THEN DATEADD(day, 1, at) ELSE at END,
  CASE WHEN m < 980 OR m >= 990 THEN 1 ELSE 0 END, 3, CONCAT(N'k', g), at,
  CASE WHEN m < 980 THEN DATEADD(millisecond, 500, at) END,
  CASE WHEN m < 975 THEN DATEADD(second, 1, at) END,
  CASE WHEN st = 'running' THEN N'inc-a' END,
  CASE WHEN st = 'running' THEN DATEADD(hour, 1, at) END
FROM (SELECT g, m, `+state+` AS st,
    DATEADD(millisecond, -600 * (`+strconv.Itoa(n)+` - g), SYSUTCDATETIME()) AS at
  FROM (SELECT g, g % 1000 AS m FROM (`+gen+`) x WHERE g <= `+strconv.Itoa(n)+`) y) z`),
			store.Expand(s.Dialect(), `UPDATE STATISTICS {jobs}`)}
	case "mysql":
		digits := `(SELECT 0 n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
  UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)`
		gen := `SELECT 1 + d0.n + 10*d1.n + 100*d2.n + 1000*d3.n + 10000*d4.n + 100000*d5.n AS g FROM ` +
			digits + ` d0 CROSS JOIN ` + digits + ` d1 CROSS JOIN ` + digits + ` d2 CROSS JOIN ` +
			digits + ` d3 CROSS JOIN ` + digits + ` d4 CROSS JOIN ` + digits + ` d5`
		stmts = []string{store.Expand(s.Dialect(), `INSERT INTO {jobs} (`+cols+`)
SELECT CONCAT('/jobs/', g % 20), 'POST', st,
  CASE WHEN m >= 990 THEN at + INTERVAL 1 DAY ELSE at END,
  CASE WHEN m < 980 OR m >= 990 THEN 1 ELSE 0 END, 3, CONCAT('k', g), at,
  CASE WHEN m < 980 THEN at + INTERVAL 500000 MICROSECOND END,
  CASE WHEN m < 975 THEN at + INTERVAL 1 SECOND END,
  CASE WHEN st = 'running' THEN 'inc-a' END,
  CASE WHEN st = 'running' THEN at + INTERVAL 1 HOUR END
FROM (SELECT g, m, `+state+` AS st,
    UTC_TIMESTAMP(6) - INTERVAL (600000 * (`+strconv.Itoa(n)+` - g)) MICROSECOND AS at
  FROM (SELECT g, g % 1000 AS m FROM (`+gen+`) x WHERE g <= `+strconv.Itoa(n)+`) y) z ORDER BY g`),
			store.Expand(s.Dialect(), `ANALYZE TABLE {jobs}`)}
	}
	for _, q := range stmts {
		_, err := s.DB().ExecContext(ctx, q)
		if err != nil && strings.HasPrefix(q, "UPDATE STATISTICS") {
			// Babelfish has no UPDATE STATISTICS; its sp_updatestats
			// analyses the database's tables.
			_, err = s.DB().ExecContext(ctx, "EXEC sp_updatestats")
		}
		require.NoError(t, err, q)
	}
}

// checkPostgresPlan runs the read under EXPLAIN ANALYZE and fails on a
// sequential scan of the jobs table (unless the read may walk) or a scan
// of it or of one of its indexes that reads more rows than readBound.
func checkPostgresPlan(t *testing.T, s *store.Store, r adminRead, q string, args []any) {
	t.Helper()
	ctx := context.Background()
	c, err := s.DB().Conn(ctx)
	require.NoError(t, err)
	defer c.Close()
	analyze := "ANALYZE, "
	if strings.HasPrefix(q, "UPDATE") {
		analyze = "" // the retry would change rows
	}
	explain := func(stmt string, args ...any) map[string]any {
		t.Helper()
		var out string
		require.NoError(t, c.QueryRowContext(ctx, "EXPLAIN ("+analyze+"FORMAT JSON) "+stmt, args...).Scan(&out), stmt)
		var plans []map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &plans))
		return plans[0]["Plan"].(map[string]any)
	}
	// The store sends these reads as the unnamed statement, which
	// PostgreSQL plans for each call's arguments: a named prepared
	// statement would get a generic plan after five calls, which walks the
	// table newest first for endpoint=/nomatch or since=10s.
	// (The counts' only arguments are their caps.)
	if r.name != "counts" {
		require.Equal(t, pgx.QueryExecModeDescribeExec, args[0], "%s: not planned per call", r.name)
	}
	requireBoundedPostgres(t, r, explain(q, args...), analyze != "")
}

// requireBoundedPostgres walks a JSON plan.
func requireBoundedPostgres(t *testing.T, r adminRead, plan map[string]any, analyzed bool) {
	t.Helper()
	name := r.name
	var shape []string
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		node, _ := n["Node Type"].(string)
		rel, _ := n["Relation Name"].(string)
		idx, _ := n["Index Name"].(string)
		if rel != "" || idx != "" {
			shape = append(shape, strings.TrimSpace(node+" "+idx))
		}
		onJobs := rel == "slotpoller_jobs" || strings.HasPrefix(idx, "slotpoller_jobs")
		if onJobs && node == "Seq Scan" && !r.walk {
			t.Errorf("%s: a sequential scan of the jobs table:\n%s", name, dump(plan))
		}
		if onJobs && analyzed {
			read := num(n["Actual Rows"]) + num(n["Rows Removed by Filter"]) + num(n["Rows Removed by Index Recheck"])
			if read*max(num(n["Actual Loops"]), 1) > readBound(adminRows) {
				t.Errorf("%s: %s reads %.0f rows of the jobs table:\n%s", name, node, read, dump(plan))
			}
		}
		subs, _ := n["Plans"].([]any)
		for _, sub := range subs {
			walk(sub.(map[string]any))
		}
	}
	walk(plan)
	t.Logf("%-52s %s", name, strings.Join(shape, ", "))
}

// readBound is the most rows one scan of a read may read in a table of n
// jobs: a twentieth of it, and at least twice the counts' cap.
func readBound(n int) float64 {
	return float64(max(n/20, 20_000))
}

func num(v any) float64 {
	f, _ := v.(float64)
	return f
}

func dump(plan map[string]any) string {
	b, _ := json.MarshalIndent(plan, "", " ")
	return string(b)
}

// checkMySQLReads runs the read on a connection of its own and counts the
// rows InnoDB handed the server for it (the session's Handler_read_*
// counters, which do not tell one scan from another): no more than
// readBound of the n rows for each access to the jobs table in its plan,
// whatever the plan. A write runs in a transaction rolled back.
func checkMySQLReads(t *testing.T, s *store.Store, r adminRead, q string, args []any, n int) {
	t.Helper()
	ctx := context.Background()
	c, err := s.DB().Conn(ctx)
	require.NoError(t, err)
	defer c.Close()
	reads := func() float64 { return float64(mysqlRowsRead(t, c)) }
	var plan []string
	scans := 0
	rows, err := c.QueryContext(ctx, "EXPLAIN "+q, args...)
	require.NoError(t, err, q)
	cols, err := rows.Columns()
	require.NoError(t, err)
	for rows.Next() {
		v := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(v))
		for i := range v {
			ptrs[i] = &v[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		var parts []string
		for i, col := range cols {
			if col == "table" && strings.HasSuffix(v[i].String, "jobs") {
				scans++
			}
			if col == "table" || col == "type" || col == "key" || col == "rows" || col == "Extra" {
				parts = append(parts, col+"="+v[i].String)
			}
		}
		plan = append(plan, strings.Join(parts, " "))
	}
	require.NoError(t, rows.Err())
	rows.Close()

	before := reads()
	if strings.HasPrefix(q, "UPDATE") {
		_, err := c.ExecContext(ctx, "START TRANSACTION")
		require.NoError(t, err)
		_, err = c.ExecContext(ctx, q, args...)
		require.NoError(t, err, q)
		_, err = c.ExecContext(ctx, "ROLLBACK")
		require.NoError(t, err)
	} else {
		rows, err := c.QueryContext(ctx, q, args...)
		require.NoError(t, err, q)
		for rows.Next() {
		}
		require.NoError(t, rows.Err())
		rows.Close()
	}
	read := reads() - before - 20 // SHOW STATUS reads a few rows of its own
	if read > float64(max(scans, 1))*readBound(n) {
		t.Errorf("%s: reads %.0f rows of the jobs table; plan:\n%s", r.name, read, strings.Join(plan, "\n"))
	}
	t.Logf("%-52s %7.0f rows read; %s", r.name, read, strings.Join(plan, "; "))
}

// checkSQLitePlan: EXPLAIN QUERY PLAN of the read, on the jobs table:
//   - no SCAN of it (with or without an index: a walk of it) unless the
//     read may walk, but for the partial index of the jobs backing off;
//   - a read that may walk does walk, the rowid newest first (SCAN, or a
//     rowid range): a seek and a sort of the rows a filter keeps is no
//     good plan when it keeps many (a prefix 5% of the jobs have);
//   - a time window is read by the range of the index on created_at when
//     it holds few rows (fewer than the count before the read allows,
//     sorted by id), else by a walk of the rowid newest first (the reads
//     marked walk): no index on another column, which would read all its
//     rows outside the window, and no sort of a large window;
//   - no sort (USE TEMP B-TREE), except in the throughput (of at most its
//     cap of rows), a small time window's, and a read by prefix: its
//     walk's page, and the older rows of the prefix's range when the walk
//     of the newest did not fill the page.
func checkSQLitePlan(t *testing.T, s *store.Store, r adminRead, q string, args []any) {
	t.Helper()
	rows, err := s.DB().QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+q, args...)
	require.NoError(t, err)
	defer rows.Close()
	var shape []string
	sorts := false
	for rows.Next() {
		var id, parent, unused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
		if strings.Contains(detail, "slotpoller_jobs") {
			shape = append(shape, detail)
		}
		sorts = sorts || strings.HasPrefix(detail, "USE TEMP B-TREE")
	}
	require.NoError(t, rows.Err())
	plan := strings.Join(shape, "; ")
	walks := false
	for _, d := range shape {
		// A partial index holds only the rows of its filter: the scan of
		// the one on the jobs backing off reads those and no others.
		scan := strings.HasPrefix(d, "SCAN slotpoller_jobs") && d != "SCAN slotpoller_jobs USING INDEX slotpoller_jobs_retrying"
		if scan && !r.walk {
			t.Errorf("%s: the jobs table is walked: %s", r.name, plan)
		}
		walks = walks || scan || strings.Contains(d, "USING INTEGER PRIMARY KEY (rowid>") || strings.Contains(d, "USING INTEGER PRIMARY KEY (rowid<")
	}
	// (The counts walk the index on state, up to their caps.)
	if r.walk && !walks && r.name != "counts" {
		t.Errorf("%s: not a walk of the rowid newest first: %s", r.name, plan)
	}
	window := strings.Contains(r.name, "since=") || strings.Contains(r.name, "until=")
	byCreated := strings.Contains(plan, "USING INDEX slotpoller_jobs_created (created_at")
	if r.byState && (byCreated || !strings.Contains(plan, "USING INDEX slotpoller_jobs_state (state=?)") || sorts) {
		t.Errorf("%s: not the state's rows newest first, through the index on state: %s", r.name, plan)
	}
	if window && !r.walk && !r.byState && (!byCreated || strings.Contains(plan, "SCAN ")) {
		t.Errorf("%s: the time window is not read by the range of the index on created_at: %s", r.name, plan)
	}
	if window && r.walk && byCreated {
		t.Errorf("%s: the large time window is read by the index on created_at: %s", r.name, plan)
	}
	if sorts && !strings.Contains(r.name, "endpoint=") && r.name != "throughput" && !(window && !r.walk) {
		t.Errorf("%s: sorted: %s", r.name, plan)
	}
	t.Logf("%-38s %s", r.name, plan)
}

var (
	babelNode    = regexp.MustCompile(`^(?:->)?\s*(.*? on jobs\w*)\b.*\(actual time=\S+ rows=(\d+) loops=(\d+)\)`)
	babelShape   = regexp.MustCompile(`^(?:->)?\s*(.*? on jobs\w*)`)
	babelRemoved = regexp.MustCompile(`^Rows Removed by (?:Filter|Index Recheck): (\d+)`)
)

// checkSQLServerPlan reads the plan Babelfish gives (PostgreSQL's EXPLAIN
// as text): under BABELFISH_STATISTICS PROFILE, which runs the read, the
// same bounds as on PostgreSQL (no sequential scan of the jobs table
// unless the read may walk, no scan that reads more than a twentieth of
// it); a retry, an UPDATE, is only planned (BABELFISH_SHOWPLAN_ALL) and
// may not scan the table. Real SQL Server refuses these settings: there
// the read only runs.
func checkSQLServerPlan(t *testing.T, s *store.Store, r adminRead, q string, args []any, n int) {
	t.Helper()
	ctx := context.Background()
	c, err := s.DB().Conn(ctx)
	require.NoError(t, err)
	defer c.Close()
	on, off := []string{"SET BABELFISH_SHOWPLAN_ALL ON"}, "SET BABELFISH_SHOWPLAN_ALL OFF"
	analyzed := !strings.HasPrefix(q, "UPDATE")
	if analyzed {
		on = []string{"SELECT set_config('babelfishpg_tsql.enable_stats_explain', 'on', false)", "SET BABELFISH_STATISTICS PROFILE ON"}
		off = "SET BABELFISH_STATISTICS PROFILE OFF"
	}
	for _, stmt := range on {
		if _, err := c.ExecContext(ctx, stmt); err != nil {
			t.Logf("%s: no Babelfish plans (%v): the read is run, its plan not checked", r.name, err)
			return
		}
	}
	defer c.ExecContext(ctx, off)
	rows, err := c.QueryContext(ctx, q, args...)
	require.NoError(t, err)
	var lines []string
	for {
		cols, err := rows.Columns()
		require.NoError(t, err)
		for rows.Next() {
			if len(cols) != 1 {
				continue // the read's own rows
			}
			var line sql.NullString
			require.NoError(t, rows.Scan(&line))
			lines = append(lines, line.String)
		}
		if !rows.NextResultSet() {
			break
		}
	}
	require.NoError(t, rows.Err())
	rows.Close()
	require.NotEmpty(t, lines, "%s: Babelfish gave no plan", r.name)
	plan := strings.Join(lines, "\n")
	var shape []string
	node, read := "", 0.0
	flush := func() {
		if node != "" && read > readBound(n) {
			t.Errorf("%s: %s reads %.0f rows of the jobs table:\n%s", r.name, node, read, plan)
		}
		node, read = "", 0
	}
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if strings.Contains(l, "->") || strings.Contains(l, "(cost=") {
			flush()
		}
		if strings.Contains(l, "Seq Scan on jobs ") && !r.walk {
			t.Errorf("%s: a sequential scan of the jobs table:\n%s", r.name, plan)
		}
		if m := babelShape.FindStringSubmatch(l); m != nil {
			shape = append(shape, m[1])
		}
		if m := babelNode.FindStringSubmatch(l); m != nil {
			rows, _ := strconv.ParseFloat(m[2], 64)
			loops, _ := strconv.ParseFloat(m[3], 64)
			node, read = m[1], rows*max(loops, 1)
		} else if m := babelRemoved.FindStringSubmatch(l); m != nil && node != "" {
			removed, _ := strconv.ParseFloat(m[1], 64)
			read += removed
		}
	}
	flush()
	t.Logf("%-38s %s", r.name, strings.Join(slices.Compact(shape), "; "))
}
