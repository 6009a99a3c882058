package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// The API's operator actions are in the audit log once they took
// effect, named by the credential that took them: the admin token, or a
// dashboard session (a label of its own, the same for its every action,
// never its cookie or CSRF token). A refused action is not recorded.
// GET /api/v1/audit lists them newest first, filtered and paged.
func TestAPIActionsAreAudited(t *testing.T) {
	s, db := storetest.OpenDB(t, "sqlite")
	ctx := context.Background()
	const token = "an-audit-token-0123456789"
	base, _ := dashServer(t, s, db, token)
	require.NoError(t, jobs.AddSchedule(ctx, s, store.Schedule{Name: "tick", Every: time.Minute, Endpoint: "/t",
		Method: "POST", MaxAttempts: 1, Tolerance: time.Minute, Misfire: store.MisfireOnce, Overlap: store.OverlapAllow, Enabled: true, Source: store.SourceCommand}))
	id, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/later", MaxAttempts: 1, Delay: time.Hour})
	require.NoError(t, err)

	bearer := map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json"}
	res, body := send(t, "POST", base+"/api/v1/queues/reports/pause", "{}", bearer)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	res, body = send(t, "POST", base+"/api/v1/jobs/"+itoa(id)+"/cancel", "{}", bearer)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	res, _ = send(t, "POST", base+"/api/v1/jobs/"+itoa(id)+"/cancel", "{}", bearer)
	require.Equal(t, http.StatusConflict, res.StatusCode, "a second cancel is refused")
	res, _ = send(t, "POST", base+"/api/v1/jobs", `{"endpoint":"/x","delay":"1h"}`, bearer)
	require.Equal(t, http.StatusCreated, res.StatusCode, "an enqueue is not an operator action")

	// A dashboard session pauses the schedule.
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": base}
	res, _ = send(t, "POST", base+"/login", url.Values{"token": {token}}.Encode(), form)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	cookie := res.Cookies()[0].Name + "=" + res.Cookies()[0].Value
	_, page := send(t, "GET", base+"/", "", map[string]string{"Cookie": cookie})
	i := strings.Index(page, `name="slotpoller-csrf" content="`)
	require.Positive(t, i)
	csrf := page[i+len(`name="slotpoller-csrf" content="`):]
	csrf = csrf[:strings.Index(csrf, `"`)]
	res, body = send(t, "POST", base+"/api/v1/schedules/tick/pause", "{}",
		map[string]string{"Cookie": cookie, "Origin": base, csrfHeader: csrf, "Content-Type": "application/json"})
	require.Equal(t, http.StatusOK, res.StatusCode, body)

	list := func(query string) auditResponse {
		t.Helper()
		res, body := send(t, "GET", base+"/api/v1/audit"+query, "", bearer)
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		var out auditResponse
		require.NoError(t, json.Unmarshal([]byte(body), &out))
		return out
	}
	all := list("")
	require.Len(t, all.Entries, 3, "pause, cancel and the session's pause: no refused action, no enqueue")
	require.Empty(t, all.NextCursor)
	got := func(e auditView) [3]string { return [3]string{e.Action, e.Target, e.Actor} }
	require.Equal(t, [3]string{"schedule.pause", "tick", all.Entries[0].Actor}, got(all.Entries[0]), "newest first")
	require.Regexp(t, `^dashboard session [0-9a-f]{8}$`, all.Entries[0].Actor)
	require.NotContains(t, all.Entries[0].Actor, csrf[:8], "the label is not the CSRF token")
	require.Equal(t, [3]string{"job.cancel", itoa(id), "api (admin token)"}, got(all.Entries[1]))
	require.Contains(t, all.Entries[1].Detail, `"state":"cancelled"`, "the answer")
	require.Equal(t, [3]string{"queue.pause", "reports", "api (admin token)"}, got(all.Entries[2]))
	require.Equal(t, "127.0.0.1 via dash-1", all.Entries[2].Origin)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	for _, e := range all.Entries {
		at := time.Time(e.At)
		require.WithinDuration(t, now, at, time.Minute, "the database's clock")
	}

	require.Len(t, list("?action=queue").Entries, 1)
	require.Len(t, list("?actor="+url.QueryEscape("api (admin token)")).Entries, 2)
	first := list("?limit=2")
	require.Len(t, first.Entries, 2)
	require.NotEmpty(t, first.NextCursor)
	rest := list("?limit=2&cursor=" + first.NextCursor)
	require.Len(t, rest.Entries, 1)
	require.Equal(t, "queue.pause", rest.Entries[0].Action)

	res, body = send(t, "GET", base+"/api/v1/audit?cursor=x", "", bearer)
	require.Equal(t, http.StatusBadRequest, res.StatusCode, body)
	require.Contains(t, body, `"field":"cursor"`)
	res, body = send(t, "GET", base+"/api/v1/audit?actr=x", "", bearer)
	require.Equal(t, http.StatusBadRequest, res.StatusCode, body)
	require.Contains(t, body, "unknown query parameter")
}
