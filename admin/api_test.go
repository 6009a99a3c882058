package admin

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

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/service"
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
		srv := httptest.NewServer(Handler(rn.n))
		t.Cleanup(srv.Close)
		base := srv.URL
		require.Eventually(t, func() bool { return callAPI(t, base, getReq("/api/v1/jobs/counts")).status == http.StatusOK },
			30*time.Second, 20*time.Millisecond, "the API answers once the node has its database")

		// One job: it runs, with its payload.
		r := must(t, base, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/one","payload":"{\"order\":42}","timeout":"5s"}`))
		one := idOf(t, r)
		waitState(t, base, one, "done")
		// The node runs now. A job due now, and the node has room: it is
		// inserted already claimed by this node and called at once (the
		// local fast path), never waiting in the queue for a poll.
		now := idOf(t, must(t, base, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/now"}`)))
		require.NotEqual(t, "ready", jobState(t, base, now), "started by the enqueue itself")
		waitState(t, base, now, "done")
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

		// A running job's call is asked to stop: 202, cancelling, then
		// cancelled once the node's renewal has cut the call off.
		slow := idOf(t, must(t, base, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/slow"}`)))
		waitState(t, base, slow, "running")
		r = must(t, base, http.StatusAccepted, post(fmt.Sprintf("/api/v1/jobs/%d/cancel", slow), ""))
		require.Equal(t, "cancelling", r.body["state"])
		got = must(t, base, http.StatusOK, getReq(fmt.Sprintf("/api/v1/jobs/%d", slow))).body
		require.NotEmpty(t, got["cancel_requested_by"])
		waitState(t, base, slow, "cancelled")
		got = must(t, base, http.StatusOK, getReq(fmt.Sprintf("/api/v1/jobs/%d", slow))).body
		require.Contains(t, got["last_error"], "while running")
		r = must(t, base, http.StatusConflict, post(fmt.Sprintf("/api/v1/jobs/%d/cancel", slow), ""))
		require.Equal(t, "cancelled", r.err()["state"])
		ep.releaseSlow()

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
		r = must(t, base, http.StatusOK, getReq("/api/v1/jobs?state=dead&endpoint=/flaky&since=1h&until=1m"))
		require.Empty(t, r.body["jobs"], "none created over a minute ago")
		r = must(t, base, http.StatusOK, post("/api/v1/jobs/retry", `{"state":"dead","until":"1m"}`))
		require.Equal(t, float64(0), r.body["retried"], "retry-all keeps to the range too")
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
		require.Equal(t, float64(2), counts["cancelled"], "the waiting job and the running one")
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

// apiServer serves a node's admin handler on its store, the node not
// running: enough for everything but running jobs.
func apiServer(t testing.TB, s *store.Store, db storetest.DB, token string) string {
	t.Helper()
	cfg := testConfig(t, db, "api-bad", "http://localhost")
	cfg.Admin.Token = token
	n := service.NewNode(cfg, service.NewLogger(io.Discard, config.LogConfig{Level: "error"}), nil)
	srv := httptest.NewServer(Handler(storeNode{n, s}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// badCase is a request the API refuses: its status, error code, field,
// batch index (-1: none) and a piece of the message.
type badCase struct {
	name   string
	req    apiReq
	status int
	code   string
	field  string
	index  int
	msg    string
}

func bad(name string, req apiReq, status int, code, field string, index int, msg string) badCase {
	return badCase{name: name, req: req, status: status, code: code, field: field, index: index, msg: msg}
}

func checkBad(t *testing.T, base string, c badCase) {
	t.Helper()
	r := callAPI(t, base, c.req)
	require.Equal(t, c.status, r.status, r.raw)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	e := r.err()
	require.NotNil(t, e, "an error object: %s", r.raw)
	require.Equal(t, c.code, e["code"], r.raw)
	if c.field == "" {
		require.NotContains(t, e, "field", r.raw)
	} else {
		require.Equal(t, c.field, e["field"], r.raw)
	}
	if c.index < 0 {
		require.NotContains(t, e, "index", r.raw)
	} else {
		require.Equal(t, float64(c.index), e["index"], r.raw)
	}
	require.Contains(t, e["message"], c.msg)
	require.Empty(t, r.header.Get("Access-Control-Allow-Origin"), "no CORS, ever")
}

func TestAPIBadRequests(t *testing.T) {
	s, db := storetest.OpenDB(t, "sqlite")
	base := apiServer(t, s, db, "")
	ctx := context.Background()
	id, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/waiting", Method: "POST", MaxAttempts: 1, Delay: time.Hour, IdempotencyKey: "k-waiting"})
	require.NoError(t, err)
	const J, B = "/api/v1/jobs", "/api/v1/jobs/batch"
	waiting := fmt.Sprintf("/api/v1/jobs/%d", id)
	big := strings.Repeat("x", 1<<20+1)
	soon := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	withHeader := func(q apiReq, k, v string) apiReq { q.header = map[string]string{k: v}; return q }
	withType := func(q apiReq, ct string) apiReq { q.ctype = ct; return q }
	bad400 := http.StatusBadRequest

	cases := []badCase{
		// malformed bodies
		bad("malformed JSON", post(J, `{"endpoint" "/x"}`), bad400, "invalid_json", "", -1, "malformed JSON at byte 13"),
		bad("cut short", post(J, `{"endpoint": "/x"`), bad400, "invalid_json", "", -1, "ends in the middle of a value"),
		bad("empty body", post(J, ``), bad400, "invalid_json", "", -1, "the body is empty"),
		bad("an array, not an object", post(J, `[{"endpoint":"/x"}]`), bad400, "wrong_type", "", -1, "must be a JSON object, not an array"),
		bad("trailing garbage", post(J, `{"endpoint":"/x"} xyz`), bad400, "invalid_json", "", -1, "trailing data after the JSON object"),
		bad("two objects", post(J, `{"endpoint":"/x"}{"endpoint":"/y"}`), bad400, "invalid_json", "", -1, "trailing data"),
		// fields
		bad("unknown field", post(J, `{"endpoint":"/x","priority":1}`), bad400, "unknown_field", "priority", -1, `unknown field "priority"`),
		bad("max_attempts a string", post(J, `{"endpoint":"/x","max_attempts":"3"}`), bad400, "wrong_type", "max_attempts", -1, "max_attempts must be a whole number, not string"),
		bad("max_attempts a fraction", post(J, `{"endpoint":"/x","max_attempts":1.5}`), bad400, "wrong_type", "max_attempts", -1, "must be a whole number, not number 1.5"),
		bad("endpoint a number", post(J, `{"endpoint":42}`), bad400, "wrong_type", "endpoint", -1, "endpoint must be a string, not number"),
		bad("payload an object", post(J, `{"endpoint":"/x","payload":{"a":1}}`), bad400, "wrong_type", "payload", -1, "payload must be a string, not object"),
		bad("delay in milliseconds", post(J, `{"endpoint":"/x","delay":30000}`), bad400, "wrong_type", "delay", -1, "delay must be a string, not number"),
		bad("delay without a unit", post(J, `{"endpoint":"/x","delay":"30"}`), bad400, "invalid_field", "delay", -1, `"30" is not a duration`),
		bad("negative delay", post(J, `{"endpoint":"/x","delay":"-5s"}`), bad400, "invalid_field", "delay", -1, "delay"),
		bad("timeout not a duration", post(J, `{"endpoint":"/x","timeout":"soon"}`), bad400, "invalid_field", "timeout", -1, `"soon" is not a duration`),
		bad("run_at not RFC 3339", post(J, `{"endpoint":"/x","run_at":"tomorrow"}`), bad400, "invalid_field", "run_at", -1, "not an RFC 3339 time"),
		bad("run_at and delay", post(J, `{"endpoint":"/x","run_at":"`+soon+`","delay":"1m"}`), bad400, "invalid_field", "run_at", -1, "not both"),
		bad("no endpoint", post(J, `{}`), bad400, "invalid_field", "endpoint", -1, "endpoint"),
		bad("endpoint to another host", post(J, `{"endpoint":"http://evil.example/x"}`), bad400, "invalid_field", "endpoint", -1, "endpoint"),
		bad("endpoint climbing out", post(J, `{"endpoint":"/a/../../admin"}`), bad400, "invalid_field", "endpoint", -1, "endpoint"),
		bad("method TRACE", post(J, `{"endpoint":"/x","method":"TRACE"}`), bad400, "invalid_field", "method", -1, `method "TRACE" is not one of`),
		bad("max_attempts too many", post(J, `{"endpoint":"/x","max_attempts":100000}`), bad400, "invalid_field", "max_attempts", -1, "max"),
		bad("payload and payload_base64", post(J, `{"endpoint":"/x","payload":"a","payload_base64":"YQ=="}`), bad400, "invalid_field", "payload_base64", -1, "not both"),
		bad("payload_base64 not base64", post(J, `{"endpoint":"/x","payload_base64":"!!!"}`), bad400, "invalid_field", "payload_base64", -1, "not standard base64"),
		bad("payload over 1 MiB", post(J, `{"endpoint":"/x","payload":"`+big+`"}`), bad400, "invalid_field", "payload", -1, "at most 1048576 (1 MiB)"),
		bad("idempotency key with a newline", post(J, `{"endpoint":"/x","idempotency_key":"a\nb"}`), bad400, "invalid_field", "idempotency_key", -1, "has a control character"),
		// size
		bad("body over 2 MiB", post(J, `{"endpoint":"/x","payload":"`+strings.Repeat("x", 3<<20)+`"}`), http.StatusRequestEntityTooLarge, "body_too_large", "", -1, "over 2097152 bytes"),
		bad("batch over 16 MiB", post(B, `{"jobs":[{"endpoint":"/x","payload":"`+strings.Repeat("x", 17<<20)+`"}]}`), http.StatusRequestEntityTooLarge, "body_too_large", "", -1, "over 16777216 bytes"),
		// batches
		bad("batch without jobs", post(B, `{}`), bad400, "invalid_field", "jobs", -1, "no jobs"),
		bad("batch of none", post(B, `{"jobs":[]}`), bad400, "invalid_field", "jobs", -1, "no jobs"),
		bad("batch jobs an object", post(B, `{"jobs":{"endpoint":"/x"}}`), bad400, "wrong_type", "jobs", -1, "jobs must be an array, not object"),
		bad("batch over 10,000", post(B, `{"jobs":[`+strings.Repeat(`{},`, 10000)+`{}]}`), bad400, "invalid_field", "jobs", -1, "a batch of 10001 jobs; at most 10000"),
		bad("batch unknown field at 1", post(B, `{"jobs":[{"endpoint":"/x"},{"endpoint":"/x","prio":1}]}`), bad400, "unknown_field", "prio", 1, `jobs[1]: unknown field "prio"`),
		bad("batch wrong type at 2", post(B, `{"jobs":[{"endpoint":"/x"},{"endpoint":"/x"},{"endpoint":"/x","max_attempts":"3"}]}`), bad400, "wrong_type", "max_attempts", 2, "jobs[2]: max_attempts must be a whole number"),
		bad("batch element a string", post(B, `{"jobs":["/x"]}`), bad400, "wrong_type", "", 0, "jobs[0]: the value must be a job object, not a string"),
		bad("batch bad endpoint at 1", post(B, `{"jobs":[{"endpoint":"/x"},{"endpoint":"x"}]}`), bad400, "invalid_field", "endpoint", 1, "jobs[1]: endpoint"),
		bad("batch bad delay at 0", post(B, `{"jobs":[{"endpoint":"/x","delay":"1 hour"}]}`), bad400, "invalid_field", "delay", 0, `jobs[0]: delay: "1 hour" is not a duration`),
		bad("batch repeats a unique key", post(B, `{"jobs":[{"endpoint":"/x","unique_key":"k"},{"endpoint":"/x","unique_key":"k"}]}`), bad400, "invalid_field", "unique_key", 1, "also job 0's in this batch"),
		// content type
		bad("text/plain", withType(post(J, `{"endpoint":"/x"}`), "text/plain"), http.StatusUnsupportedMediaType, "unsupported_media_type", "", -1, "Content-Type text/plain: send Content-Type: application/json"),
		bad("a form", withType(post(J, `endpoint=/x`), "application/x-www-form-urlencoded"), http.StatusUnsupportedMediaType, "unsupported_media_type", "", -1, "send Content-Type: application/json"),
		bad("no content type", withType(post(J, `{"endpoint":"/x"}`), "-"), http.StatusUnsupportedMediaType, "unsupported_media_type", "", -1, "Content-Type none"),
		bad("latin-1 JSON", withType(post(J, `{"endpoint":"/x"}`), "application/json; charset=iso-8859-1"), http.StatusUnsupportedMediaType, "unsupported_media_type", "", -1, "UTF-8"),
		bad("cancel as text/plain", withType(post(waiting+"/cancel", ``), "text/plain"), http.StatusUnsupportedMediaType, "unsupported_media_type", "", -1, "application/json"),
		// routes and methods
		bad("DELETE a job list", apiReq{method: http.MethodDelete, path: J}, http.StatusMethodNotAllowed, "method_not_allowed", "", -1, "DELETE /api/v1/jobs is not allowed: use GET, POST"),
		bad("GET a batch", getReq(B), http.StatusMethodNotAllowed, "method_not_allowed", "", -1, "use POST"),
		bad("GET a cancel", getReq(waiting+"/cancel"), http.StatusMethodNotAllowed, "method_not_allowed", "", -1, "use POST"),
		bad("DELETE a job", apiReq{method: http.MethodDelete, path: waiting}, http.StatusMethodNotAllowed, "method_not_allowed", "", -1, "use GET"),
		bad("a preflight", apiReq{method: http.MethodOptions, path: J}, http.StatusMethodNotAllowed, "method_not_allowed", "", -1, "OPTIONS"),
		bad("unknown route", getReq("/api/v1/nodes"), http.StatusNotFound, "no_route", "", -1, "no API route /api/v1/nodes"),
		bad("another version", getReq("/api/v2/jobs"), http.StatusNotFound, "no_route", "", -1, "no API route"),
		bad("trailing slash", getReq("/api/v1/jobs/"), http.StatusNotFound, "no_route", "", -1, "no API route"),
		bad("job id a word", getReq("/api/v1/jobs/abc"), bad400, "invalid_field", "id", -1, `"abc" is not a job id`),
		bad("job id zero", getReq("/api/v1/jobs/0"), bad400, "invalid_field", "id", -1, "not a job id"),
		bad("job id too big", getReq("/api/v1/jobs/99999999999999999999"), bad400, "invalid_field", "id", -1, "not a job id"),
		bad("job not found", getReq("/api/v1/jobs/987654"), http.StatusNotFound, "not_found", "", -1, "job 987654: job not found"),
		bad("cancel not found", post("/api/v1/jobs/987654/cancel", ""), http.StatusNotFound, "not_found", "", -1, "job not found"),
		bad("retry not found", post("/api/v1/jobs/987654/retry", "{}"), http.StatusNotFound, "not_found", "", -1, "job not found"),
		bad("retry a waiting job", post(waiting+"/retry", ""), http.StatusConflict, "state_conflict", "", -1, "only a dead, failed, cancelled or missed job can be retried"),
		bad("cancel with options", post(waiting+"/cancel", `{"force":true}`), bad400, "unknown_field", "force", -1, `unknown field "force"`),
		bad("get with a query", getReq(waiting+"?verbose=1"), bad400, "unknown_parameter", "verbose", -1, "this route takes none"),
		// list filters
		bad("bad state", getReq(J+"?state=broken"), bad400, "invalid_field", "state", -1, `state "broken" is not one of`),
		bad("misspelt filter", getReq(J+"?stat=dead"), bad400, "unknown_parameter", "stat", -1, `unknown query parameter "stat"`),
		bad("state twice", getReq(J+"?state=dead&state=done"), bad400, "invalid_field", "state", -1, "given 2 times"),
		bad("limit zero", getReq(J+"?limit=0"), bad400, "invalid_field", "limit", -1, "from 1 to 1000"),
		bad("limit too high", getReq(J+"?limit=1001"), bad400, "invalid_field", "limit", -1, "from 1 to 1000"),
		bad("limit a word", getReq(J+"?limit=all"), bad400, "invalid_field", "limit", -1, `limit "all"`),
		bad("bad cursor", getReq(J+"?cursor=abc"), bad400, "invalid_field", "cursor", -1, `cursor "abc" is not one a page gave`),
		bad("negative cursor", getReq(J+"?cursor=-5"), bad400, "invalid_field", "cursor", -1, "is not one a page gave"),
		bad("since a date", getReq(J+"?since=2026-01-01"), bad400, "invalid_field", "since", -1, "is not a duration"),
		bad("since negative", getReq(J+"?since=-1h"), bad400, "invalid_field", "since", -1, "must not be negative"),
		bad("until a date", getReq(J+"?until=2026-01-01"), bad400, "invalid_field", "until", -1, `"2026-01-01" is not a duration`),
		bad("until negative", getReq(J+"?until=-1h"), bad400, "invalid_field", "until", -1, "until -1h0m0s must not be negative"),
		bad("until twice", getReq(J+"?until=1h&until=2h"), bad400, "invalid_field", "until", -1, "given 2 times"),
		bad("until not before since", getReq(J+"?since=1h&until=2h"), bad400, "invalid_field", "until", -1, "until 2h0m0s must be less than since 1h0m0s"),
		bad("until equal to since", getReq(J+"?since=1h&until=1h"), bad400, "invalid_field", "until", -1, "must be less than since"),
		bad("malformed query", getReq(J+"?state=%zz"), bad400, "bad_query", "", -1, "the query string is malformed"),
		bad("tasks all=maybe", getReq("/api/v1/tasks?all=maybe"), bad400, "invalid_field", "all", -1, `"maybe" is not true or false`),
		// retry by filter
		bad("retry all without a state", post("/api/v1/jobs/retry", `{}`), bad400, "invalid_field", "state", -1, "say which jobs to retry"),
		bad("retry ready jobs", post("/api/v1/jobs/retry", `{"state":"ready"}`), bad400, "invalid_field", "state", -1, "a ready job cannot be retried"),
		bad("retry limit too high", post("/api/v1/jobs/retry", `{"state":"dead","limit":5000}`), bad400, "invalid_field", "limit", -1, "between 1 and 1000"),
		bad("retry since in hours", post("/api/v1/jobs/retry", `{"state":"dead","since":24}`), bad400, "wrong_type", "since", -1, "since must be a string"),
		bad("retry until in hours", post("/api/v1/jobs/retry", `{"state":"dead","until":1}`), bad400, "wrong_type", "until", -1, "until must be a string"),
		bad("retry until past since", post("/api/v1/jobs/retry", `{"state":"dead","since":"1h","until":"3h"}`), bad400, "invalid_field", "until", -1, "must be less than since"),
		bad("retry unknown field", post("/api/v1/jobs/retry", `{"state":"dead","older_than":"1h"}`), bad400, "unknown_field", "older_than", -1, "unknown field"),
		// the browser guard (no token on loopback)
		bad("cross-origin post", withHeader(post(J, `{"endpoint":"/x"}`), "Origin", "http://evil.example"), http.StatusForbidden, "forbidden_origin", "", -1, "Origin http://evil.example is not this listener's own"),
		bad("null origin", withHeader(post(J, `{"endpoint":"/x"}`), "Origin", "null"), http.StatusForbidden, "forbidden_origin", "", -1, "cross-origin requests are refused"),
		bad("cross-origin preflight", withHeader(apiReq{method: http.MethodOptions, path: J}, "Origin", "http://evil.example"), http.StatusForbidden, "forbidden_origin", "", -1, "cross-origin"),
		bad("cross-origin read of /status", withHeader(getReq("/status"), "Origin", "http://localhost:1"), http.StatusForbidden, "forbidden_origin", "", -1, "cross-origin"),
		bad("DNS rebinding", withHeader(getReq(J), "Host", "evil.example:9090"), http.StatusForbidden, "forbidden_host", "", -1, "the Host header must name this host's loopback"),
	}
	require.GreaterOrEqual(t, len(cases), 30)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { checkBad(t, base, c) })
	}

	// Nothing refused was written: only the waiting job is in the table.
	page := must(t, base, http.StatusOK, getReq(J))
	require.Len(t, page.body["jobs"], 1)
	// The browser guard lets the listener's own origin through.
	must(t, base, http.StatusCreated, withHeader(post(J, `{"endpoint":"/x","delay":"1h"}`), "Origin", base))
	must(t, base, http.StatusOK, withHeader(getReq(J), "Host", "localhost"))
}

// TestAPIToken: with admin.token set, everything but /healthz and /readyz
// takes it.
func TestAPIToken(t *testing.T) {
	s, db := storetest.OpenDB(t, "sqlite")
	const token = "0123456789abcdef-the-token"
	base := apiServer(t, s, db, token)
	auth := func(q apiReq, v string) apiReq { q.header = map[string]string{"Authorization": v}; return q }
	cases := []badCase{
		bad("missing token", getReq("/api/v1/jobs"), http.StatusUnauthorized, "unauthorized", "", -1, "send the admin token: Authorization: Bearer <admin.token>"),
		bad("wrong token", auth(getReq("/api/v1/jobs"), "Bearer 0123456789abcdef-the-tokeN"), http.StatusUnauthorized, "unauthorized", "", -1, "the bearer token is not admin.token"),
		bad("token prefix", auth(getReq("/api/v1/jobs"), "Bearer 0123456789abcdef"), http.StatusUnauthorized, "unauthorized", "", -1, "not admin.token"),
		bad("basic auth", auth(getReq("/api/v1/jobs"), "Basic "+token), http.StatusUnauthorized, "unauthorized", "", -1, "send the admin token"),
		bad("bare token", auth(getReq("/api/v1/jobs"), token), http.StatusUnauthorized, "unauthorized", "", -1, "send the admin token"),
		bad("enqueue without token", post("/api/v1/jobs", `{"endpoint":"/x"}`), http.StatusUnauthorized, "unauthorized", "", -1, "send the admin token"),
		bad("metrics without token", getReq("/metrics"), http.StatusUnauthorized, "unauthorized", "", -1, "send the admin token"),
		bad("status without token", getReq("/status"), http.StatusUnauthorized, "unauthorized", "", -1, "send the admin token"),
		bad("right token, cross origin", withOrigin(auth(getReq("/api/v1/jobs"), "Bearer "+token), "http://evil.example"), http.StatusForbidden, "forbidden_origin", "", -1, "cross-origin"),
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkBad(t, base, c)
		})
	}
	r := callAPI(t, base, getReq("/api/v1/jobs"))
	require.Equal(t, `Bearer realm="slotpoller"`, r.header.Get("WWW-Authenticate"))

	// Probes need no token; the right one opens the rest, whatever the
	// Host (a token, not the network, is the guard beyond loopback).
	for _, p := range []string{"/healthz", "/readyz"} {
		require.NotEqual(t, http.StatusUnauthorized, callAPI(t, base, getReq(p)).status, p)
	}
	must(t, base, http.StatusOK, auth(getReq("/api/v1/jobs"), "Bearer "+token))
	must(t, base, http.StatusOK, auth(getReq("/metrics"), "bearer "+token))
	q := auth(post("/api/v1/jobs", `{"endpoint":"/x","delay":"1h"}`), "Bearer "+token)
	q.header["Host"] = "slotpoller.internal:9090"
	must(t, base, http.StatusCreated, q)
}

func withOrigin(q apiReq, o string) apiReq {
	if q.header == nil {
		q.header = map[string]string{}
	}
	q.header["Origin"] = o
	return q
}
