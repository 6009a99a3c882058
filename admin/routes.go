package admin

import (
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"
)

// access is what a route asks of a request before serving it.
type access int

const (
	// authorized: the guard's Host and Origin checks and, with admin.token
	// set, the bearer token or a signed-in session (api_guard.go). The
	// default: a route must say it is anything else.
	authorized access = iota
	// signIn: the guard's Host and Origin checks, no token: the sign-in
	// form and the page's script and style, none of which holds a secret.
	signIn
	// public: no check: load balancers probe without credentials.
	public
)

func (a access) String() string {
	switch a {
	case public:
		return "public"
	case signIn:
		return "sign-in"
	}
	return "token"
}

// route is one line of the route table.
type route struct {
	method string // GET, POST; "" takes any method
	path   string // a ServeMux path pattern
	access access
	about  string // what the listing at GET /api/ says of it
	// Exactly one of call and page: call is a JSON API call, served by
	// api.route (JSON errors and 405, the POST content type, a body cap,
	// a timeout, the node's client); page is served as it is.
	call apiFunc
	page http.Handler
}

// routes is the route table: every route the admin endpoint serves, in
// the order the listing at GET /api/ gives them. The mux (serveMux), the
// guard's exceptions and the listing are all made from it.
func (n *endpoint) routes(a *api, d *dashboard) []route {
	page := func(f http.HandlerFunc) http.Handler { return f }
	return []route{
		{"GET", "/{$}", authorized, "the dashboard (a browser)", nil, page(d.index)},
		{"GET", "/assets/", signIn, "the dashboard's script and style", nil, page(d.asset)},
		{"GET", "/login", signIn, "the dashboard's sign-in form (with admin.token set)", nil, page(d.loginForm)},
		{"POST", "/login", signIn, "sign in: the token buys a session cookie", nil, page(d.signIn)},
		{"POST", "/logout", authorized, "sign out", nil, page(d.signOut)},
		{"GET", "/healthz", public, "200 while the process is up", nil, page(healthz)},
		{"GET", "/readyz", public, "200 when the database answers, the clock offset is known and the node is checked in", nil, page(n.readyz)},
		{"GET", "/metrics", authorized, "Prometheus metrics", nil, n.metrics()},
		{"GET", "/status", authorized, "the farm's status as JSON (slotpoller status -json)", nil, page(n.status)},
		{"GET", "/api/{$}", authorized, "this list", nil, nil}, // its page is the table itself: serveMux
		{"POST", "/api/v1/jobs", authorized, "enqueue one job", a.enqueue, nil},
		{"POST", "/api/v1/jobs/batch", authorized, `enqueue {"jobs": [...]} in one transaction`, a.enqueueBatch, nil},
		{"GET", "/api/v1/jobs", authorized, "list: ?state=&endpoint=&since=&until=&limit=&cursor=", a.list, nil},
		{"GET", "/api/v1/jobs/counts", authorized, "jobs by state", a.counts, nil},
		{"GET", "/api/v1/jobs/search", authorized, "find jobs: ?q= (an id, a unique or idempotency key, text in a payload or last error)&limit=&scan=", a.search, nil},
		{"GET", "/api/v1/jobs/{id}", authorized, "a job with its history", a.get, nil},
		{"POST", "/api/v1/jobs/{id}/cancel", authorized, "cancel a waiting job (200), or stop a running one's call (202)", a.cancel, nil},
		{"POST", "/api/v1/jobs/{id}/retry", authorized, "retry a finished job", a.retry, nil},
		{"POST", "/api/v1/jobs/retry", authorized, `retry {"state", "endpoint", "since", "until", "limit"}`, a.retryMatching, nil},
		{"GET", "/api/v1/schedules", authorized, "schedules", a.schedules, nil},
		{"GET", "/api/v1/tasks", authorized, "endless tasks (?all=true: deleted too)", a.tasks, nil},
		{"GET", "/api/v1/farm", authorized, "the rotation, the nodes and job counts (the dashboard's farm view)", a.farmRead, nil},
		{"GET", "/api/v1/throughput", authorized, "jobs finished per minute and start delays, last hour", a.throughputRead, nil},
		{"POST", "/api/v1/schedules/{name}/pause", authorized, "pause a schedule", a.scheduleAction("paused", pauseSchedule), nil},
		{"POST", "/api/v1/schedules/{name}/resume", authorized, "resume a schedule", a.scheduleAction("resumed", resumeSchedule), nil},
		{"POST", "/api/v1/schedules/{name}/trigger", authorized, "run one extra occurrence of a schedule now", a.scheduleAction("triggered", triggerSchedule), nil},
		{"GET", "/api/v1/queues", authorized, "queues: paused or not, waiting and running jobs", a.queues, nil},
		{"POST", "/api/v1/queues/{name}/pause", authorized, "pause a queue: its jobs wait (calls running go on)", a.queueAction(true), nil},
		{"POST", "/api/v1/queues/{name}/resume", authorized, "resume a queue", a.queueAction(false), nil},
		{"POST", "/api/v1/queues/{name}/cancel", authorized, `stop a queue's running calls; {"waiting": true}: cancel its waiting jobs too (202)`, a.queueCancel, nil},
		{"POST", "/api/v1/tasks/{name}/delete", authorized, "delete an endless task", a.nameAction("task", "delete requested", deleteTask), nil},
		{"GET", "/api/v1/audit", authorized, "operator actions, newest first: ?since=&actor=&action=&limit=&cursor=", a.auditList, nil},
		{"", "/api/", authorized, "any other path under /api/: a JSON 404", nil, page(noRoute)},
	}
}

// serveMux makes the mux of a route table. The API's routes are served
// by path, whatever the method, so that a wrong method gets the API's
// JSON 405 rather than the mux's text one.
func serveMux(table []route, a *api) *http.ServeMux {
	mux := http.NewServeMux()
	calls := map[string]methods{}
	var paths []string
	for _, r := range table {
		switch {
		case r.call != nil:
			if calls[r.path] == nil {
				calls[r.path] = methods{}
				paths = append(paths, r.path)
			}
			calls[r.path][r.method] = r.call
		case r.path == "/api/{$}":
			mux.HandleFunc(pattern(r), listing(table, a.n.cfg.Node.Name))
		default:
			mux.Handle(pattern(r), r.page)
		}
	}
	for _, p := range paths {
		a.route(mux, p, calls[p])
	}
	return mux
}

func pattern(r route) string {
	if r.method == "" {
		return r.path
	}
	return r.method + " " + r.path
}

// listing is GET /api/: the route table, one route a line.
func listing(table []route, node string) http.HandlerFunc {
	var b strings.Builder
	fmt.Fprintf(&b, "slotpoller node %s\n\n", node)
	b.WriteString("JSON in and out; a POST under /api/v1/ takes Content-Type: application/json.\n")
	b.WriteString("Access: token (admin.token or a dashboard session, when set), sign-in (no token), public (no check).\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "METHOD\tPATH\tACCESS\tWHAT")
	for _, r := range table {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", listedMethod(r.method), listedPath(r.path), r.access, r.about)
	}
	_ = tw.Flush()
	body := b.String()
	return func(w http.ResponseWriter, _ *http.Request) { text(w, http.StatusOK, body) }
}

func listedMethod(m string) string {
	if m == "" {
		return "ANY"
	}
	return m
}

// listedPath writes a pattern as a path: "/{$}" is "/".
func listedPath(p string) string {
	return strings.TrimSuffix(p, "{$}")
}

// accessOf is the access a request's path asks for by the table: that of
// the route with the path, or with the prefix when the route's path ends
// in "/"; authorized when no route says otherwise. The method does not
// count: a wrong method on a public path gets its 405 unchecked, as its
// right one would.
func accessOf(table []route) func(path string) access {
	exact, prefix := map[string]access{}, map[string]access{}
	for _, r := range table {
		if r.access == authorized {
			continue
		}
		if strings.HasSuffix(r.path, "/") {
			prefix[r.path] = r.access
		} else {
			exact[r.path] = r.access
		}
	}
	return func(path string) access {
		if a, ok := exact[path]; ok {
			return a
		}
		for p, a := range prefix {
			if strings.HasPrefix(path, p) {
				return a
			}
		}
		return authorized
	}
}
