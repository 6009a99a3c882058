//go:build unix

package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
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

// poisonRow is a job row written with SQL, as an application or an
// operator could, that no node can run as it stands.
type poisonRow struct {
	what   string
	values string // endpoint, method, state, run_at, attempt, max_attempts, idem_key, token, owner, owner_node, lease_until, started_at
	// runnable: the row is due (or reclaimed) and its call can be made,
	// so done is as good an end for it as failed or dead.
	runnable bool
	// neverDue: no claim would ever take the row; it is set aside at the
	// retention look, once a minute.
	neverDue bool
}

// poisonLiterals are a dialect's spelling of the values the rows need.
type poisonLiterals struct {
	latest, earliest string // the run times furthest ahead and behind the column holds
	crlfKey          string // an idempotency key with CR/LF and a header after them
	// zeroDate is a run time the column holds that is no date ("" where
	// none): MySQL's zero date, which MariaDB's default SQL mode (without
	// NO_ZERO_DATE, which MySQL 8's has) stores and Go's driver reads as
	// time.Time{}.
	zeroDate string
}

var poisonByDriver = map[string]poisonLiterals{
	"postgres": {`'infinity'`, `'-infinity'`, `E'poison-5\r\nX-Injected: 1'`, ""},
	// run_at holds milliseconds; SQLite keeps whatever a column is given.
	"sqlite":    {`'infinity'`, `-9223372036854775807`, `'poison-5' || char(13) || char(10) || 'X-Injected: 1'`, ""},
	"sqlserver": {`'9999-12-31T23:59:59.9999999'`, `'0001-01-01T00:00:00'`, `N'poison-5' + CHAR(13) + CHAR(10) + N'X-Injected: 1'`, ""},
	// DATETIME(6) is documented from year 1000, yet MariaDB and MySQL
	// store year 1 in strict mode without a warning.
	"mysql": {`'9999-12-31 23:59:59.999999'`, `'0001-01-01 00:00:00'`, `CONCAT('poison-5', CHAR(13, 10 USING utf8mb4), 'X-Injected: 1')`,
		`'0000-00-00 00:00:00'`},
}

// poisonRows are the rows TestChaosPoisonRows writes on driver; each has
// an idempotency key "poison-N..." of its own.
func poisonRows(driver string) []poisonRow {
	l := poisonByDriver[driver]
	readyAt := func(endpoint, runAt, attempt, maxAttempts, key, token string) string {
		return fmt.Sprintf(`%s, 'POST', 'ready', %s, %s, %s, %s, %s, NULL, NULL, NULL, NULL`, endpoint, runAt, attempt, maxAttempts, key, token)
	}
	ready := func(runAt, attempt, maxAttempts, key, token string) string {
		return readyAt("'/jobs/poison'", runAt, attempt, maxAttempts, key, token)
	}
	rows := []poisonRow{
		{what: "run_at the latest time", values: ready(l.latest, "0", "3", "'poison-1'", "0"), neverDue: true},
		{what: "run_at the earliest time", values: ready(l.earliest, "0", "3", "'poison-2'", "0"), runnable: true},
		{what: "token at the largest BIGINT", values: ready("{now}", "0", "3", "'poison-3'", "9223372036854775807")},
		{what: "attempt at the largest INTEGER", values: ready("{now}", "2147483647", "2147483647", "'poison-4'", "0")},
		{what: "idempotency key with CR/LF", values: ready("{now}", "0", "3", l.crlfKey, "0")},
		// A running job whose node left no lease is reclaimed as expired,
		// and run again: done is its end.
		{what: "running with lease_until NULL", values: `'/jobs/poison', 'POST', 'running', {now}, 1, 3, 'poison-6', 1, 'gone-incarnation', 'gone-node', NULL, {now}`,
			runnable: true},
		{what: "endpoint on another host", values: readyAt("'http://elsewhere.invalid/jobs/poison'", "{now}", "0", "3", "'poison-7'", "0")},
	}
	if l.zeroDate != "" {
		rows = append(rows, poisonRow{what: "run_at the zero date", values: ready(l.zeroDate, "0", "3", "'poison-8'", "0"), runnable: true})
	}
	return rows
}

// TestChaosPoisonRows writes job rows no node can run (a run time at the
// end of time, and at its beginning; a token or attempt at the largest
// value its column holds; an idempotency key that is no header value; a
// running job without a lease; an endpoint on another host) among good
// jobs that trickle in to 3 nodes. A good job must be called within its
// normal start bound whatever rows sit beside it, no node may die of a
// row, and each poison row must end failed or dead with its reason in
// last_error (or done, the one whose call can be made).
//
// SQLite, PostgreSQL and MySQL (these two side by side) run in the short
// mode; SQL Server (the T-SQL test server, slow to warm up three nodes)
// with SLOTPOLLER_CHAOS_DURATION.
// SLOTPOLLER_CHAOS_POISON=text writes only the rows whose description
// holds text (e.g. "token"), to tell which row does what.
func TestChaosPoisonRows(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres", "sqlserver", "mysql"} {
		t.Run(driver, func(t *testing.T) {
			switch driver {
			case "postgres":
				storetest.RequirePostgres(t)
				t.Parallel()
			case "mysql":
				storetest.RequireMySQL(t)
				t.Parallel()
			case "sqlserver":
				storetest.RequireSQLServer(t)
				if chaosDuration(t) == 0 {
					t.Skip("SQL Server: the poison rows run in the long mode only (SLOTPOLLER_CHAOS_DURATION), as three nodes take a minute to warm up on the T-SQL test server")
				}
			}
			chaosPoisonRows(t, driver)
		})
	}
}

func chaosPoisonRows(t *testing.T, driver string) {
	poison := poisonRows(driver)
	if only := os.Getenv("SLOTPOLLER_CHAOS_POISON"); only != "" {
		poison = nil
		for _, row := range poisonRows(driver) {
			if strings.Contains(row.what, only) {
				poison = append(poison, row)
			}
		}
		require.NotEmpty(t, poison, "SLOTPOLLER_CHAOS_POISON=%q matches no poison row", only)
	}
	s, db := storetest.OpenDB(t, driver)
	began := time.Now()
	ctx := context.Background()
	rec := &chaosRecorder{slowCall: fastChaos.slowCall, longCall: fastChaos.longCall}
	f := newScenarioFarm(t, s, db, rec)
	p := f.profile
	// A good job is due when enqueued: the slot owner of the next slot
	// claims it, a rotation (one slot per node) at most away, plus the
	// slack a busy test machine needs.
	bound := chaosNodes*p.slot + p.slot + p.slack + time.Second

	// Warm-up: every node has claimed and finished jobs (on the T-SQL test
	// server a node's first statements compile for seconds), so that the
	// start bound measures the farm, not its first statements.
	for i := range 3 * chaosNodes {
		_, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/warm-up", MaxAttempts: 20, UniqueKey: "warm-up-" + strconv.Itoa(i)})
		require.NoError(t, err)
	}
	waitFor(t, 2*time.Minute, "the warm-up jobs to run", func() bool {
		n, err := s.JobCounts(ctx)
		require.NoError(t, err)
		return n[store.StateDone] == 3*chaosNodes
	})
	before, after := 2*time.Second, 8*time.Second
	if driver == "sqlserver" {
		before = 10 * time.Second
	}
	if d := chaosDuration(t); d > after {
		after = d
	}
	type good struct {
		id       int64
		enqueued time.Time
		poisoned bool // enqueued after the poison rows were written
	}
	var (
		mu       sync.Mutex
		goods    []good
		poisoned bool
	)
	stop := make(chan struct{})
	var trickle sync.WaitGroup
	trickle.Add(1)
	go func() {
		defer trickle.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			at := time.Now()
			id, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/good", MaxAttempts: 20, UniqueKey: "good-" + strconv.Itoa(i)})
			if err != nil {
				t.Errorf("enqueue a good job: %v", err)
				return
			}
			mu.Lock()
			goods = append(goods, good{id, at, poisoned})
			mu.Unlock()
		}
	}()
	time.Sleep(before)
	var poisonIDs []int64
	for _, row := range poison {
		_, err := s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `INSERT INTO {jobs} (endpoint, method, state, run_at, attempt, max_attempts,
  idem_key, token, owner, owner_node, lease_until, started_at, created_at) VALUES (`+row.values+`, {now})`))
		require.NoError(t, err, "write the poison row %q", row.what)
		key := row.values[strings.Index(row.values, "poison-") : strings.Index(row.values, "poison-")+len("poison-N")]
		poisonIDs = append(poisonIDs, poisonID(t, s, key, row.what))
	}
	mu.Lock()
	poisoned = true
	mu.Unlock()
	poisonedAt := time.Now()
	time.Sleep(after)
	close(stop)
	trickle.Wait()
	// The last good jobs get their bound; the poison rows as long to end.
	time.Sleep(bound)

	crashed := 0
	for name, n := range f.nodes {
		if n.cmd.ProcessState != nil || strings.Contains(n.output(), "panic:") {
			crashed++
			t.Errorf("node %s died among the poison rows", name)
		}
	}
	// Their states before the nodes stop (a stop gives back what it holds).
	type ending struct {
		state, lastError string
	}
	endings := make([]ending, len(poisonIDs))
	read := func(i int) {
		var state string
		var lastError *string
		require.NoError(t, s.DB().QueryRowContext(ctx, store.Expand(s.Dialect(), `SELECT state, last_error FROM {jobs} WHERE id = ?`), poisonIDs[i]).Scan(&state, &lastError))
		endings[i] = ending{state: state}
		if lastError != nil {
			endings[i].lastError = *lastError
		}
	}
	for i := range poisonIDs {
		read(i)
	}
	// A row due further ahead than any door writes is never claimed; the
	// slot owner's look at retention time (once a minute, longer than this
	// run) sets it aside. Until then it waits, blocking nothing: the look
	// itself is run here, and must set it aside.
	for i, row := range poison {
		if row.neverDue && endings[i].state == store.StateReady {
			_, err := s.JobsSetAsideUnreachable(ctx, jobs.Unreachable, 500)
			require.NoError(t, err)
			read(i)
		}
	}
	if crashed == 0 {
		for _, n := range f.nodes {
			n.stop(t)
		}
	}

	first := map[string]time.Time{}
	for _, c := range rec.snapshot() {
		if c.kind == "job" {
			if at, ok := first[c.key]; !ok || c.start.Before(at) {
				first[c.key] = c.start
			}
		}
	}
	delayed, goodAfter := 0, 0
	var waitsBefore, waitsAfter []time.Duration
	for _, g := range goods {
		at, ok := first[strconv.FormatInt(g.id, 10)]
		wait := at.Sub(g.enqueued)
		if !ok {
			wait = time.Since(g.enqueued)
		}
		switch {
		case g.poisoned:
			goodAfter++
			waitsAfter = append(waitsAfter, wait)
		case ok && at.Before(poisonedAt):
			waitsBefore = append(waitsBefore, wait) // the farm's pace without poison
		}
		if !ok || wait > bound {
			delayed++
			if delayed <= 10 {
				t.Errorf("good job %d (enqueued %s, after the poison rows: %v) was called after %v (called: %v), bound %v",
					g.id, g.enqueued.Format("15:04:05.000"), g.poisoned, wait.Round(time.Millisecond), ok, bound)
			}
		}
	}
	if delayed > 10 {
		t.Errorf("... %d good jobs delayed in all", delayed)
	}
	require.Positive(t, goodAfter, "no good job was enqueued after the poison rows")

	notEnded := 0
	var rows []string
	for i, row := range poison {
		e := endings[i]
		ok := (e.state == store.StateFailed || e.state == store.StateDead) && e.lastError != ""
		if row.runnable && e.state == store.StateDone {
			ok = true
		}
		if !ok {
			notEnded++
			t.Errorf("poison row %d (%s) is %s with last_error %q: want failed or dead, with the reason", poisonIDs[i], row.what, e.state, e.lastError)
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s |", row.what, e.state, strings.ReplaceAll(shorten(e.lastError, 80), "|", "/")))
	}

	var b strings.Builder
	fmt.Fprintf(&b, "### poison rows among good jobs (%s)\n\n3 nodes, slot %v; a good job enqueued every 50 ms for %v, %d poison rows written with SQL after %v; start bound %v. %v in all.\n\n",
		driver, p.slot, before+after, len(poisonIDs), before, bound, time.Since(began).Round(time.Second))
	fmt.Fprintf(&b, "| good jobs | good jobs delayed by a poison row | slowest start of the jobs called before the poison | of those enqueued after | nodes died | poison rows not ended (failed/dead) |\n")
	fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|\n| %d | %d | %v | %v | %d | %d |\n\n", len(goods), delayed,
		slowest(waitsBefore).Round(time.Millisecond), slowest(waitsAfter).Round(time.Millisecond), crashed, notEnded)
	fmt.Fprintf(&b, "| poison row | state at the end | last_error |\n|---|---|---|\n%s\n", strings.Join(rows, "\n"))
	t.Log("\n" + b.String())
	appendChaosReport(t, b.String())
}

func slowest(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)-1]
}

func shorten(s string, n int) string {
	s = strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(s)
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// poisonID is the id of the poison row whose idempotency key starts with
// key ("poison-N"). Not `idem_key LIKE 'poison-N%'`: on MariaDB that
// walks the index of idempotency keys over a range that misses a key
// whose next character sorts below a space (its PAD SPACE collation
// compares 'poison-5\r\n...' as less than 'poison-5'), and found no row
// for the key with CR/LF. The store itself never matches a prefix with
// LIKE (jobs_admin.go's prefixRange and SUBSTRING).
func poisonID(t *testing.T, s *store.Store, key, what string) int64 {
	t.Helper()
	rows, err := s.DB().QueryContext(context.Background(), store.Expand(s.Dialect(), `SELECT id, idem_key FROM {jobs} WHERE idem_key LIKE 'poison-%'`))
	require.NoError(t, err)
	defer rows.Close()
	var found []int64
	for rows.Next() {
		var id int64
		var idem string
		require.NoError(t, rows.Scan(&id, &idem))
		if strings.HasPrefix(idem, key) {
			found = append(found, id)
		}
	}
	require.NoError(t, rows.Err())
	require.Len(t, found, 1, "the poison row %q (idempotency key %s...)", what, key)
	return found[0]
}
