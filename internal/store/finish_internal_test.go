package store

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// PostgreSQL writes every batch of results with one statement and seven
// array parameters: a VALUES list of 250 rows was 1,750 parameters and a
// statement per batch size to parse and plan, and cost the database more
// per job than the claim. The other dialects keep their rows.
func TestFinishStatementShapes(t *testing.T) {
	batch := func(n int) []finishRow {
		rows := make([]finishRow, n)
		for i := range rows {
			rows[i] = finishRow{id: int64(i + 1), token: 1, state: StateDone, suffix: "done"}
		}
		rows[0].status, rows[0].err = 503, "unavailable"
		return rows
	}
	// A store of its own for each size: the statements are cached per store.
	one, args1 := New(nil, Postgres{}).finishStatement(batch(1))
	full, argsFull := New(nil, Postgres{}).finishStatement(batch(MaxFinishBatch))
	require.Equal(t, one, full, "one statement for every batch size")
	require.Len(t, args1, len(finishSeps())+7)
	require.Len(t, argsFull, len(finishSeps())+7)
	require.Equal(t, len(argsFull), highestPlaceholder(full), "a parameter for every argument")
	require.Contains(t, full, "unnest(")

	q1, a1 := New(nil, SQLite{}).finishStatement(batch(1))
	q3, a3 := New(nil, SQLite{}).finishStatement(batch(3))
	require.NotEqual(t, q1, q3)
	require.Len(t, a1, len(finishSeps())+7)
	require.Len(t, a3, len(finishSeps())+3*7)
	require.Equal(t, len(a3), strings.Count(q3, "?"), "a parameter for every argument")
}

// highestPlaceholder is the largest $n in a PostgreSQL statement.
func highestPlaceholder(q string) int {
	highest := 0
	for _, m := range regexp.MustCompile(`\$([0-9]+)`).FindAllStringSubmatch(q, -1) {
		n, _ := strconv.Atoi(m[1])
		highest = max(highest, n)
	}
	return highest
}

// A zero status and an empty error are NULL in the arrays, as nullInt and
// nullString make them in a VALUES row.
func TestFinishColumnsWriteNulls(t *testing.T) {
	c := finishColumnsOf([]finishRow{
		{id: 1, token: 2, state: StateReady, retry: 1000, status: 503, err: "unavailable", suffix: "retry"},
		{id: 3, token: 4, state: StateDone, suffix: "done"},
	})
	require.Equal(t, []int64{1, 3}, c.ids)
	require.Equal(t, []int64{2, 4}, c.tokens)
	require.Equal(t, []int64{1000, 0}, c.retries)
	require.Equal(t, []string{StateReady, StateDone}, c.states)
	require.Equal(t, []string{"retry", "done"}, c.suffixes)
	require.Equal(t, int32(503), *c.statuses[0])
	require.Equal(t, "unavailable", *c.errs[0])
	require.Nil(t, c.statuses[1])
	require.Nil(t, c.errs[1])
}
