package admin

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// TestAPIEnqueueCarriesTheTrace: a job enqueued through the API belongs
// to the trace of its own traceparent field, else to the request's
// traceparent header (a web request traced by OpenTelemetry sends it);
// an invalid header is ignored, as W3C asks of a receiver, an invalid
// field refused. The job's call carries the trace.
func TestAPIEnqueueCarriesTheTrace(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		_, db := storetest.OpenDB(t, driver)
		var mu sync.Mutex
		sent := map[string]string{} // path → traceparent of its call
		ep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			sent[r.URL.Path] = r.Header.Get("traceparent")
			mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(ep.Close)
		rn := runNode(t, testConfig(t, db, "api-1", ep.URL))
		srv := httptest.NewServer(Handler(rn.n))
		t.Cleanup(srv.Close)
		base := srv.URL
		require.Eventually(t, func() bool { return callAPI(t, base, getReq("/api/v1/jobs/counts")).status == http.StatusOK },
			30*time.Second, 20*time.Millisecond, "the API answers once the node has its database")

		const header = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		const field = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		withHeader := func(q apiReq, tp string) apiReq { q.header = map[string]string{"traceparent": tp}; return q }
		traceOf := func(id int64) any {
			return must(t, base, http.StatusOK, getReq(fmt.Sprintf("/api/v1/jobs/%d", id))).body["traceparent"]
		}

		fromHeader := idOf(t, must(t, base, http.StatusCreated, withHeader(post("/api/v1/jobs", `{"endpoint":"/header"}`), header)))
		fromField := idOf(t, must(t, base, http.StatusCreated,
			withHeader(post("/api/v1/jobs", `{"endpoint":"/field","traceparent":"`+field+`"}`), header)))
		badHeader := idOf(t, must(t, base, http.StatusCreated, withHeader(post("/api/v1/jobs", `{"endpoint":"/bad-header"}`), "00-zz-01")))
		r := must(t, base, http.StatusCreated, withHeader(post("/api/v1/jobs/batch", `{"jobs":[{"endpoint":"/batch-a"},{"endpoint":"/batch-b","traceparent":"`+field+`"}]}`), header))
		batch := r.body["ids"].([]any)

		require.Equal(t, header, traceOf(fromHeader), "the request's header")
		require.Equal(t, field, traceOf(fromField), "the job's own field wins")
		require.Nil(t, traceOf(badHeader), "an invalid header is ignored")
		require.Equal(t, header, traceOf(int64(batch[0].(float64))))
		require.Equal(t, field, traceOf(int64(batch[1].(float64))))

		r = must(t, base, http.StatusBadRequest, post("/api/v1/jobs", `{"endpoint":"/x","traceparent":"00-zz-01"}`))
		require.Equal(t, "traceparent", r.err()["field"])
		require.Contains(t, r.err()["message"], "is not a W3C traceparent")

		for _, id := range []int64{fromHeader, fromField, badHeader} {
			waitState(t, base, id, "done")
		}
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, header[:36], sent["/header"][:36], "the call is in the enqueuer's trace")
		require.NotEqual(t, header, sent["/header"], "as a span of its own")
		require.Equal(t, field[:36], sent["/field"][:36])
		require.Len(t, sent["/bad-header"], 55, "a job without a trace still gets one")
	})
}
