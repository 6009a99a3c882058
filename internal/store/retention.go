package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// FinishedStates are the states a job ends in, in the order retention
// visits them.
var FinishedStates = []string{StateDone, StateFailed, StateDead, StateCancelled, StateMissed}

// CountStates are the states JobCountsCapped counts, and StateRetrying: the
// ready jobs backing off after a failed attempt (attempt > 0, due later).
// They are counted in ready too.
var CountStates = []string{StateReady, StateRetrying, StateRunning, StateDone, StateFailed, StateDead, StateCancelled, StateMissed}

// StateRetrying is not a state a row has: it names the ready jobs that
// failed at least once and wait for their next attempt.
const StateRetrying = "retrying"

// BackingOff reports whether the job waits for a retry after a failed
// attempt at dbNow (a database time): what job listings show as retrying.
func (j Job) BackingOff(dbNow time.Time) bool {
	return j.State == StateReady && j.Attempt > 0 && j.RunAt.After(dbNow)
}

// firstRows is a SELECT that returns at most limit rows: SQL Server's
// TOP (?) before the columns, LIMIT ? after the rest elsewhere. The limit
// travels as a parameter in its place; rest must hold no other parameter
// when the select is part of a larger statement with parameters after it.
func (s *Store) firstRows(cols, rest string, args []any, limit int) (string, []any) {
	return rowLimit(s.d, "SELECT "+cols+" "+rest, args, limit)
}

// pickedIDs is the subquery of an IN list of the ids pick selects, in a
// write of the table pick reads: pick itself, or where the dialect takes
// no row limit in an IN subquery nor a read of the table a statement
// writes (derivedPick), a derived table of it, which the database reads
// first.
func pickedIDs(d Dialect, pick string) string {
	if _, ok := d.(derivedPick); ok {
		return `SELECT p.id FROM (` + pick + `) AS p`
	}
	return pick
}

// derivedPick is a dialect that takes a write's picked ids from a derived
// table (pickedIDs): MySQL (errors 1235 and 1093).
type derivedPick interface{ derivedPick() }

// finishedState is the condition of a retention delete for one state; the
// state is a literal (it is one of FinishedStates, never user input), so
// that the statement of each state is its own plan. finished_at IS NOT
// NULL is implied, and said, so that every database matches the partial
// index on finished rows even though the bound is computed from its clock.
//
// The bound is the clock read once ({now_once+?}): on PostgreSQL a bound
// on the clock read for every row is no index condition, and each prune
// walked every retained job of the state to find none old enough (a third
// of a second at a million).
func finishedState(state string) string {
	return "state = '" + state + "' AND finished_at IS NOT NULL AND finished_at < {now_once+?}"
}

// JobsPrune deletes up to limit jobs of a finished state whose finished_at
// is older than age on the database clock, oldest first, and returns how
// many it deleted. One statement, a seek on (state, finished_at) and at most
// limit row locks: a claim, which touches only ready rows, never waits for
// it. The outer condition repeats the inner one, so that a row changed
// between the pick and the delete (a dead job retried) is left alone.
func (s *Store) JobsPrune(ctx context.Context, state string, age time.Duration, limit int) (int64, error) {
	if !isFinished(state) {
		return 0, fmt.Errorf("prune jobs: %q is not a finished state", state)
	}
	pick, args := s.firstRows("id", "FROM {jobs} WHERE "+finishedState(state)+" ORDER BY finished_at", []any{-millis(age)}, limit)
	if s.writesBack() {
		// The ids first, then a delete by primary key in id order
		// (idsfirst.go): a subquery in the DELETE would share-lock the
		// index it reads.
		ids, err := queryKeys[int64](ctx, s, nil, "delete "+state+" jobs past their retention", s.statement(pick), args)
		if err != nil || len(ids) == 0 {
			return 0, err
		}
		slices.Sort(ids)
		// The multiple-table form: a single-table DELETE takes no index hint.
		q := s.statement(`DELETE j FROM {jobs} AS j` + byID + ` WHERE j.id IN (` + placeholders(len(ids)) + `) AND j.` + finishedState(state))
		return s.execCount(ctx, "delete "+state+" jobs past their retention", q, append(int64Args(ids), -millis(age))...)
	}
	q := s.statement(`DELETE FROM {jobs} WHERE ` + finishedState(state) + ` AND id IN (` + pick + `)`)
	return s.execCount(ctx, "delete "+state+" jobs past their retention", q, append([]any{-millis(age)}, args...)...)
}

func isFinished(state string) bool {
	for _, f := range FinishedStates {
		if f == state {
			return true
		}
	}
	return false
}

// NodesPrune deletes the registry rows of nodes not seen for age on the
// database clock: nodes that left, and nodes that died without leaving.
// age is more than any TTL, so no live node's row goes; a node that comes
// back after it checks in again as a new row.
func (s *Store) NodesPrune(ctx context.Context, age time.Duration) (int64, error) {
	q := s.statement(`DELETE FROM {nodes} WHERE last_seen < {now+?}`)
	return s.execCount(ctx, "delete nodes not seen for "+age.String(), q, -millis(age))
}

// JobTally is the number of jobs per state (CountStates), each counted up
// to a cap: a count equal to Cap means "Cap or more".
type JobTally struct {
	Counts map[string]int
	Cap    int
}

// AtCap reports whether state's count reached the cap.
func (t JobTally) AtCap(state string) bool { return t.Counts[state] >= t.Cap }

// Show formats state's count, "10000+" at the cap.
func (t JobTally) Show(state string) string {
	if t.AtCap(state) {
		return fmt.Sprintf("%d+", t.Cap)
	}
	return fmt.Sprint(t.Counts[state])
}

// countsStatement is JobCountsCapped's statement and its arguments.
func (s *Store) countsStatement(limit int) (string, []any) {
	conds := map[string]string{StateRetrying: "state = 'ready' AND attempt > 0 AND run_at > {now}"}
	var parts []string
	var args []any
	for i, st := range CountStates {
		cond, ok := conds[st]
		if !ok {
			cond = "state = '" + st + "'"
		}
		pick, a := s.firstRows("1 AS one", "FROM {jobs} WHERE "+cond, nil, limit)
		parts = append(parts, fmt.Sprintf("SELECT %d AS k, COUNT(*) AS n FROM (%s) c%d", i, pick, i))
		args = append(args, a...)
	}
	return s.statement(strings.Join(parts, "\nUNION ALL ")), args
}

// JobCountsCapped counts the jobs of each state of CountStates, stopping at
// limit in each: one statement reading at most limit index entries per
// state, whatever the size of the table (JobCounts reads every row).
func (s *Store) JobCountsCapped(ctx context.Context, limit int) (JobTally, error) {
	if limit < 1 {
		limit = 1
	}
	q, args := s.countsStatement(limit)
	t := JobTally{Counts: map[string]int{}, Cap: limit}
	err := s.retry(ctx, func() error {
		rows, err := s.query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k, n int
			if err := rows.Scan(&k, &n); err != nil {
				return err
			}
			if k >= 0 && k < len(CountStates) {
				t.Counts[CountStates[k]] = n
			}
		}
		return rows.Err()
	})
	if err != nil {
		return t, fmt.Errorf("count jobs by state: %w", err)
	}
	return t, nil
}
