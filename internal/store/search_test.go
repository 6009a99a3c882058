package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// hits is a search's hits as "id:how", in order.
func hits(r store.SearchResult) []string {
	var out []string
	for _, h := range r.Hits {
		out = append(out, fmt.Sprintf("%d:%s", h.Job.ID, h.Matched))
	}
	return out
}

func hit(id int64, how string) string { return fmt.Sprintf("%d:%s", id, how) }

// A job is found by its id, unique key or idempotency key (exactly), or
// by text in its payload (bytes, whatever else the payload holds) or its
// last error; once, by the first way it matched; exact matches first,
// then text matches newest first, up to the limit, among the newest Scan
// jobs.
func TestJobsSearch(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		insert := func(j store.NewJob) int64 {
			t.Helper()
			j.Endpoint, j.Method, j.MaxAttempts = "/jobs/search", "POST", 1
			id, err := s.JobInsert(ctx, j)
			require.NoError(t, err)
			return id
		}
		lastError := func(id int64, msg string) {
			t.Helper()
			_, err := s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {jobs} SET last_error = ? WHERE id = ?`), msg, id)
			require.NoError(t, err)
		}
		search := func(q store.JobSearch) store.SearchResult {
			t.Helper()
			r, err := s.JobsSearch(ctx, q)
			require.NoError(t, err)
			return r
		}

		old := insert(store.NewJob{Payload: []byte(`{"order":"needle-old"}`)})                                   // 1
		keyed := insert(store.NewJob{UniqueKey: "order-77", IdempotencyKey: "idem-Alpha", Payload: []byte("x")}) // 2
		// A payload that is not UTF-8 (nor text at all) around the text.
		binary := insert(store.NewJob{Payload: append(append([]byte{0x00, 0xff, 0xfe, 0x80}, "needle-bin"...), 0xc3, 0x28, 0x00)})
		failed := insert(store.NewJob{Payload: []byte("nothing here")})
		lastError(failed, "HTTP 500: needle-err in the handler")
		// Found two ways: by its idempotency key and by its payload.
		both := insert(store.NewJob{IdempotencyKey: "needle-both", Payload: []byte("holds needle-both")})
		byID := insert(store.NewJob{Payload: []byte("another")})

		// Exact: id, unique key, idempotency key.
		r := search(store.JobSearch{Text: strconv.FormatInt(byID, 10), Limit: 10})
		require.Equal(t, []string{hit(byID, "id")}, hits(r))
		require.Equal(t, "another", string(r.Hits[0].Job.Payload), "read as scanJob reads it")
		require.Nil(t, r.Hits[0].Job.History)
		require.Equal(t, []string{hit(keyed, "unique_key")}, hits(search(store.JobSearch{Text: "order-77", Limit: 10})))
		require.Equal(t, []string{hit(keyed, "idempotency_key")}, hits(search(store.JobSearch{Text: "idem-Alpha", Limit: 10})))
		require.Empty(t, hits(search(store.JobSearch{Text: "idem-alpha", Limit: 10})), "a key is compared exactly: case")
		require.Empty(t, hits(search(store.JobSearch{Text: "idem-Alph", Limit: 10})), "a key is compared exactly: not a prefix")
		require.Empty(t, hits(search(store.JobSearch{Text: "order-77 ", Limit: 10})), "a key is compared exactly: trailing space")

		// Text: in a payload (bytes, any around them), in a last error.
		require.Equal(t, []string{hit(binary, "payload")}, hits(search(store.JobSearch{Text: "needle-bin", Limit: 10})))
		require.Equal(t, []string{hit(failed, "last_error")}, hits(search(store.JobSearch{Text: "needle-err", Limit: 10})))
		require.Empty(t, hits(search(store.JobSearch{Text: "NEEDLE-ERR", Limit: 10})), "text is case-sensitive")
		require.Empty(t, hits(search(store.JobSearch{Text: "needle-%", Limit: 10})), "no wildcard")

		// Found two ways, listed once, by the first way.
		r = search(store.JobSearch{Text: "needle-both", Limit: 10})
		require.Equal(t, []string{hit(both, "idempotency_key")}, hits(r))

		// Exact first, then text newest first.
		r = search(store.JobSearch{Text: "needle", Limit: 10})
		require.Equal(t, []string{hit(both, "payload"), hit(failed, "last_error"), hit(binary, "payload"), hit(old, "payload")}, hits(r))
		require.Zero(t, r.From, "the window held the whole table")
		// An id that is also text in a payload: the id first.
		idText := strconv.FormatInt(old, 10)
		withID := insert(store.NewJob{Payload: []byte("refers to " + idText)})
		r = search(store.JobSearch{Text: idText, Limit: 10})
		require.Equal(t, hit(old, "id"), hits(r)[0])
		require.Contains(t, hits(r), hit(withID, "payload"))

		// Limit.
		require.Equal(t, []string{hit(both, "payload"), hit(failed, "last_error")}, hits(search(store.JobSearch{Text: "needle", Limit: 2})))

		// Scan: the newest 3 jobs (withID, byID, both) are read; older
		// matches are not found, From is the oldest id read.
		r = search(store.JobSearch{Text: "needle", Limit: 10, Scan: 3})
		require.Equal(t, []string{hit(both, "payload")}, hits(r))
		require.Equal(t, both, r.From)
		// An exact match is found whatever the window.
		r = search(store.JobSearch{Text: "order-77", Limit: 10, Scan: 1})
		require.Equal(t, []string{hit(keyed, "unique_key")}, hits(r))
		require.Equal(t, withID, r.From)
		r = search(store.JobSearch{Text: "needle", Limit: 10, Scan: 7})
		require.Len(t, r.Hits, 4)
		require.Equal(t, old, r.From, "7 jobs: the 7th newest is the oldest")
		r = search(store.JobSearch{Text: "needle", Limit: 10, Scan: 8})
		require.Len(t, r.Hits, 4)
		require.Zero(t, r.From, "the window covers the table")

		// Validation.
		for _, c := range []struct {
			q    store.JobSearch
			want string
		}{
			{store.JobSearch{Text: "", Limit: 1}, "text is empty"},
			{store.JobSearch{Text: strings.Repeat("é", 201), Limit: 1}, "text has 201 characters"},
			{store.JobSearch{Text: "x", Limit: 0}, "limit 0"},
			{store.JobSearch{Text: "x", Limit: 101}, "limit 101"},
			{store.JobSearch{Text: "x", Limit: 1, Scan: -1}, "scan -1"},
			{store.JobSearch{Text: "x", Limit: 1, Scan: store.MaxSearchScan + 1}, "scan 100001"},
		} {
			_, err := s.JobsSearch(ctx, c.q)
			require.ErrorContains(t, err, c.want)
		}
		_, err := s.JobsSearch(ctx, store.JobSearch{Text: strings.Repeat("é", 200), Limit: 100, Scan: store.MaxSearchScan})
		require.NoError(t, err, "the bounds themselves are allowed")
	})
}

// At 1,000,000 jobs on PostgreSQL every statement of a search is an index
// scan, and the text search reads at most Scan rows of the table.
func TestJobsSearchMillionRows(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the search over 1,000,000 PostgreSQL jobs")
	}
	storetest.RequirePostgres(t)
	s, _ := storetest.Open(t, "postgres")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const rows = 1_000_000
	start := time.Now()
	_, err := s.DB().ExecContext(ctx, `INSERT INTO slotpoller_jobs (endpoint, method, payload, state, run_at, attempt, max_attempts,
  timeout_ms, unique_key, idem_key, token, created_at, finished_at, last_status, last_error, exclusive, queue)
SELECT '/jobs/' || (g % 50), 'POST', convert_to('{"order":' || g || ',"customer":"c' || (g % 1000) || '"}', 'UTF8'),
  CASE WHEN g % 10 = 0 THEN 'dead' ELSE 'succeeded' END, now() - (`+strconv.Itoa(rows)+` - g) * interval '1 second', 1, 3,
  0, CASE WHEN g % 4 = 0 THEN 'order-' || g END, 'idem-' || g, 0, now() - (`+strconv.Itoa(rows)+` - g) * interval '1 second',
  now(), CASE WHEN g % 10 = 0 THEN 500 ELSE 200 END, CASE WHEN g % 10 = 0 THEN 'HTTP 500: upstream timeout ' || g END, 0, 'default'
FROM generate_series(1, `+strconv.Itoa(rows)+`) AS g`)
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `VACUUM ANALYZE slotpoller_jobs`)
	require.NoError(t, err)
	t.Logf("filled %d jobs and analyzed in %s", rows, time.Since(start).Round(time.Millisecond))

	// Each of the search's statements, written as the store writes them
	// for PostgreSQL, explained with the arguments of a search.
	type node struct {
		NodeType     string  `json:"Node Type"`
		RelationName string  `json:"Relation Name"`
		IndexName    string  `json:"Index Name"`
		ActualRows   float64 `json:"Actual Rows"`
		Loops        float64 `json:"Actual Loops"`
		Filtered     float64 `json:"Rows Removed by Filter"`
		Plans        []node  `json:"Plans"`
	}
	explain := func(name, q string, args ...any) (nodes []node, ms float64) {
		t.Helper()
		var out []byte
		require.NoError(t, s.DB().QueryRowContext(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+q, args...).Scan(&out))
		var p []struct {
			Plan          node    `json:"Plan"`
			ExecutionTime float64 `json:"Execution Time"`
		}
		require.NoError(t, json.Unmarshal(out, &p))
		var walk func(n node)
		walk = func(n node) {
			nodes = append(nodes, n)
			for _, c := range n.Plans {
				walk(c)
			}
		}
		walk(p[0].Plan)
		var kinds []string
		for _, n := range nodes {
			if n.RelationName == "slotpoller_jobs" {
				kinds = append(kinds, fmt.Sprintf("%s on %s (%s): %.0f rows, %.0f filtered", n.NodeType, n.RelationName, n.IndexName, n.ActualRows*max(n.Loops, 1), n.Filtered*max(n.Loops, 1)))
				require.NotEqual(t, "Seq Scan", n.NodeType, "%s: no sequential scan of the jobs\n%s", name, out)
			}
		}
		t.Logf("%s: %.2f ms; %s", name, p[0].ExecutionTime, strings.Join(kinds, "; "))
		return nodes, p[0].ExecutionTime
	}
	d := s.Dialect()
	cols := "id, payload, last_error" // the plan's shape does not depend on the columns read
	explain("exact (id, unique key, idempotency key)", store.Expand(d, `SELECT `+cols+` FROM {jobs} WHERE id = ?
UNION ALL SELECT `+cols+` FROM {jobs} WHERE unique_key = ?
UNION ALL SELECT * FROM (SELECT `+cols+` FROM {jobs} WHERE idem_key = ? ORDER BY id DESC LIMIT ?) AS i`),
		int64(123456), "order-500000", "idem-777777", 20)
	for _, scan := range []int{store.DefaultSearchScan, store.MaxSearchScan} {
		explain(fmt.Sprintf("bound (Scan %d)", scan), store.Expand(d, `SELECT id FROM {jobs} ORDER BY id DESC LIMIT 1 OFFSET ?`), scan-1)
		var from int64
		require.NoError(t, s.DB().QueryRowContext(ctx, store.Expand(d, `SELECT id FROM {jobs} ORDER BY id DESC LIMIT 1 OFFSET ?`), scan-1).Scan(&from))
		// A text no job holds: the search reads its whole window.
		nodes, _ := explain(fmt.Sprintf("text, no match (Scan %d)", scan), store.Expand(d, `SELECT `+cols+` FROM {jobs}
WHERE id >= ? AND (position(CAST(? AS bytea) in payload) > 0 OR position(CAST(? AS text) in last_error) > 0) ORDER BY id DESC LIMIT ?`),
			from, []byte("no-such-text"), "no-such-text", 20)
		for _, n := range nodes {
			if n.RelationName == "slotpoller_jobs" {
				read := (n.ActualRows + n.Filtered) * max(n.Loops, 1)
				require.LessOrEqual(t, read, float64(scan), "the text search reads at most Scan rows")
				require.Equal(t, float64(scan), read, "and reads its whole window when nothing matches")
			}
		}
	}

	// The store's own calls: timed, and the rows the text search read
	// counted by the database.
	for _, c := range []struct {
		name string
		q    store.JobSearch
		want int
	}{
		{"by id", store.JobSearch{Text: "123456", Limit: 20}, 1},
		{"by unique key", store.JobSearch{Text: "order-500000", Limit: 20}, 1},
		{"by idempotency key", store.JobSearch{Text: "idem-777777", Limit: 20}, 1},
		{"text in the newest payloads", store.JobSearch{Text: `"customer":"c7"`, Limit: 20}, 10},
		{"text in last errors", store.JobSearch{Text: "upstream timeout 99999", Limit: 20}, 1},
		{"text no job holds (Scan 10,000)", store.JobSearch{Text: "no-such-text", Limit: 20}, 0},
		{"text no job holds (Scan 100,000)", store.JobSearch{Text: "no-such-text", Limit: 20, Scan: store.MaxSearchScan}, 0},
	} {
		tx, err := s.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		before := jobsRowsRead(t, tx, "postgres")
		began := time.Now()
		r, err := s.WithTx(tx).JobsSearch(ctx, c.q)
		took := time.Since(began)
		require.NoError(t, err)
		read := jobsRowsRead(t, tx, "postgres") - before
		require.NoError(t, tx.Rollback())
		scan := c.q.Scan
		if scan == 0 {
			scan = store.DefaultSearchScan
		}
		t.Logf("%s: %d hits in %s, %d rows read from the jobs table and its indexes (Scan %d), from id %d", c.name, len(r.Hits), took.Round(time.Microsecond), read, scan, r.From)
		require.Len(t, r.Hits, c.want, c.name)
		// The bound's walk of the primary key (Scan index entries), the
		// text search's (at most Scan index entries and their rows), and
		// the exact seeks' few.
		require.LessOrEqual(t, read, int64(3*scan+100), "%s reads its window, not the table", c.name)
	}
}
