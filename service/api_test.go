package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// apiReq is one call of the HTTP API in a test.
type apiReq struct {
	method, path string
	body         string
	ctype        string            // Content-Type; "application/json" for a POST unless set ("-" sends none)
	header       map[string]string // more headers (Host is set as the request's host)
}

// apiResp is an answer: its status, headers and JSON body.
type apiResp struct {
	status int
	header http.Header
	raw    string
	body   map[string]any
}

func (r apiResp) err() map[string]any {
	e, _ := r.body["error"].(map[string]any)
	return e
}

func callAPI(t *testing.T, base string, q apiReq) apiResp {
	t.Helper()
	req, err := http.NewRequest(q.method, base+q.path, strings.NewReader(q.body))
	require.NoError(t, err)
	switch {
	case q.ctype == "-":
	case q.ctype != "":
		req.Header.Set("Content-Type", q.ctype)
	case q.method == http.MethodPost:
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range q.header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := apiResp{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		require.NoError(t, json.Unmarshal(raw, &out.body), "the answer is JSON: %s", raw)
	}
	return out
}

// must calls and requires the status.
func must(t *testing.T, base string, status int, q apiReq) apiResp {
	t.Helper()
	r := callAPI(t, base, q)
	require.Equal(t, status, r.status, "%s %s: %s", q.method, q.path, r.raw)
	return r
}

func post(path, body string) apiReq { return apiReq{method: http.MethodPost, path: path, body: body} }
func getReq(path string) apiReq     { return apiReq{method: http.MethodGet, path: path} }

// jobState reads a job's state through the API.
func jobState(t *testing.T, base string, id int64) string {
	t.Helper()
	r := must(t, base, http.StatusOK, getReq(fmt.Sprintf("/api/v1/jobs/%d", id)))
	return r.body["state"].(string)
}

func waitState(t *testing.T, base string, id int64, state string) {
	t.Helper()
	require.Eventually(t, func() bool { return jobState(t, base, id) == state }, 30*time.Second, 20*time.Millisecond,
		"job %d should become %s", id, state)
}

func idOf(t *testing.T, r apiResp) int64 {
	t.Helper()
	id, ok := r.body["id"].(float64)
	require.True(t, ok, "an id in %s", r.raw)
	return int64(id)
}

// endpoints are the job pages of a test: they record each call's path and
// body; /flaky fails while failing is set; /slow holds until released.
type endpoints struct {
	mu      sync.Mutex
	calls   map[string][]string
	failing atomic.Bool
	release chan struct{}
}

func newEndpoints(t *testing.T) (*endpoints, string) {
	e := &endpoints{calls: map[string][]string{}, release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.calls[r.URL.Path] = append(e.calls[r.URL.Path], string(body))
		e.mu.Unlock()
		switch {
		case strings.HasPrefix(r.URL.Path, "/flaky") && e.failing.Load():
			http.Error(w, "down for a deploy", http.StatusInternalServerError)
			return
		case r.URL.Path == "/slow":
			select {
			case <-e.release:
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(e.releaseSlow)
	return e, srv.URL
}

func (e *endpoints) releaseSlow() {
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-e.release:
	default:
		close(e.release)
	}
}

func (e *endpoints) bodies(path string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.calls[path]...)
}

// TestAPIJobs drives every job route of a running node's API, with a real
// runner calling the jobs.
func TestAPIJobs(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, db := storetest.OpenDB(t, driver)
		ep, epURL := newEndpoints(t)
		rn := runNode(t, testConfig(t, db, "api-1", epURL))
		srv := httptest.NewServer(rn.n.AdminHandler())
		t.Cleanup(srv.Close)
		base := srv.URL
		require.Eventually(t, func() bool { return callAPI(t, base, getReq("/api/v1/jobs/counts")).status == http.StatusOK },
			30*time.Second, 20*time.Millisecond, "the API answers once the node has its database")

		// One job: it runs, with its payload.
		r := must(t, base, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/one","payload":"{\"order\":42}","timeout":"5s"}`))
		one := idOf(t, r)
		waitState(t, base, one, "done")
		require.Equal(t, []string{`{"order":42}`}, ep.bodies("/one"))
		got := must(t, base, http.StatusOK, getReq(fmt.Sprintf("/api/v1/jobs/%d", one))).body
		require.Equal(t, `{"order":42}`, got["payload"])
		require.Equal(t, "5s", got["timeout"])
		require.Equal(t, "/one", got["endpoint"])
		history := got["history"].([]any)
		require.Len(t, history, 1)
		require.Equal(t, "done", history[0].(map[string]any)["outcome"])
		require.Equal(t, "api-1", history[0].(map[string]any)["node"])

		// A batch, binary payload included: all run.
		r = must(t, base, http.StatusCreated, post("/api/v1/jobs/batch",
			`{"jobs":[{"endpoint":"/batch","payload":"a"},{"endpoint":"/batch","payload_base64":"/wA="},{"endpoint":"/batch","method":"PUT"}]}`))
		ids := r.body["ids"].([]any)
		require.Len(t, ids, 3)
		for _, id := range ids {
			waitState(t, base, int64(id.(float64)), "done")
		}
		require.ElementsMatch(t, []string{"a", "\xff\x00", ""}, ep.bodies("/batch"))
		got = must(t, base, http.StatusOK, getReq(fmt.Sprintf("/api/v1/jobs/%d", int64(ids[1].(float64))))).body
		require.Equal(t, "/wA=", got["payload_base64"], "a binary payload comes back as base64")

		// A unique key held: 409 with the holder's id, alone or in a batch.
		r = must(t, base, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/later","delay":"1h","unique_key":"report-7"}`))
		held := idOf(t, r)
		r = must(t, base, http.StatusConflict, post("/api/v1/jobs", `{"endpoint":"/later","unique_key":"report-7"}`))
		require.Equal(t, "duplicate", r.err()["code"])
		require.Equal(t, float64(held), r.err()["id"])
		require.Equal(t, "unique_key", r.err()["field"])
		r = must(t, base, http.StatusConflict, post("/api/v1/jobs/batch", `{"jobs":[{"endpoint":"/x"},{"endpoint":"/later","unique_key":"report-7"}]}`))
		require.Equal(t, float64(held), r.err()["id"])
		require.Equal(t, float64(1), r.err()["index"])

		// Cancel a waiting job; a second cancel is a conflict.
		r = must(t, base, http.StatusOK, post(fmt.Sprintf("/api/v1/jobs/%d/cancel", held), ""))
		require.Equal(t, "cancelled", r.body["state"])
		require.Equal(t, "cancelled", jobState(t, base, held))
		r = must(t, base, http.StatusConflict, post(fmt.Sprintf("/api/v1/jobs/%d/cancel", held), "{}"))
		require.Equal(t, "state_conflict", r.err()["code"])
		require.Equal(t, "cancelled", r.err()["state"])

		// A running job cannot be cancelled.
		slow := idOf(t, must(t, base, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/slow"}`)))
		waitState(t, base, slow, "running")
		r = must(t, base, http.StatusConflict, post(fmt.Sprintf("/api/v1/jobs/%d/cancel", slow), ""))
		require.Equal(t, "running", r.err()["state"])
		require.Contains(t, r.err()["message"], "a running call is not interrupted")
		ep.releaseSlow()
		waitState(t, base, slow, "done")

		// Dead jobs: one retried by id, the others by a filter; all run.
		ep.failing.Store(true)
		var dead []int64
		for range 3 {
			dead = append(dead, idOf(t, must(t, base, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/flaky","max_attempts":1}`))))
		}
		for _, id := range dead {
			waitState(t, base, id, "dead")
		}
		got = must(t, base, http.StatusOK, getReq(fmt.Sprintf("/api/v1/jobs/%d", dead[0]))).body
		require.Equal(t, float64(500), got["last_status"])
		r = must(t, base, http.StatusOK, getReq("/api/v1/jobs?state=dead&endpoint=/flaky"))
		require.Len(t, r.body["jobs"], 3)
		ep.failing.Store(false)
		must(t, base, http.StatusOK, post(fmt.Sprintf("/api/v1/jobs/%d/retry", dead[0]), ""))
		waitState(t, base, dead[0], "done")
		r = must(t, base, http.StatusOK, post("/api/v1/jobs/retry", `{"state":"dead","endpoint":"/flaky","since":"1h"}`))
		require.Equal(t, float64(2), r.body["retried"])
		require.Equal(t, false, r.body["more"])
		for _, id := range dead[1:] {
			waitState(t, base, id, "done")
		}
		got = must(t, base, http.StatusOK, getReq(fmt.Sprintf("/api/v1/jobs/%d", dead[1]))).body
		var outcomes []string
		for _, e := range got["history"].([]any) {
			outcomes = append(outcomes, e.(map[string]any)["outcome"].(string))
		}
		require.Equal(t, []string{"dead", "retried", "done"}, outcomes)
		require.Equal(t, "api@api-1", got["history"].([]any)[1].(map[string]any)["node"], "the history names who retried")

		// Paging: newest first, cut by id, the last page without a cursor.
		var paged []int64
		for range 5 {
			paged = append(paged, idOf(t, must(t, base, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/page/x","delay":"1h"}`))))
		}
		var seen []int64
		cursor, pages := "", 0
		for {
			r = must(t, base, http.StatusOK, getReq("/api/v1/jobs?endpoint=/page/&state=ready&limit=2&cursor="+cursor))
			pages++
			for _, j := range r.body["jobs"].([]any) {
				jm := j.(map[string]any)
				require.NotContains(t, jm, "payload", "a list carries no payloads")
				require.NotContains(t, jm, "history")
				seen = append(seen, int64(jm["id"].(float64)))
			}
			cursor = r.body["next_cursor"].(string)
			if cursor == "" {
				break
			}
		}
		require.Equal(t, 3, pages)
		require.Equal(t, []int64{paged[4], paged[3], paged[2], paged[1], paged[0]}, seen)

		// Counts: every state, zeros included.
		r = must(t, base, http.StatusOK, getReq("/api/v1/jobs/counts"))
		counts := r.body["counts"].(map[string]any)
		for _, st := range []string{"ready", "running", "done", "failed", "dead", "cancelled", "missed"} {
			require.Contains(t, counts, st)
		}
		require.Equal(t, float64(5), counts["ready"])
		require.Equal(t, float64(1), counts["cancelled"])
		require.Equal(t, float64(0), counts["dead"])

		// Schedules and tasks, read-only.
		ctx := context.Background()
		require.NoError(t, jobs.AddSchedule(ctx, s, store.Schedule{Name: "nightly", Every: 24 * time.Hour, Endpoint: "/nightly",
			Method: "POST", MaxAttempts: 3, Tolerance: time.Minute, Misfire: store.MisfireOnce, Overlap: store.OverlapForbid,
			Enabled: true, Source: store.SourceCommand}))
		require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "pump", Endpoint: "/pump", Method: "POST", Every: time.Hour}))
		r = must(t, base, http.StatusOK, getReq("/api/v1/schedules"))
		scs := r.body["schedules"].([]any)
		require.Len(t, scs, 1)
		require.Equal(t, "nightly", scs[0].(map[string]any)["name"])
		r = must(t, base, http.StatusOK, getReq("/api/v1/tasks?all=true"))
		tasks := r.body["tasks"].([]any)
		require.Len(t, tasks, 1)
		require.Equal(t, "pump", tasks[0].(map[string]any)["name"])
	})
}
