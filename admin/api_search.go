package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/slotpoller/slotpoller/client"
)

// searchResponse is what GET /api/v1/jobs/search answers.
type searchResponse struct {
	Hits []searchHit `json:"hits"`
	// From is the oldest job id the text search read: every job from it on
	// was read, older ones were not (raise scan to look further back).
	// Absent when the text search read the whole table.
	From int64 `json:"from,omitempty"`
}

// searchHit is a job found, and by what.
type searchHit struct {
	Matched string  `json:"matched"` // id, unique_key, idempotency_key, payload or last_error
	Job     jobView `json:"job"`
}

// search serves GET /api/v1/jobs/search?q=&limit=&scan= (client.Search).
func (a *api) search(ctx context.Context, c *client.Client, r *http.Request) (int, any, error) {
	q, err := query(r, "q", "limit", "scan")
	if err != nil {
		return 0, nil, err
	}
	s := client.Search{Text: q.Get("q")}
	for _, p := range []struct {
		name string
		to   *int
	}{{"limit", &s.Limit}, {"scan", &s.Scan}} {
		raw := q.Get(p.name)
		if raw == "" {
			continue
		}
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 {
			return 0, nil, &client.FieldError{Field: p.name, Problem: fmt.Sprintf("%s %q must be a whole number from 1", p.name, raw)}
		}
		*p.to = n
	}
	res, err := c.Search(ctx, s)
	var fe *client.FieldError
	if errors.As(err, &fe) && fe.Field == "text" {
		fe.Field = "q" // the query parameter's name
	}
	if err != nil {
		return 0, nil, err
	}
	out := searchResponse{Hits: make([]searchHit, 0, len(res.Hits)), From: res.From}
	for _, h := range res.Hits {
		out.Hits = append(out.Hits, searchHit{Matched: h.Matched, Job: view(h.Job, false)})
	}
	return http.StatusOK, out, nil
}
