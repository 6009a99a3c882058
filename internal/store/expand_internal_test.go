package store

import (
	"database/sql"
	"fmt"
	"strings"
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

// A prefix's range holds every endpoint that starts with it, in byte order
// (the order of the endpoint's index on every database), and SUBSTRING
// stays the judge of the rest.
func TestPrefixRangeHoldsEveryEndpointWithThePrefix(t *testing.T) {
	for _, c := range []struct{ prefix, lo, hi string }{
		{"/jobs/7", "/jobs/7", "/jobs/8"},
		{"/a~", "/a~", "/a\x7f"},
		{"/a\x7fb", "/a", "/b"},
		{"/é/x", "/", "0"},
		{strings.Repeat("a", 300), strings.Repeat("a", 200), strings.Repeat("a", 199) + "b"},
	} {
		lo, hi, ok := prefixRange(c.prefix)
		require.True(t, ok, c.prefix)
		require.Equal(t, c.lo, lo, c.prefix)
		require.Equal(t, c.hi, hi, c.prefix)
		for _, tail := range []string{"", "\x00", "~", "\x7f", "é", "\uffff", "\U0010ffff/z"} {
			e := c.prefix + tail
			require.True(t, lo <= e && e < hi, "%q not in [%q, %q)", e, lo, hi)
		}
	}
	_, _, ok := prefixRange("é")
	require.False(t, ok, "no ASCII character to bound the range with")
}
