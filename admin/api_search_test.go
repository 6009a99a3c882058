package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// GET /api/v1/jobs/search finds a job by id, key or text, says by what,
// and how far back its text search read; bad parameters are refused by
// name.
func TestAPISearch(t *testing.T) {
	s, db := storetest.OpenDB(t, "sqlite")
	ctx := context.Background()
	base := apiServer(t, s, db, "")
	keyed, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/invoice", MaxAttempts: 1, Delay: time.Hour, UniqueKey: "invoice-42",
		Payload: []byte(`{"order":42}`)})
	require.NoError(t, err)
	other, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/mail", MaxAttempts: 1, Delay: time.Hour, IdempotencyKey: "mail-7",
		Payload: []byte(`{"to":"ann@example.com"}`)})
	require.NoError(t, err)

	search := func(q string) searchResponse {
		t.Helper()
		r := must(t, base, http.StatusOK, getReq("/api/v1/jobs/search?"+q))
		var out searchResponse
		require.NoError(t, json.Unmarshal([]byte(r.raw), &out))
		return out
	}
	found := func(res searchResponse) map[int64]string {
		m := map[int64]string{}
		for _, h := range res.Hits {
			m[h.Job.ID] = h.Matched
		}
		return m
	}
	require.Equal(t, map[int64]string{keyed: "unique_key"}, found(search("q=invoice-42")))
	require.Equal(t, map[int64]string{other: "idempotency_key"}, found(search("q=mail-7")))
	require.Equal(t, map[int64]string{other: "payload"}, found(search("q="+url.QueryEscape("ann@example"))))
	require.Equal(t, map[int64]string{keyed: "id"}, found(search("q="+itoa(keyed))))
	res := search("q=order&scan=1")
	require.Empty(t, res.Hits, "the newest job alone was read")
	require.Equal(t, other, res.From, "and the answer says from where")
	require.Equal(t, map[int64]string{keyed: "payload"}, found(search("q=order")))

	for _, c := range []struct{ query, field string }{
		{"", "q"}, {"q=x&limit=0", "limit"}, {"q=x&limit=101", "limit"}, {"q=x&scan=100001", "scan"}, {"q=x&scan=many", "scan"},
	} {
		r := must(t, base, http.StatusBadRequest, getReq("/api/v1/jobs/search?"+c.query))
		require.Equal(t, c.field, r.err()["field"], c.query)
	}
}
