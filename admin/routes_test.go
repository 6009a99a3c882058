package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/service"
	"github.com/stretchr/testify/require"
)

// tableOf is the route table of a node's handler, with the node's.
func tableOf(t *testing.T, token string) ([]route, http.Handler) {
	t.Helper()
	cfg := testConfig(t, storetest.DB{Driver: "sqlite", DSN: t.TempDir() + "/never-opened.db"}, "routes-1", "http://localhost")
	cfg.Admin.Token = token
	node := service.NewNode(cfg, service.NewLogger(io.Discard, config.LogConfig{Level: "error"}), nil)
	n := &endpoint{Node: node, cfg: node.Config(), log: node.Logger(), clock: node.Clock()}
	ses := newSessions(n.clock, sessionCookieName(""))
	table := n.routes(newAPI(n), newDashboard(n, ses))
	return table, Handler(node)
}

// GET /api/ lists the route table: every route, in its order, with its
// access and what it does; nothing else.
func TestTheListingIsTheRouteTable(t *testing.T) {
	table, h := tableOf(t, "")
	srv := httptest.NewServer(h)
	defer srv.Close()
	code, body := get(t, srv.URL+"/api/")
	require.Equal(t, http.StatusOK, code)
	_, rows, ok := strings.Cut(body, "METHOD")
	require.True(t, ok, body)
	lines := strings.Split(strings.TrimSpace(rows), "\n")[1:]
	cols := regexp.MustCompile(`\s{2,}`)
	require.Len(t, lines, len(table), body)
	for i, r := range table {
		got := cols.Split(lines[i], 4)
		require.Equal(t, []string{listedMethod(r.method), listedPath(r.path), r.access.String(), r.about}, got, "line %d", i)
		require.True(t, (r.call == nil) != (r.page == nil) || r.path == "/api/{$}", "%s %s: a call or a page", r.method, r.path)
	}
}

// With admin.token set, every route of the table but the public and
// sign-in ones wants the token; those are let through without it.
func TestEveryRouteButThePublicOnesWantsTheToken(t *testing.T) {
	table, h := tableOf(t, "routes-token-0123456789")
	srv := httptest.NewServer(h)
	defer srv.Close()
	// The exceptions are these, as the package's doc says: adding one is a
	// decision, not a slip of the table.
	open := map[string]string{}
	for _, r := range table {
		if r.access != authorized {
			open[r.method+" "+r.path] = r.access.String()
		}
	}
	require.Equal(t, map[string]string{"GET /healthz": "public", "GET /readyz": "public",
		"GET /login": "sign-in", "POST /login": "sign-in", "GET /assets/": "sign-in"}, open)

	fill := strings.NewReplacer("{$}", "", "{id}", "1", "{name}", "x")
	for _, r := range table {
		method := r.method
		if method == "" {
			method = http.MethodGet
		}
		path := fill.Replace(r.path)
		if r.path == "/api/" {
			path = "/api/v9/none"
		}
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		// The guard's refusal says Bearer; the sign-in form's own 401 (a
		// wrong token in the form) does not.
		refused := resp.StatusCode == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") != ""
		if r.access == authorized {
			require.True(t, refused, "%s %s: %d", method, path, resp.StatusCode)
		} else {
			require.False(t, refused, "%s %s", method, path)
			require.NotEqual(t, http.StatusForbidden, resp.StatusCode, "%s %s", method, path)
		}
	}
}
