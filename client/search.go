package client

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/slotpoller/slotpoller/internal/store"
)

// Search is what to look for: a job id, a unique key or an idempotency
// key (each found by an index seek, however many jobs the table holds),
// or text in a payload or last error, looked for among the newest Scan
// jobs only, so that a search costs the same on a table of a million.
type Search struct {
	Text  string // 1 to MaxSearchText characters
	Limit int    // most jobs returned; 0 is DefaultSearchLimit, at most MaxSearchLimit
	Scan  int    // newest jobs the text search reads; 0 is DefaultSearchScan, at most MaxSearchScan
}

// Search bounds.
const (
	MaxSearchText      = 200
	DefaultSearchLimit = 20
	MaxSearchLimit     = 100
	DefaultSearchScan  = store.DefaultSearchScan
	MaxSearchScan      = store.MaxSearchScan
)

// SearchHit is a job found, and by what: "id", "unique_key",
// "idempotency_key", "payload" or "last_error".
type SearchHit struct {
	Matched string  `json:"matched"`
	Job     JobInfo `json:"job"`
}

// SearchResult is what a search found: exact matches first, then text
// matches newest first, each job once.
type SearchResult struct {
	Hits []SearchHit `json:"hits"`
	// From is the oldest job id the text search read: it read every job
	// from From on, and none older. 0 when it read the whole table.
	From int64 `json:"from,omitempty"`
}

// CheckSearch validates a search before anything is sent. Errors are
// *FieldError.
func CheckSearch(q Search) error {
	switch n := utf8.RuneCountInString(q.Text); {
	case q.Text == "":
		return &FieldError{Field: "text", Problem: "nothing to look for: give a job id, a unique or idempotency key, or text in a payload or last error"}
	case n > MaxSearchText || !utf8.ValidString(q.Text):
		return &FieldError{Field: "text", Problem: fmt.Sprintf("the text must be valid UTF-8 of at most %d characters (it has %d)", MaxSearchText, n)}
	case q.Limit < 0 || q.Limit > MaxSearchLimit:
		return &FieldError{Field: "limit", Problem: fmt.Sprintf("limit %d must be from 1 to %d", q.Limit, MaxSearchLimit)}
	case q.Scan < 0 || q.Scan > MaxSearchScan:
		return &FieldError{Field: "scan", Problem: fmt.Sprintf("scan %d must be from 1 to %d", q.Scan, MaxSearchScan)}
	}
	return nil
}

// Search finds jobs by id, key or text (see Search).
func (c *Client) Search(ctx context.Context, q Search) (SearchResult, error) {
	if err := CheckSearch(q); err != nil {
		return SearchResult{}, err
	}
	if q.Limit == 0 {
		q.Limit = DefaultSearchLimit
	}
	res, err := c.s.JobsSearch(ctx, store.JobSearch{Text: q.Text, Limit: q.Limit, Scan: q.Scan})
	if err != nil {
		return SearchResult{}, fmt.Errorf("search jobs for %q: %w", q.Text, err)
	}
	out := SearchResult{Hits: make([]SearchHit, 0, len(res.Hits)), From: res.From}
	for _, h := range res.Hits {
		out.Hits = append(out.Hits, SearchHit{Matched: h.Matched, Job: info(h.Job)})
	}
	return out, nil
}
