package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/internal/store"
)

// The audit log's API door: every operator action the API takes (the
// dashboard's too: its buttons call the API) is recorded once it took
// effect, with who (the credential the guard accepted), from where (the
// caller's address and the node that served it), when (the database's
// clock, written by the store) and what (the action, its target and the
// answer).

// credKind is how the guard accepted a request.
type credKind int

const (
	credLoopback credKind = iota // no admin.token: loopback callers only
	credToken                    // the bearer token
	credSession                  // a signed-in dashboard session
)

// credential is who a request acts as.
type credential struct {
	kind    credKind
	session string // a session's label (credSession)
}

type credKey struct{}

func withCredential(r *http.Request, c credential) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), credKey{}, c))
}

// actor is who the audit log says acted: the API's token, a dashboard
// session, or a loopback caller (no admin.token), told apart from the
// dashboard's page by the CSRF header the page sends on every write: a
// label, not a guard (without a token every loopback caller is trusted).
func actor(r *http.Request) string {
	c, _ := r.Context().Value(credKey{}).(credential)
	switch {
	case c.kind == credSession:
		return "dashboard session " + c.session
	case c.kind == credToken:
		return "api (admin token)"
	case r.Header.Values(csrfHeader) != nil:
		// Without a token the page's CSRF token is empty, and sent all
		// the same.
		return "dashboard (loopback, no admin.token)"
	}
	return "api (loopback, no admin.token)"
}

// origin is where a request came from, and the node that served it.
func (a *api) origin(r *http.Request) string {
	host := r.RemoteAddr
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return host + " via " + a.n.cfg.Node.Name
}

// audited are the API's operator actions: a route's pattern, the action
// the audit log names, and the path value that names its target ("" for
// a filter, which the answer says).
var audited = map[string]struct{ action, target string }{
	"/api/v1/jobs/{id}/cancel":         {"job.cancel", "id"},
	"/api/v1/jobs/{id}/retry":          {"job.retry", "id"},
	"/api/v1/jobs/retry":               {"job.retry_matching", ""},
	"/api/v1/schedules/{name}/pause":   {"schedule.pause", "name"},
	"/api/v1/schedules/{name}/resume":  {"schedule.resume", "name"},
	"/api/v1/schedules/{name}/trigger": {"schedule.trigger", "name"},
	"/api/v1/queues/{name}/pause":      {"queue.pause", "name"},
	"/api/v1/queues/{name}/resume":     {"queue.resume", "name"},
	"/api/v1/queues/{name}/cancel":     {"queue.cancel", "name"},
	"/api/v1/tasks/{name}/delete":      {"task.delete", "name"},
}

// audit records an action the API took (status and body its answer). An
// entry that cannot be written is logged: the action stands.
func (a *api) audit(s *store.Store, r *http.Request, pattern string, body any) {
	what, ok := audited[pattern]
	if !ok || r.Method != http.MethodPost || s == nil {
		return
	}
	target := ""
	if what.target != "" {
		target = r.PathValue(what.target)
	}
	detail, _ := json.Marshal(body)
	e := store.AuditEntry{Actor: actor(r), Origin: a.origin(r), Action: what.action, Target: target, Detail: strings.TrimSpace(string(detail))}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), apiTimeout)
	defer cancel()
	if _, err := s.AuditAdd(ctx, e); err != nil {
		a.log.Error("could not record an action in the audit log; the action stands", "action", e.Action, "target", e.Target, "actor", e.Actor, "err", err)
	}
}

// auditView is an audit entry as the API shows it.
type auditView struct {
	ID     int64   `json:"id"`
	At     apiTime `json:"at"`
	Actor  string  `json:"actor"`
	Origin string  `json:"origin"`
	Action string  `json:"action"`
	Target string  `json:"target,omitempty"`
	Detail string  `json:"detail,omitempty"`
}

// auditResponse is a page of the audit log, newest first.
type auditResponse struct {
	Entries []auditView `json:"entries"`
	// NextCursor is the cursor of the next (older) page; "" on the last.
	NextCursor string `json:"next_cursor"`
}

// auditList serves GET /api/v1/audit?since=&actor=&action=&limit=&cursor=.
func (a *api) auditList(ctx context.Context, _ *client.Client, r *http.Request) (int, any, error) {
	q, err := query(r, "since", "actor", "action", "limit", "cursor")
	if err != nil {
		return 0, nil, err
	}
	f := store.AuditFilter{Actor: q.Get("actor"), Action: q.Get("action")}
	if f.Since, err = queryDuration(q, "since"); err != nil {
		return 0, nil, err
	}
	if f.Limit, err = queryLimit(q); err != nil {
		return 0, nil, err
	}
	if f.Limit == 0 {
		f.Limit = client.DefaultListLimit
	}
	if c := q.Get("cursor"); c != "" {
		if f.Before, err = strconv.ParseInt(c, 10, 64); err != nil || f.Before < 1 {
			return 0, nil, &client.FieldError{Field: "cursor", Problem: fmt.Sprintf("cursor %q is not one a page of the audit log gave", c)}
		}
	}
	s := a.n.Store()
	if s == nil {
		return 0, nil, &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "database: not connected yet"}
	}
	entries, err := s.AuditList(ctx, f)
	if err != nil {
		return 0, nil, err
	}
	resp := auditResponse{Entries: make([]auditView, 0, len(entries))}
	for _, e := range entries {
		resp.Entries = append(resp.Entries, auditView{ID: e.ID, At: apiTime(e.At), Actor: e.Actor, Origin: e.Origin,
			Action: e.Action, Target: e.Target, Detail: e.Detail})
	}
	if len(entries) == f.Limit {
		resp.NextCursor = strconv.FormatInt(entries[len(entries)-1].ID, 10)
	}
	return http.StatusOK, resp, nil
}
