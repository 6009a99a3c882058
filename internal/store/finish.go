package store

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// The results of calls, recorded in batches: one statement per batch of
// up to MaxFinishBatch results, each row fenced by its token.

// Finish is the end of one call, for JobsFinish: the claim it ends (id
// and token) and how it ended.
type Finish struct {
	ID, Token int64
	Outcome   Outcome
}

// MaxFinishBatch is the most calls JobsFinish records in one statement:
// 7 parameters a row keeps a batch under SQL Server's 2,100.
const MaxFinishBatch = 250

// JobsFinish records the ends of several calls in one statement, each row
// fenced by its claim's token exactly as JobFinishIfRunning fences one, and
// with the same attempt line in the history. It reports, in the order
// given, whether each row was still held under its token and so written:
// a row whose lease was lost is left to its new owner. At most
// MaxFinishBatch rows.
func (s *Store) JobsFinish(ctx context.Context, given []Finish) ([]bool, error) {
	fs := given
	if len(fs) == 0 {
		return nil, nil
	}
	if len(fs) > MaxFinishBatch {
		return nil, fmt.Errorf("record results of %d jobs: at most %d in one statement", len(fs), MaxFinishBatch)
	}
	rows := finishRowsOf(fs)
	var ids []int64
	var err error
	if s.writesBack() {
		ids, err = s.finishLocked(ctx, rows)
		if err != nil {
			err = fmt.Errorf("record results of %d jobs: %w", len(fs), err)
		}
	} else {
		q, args := s.finishStatement(rows)
		ids, err = queryAll(ctx, s, fmt.Sprintf("record results of %d jobs", len(fs)), q, args, func(r rowScanner) (int64, error) {
			var id int64
			return id, r.Scan(&id)
		})
	}
	if err != nil {
		return nil, err
	}
	return writtenOf(given, ids), nil
}

// writtenOf says, in the order given, whether each result is among those
// a statement reported written (ids).
func writtenOf(given []Finish, ids []int64) []bool {
	written := make(map[int64]bool, len(ids))
	for _, id := range ids {
		written[id] = true
	}
	out := make([]bool, len(given))
	for i, f := range given {
		out[i] = written[f.ID]
	}
	return out
}

// finishRowsOf is a batch of results as JobsFinish writes them: in id
// order, as every other statement that writes several jobs, so that two
// of them lock shared rows in the same order.
func finishRowsOf(given []Finish) []finishRow {
	fs := slices.Clone(given)
	slices.SortFunc(fs, func(a, b Finish) int { return cmp.Compare(a.ID, b.ID) })
	rows := make([]finishRow, len(fs))
	for i, f := range fs {
		o := f.Outcome
		rows[i] = finishRow{id: f.ID, token: f.Token, state: o.State, status: o.Status, err: o.Error,
			suffix: historySuffix(o.State, o.Status, o.Error)}
		if o.State == StateReady {
			rows[i].retry = millis(o.RetryAfter)
			rows[i].suffix = historySuffix(OutcomeRetry, o.Status, o.Error)
		}
	}
	return rows
}

// finishRow is one result as JobsFinish writes it.
type finishRow struct {
	id, token   int64
	state       string
	retry       int64 // ms until a retry is due
	status      int
	err, suffix string
}

// finishStatement is JobsFinish's statement and its arguments: the
// dialect's arrays where it takes them, else its VALUES rows, the
// statement for n rows built once (a busy node writes a batch every few
// milliseconds).
func (s *Store) finishStatement(rows []finishRow) (string, []any) {
	if fa, ok := s.d.(finishArrays); ok {
		c := finishColumnsOf(rows)
		args := append(finishSeps(), c.ids, c.tokens, c.states, c.retries, c.statuses, c.errs, c.suffixes)
		return s.expanded(-1, func() string { return fa.finishArrayJobs() }), args
	}
	var args []any
	if !finishRowsFirst(s.d) {
		args = finishSeps()
	}
	for _, r := range rows {
		args = append(args, r.id, r.token, r.state, r.retry, nullInt(r.status), nullString(r.err), r.suffix)
	}
	if finishRowsFirst(s.d) {
		args = append(args, finishSeps()...)
	}
	fv := s.d.(finishValues)
	return s.expanded(len(rows), func() string {
		values := make([]string, len(rows))
		for i := range values {
			values[i] = fv.finishRow()
		}
		return fv.finishJobs(values)
	}), args
}

// expanded is the expanded statement that build writes for a batch of n
// rows (-1: any number), built once per store.
func (s *Store) expanded(n int, build func() string) string {
	if q, ok := s.finishSQL.Load(n); ok {
		return q.(string)
	}
	q := expand(s.d, build())
	s.finishSQL.Store(n, q)
	return q
}

// finishColumnArrays is a batch of results column by column, for a dialect
// that takes them as arrays; a zero status or an empty error is NULL.
type finishColumnArrays struct {
	ids, tokens, retries []int64
	states, suffixes     []string
	statuses             []*int32
	errs                 []*string
}

func finishColumnsOf(rows []finishRow) finishColumnArrays {
	n := len(rows)
	c := finishColumnArrays{ids: make([]int64, n), tokens: make([]int64, n), retries: make([]int64, n),
		states: make([]string, n), suffixes: make([]string, n), statuses: make([]*int32, n), errs: make([]*string, n)}
	for i, r := range rows {
		c.ids[i], c.tokens[i], c.retries[i], c.states[i], c.suffixes[i] = r.id, r.token, r.retry, r.state, r.suffix
		if r.status != 0 {
			status := int32(r.status)
			c.statuses[i] = &status
		}
		if r.err != "" {
			c.errs[i] = &rows[i].err
		}
	}
	return c
}

// finishValues is how a dialect writes JobsFinish: a row of its VALUES
// list (id, token, state, retry ms, status, error, history suffix), and
// the statement around the rows and the history expression.
type finishValues interface {
	finishRow() string
	finishJobs(rows []string) string
}

// finishSet is the SET list of a batch of results for the jobs table
// named t (its name or alias): a retry is due again after its delay, and
// only an end writes finished_at. retryAt is when a retry is due: the
// database clock plus the row's delay.
//
// A retry of a job whose cancel was requested (cancel.go) ends it
// cancelled: its call failed before the node heard of the request, and it
// must not run again. Its history line tells how the attempt ended.
func finishSet(d Dialect, t, retryAt string) string {
	cancelled := `v.v_state = 'ready' AND ` + t + `.cancel_requested_at IS NOT NULL`
	return `state = CASE WHEN ` + cancelled + ` THEN 'cancelled' ELSE v.v_state END, owner = NULL, lease_until = NULL,
  run_at = CASE WHEN v.v_state = 'ready' THEN ` + retryAt + ` ELSE ` + t + `.run_at END,
  finished_at = CASE WHEN v.v_state = 'ready' AND ` + t + `.cancel_requested_at IS NULL THEN ` + t + `.finished_at ELSE {now} END,
  last_status = v.v_status,
  last_error = CASE WHEN ` + cancelled + ` THEN ` + cancelledError(d, t+".") + ` ELSE v.v_err END,
  history = ` + historyLineOf(d, t+".", t+".owner_node", t+".started_at", "v.v_suffix")
}

const finishColumns = "v_id, v_token, v_state, v_retry, v_status, v_err, v_suffix"

// finishArrays is a dialect that takes a batch of results as one array
// per column: one statement for every size of batch, prepared once per
// connection, with seven parameters for the rows however many there are.
type finishArrays interface {
	finishArrayJobs() string
}

// PostgreSQL unnests the columns' arrays in UPDATE ... FROM. (A VALUES list
// of 250 rows was 1,750 parameters to bind and a statement per batch size
// to parse and plan.)
func (d Postgres) finishArrayJobs() string {
	return `UPDATE {jobs} SET ` + finishSet(d, "{jobs}", retryAtOf(d)) + `
FROM unnest(CAST(? AS bigint[]), CAST(? AS bigint[]), CAST(? AS text[]), CAST(? AS bigint[]), CAST(? AS integer[]),
    CAST(? AS text[]), CAST(? AS text[])) AS v(` + finishColumns + `)
WHERE {jobs}.id = v.v_id AND {jobs}.token = v.v_token AND {jobs}.state = 'running'
RETURNING {jobs}.id`
}

// retryAtOf is when a batch row's retry is due: the database clock plus
// the row's v_retry milliseconds.
func retryAtOf(d Dialect) string {
	return strings.NewReplacer("?", "v.v_retry", againMarker, "v.v_retry").Replace(d.NowPlusMillis())
}

// SQLite joins the rows in UPDATE ... FROM, a VALUES list
// whose columns (column1, column2...) are named in a derived table.
func (SQLite) finishRow() string { return "(?, ?, ?, ?, ?, ?, ?)" }
func (d SQLite) finishJobs(rows []string) string {
	return `UPDATE {jobs} SET ` + finishSet(d, "{jobs}", retryAtOf(d)) + `
FROM (SELECT column1 AS v_id, column2 AS v_token, column3 AS v_state, column4 AS v_retry, column5 AS v_status,
    column6 AS v_err, column7 AS v_suffix
  FROM (VALUES
  ` + strings.Join(rows, ",\n  ") + `) AS r) AS v
WHERE {jobs}.id = v.v_id AND {jobs}.token = v.v_token AND {jobs}.state = 'running'
RETURNING {jobs}.id`
}

// SQL Server writes the rows into a table variable and updates the jobs
// it names through the primary key, as the single-row finish does. Each
// row's values are looked up in the table variable by correlated
// subqueries rather than a join: Babelfish refuses an UPDATE whose SET
// reads a joined table when it has an OUTPUT INTO. Each row is 7
// parameters: a batch of MaxFinishBatch stays under the 2,100 a statement
// may have.
// A retry's due time is computed as the row goes into the table variable,
// from its delay parameter (v_retry is that time here).
func (SQLServer) finishRow() string {
	return "SELECT ?, ?, ?, " + sqlServerPlusMillis("?", againMarker) + ", ?, ?, ?"
}
func (d SQLServer) finishJobs(rows []string) string {
	set := finishValue.ReplaceAllString(finishSet(d, "j", "v.v_retry"), "(SELECT x.$1 FROM @v AS x WHERE x.v_id = j.id)")
	return `DECLARE @v TABLE (v_id BIGINT PRIMARY KEY, v_token BIGINT, v_state NVARCHAR(20), v_retry DATETIME2(7), v_status INT,
  v_err NVARCHAR(MAX), v_suffix NVARCHAR(MAX));
INSERT INTO @v (` + finishColumns + `)
  ` + strings.Join(rows, "\n  UNION ALL ") + `;
UPDATE j SET ` + set + `
{output id}
FROM {jobs} AS j WITH (ROWLOCK)
WHERE j.state = 'running' AND j.id IN (SELECT y.v_id FROM @v AS y WHERE y.v_token = j.token)`
}

// finishSeps are the arguments of finishSet's own parameters, in the
// order of its text: the cancelled error around the actor, then the
// history's separators.
func finishSeps() []any {
	before, after := cancelledErrorParts()
	return append([]any{before, after}, historySeps()...)
}

// finishValue is a reference to a column of a batch's row in finishSet.
var finishValue = regexp.MustCompile(`\bv\.(v_[a-z]+)`)

// finishRowsFirst reports whether a dialect's finishJobs places its rows
// before the SET list, so that the row parameters come first.
func finishRowsFirst(d Dialect) bool {
	switch d.(type) {
	case SQLServer, MySQL:
		return true
	}
	return false
}
