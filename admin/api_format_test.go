package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/nodetest"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/service"
	"github.com/stretchr/testify/require"
)

// apiTimeText is a time as the API writes every one: UTC, milliseconds,
// 24 characters.
var apiTimeText = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// timesIn collects the values of the time fields (by name) anywhere in a
// decoded JSON body.
func timesIn(v any, keys map[string]bool, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && keys[k] {
				*out = append(*out, k+"="+s)
			}
			timesIn(x, keys, out)
		}
	case []any:
		for _, x := range v {
			timesIn(x, keys, out)
		}
	}
}

// Every time the API writes has the one fixed-width form, whatever its
// fraction of a second (a whole second too: RFC3339Nano would drop it),
// and Date.parse reads it.
func TestAPITimesAreFixedWidthUTC(t *testing.T) {
	s, db := storetest.OpenDB(t, "sqlite")
	ctx := context.Background()
	base := apiServer(t, s, db, "")
	require.NoError(t, jobs.AddSchedule(ctx, s, store.Schedule{Name: "tick", Every: time.Minute, Endpoint: "/t",
		Method: "POST", MaxAttempts: 1, Tolerance: time.Minute, Misfire: store.MisfireOnce, Overlap: store.OverlapAllow, Enabled: true, Source: store.SourceCommand}))
	require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "feed", Endpoint: "/f", Method: "POST", Every: time.Second}))
	at := time.Now().Add(24 * time.Hour).Truncate(time.Second).In(time.FixedZone("CET", 3600))
	r := must(t, base, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/a","run_at":"`+at.Format(time.RFC3339)+`"}`))
	id := idOf(t, r)
	must(t, base, http.StatusOK, post("/api/v1/jobs/"+jsonNumber(id)+"/cancel", ""))
	must(t, base, http.StatusOK, post("/api/v1/schedules/tick/trigger", "{}"))

	keys := map[string]bool{"run_at": true, "created": true, "started": true, "finished": true, "lease_until": true,
		"scheduled_for": true, "ended": true, "database_time": true, "last_seen": true, "next_fire_at": true,
		"last_fire_at": true, "since": true, "last_call_at": true}
	seen := map[string]bool{}
	for _, path := range []string{"/api/v1/jobs/" + jsonNumber(id), "/api/v1/jobs", "/api/v1/schedules", "/api/v1/tasks?all=true", "/api/v1/farm"} {
		r := must(t, base, http.StatusOK, getReq(path))
		var times []string
		timesIn(r.body, keys, &times)
		for _, kv := range times {
			k, v, _ := strings.Cut(kv, "=")
			require.Regexp(t, apiTimeText, v, "%s: %s", path, k)
			seen[k] = true
		}
	}
	for _, k := range []string{"run_at", "created", "finished", "ended", "database_time", "next_fire_at"} {
		require.True(t, seen[k], "no %s seen: the test covers less than it says", k)
	}
	r = must(t, base, http.StatusOK, getReq("/api/v1/jobs/"+jsonNumber(id)))
	require.Equal(t, at.UTC().Format("2006-01-02T15:04:05")+".000Z", r.body["run_at"], "in UTC, a whole second with its .000")
}

func jsonNumber(id int64) string { b, _ := json.Marshal(id); return string(b) }

// An error's message is written as it reads: "<admin.token>", not
// "\u003cadmin.token\u003e".
func TestAPIErrorsAreNotHTMLEscaped(t *testing.T) {
	s, db := storetest.OpenDB(t, "sqlite")
	base := apiServer(t, s, db, "0123456789abcdef-the-token")
	r := callAPI(t, base, getReq("/api/v1/jobs"))
	require.Equal(t, http.StatusUnauthorized, r.status)
	require.Contains(t, r.raw, "Authorization: Bearer <admin.token>")
	require.NotContains(t, r.raw, `\u003c`)
}

// The API's views of the CLI's reports keep the reports' JSON fields: a
// field added to one and not the other fails here.
func TestViewsKeepTheReportsFields(t *testing.T) {
	for _, c := range []struct{ view, report any }{
		{scheduleView{}, service.ScheduleStatus{}},
		{taskView{}, service.TaskStatus{}},
		{nodeView{}, service.NodeStatus{}},
	} {
		require.Equal(t, jsonFields(reflect.TypeOf(c.report)), jsonFields(reflect.TypeOf(c.view)), "%T", c.view)
	}
}

func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		out = append(out, t.Field(i).Tag.Get("json"))
	}
	sort.Strings(out)
	return out
}

// The API's log lines name the node once (the node's logger names it; the
// API once added it again: node=api-log node=api-log).
func TestAPILogsNameTheNodeOnce(t *testing.T) {
	s, db := storetest.OpenDB(t, "sqlite")
	logs := &nodetest.Log{}
	n := service.NewNode(testConfig(t, db, "api-log", "http://localhost"), service.NewLogger(logs, config.LogConfig{Level: "info", Format: "text"}), nil)
	srv := httptest.NewServer(Handler(storeNode{n, s}))
	defer srv.Close()
	id := idOf(t, must(t, srv.URL, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/a","delay":"1h"}`)))
	must(t, srv.URL, http.StatusOK, post("/api/v1/jobs/"+jsonNumber(id)+"/cancel", ""))
	line := logs.String()
	require.Contains(t, line, "job cancelled through the API")
	require.Equal(t, 1, strings.Count(line, "node=api-log"), line)
}
