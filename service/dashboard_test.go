package service

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// The turn log keeps the latest 64 turns, one per slot, and its text
// reads back as the same slots.
func TestTurnLogEncodesTheLatestTurns(t *testing.T) {
	var l turnLog
	require.Equal(t, "", l.Encode())
	require.Nil(t, decodeTurns(""))
	for k := int64(1_780_000_000); k < 1_780_000_000+300; k += 3 {
		l.Record(k)
		l.Record(k) // a widened slot's second turn
	}
	enc := l.Encode()
	got := decodeTurns(enc)
	require.Len(t, got, turnsKept)
	require.Equal(t, int64(1_780_000_297), got[0], "newest first")
	require.Equal(t, int64(1_780_000_297-3*(turnsKept-1)), got[turnsKept-1])
	require.True(t, strings.HasPrefix(enc, "1780000297,3,3"), enc)
	require.Less(t, len(enc), 1000, "fits the column")
	require.Equal(t, []int64{10, 7}, decodeTurns("10,3,x,4"), "unreadable text ends the list")
}

// dashServer serves a node's admin handler on s with a fake clock.
func dashServer(t *testing.T, s *store.Store, db storetest.DB, token string) (string, *clock.Fake) {
	t.Helper()
	cfg := testConfig(t, db, "dash-1", "http://localhost")
	cfg.Admin.Token = token
	clk := clock.NewFake(time.Unix(1_780_000_000, 0))
	n := NewNode(cfg, NewLogger(io.Discard, LogConfig{Level: "error"}), clk)
	n.mu.Lock()
	n.store = s
	n.mu.Unlock()
	srv := httptest.NewServer(n.AdminHandler())
	t.Cleanup(srv.Close)
	return srv.URL, clk
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
	require.Equal(t, sessionCookie, c.Name)
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
	res, _ = send(t, "POST", pause, "{}", jsonHdr(map[string]string{"Origin": base, csrfHeader: "0" + csrf[1:]}))
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
		require.NotContains(t, body, "password")
	})
}
