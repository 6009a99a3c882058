package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/service"
	"github.com/stretchr/testify/require"
)

// dashServer serves a node's admin handler on s with a fake clock.
func dashServer(t *testing.T, s *store.Store, db storetest.DB, token string) (string, *clock.Fake) {
	t.Helper()
	base, clk, _ := dashServerAs(t, s, db, token, "")
	return base, clk
}

// dashServerAs is dashServer for a node whose admin.listen is listen (the
// handler is served on a port of the test's choosing all the same).
func dashServerAs(t *testing.T, s *store.Store, db storetest.DB, token, listen string) (string, *clock.Fake, *api) {
	t.Helper()
	cfg := testConfig(t, db, "dash-1", "http://localhost")
	cfg.Admin.Token, cfg.Admin.Listen = token, listen
	clk := clock.NewFake(time.Unix(1_780_000_000, 0))
	n := service.NewNode(cfg, service.NewLogger(io.Discard, config.LogConfig{Level: "error"}), clk)
	h, a := handler(storeNode{n, s})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, clk, a
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func send(t *testing.T, method, u string, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := noRedirect.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// With admin.token set a browser is sent to the sign-in form; the token
// buys an HttpOnly SameSite=Strict session whose page carries the CSRF
// token; a write with the cookie needs that header and the listener's
// Origin; a wrong token buys nothing.
func TestDashboardSignInSessionAndCSRF(t *testing.T) {
	s, db := storetest.OpenDB(t, "sqlite")
	const token = "a-dashboard-token-0123456789"
	base, _ := dashServer(t, s, db, token)
	require.NoError(t, jobs.AddSchedule(context.Background(), s, store.Schedule{Name: "tick", Every: time.Minute, Endpoint: "/t",
		Method: "POST", MaxAttempts: 1, Tolerance: time.Minute, Misfire: store.MisfireOnce, Overlap: store.OverlapAllow, Enabled: true, Source: store.SourceCommand}))

	res, _ := send(t, "GET", base+"/", "", map[string]string{"Accept": "text/html"})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/login", res.Header.Get("Location"))
	res, _ = send(t, "GET", base+"/api/v1/farm", "", nil)
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, "the API without credentials")
	res, body := send(t, "GET", base+"/login", "", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `name="token"`)

	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": base}
	res, _ = send(t, "POST", base+"/login", url.Values{"token": {"wrong-token-wrong-token"}}.Encode(), form)
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	require.Empty(t, res.Cookies())
	res, _ = send(t, "POST", base+"/login", url.Values{"token": {token}}.Encode(), form)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Len(t, res.Cookies(), 1)
	c := res.Cookies()[0]
	require.Equal(t, sessionCookiePrefix, c.Name, "no admin.listen: the bare name")
	require.True(t, c.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, c.SameSite)
	cookie := c.Name + "=" + c.Value

	res, page := send(t, "GET", base+"/", "", map[string]string{"Cookie": cookie})
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, res.Header.Get("Content-Security-Policy"), "script-src 'self'")
	i := strings.Index(page, `name="slotpoller-csrf" content="`)
	require.Positive(t, i)
	csrf := page[i+len(`name="slotpoller-csrf" content="`):]
	csrf = csrf[:strings.Index(csrf, `"`)]
	require.Len(t, csrf, 64)
	require.NotContains(t, page, token, "the page never shows the token")

	res, _ = send(t, "GET", base+"/api/v1/farm", "", map[string]string{"Cookie": cookie})
	require.Equal(t, http.StatusOK, res.StatusCode, "reads with the session")
	pause := base + "/api/v1/schedules/tick/pause"
	jsonHdr := func(extra map[string]string) map[string]string {
		h := map[string]string{"Cookie": cookie, "Content-Type": "application/json"}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	res, body = send(t, "POST", pause, "{}", jsonHdr(map[string]string{"Origin": base}))
	require.Equal(t, http.StatusForbidden, res.StatusCode, "no CSRF header: %s", body)
	require.Contains(t, body, `"csrf"`)
	// Wrong in its first character, whatever that is (a token that began
	// with "0" made "0"+csrf[1:] the right one, one run in sixteen).
	wrong := "0" + csrf[1:]
	if csrf[0] == '0' {
		wrong = "1" + csrf[1:]
	}
	res, _ = send(t, "POST", pause, "{}", jsonHdr(map[string]string{"Origin": base, csrfHeader: wrong}))
	require.Equal(t, http.StatusForbidden, res.StatusCode, "a wrong CSRF token")
	res, _ = send(t, "POST", pause, "{}", jsonHdr(map[string]string{csrfHeader: csrf}))
	require.Equal(t, http.StatusForbidden, res.StatusCode, "no Origin")
	res, _ = send(t, "POST", pause, "{}", jsonHdr(map[string]string{"Origin": "http://evil.example", csrfHeader: csrf}))
	require.Equal(t, http.StatusForbidden, res.StatusCode, "a foreign Origin")
	sc, err := s.ScheduleGet(context.Background(), "tick")
	require.NoError(t, err)
	require.True(t, sc.Enabled, "no refused write changed anything")
	res, body = send(t, "POST", pause, "{}", jsonHdr(map[string]string{"Origin": base, csrfHeader: csrf}))
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	sc, err = s.ScheduleGet(context.Background(), "tick")
	require.NoError(t, err)
	require.False(t, sc.Enabled)

	res, _ = send(t, "POST", base+"/logout", "", map[string]string{"Cookie": cookie, "Origin": base, csrfHeader: csrf})
	require.Equal(t, http.StatusNoContent, res.StatusCode)
	res, _ = send(t, "GET", base+"/api/v1/farm", "", map[string]string{"Cookie": cookie})
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, "signed out")
}

// Two nodes on one host share the browser's cookies (a browser keeps
// them by host, not port): each names its session cookie after its
// listener's port, so signing in to one does not sign the other out.
func TestDashboardSessionCookiePerListener(t *testing.T) {
	require.Equal(t, "slotpoller_session_9090", sessionCookieName("127.0.0.1:9090"))
	require.Equal(t, "slotpoller_session_9091", sessionCookieName("[::1]:9091"))
	require.Equal(t, "slotpoller_session_http", sessionCookieName("localhost:http"))
	require.Equal(t, "slotpoller_session", sessionCookieName(""))

	s, db := storetest.OpenDB(t, "sqlite")
	const token = "a-dashboard-token-0123456789"
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar, CheckRedirect: noRedirect.CheckRedirect}
	var bases []string
	for _, listen := range []string{"127.0.0.1:9090", "127.0.0.1:9091"} {
		base, _, _ := dashServerAs(t, s, db, token, listen)
		res, err := browser.PostForm(base+"/login", url.Values{"token": {token}})
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusSeeOther, res.StatusCode)
		bases = append(bases, base)
	}
	u, err := url.Parse(bases[0])
	require.NoError(t, err)
	var names []string
	for _, c := range jar.Cookies(u) {
		names = append(names, c.Name)
	}
	require.ElementsMatch(t, []string{"slotpoller_session_9090", "slotpoller_session_9091"}, names, "one cookie per node in the jar")
	for _, base := range bases {
		res, err := browser.Get(base + "/api/v1/farm")
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, "%s: still signed in after the other node's sign-in", base)
	}
}

// The schedule and task actions answer bad input with a clear 4xx and
// act through the CLI's functions; the farm read is shared by every
// viewer for a second, whatever their number.
func TestDashboardRoutes(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, db := storetest.OpenDB(t, driver)
		ctx := context.Background()
		base, clk := dashServer(t, s, db, "")
		require.NoError(t, jobs.AddSchedule(ctx, s, store.Schedule{Name: "tick", Every: time.Hour, Endpoint: "/t",
			Method: "POST", MaxAttempts: 1, Tolerance: time.Minute, Misfire: store.MisfireOnce, Overlap: store.OverlapAllow, Enabled: true, Source: store.SourceCommand}))
		require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "feed", Endpoint: "/f", Method: "POST", Every: time.Second}))
		jsonHdr := map[string]string{"Content-Type": "application/json"}

		res, body := send(t, "POST", base+"/api/v1/schedules/nope/pause", "{}", jsonHdr)
		require.Equal(t, http.StatusNotFound, res.StatusCode, body)
		require.Contains(t, body, `no schedule named \"nope\"`)
		res, body = send(t, "POST", base+"/api/v1/schedules/%20x/trigger", "{}", jsonHdr)
		require.Equal(t, http.StatusBadRequest, res.StatusCode, body)
		require.Contains(t, body, `"field":"name"`)
		res, body = send(t, "POST", base+"/api/v1/schedules/tick/pause", `{"now":true}`, jsonHdr)
		require.Equal(t, http.StatusBadRequest, res.StatusCode, body)
		res, _ = send(t, "POST", base+"/api/v1/schedules/tick/pause", "{}", nil)
		require.Equal(t, http.StatusUnsupportedMediaType, res.StatusCode)
		res, _ = send(t, "GET", base+"/api/v1/schedules/tick/pause", "", nil)
		require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)

		res, body = send(t, "POST", base+"/api/v1/schedules/tick/trigger", "", jsonHdr)
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		require.Contains(t, body, `"id":`)
		res, _ = send(t, "POST", base+"/api/v1/schedules/tick/pause", "{}", jsonHdr)
		require.Equal(t, http.StatusOK, res.StatusCode)
		res, _ = send(t, "POST", base+"/api/v1/schedules/tick/resume", "{}", jsonHdr)
		require.Equal(t, http.StatusOK, res.StatusCode)
		sc, err := s.ScheduleGet(ctx, "tick")
		require.NoError(t, err)
		require.True(t, sc.Enabled)

		res, body = send(t, "POST", base+"/api/v1/tasks/nope/delete", "{}", jsonHdr)
		require.Equal(t, http.StatusNotFound, res.StatusCode, body)
		res, body = send(t, "POST", base+"/api/v1/tasks/feed/delete", "{}", jsonHdr)
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		require.Contains(t, body, `"state":"deleted"`, "an unowned task is deleted at once")

		res, body = send(t, "GET", base+"/api/v1/throughput", "", nil)
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		require.Contains(t, body, `"cap":50000`)

		before := s.Statements()
		for range 5 {
			res, body = send(t, "GET", base+"/api/v1/farm", "", nil)
			require.Equal(t, http.StatusOK, res.StatusCode, body)
		}
		require.Equal(t, int64(2), s.Statements()-before, "five viewers within a second: one read of the registry and the counts")
		clk.Advance(farmEvery)
		_, _ = send(t, "GET", base+"/api/v1/farm", "", nil)
		require.Equal(t, int64(4), s.Statements()-before, "a second later: read again")
		require.Contains(t, body, `"strip":[`)
	})
}

// dashboardReads are the dashboard's read endpoints, as each page sends
// them; the jobs page sends two.
var dashboardReads = []struct{ page, path string }{
	{"Farm", "/api/v1/farm"},
	{"Jobs", "/api/v1/jobs/counts"},
	{"Jobs", "/api/v1/jobs?limit=25"},
	{"Job", "/api/v1/jobs/{id}"},
	{"Schedules", "/api/v1/schedules"},
	{"Tasks", "/api/v1/tasks"},
	{"Throughput", "/api/v1/throughput"},
}

// Each dashboard read sends a fixed number of statements, whatever the
// number of schedules (the schedules page once read two per schedule);
// and each schedule's row tells its own last result. The figures are
// docs/benchmarks.md's "Dashboard" table: go test -run
// TestDashboardReadStatements -v ./admin/
func TestDashboardReadStatements(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, db := storetest.OpenDB(t, driver)
		ctx := context.Background()
		base, clk, a := dashServerAs(t, s, db, "", "")
		require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "feed", Endpoint: "/f", Method: "POST", Every: time.Second}))
		id, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/x", Method: "POST", MaxAttempts: 1, IdempotencyKey: "x"})
		require.NoError(t, err)
		setState := store.Expand(s.Dialect(), `UPDATE {jobs} SET state = ?, last_status = ?, finished_at = {now} WHERE id = ?`)

		// addSchedules adds schedules up to n, each with a done occurrence,
		// a later one (failed for odd i, done for even i), and one waiting.
		added := 0
		addSchedules := func(n int) {
			for ; added < n; added++ {
				name := fmt.Sprintf("s%02d", added)
				require.NoError(t, jobs.AddSchedule(ctx, s, store.Schedule{Name: name, Every: time.Hour, Endpoint: "/t",
					Method: "POST", MaxAttempts: 1, Tolerance: time.Minute, Misfire: store.MisfireOnce, Overlap: store.OverlapAllow,
					Enabled: true, Source: store.SourceCommand}))
				fire := time.Now().UTC().Truncate(time.Second).Add(-3 * time.Hour)
				for k, state := range []string{store.StateDone, []string{store.StateDone, store.StateFailed}[added%2], store.StateReady} {
					at := fire.Add(time.Duration(k) * time.Hour)
					jid, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/t", Method: "POST", MaxAttempts: 1, RunAt: &at,
						IdempotencyKey: fmt.Sprintf("%s-%d", name, k), Schedule: name, ScheduledFor: &at})
					require.NoError(t, err)
					if state != store.StateReady {
						status := map[string]int{store.StateDone: 204, store.StateFailed: 500}[state]
						_, err = s.DB().ExecContext(ctx, setState, state, status, jid)
						require.NoError(t, err)
					}
				}
			}
		}
		// cost sends path once and returns the statements it took, the
		// node's store's and the API's clients' (the job routes').
		sent := func() int64 { return s.Statements() + a.statements() }
		cost := func(path string) int64 {
			t.Helper()
			clk.Advance(throughputEvery) // past the shared copies: a fresh read
			before := sent()
			res, body := send(t, "GET", base+strings.ReplaceAll(path, "{id}", fmt.Sprint(id)), "", nil)
			require.Equal(t, http.StatusOK, res.StatusCode, "%s: %s", path, body)
			return sent() - before
		}

		addSchedules(3)
		few := map[string]int64{}
		for _, r := range dashboardReads {
			few[r.path] = cost(r.path)
		}
		addSchedules(30)
		t.Logf("%s: statements per request (3 schedules / 30 schedules)", driver)
		for _, r := range dashboardReads {
			many := cost(r.path)
			require.Equal(t, few[r.path], many, "%s: the same with 30 schedules as with 3", r.path)
			require.Positive(t, many, r.path)
			t.Logf("| %s | `GET %s` | %d |", r.page, r.path, many)
		}
		require.Equal(t, int64(3), few["/api/v1/schedules"], "the schedules, their counts, their last results")

		var got struct {
			Schedules []service.ScheduleStatus `json:"schedules"`
		}
		res, body := send(t, "GET", base+"/api/v1/schedules", "", nil)
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.NoError(t, json.Unmarshal([]byte(body), &got))
		require.Len(t, got.Schedules, 30)
		for i, sc := range got.Schedules {
			want, status := store.StateDone, 204
			if i%2 == 1 {
				want, status = store.StateFailed, 500
			}
			require.Equal(t, fmt.Sprintf("s%02d", i), sc.Name)
			require.Equal(t, want, sc.LastResult, sc.Name)
			require.Equal(t, status, sc.LastStatus, sc.Name)
			require.Zero(t, sc.Missed, sc.Name)
		}
	})
}

// The node's DSN carries a password; no page, asset or API answer shows
// it, and the farm view shows the DSN masked.
func TestDashboardNeverShowsTheDSNPassword(t *testing.T) {
	const secret = "s3cretpw"
	storetest.Each(t, func(t *testing.T, driver string) {
		s, db := storetest.OpenDB(t, driver)
		ctx := context.Background()
		switch driver {
		case "sqlite":
			sep := "?"
			if strings.Contains(db.DSN, "?") {
				sep = "&"
			}
			db.DSN += sep + "password=" + secret
		case "mysql":
			// user[:password]@tcp(...)/db: the password goes after the user.
			user, rest, ok := strings.Cut(db.DSN, "@")
			require.True(t, ok, "a MySQL DSN names its user: %s", db.DSN)
			user, _, _ = strings.Cut(user, ":")
			db.DSN = user + ":" + secret + "@" + rest
		default:
			// The node shows this DSN and reads through s: PostgreSQL here
			// trusts any password, and the handler does not connect anyway.
			u, err := url.Parse(db.DSN)
			require.NoError(t, err)
			u.User = url.UserPassword(u.User.Username(), secret)
			db.DSN = u.String()
		}
		base, _ := dashServer(t, s, db, "")
		require.NoError(t, jobs.AddSchedule(ctx, s, store.Schedule{Name: "tick", Every: time.Hour, Endpoint: "/t",
			Method: "POST", MaxAttempts: 1, Tolerance: time.Minute, Misfire: store.MisfireOnce, Overlap: store.OverlapAllow, Enabled: true, Source: store.SourceCommand}))
		require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "feed", Endpoint: "/f", Method: "POST", Every: time.Second}))
		id, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/x", Method: "POST", MaxAttempts: 1, IdempotencyKey: "x"})
		require.NoError(t, err)

		for _, path := range []string{"/", "/assets/app.js", "/assets/style.css", "/login", "/api/", "/status", "/metrics",
			"/api/v1/farm", "/api/v1/jobs", "/api/v1/jobs/counts", fmt.Sprintf("/api/v1/jobs/%d", id), "/api/v1/jobs/987654",
			"/api/v1/jobs?since=bad", "/api/v1/schedules", "/api/v1/tasks?all=true", "/api/v1/throughput", "/api/v1/nothing"} {
			res, body := send(t, "GET", base+path, "", map[string]string{"Accept": "text/html"})
			require.NotContains(t, body, secret, "GET %s (%d) shows the DSN's password", path, res.StatusCode)
			for k, vs := range res.Header {
				require.NotContains(t, strings.Join(vs, " "), secret, "GET %s: header %s", path, k)
			}
		}
		_, body := send(t, "GET", base+"/api/v1/farm", "", nil)
		var farm FarmView
		require.NoError(t, json.Unmarshal([]byte(body), &farm))
		require.Equal(t, config.MaskDSN(db.DSN), farm.DSN)
		require.Contains(t, farm.DSN, "xxxxx", "the DSN is shown, masked")
	})
}
