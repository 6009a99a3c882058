package store

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Finding a job from what an operator has at hand: its id, its unique
// key, its idempotency key (which the job's endpoint saw), or a piece of
// its payload or of its last error. Every statement is bounded whatever
// the table's size:
//   - the exact lookups are index seeks (the primary key, the unique key's
//     index, the idempotency key's of migration 19), one statement;
//   - the text search reads only the newest Scan jobs: a backward range of
//     the primary key from the Scan-th newest id, which a statement reads
//     first. Nothing indexes a substring of a payload, so an older job is
//     found by its text only with a larger Scan (or by an exact key).

// JobSearch is what to look for.
type JobSearch struct {
	Text  string // 1 to 200 characters: a job id, a unique key, an idempotency key, or text in a payload or last error
	Limit int    // most jobs returned, 1..100
	Scan  int    // how many of the newest jobs the text search reads: 1..MaxSearchScan; 0 is DefaultSearchScan
}

// DefaultSearchScan is how many of the newest jobs a text search reads
// unless told; MaxSearchScan the most it may be told to.
const DefaultSearchScan, MaxSearchScan = 10_000, 100_000

// The bounds of a search's text and limit.
const (
	maxSearchText  = 200
	maxSearchLimit = 100
)

// SearchHit is one job found, and how: "id", "unique_key",
// "idempotency_key", "payload" or "last_error" (the first that matched,
// in that order).
type SearchHit struct {
	Job     Job
	Matched string
}

// SearchResult is what JobsSearch found.
type SearchResult struct {
	Hits []SearchHit // exact matches first, then text matches newest first; a job once
	// From is the oldest job id the text search read (it read every job
	// with id >= From); 0 when it read the whole table.
	From int64
}

// How a job matched, in the order a hit names the first.
var searchMatches = []string{"id", "unique_key", "idempotency_key", "payload", "last_error"}

// JobsSearch finds up to q.Limit jobs by q.Text: those it names exactly
// (id, unique key, idempotency key) first, then those among the newest
// q.Scan whose payload or last error holds it, newest first. Jobs are
// read as JobsList reads them (no history).
func (s *Store) JobsSearch(ctx context.Context, q JobSearch) (SearchResult, error) {
	const what = "search jobs"
	if q.Scan == 0 {
		q.Scan = DefaultSearchScan
	}
	n := utf8.RuneCountInString(q.Text)
	switch {
	case q.Text == "":
		return SearchResult{}, fmt.Errorf("%s: the text is empty", what)
	case n > maxSearchText:
		return SearchResult{}, fmt.Errorf("%s: the text has %d characters, more than %d", what, n, maxSearchText)
	case !utf8.ValidString(q.Text):
		return SearchResult{}, fmt.Errorf("%s: the text is not valid UTF-8", what)
	case q.Limit < 1 || q.Limit > maxSearchLimit:
		return SearchResult{}, fmt.Errorf("%s: the limit %d is not between 1 and %d", what, q.Limit, maxSearchLimit)
	case q.Scan < 1 || q.Scan > MaxSearchScan:
		return SearchResult{}, fmt.Errorf("%s: the scan %d is not between 1 and %d", what, q.Scan, MaxSearchScan)
	}

	m := newSearchMatch(q.Text)
	var res SearchResult
	seen := map[int64]bool{}
	add := func(jobs []Job) {
		for _, j := range jobs {
			// The database narrows, the store decides: a match is exact
			// (byte for byte) on every database, whatever a collation pads
			// or folds, and a candidate that holds the text nowhere
			// (SQL Server's hexadecimal form of the payload test) is
			// dropped.
			how := m.of(j)
			if how == "" || seen[j.ID] || len(res.Hits) >= q.Limit {
				continue
			}
			seen[j.ID] = true
			res.Hits = append(res.Hits, SearchHit{Job: j, Matched: how})
		}
	}

	exact, err := s.searchExact(ctx, q, m.id)
	if err != nil {
		return SearchResult{}, fmt.Errorf("%s: %w", what, err)
	}
	// By how they matched (id, unique key, idempotency key), then newest
	// first; a job the seeks found that matches none of them exactly is
	// left to the text search.
	exact = slices.DeleteFunc(exact, func(j Job) bool { return slices.Index(searchMatches, m.of(j)) > 2 })
	slices.SortFunc(exact, func(a, b Job) int {
		return cmp.Or(cmp.Compare(slices.Index(searchMatches, m.of(a)), slices.Index(searchMatches, m.of(b))), cmp.Compare(b.ID, a.ID))
	})
	add(exact)

	ids, err := queryAll(ctx, s, "read the text search's bound",
		s.statement(`SELECT id FROM {jobs} ORDER BY id DESC `+s.d.NthRow()), []any{q.Scan - 1}, scanID)
	if err != nil {
		return SearchResult{}, fmt.Errorf("%s: %w", what, err)
	}
	if len(ids) > 0 {
		res.From = ids[0]
	}
	inPayload, payloadArgs := s.d.BytesContain("payload", q.Text)
	inError, errorArgs := s.d.TextContains("last_error", q.Text)
	args := append(append([]any{res.From}, payloadArgs...), errorArgs...)
	// Limit rows are enough: at most those the exact lookups found are
	// found again.
	stmt, args := s.firstRows(jobColumns, "FROM {jobs} WHERE id >= ? AND ("+inPayload+" OR "+inError+") ORDER BY id DESC", args, q.Limit)
	stmt, args = s.planPerCall(s.statement(stmt), args)
	text, err := queryAll(ctx, s, "search jobs' payloads and last errors", stmt, args, scanJob)
	if err != nil {
		return SearchResult{}, fmt.Errorf("%s: %w", what, err)
	}
	add(text)
	return res, nil
}

// searchExact reads the jobs text names exactly: by id (when it is a
// whole number), unique key and idempotency key, each an index seek, in
// one statement. Several jobs may share an idempotency key (a key is the
// caller's): the newest Limit of them.
func (s *Store) searchExact(ctx context.Context, q JobSearch, id int64) ([]Job, error) {
	var parts []string
	var args []any
	if id > 0 {
		parts, args = append(parts, `SELECT `+jobColumns+` FROM {jobs} WHERE id = ?`), append(args, id)
	}
	parts, args = append(parts, `SELECT `+jobColumns+` FROM {jobs} WHERE unique_key = ?`), append(args, q.Text)
	idem, idemArgs := rowLimit(s.d, `SELECT `+jobColumns+` FROM {jobs} WHERE `+s.d.IdemKey()+` = ? ORDER BY id DESC`, []any{q.Text}, q.Limit)
	parts, args = append(parts, `SELECT * FROM (`+idem+`) AS i`), append(args, idemArgs...)
	stmt, args := s.planPerCall(s.statement(strings.Join(parts, "\nUNION ALL\n")), args)
	return queryAll(ctx, s, "find jobs by id or key", stmt, args, scanJob)
}

// searchMatch tells how a job matched a search's text.
type searchMatch struct {
	text string
	id   int64 // the text as a job id (a whole number), else 0
}

func newSearchMatch(text string) searchMatch {
	id, err := strconv.ParseInt(text, 10, 64)
	if err != nil || id < 1 {
		id = 0
	}
	return searchMatch{text: text, id: id}
}

// of is how j matched: the first of searchMatches that holds the text, ""
// for none.
func (m searchMatch) of(j Job) string {
	switch {
	case m.id != 0 && j.ID == m.id:
		return "id"
	case j.UniqueKey == m.text:
		return "unique_key"
	case j.IdempotencyKey == m.text:
		return "idempotency_key"
	case bytes.Contains(j.Payload, []byte(m.text)):
		return "payload"
	case strings.Contains(j.LastError, m.text):
		return "last_error"
	}
	return ""
}

func scanID(r rowScanner) (int64, error) {
	var id int64
	err := r.Scan(&id)
	return id, err
}
