package store

import (
	"database/sql"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Statements are expanded once per store and its transactions, and the
// cache stops growing at maxExpanded texts while every text still expands.
func TestStatementsAreExpandedOnceAndTheCacheIsBounded(t *testing.T) {
	s := New(nil, Postgres{})
	q := `SELECT id FROM {jobs} WHERE run_at <= {now+?} AND state = ?`
	first := s.statement(q)
	require.Equal(t, expand(Postgres{}, q), first)
	require.Equal(t, first, s.statement(q))
	require.Equal(t, int64(1), s.statements.count.Load(), "one text, one entry")
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = s.statement(q) }), "a cached text is not expanded again")
	require.Same(t, s.statements, s.WithTx(&sql.Tx{}).statements, "a transaction's store shares the cache")

	for i := range maxExpanded + 10 {
		text := fmt.Sprintf(`SELECT %d FROM {nodes} WHERE name = ?`, i)
		require.Equal(t, expand(Postgres{}, text), s.statement(text))
	}
	require.Equal(t, int64(maxExpanded), s.statements.count.Load(), "no more than maxExpanded texts kept")
	_, kept := s.statements.byText.Load(fmt.Sprintf(`SELECT %d FROM {nodes} WHERE name = ?`, maxExpanded+5))
	require.False(t, kept)
}

// Callers racing with new texts never keep more than maxExpanded of them.
func TestTheStatementCacheBoundHoldsUnderRaces(t *testing.T) {
	s := New(nil, SQLite{})
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				_ = s.statement(fmt.Sprintf(`SELECT %d FROM {jobs} WHERE id = ?`, g*40+i))
			}
		}()
	}
	wg.Wait()
	kept := 0
	s.statements.byText.Range(func(any, any) bool { kept++; return true })
	require.Equal(t, maxExpanded, kept)
	require.Equal(t, int64(maxExpanded), s.statements.count.Load())
}
