package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/slotpoller/slotpoller/callproto"
	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/internal/jobspec"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/service"
)

// The HTTP API, under /api/v1/ on the admin endpoint (its routes are in
// the route table, routes.go). Every job operation goes through the
// client package, as the CLI's do. JSON in and out; durations are Go
// duration strings ("30s", "1h30m"), times RFC 3339.
const (
	// maxJobBody caps the body of one job: a 1 MiB payload sent as
	// payload_base64 is 1.34 MiB; the rest is room for the other fields.
	maxJobBody = 2 << 20
	// maxBatchBody caps a batch's body. It bounds what one request holds
	// in memory; many large payloads go in several batches.
	maxBatchBody = 16 << 20
	// apiTimeout bounds one call's database work (within the server's
	// 30 s write timeout).
	apiTimeout = 25 * time.Second
)

// api serves /api/v1/.
type api struct {
	n   *endpoint
	log *slog.Logger

	mu sync.Mutex
	s  *store.Store // the store c was made for
	c  *client.Client
	// The dashboard's two reads, shared by its viewers (api_farm.go).
	farmCopy       *shared[FarmView]
	throughputCopy *shared[ThroughputView]
}

func newAPI(n *endpoint) *api {
	return &api{n: n, log: n.log.With("component", "api"),
		farmCopy:       &shared[FarmView]{clk: n.clock, every: farmEvery},
		throughputCopy: &shared[ThroughputView]{clk: n.clock, every: throughputEvery}}
}

// noRoute answers a path under /api/ that no route of the table has.
func noRoute(w http.ResponseWriter, r *http.Request) {
	writeAPIError(w, &apiError{Status: http.StatusNotFound, Code: "no_route",
		Message: fmt.Sprintf("no API route %s; the routes are listed at GET /api/", r.URL.Path)})
}

// statements is how many statements the API's clients have sent: the job
// routes' share of the database work, which the node's store does not
// count (its clients have stores of their own on the same pool).
func (a *api) statements() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var n int64
	if a.c != nil {
		n += a.c.Statements()
	}
	return n
}

// apiFunc handles one call: it returns the status and the JSON body of a
// success, or an error (an *apiError, or one of the client's).
type apiFunc func(ctx context.Context, c *client.Client, r *http.Request) (int, any, error)

type methods map[string]apiFunc

// route serves pattern's methods; another method is a JSON 405.
func (a *api) route(mux *http.ServeMux, pattern string, ms methods) {
	allow := ""
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		if ms[m] != nil {
			allow += ", " + m
		}
	}
	allow = allow[2:]
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		f := ms[r.Method]
		if f == nil {
			w.Header().Set("Allow", allow)
			writeAPIError(w, &apiError{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
				Message: fmt.Sprintf("%s %s is not allowed: use %s", r.Method, r.URL.Path, allow)})
			return
		}
		if r.Method == http.MethodPost {
			if err := checkJSONContentType(r); err != nil {
				writeAPIError(w, err)
				return
			}
		}
		c, err := a.client()
		if err != nil {
			writeAPIError(w, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
		defer cancel()
		r.Body = http.MaxBytesReader(w, r.Body, bodyCap(pattern))
		status, body, err := f(ctx, c, r)
		if err != nil {
			ae := a.apiError(err)
			if ae.Status >= 500 {
				a.log.Warn("api call failed", "method", r.Method, "path", r.URL.Path, "status", ae.Status, "err", ae.Message)
			}
			writeAPIError(w, ae)
			return
		}
		// Recorded before the answer: a caller that reads the audit log
		// once it has its answer finds the action there.
		a.audit(a.n.Store(), r, pattern, body)
		writeJSON(w, status, body)
	})
}

func bodyCap(pattern string) int64 {
	if pattern == "/api/v1/jobs/batch" {
		return maxBatchBody
	}
	return maxJobBody
}

// client returns the client of the node's store; a 503 before the node
// has connected to its database.
func (a *api) client() (*client.Client, error) {
	s := a.n.Store()
	if s == nil {
		return nil, &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "database: not connected yet"}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.s != s {
		cfg := a.n.cfg
		c, err := client.New(s.DB(), s.Driver(), client.WithSchema(cfg.Database.Schema),
			client.WithDefaultMaxAttempts(cfg.Jobs.MaxAttempts), client.WithActor("api@"+cfg.Node.Name))
		if err != nil {
			return nil, err
		}
		a.s, a.c = s, c
	}
	return a.c, nil
}

// startNow starts a job due now on this node when its runner has room
// (the local fast path: the job is inserted already claimed by this node
// and called at once); taken is false when it did not (no runner yet, the
// node stopping or full, the job not due now or refused by validation,
// which the client then reports), and the job goes to the farm's queue.
func (a *api) startNow(ctx context.Context, j client.Job) (id int64, taken bool, err error) {
	runner := a.n.LocalRunner()
	if runner == nil || a.n.Store() == nil || !j.RunAt.IsZero() || j.Delay != 0 {
		return 0, false, nil
	}
	nj := store.NewJob{Endpoint: j.Endpoint, Method: j.Method, Payload: j.Payload, MaxAttempts: j.MaxAttempts,
		Timeout: j.Timeout, UniqueKey: j.UniqueKey, IdempotencyKey: j.IdempotencyKey, Queue: j.Queue, Traceparent: j.Traceparent}
	if nj.MaxAttempts == 0 {
		nj.MaxAttempts = a.n.cfg.Jobs.MaxAttempts
	}
	if jobs.CheckNewJob(&nj) != nil {
		return 0, false, nil
	}
	id, taken, err = runner.StartNow(ctx, nj)
	if errors.Is(err, store.ErrDuplicate) {
		return 0, true, &client.DuplicateError{UniqueKey: nj.UniqueKey, ID: id}
	}
	return id, taken, err
}

func (a *api) enqueue(ctx context.Context, c *client.Client, r *http.Request) (int, any, error) {
	var req jobRequest
	if err := decodeBody(r, &req, false); err != nil {
		return 0, nil, err
	}
	j, err := req.job(0)
	if err != nil {
		return 0, nil, err
	}
	j.Traceparent = traceparentOr(j.Traceparent, r)
	id, taken, err := a.startNow(ctx, j)
	if !taken {
		id, err = c.Enqueue(ctx, j)
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, map[string]int64{"id": id}, nil
}

func (a *api) enqueueBatch(ctx context.Context, c *client.Client, r *http.Request) (int, any, error) {
	js, err := decodeBatch(r)
	if err != nil {
		return 0, nil, err
	}
	for i := range js {
		js[i].Traceparent = traceparentOr(js[i].Traceparent, r)
	}
	ids, err := c.EnqueueMany(ctx, js)
	var dup *client.DuplicateError
	if errors.As(err, &dup) {
		// Name the batch's job whose key is taken.
		for i, j := range js {
			if dup.UniqueKey != "" && j.UniqueKey == dup.UniqueKey {
				return 0, nil, duplicateError(dup, &i)
			}
		}
	}
	if err != nil {
		return 0, nil, inBatch(err)
	}
	return http.StatusCreated, map[string][]int64{"ids": ids}, nil
}

// listResponse is a page of jobs.
type listResponse struct {
	Jobs []jobView `json:"jobs"`
	// NextCursor is the cursor of the next page; "" on the last.
	NextCursor string `json:"next_cursor"`
}

func (a *api) list(ctx context.Context, c *client.Client, r *http.Request) (int, any, error) {
	q, err := query(r, "state", "endpoint", "since", "until", "limit", "cursor")
	if err != nil {
		return 0, nil, err
	}
	f := client.Filter{State: q.Get("state"), EndpointPrefix: q.Get("endpoint"), Cursor: q.Get("cursor")}
	if f.Since, err = queryDuration(q, "since"); err != nil {
		return 0, nil, err
	}
	if f.Until, err = queryDuration(q, "until"); err != nil {
		return 0, nil, err
	}
	if f.Limit, err = queryLimit(q); err != nil {
		return 0, nil, err
	}
	page, err := c.List(ctx, f)
	if err != nil {
		return 0, nil, err
	}
	resp := listResponse{Jobs: make([]jobView, 0, len(page.Jobs)), NextCursor: page.NextCursor}
	for _, j := range page.Jobs {
		resp.Jobs = append(resp.Jobs, view(j, false))
	}
	return http.StatusOK, resp, nil
}

func (a *api) get(ctx context.Context, c *client.Client, r *http.Request) (int, any, error) {
	id, err := pathID(r)
	if err != nil {
		return 0, nil, err
	}
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	j, err := c.Get(ctx, id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, view(j, true), nil
}

// actionResponse answers a cancel or a retry of one job.
type actionResponse struct {
	ID    int64  `json:"id"`
	State string `json:"state"` // the job's state now
}

// actionID is the job an action on one job names in its path; the action
// takes no query and its body is empty or {}.
func actionID(r *http.Request) (int64, error) {
	id, err := pathID(r)
	if err != nil {
		return 0, err
	}
	if _, err := query(r); err != nil {
		return 0, err
	}
	return id, decodeBody(r, &struct{}{}, true)
}

// retry is POST /api/v1/jobs/{id}/retry: a finished job runs again with a
// fresh attempt budget (its body is empty or {}).
func (a *api) retry(ctx context.Context, c *client.Client, r *http.Request) (int, any, error) {
	id, err := actionID(r)
	if err != nil {
		return 0, nil, err
	}
	if err := c.Retry(ctx, id); err != nil {
		return 0, nil, err
	}
	a.log.Info("job retried through the API", "job", id)
	return http.StatusOK, actionResponse{ID: id, State: client.StateReady}, nil
}

// retryRequest selects the jobs POST /api/v1/jobs/retry retries.
type retryRequest struct {
	State    string `json:"state"` // dead, failed, cancelled or missed: required
	Endpoint string `json:"endpoint"`
	Since    string `json:"since"`
	Until    string `json:"until"`
	Limit    int    `json:"limit"` // default and at most 1000
}

type retryResponse struct {
	Retried int64 `json:"retried"`
	// More is true when the limit was reached: there may be more to retry.
	More bool `json:"more"`
}

func (a *api) retryMatching(ctx context.Context, c *client.Client, r *http.Request) (int, any, error) {
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	var req retryRequest
	if err := decodeBody(r, &req, false); err != nil {
		return 0, nil, err
	}
	if req.State == "" {
		// Like the CLI: retrying every finished job takes saying which.
		return 0, nil, &client.FieldError{Field: "state", Problem: "say which jobs to retry: dead, failed, cancelled or missed"}
	}
	f := client.Filter{State: req.State, EndpointPrefix: req.Endpoint, Limit: req.Limit}
	var err error
	if f.Since, err = apiDuration("since", req.Since, 0); err != nil {
		return 0, nil, err
	}
	if f.Until, err = apiDuration("until", req.Until, 0); err != nil {
		return 0, nil, err
	}
	if req.Limit == 0 {
		f.Limit = client.MaxListLimit
	}
	n, err := c.RetryMatching(ctx, f)
	if err != nil {
		return 0, nil, err
	}
	a.log.Info("jobs retried through the API", "state", f.State, "endpoint", f.EndpointPrefix, "since", f.Since, "until", f.Until, "retried", n)
	return http.StatusOK, retryResponse{Retried: n, More: n == int64(f.Limit)}, nil
}

// countsResponse is the number of jobs in each state: every state is
// present, 0 when none; "retrying" are ready jobs backing off after a
// failed attempt (also counted in ready). Each count stops at Cap, so
// that reading them costs the same whatever the table's size: a count
// equal to Cap means Cap or more.
type countsResponse struct {
	Counts map[string]int `json:"counts"`
	Cap    int            `json:"cap"`
}

func (a *api) counts(ctx context.Context, _ *client.Client, r *http.Request) (int, any, error) {
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	tally, err := a.n.Store().JobCountsCapped(ctx, service.JobCountCap)
	if err != nil {
		return 0, nil, err
	}
	out := map[string]int{}
	for _, st := range []string{client.StateReady, client.StateRunning, client.StateDone, client.StateFailed,
		client.StateDead, client.StateCancelled, client.StateMissed, store.StateRetrying} {
		out[st] = 0
	}
	for st, c := range tally.Counts {
		out[st] = c
	}
	return http.StatusOK, countsResponse{Counts: out, Cap: tally.Cap}, nil
}

func (a *api) schedules(ctx context.Context, _ *client.Client, r *http.Request) (int, any, error) {
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	rep, err := service.ScheduleReport(ctx, a.n.Store())
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string][]scheduleView{"schedules": scheduleViews(rep)}, nil
}

func (a *api) tasks(ctx context.Context, _ *client.Client, r *http.Request) (int, any, error) {
	q, err := query(r, "all")
	if err != nil {
		return 0, nil, err
	}
	all := false
	if v := q.Get("all"); v != "" {
		if all, err = strconv.ParseBool(v); err != nil {
			return 0, nil, &client.FieldError{Field: "all", Problem: fmt.Sprintf("%q is not true or false", v)}
		}
	}
	tasks, err := a.n.Store().Tasks(ctx, all)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string][]taskView{"tasks": taskViews(service.TaskReport(tasks))}, nil
}

// pathID is the {id} of the path: a positive whole number.
func pathID(r *http.Request) (int64, error) {
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		return 0, &client.FieldError{Field: "id", Problem: fmt.Sprintf("%q is not a job id (a positive whole number)", raw)}
	}
	return id, nil
}

// query returns the request's query parameters, refusing one not in
// allowed or given twice: a misspelt filter must not widen a list or a
// retry silently.
func query(r *http.Request, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, &apiError{Status: http.StatusBadRequest, Code: "bad_query", Message: "the query string is malformed: " + err.Error()}
	}
	for k, vs := range q {
		known := false
		for _, a := range allowed {
			known = known || k == a
		}
		switch {
		case !known && len(allowed) == 0:
			return nil, &apiError{Status: http.StatusBadRequest, Code: "unknown_parameter", Field: k,
				Message: fmt.Sprintf("unknown query parameter %q: this route takes none", k)}
		case !known:
			return nil, &apiError{Status: http.StatusBadRequest, Code: "unknown_parameter", Field: k,
				Message: fmt.Sprintf("unknown query parameter %q: this route takes %v", k, allowed)}
		case len(vs) > 1:
			return nil, &apiError{Status: http.StatusBadRequest, Code: "invalid_field", Field: k,
				Message: fmt.Sprintf("query parameter %q is given %d times; give it once", k, len(vs))}
		}
	}
	return q, nil
}

func queryDuration(q url.Values, key string) (time.Duration, error) {
	return apiDuration(key, q.Get(key), 0)
}

// queryLimit is the list's limit: 1 to client.MaxListLimit; 0 when not
// given (the client's default).
func queryLimit(q url.Values) (int, error) {
	raw := q.Get("limit")
	if raw == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > client.MaxListLimit {
		return 0, &client.FieldError{Field: "limit", Problem: fmt.Sprintf("limit %q must be a whole number from 1 to %d", raw, client.MaxListLimit)}
	}
	return n, nil
}

// traceparentOr is a job's own traceparent, else the request's
// traceparent header when it holds a valid one: a web request traced by
// OpenTelemetry sends it on the calls it makes, and a job it enqueues
// joins its trace. A header that is not valid is ignored, as the W3C
// recommendation asks of a receiver; a job's own field is checked.
func traceparentOr(own string, r *http.Request) string {
	if own != "" {
		return own
	}
	tp, err := jobspec.CheckTraceparent(r.Header.Get(callproto.HeaderTraceparent))
	if err != nil {
		return ""
	}
	return tp
}
