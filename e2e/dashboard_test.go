//go:build unix

package e2e

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
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

// screenshotsEnv names the folder the dashboard test saves a PNG of each
// page in (relative to the repository's root): SLOTPOLLER_E2E_SCREENSHOTS=docs.
const screenshotsEnv = "SLOTPOLLER_E2E_SCREENSHOTS"

// The dashboard in a real headless Chromium against a farm of three node
// processes: every page opens, the rotation strip shows each node's turns,
// retry on a dead job runs it, a paused schedule gets no further
// occurrence and a trigger gives exactly one, and a node with admin.token
// signs the browser in with its form and takes its writes with the CSRF
// header.
func TestDashboardInABrowser(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			if driver == "postgres" {
				storetest.RequirePostgres(t)
			}
			dashboardInABrowser(t, driver)
		})
	}
}

func dashboardInABrowser(t *testing.T, driver string) {
	b := startBrowser(t)
	s, db := storetest.OpenDB(t, driver)
	ctx := context.Background()

	var failFlaky atomic.Bool
	failFlaky.Store(true)
	var flakyCalls atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/jobs/flaky", func(w http.ResponseWriter, _ *http.Request) {
		flakyCalls.Add(1)
		if failFlaky.Load() {
			http.Error(w, "the partner API is down", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(5 * time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// node-a serves the dashboard on loopback without a token; node-b with
	// one, as a node bound beyond loopback must.
	const token = "dashboard-test-token-0123456789"
	portA, portB := freePort(t), freePort(t)
	names := []string{"node-a", "node-b", "node-c"}
	for i, name := range names {
		extra := db.ExtraEnv()
		switch i {
		case 0:
			extra = append(extra, "SLOTPOLLER_ADMIN_LISTEN=127.0.0.1:"+strconv.Itoa(portA))
		case 1:
			extra = append(extra, "SLOTPOLLER_ADMIN_LISTEN=127.0.0.1:"+strconv.Itoa(portB), "SLOTPOLLER_ADMIN_TOKEN="+token)
		}
		startNode(t, env(driver, db.DSN, name, srv.URL, extra...), name)
	}
	waitFor(t, 30*time.Second, "3 live nodes", func() bool { return liveNodes(t, s) == 3 })
	seedLastHour(t, s)

	require.NoError(t, jobs.AddSchedule(ctx, s, store.Schedule{Name: "tick", Every: time.Second, Endpoint: "/jobs/tick",
		Method: "POST", MaxAttempts: 3, Tolerance: 5 * time.Second, Misfire: store.MisfireOnce, Overlap: store.OverlapForbid,
		Enabled: true, Source: store.SourceCommand}))
	require.NoError(t, jobs.AddSchedule(ctx, s, store.Schedule{Name: "nightly-report", Cron: "0 2 * * 1-5", TimeZone: "Europe/Berlin",
		Endpoint: "/jobs/report", Method: "POST", MaxAttempts: 3, Tolerance: 5 * time.Minute, Misfire: store.MisfireSkip,
		Overlap: store.OverlapForbid, Enabled: true, Source: store.SourceConfig}))
	require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "partner-feed", Endpoint: "/jobs/feed", Method: "POST", Every: time.Second}))
	require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "mailbox", Endpoint: "/jobs/mailbox", Method: "POST", Every: 2 * time.Second}))
	dead, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/flaky", Method: "POST", MaxAttempts: 1,
		Payload: []byte(`{"order":42,"customer":"ACME GmbH"}`), IdempotencyKey: "e2e-flaky"})
	require.NoError(t, err)
	for i := range 40 {
		_, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: fmt.Sprintf("/jobs/invoice?n=%d", i), Method: "POST", MaxAttempts: 3,
			IdempotencyKey: fmt.Sprintf("e2e-%d", i), Delay: time.Duration(i) * 50 * time.Millisecond})
		require.NoError(t, err)
	}
	waitFor(t, 30*time.Second, "the flaky job dead", func() bool {
		j, err := s.JobGet(ctx, dead)
		require.NoError(t, err)
		return j.State == store.StateDead
	})

	dashA := fmt.Sprintf("http://127.0.0.1:%d/", portA)
	shots := screenshots(t, driver)
	if os.Getenv(costEnv) != "" && driver == "sqlite" {
		measureViewerCost(t, b, portA)
	}

	// Farm: the strip shows a turn of each node.
	b.open(dashA + "#/farm")
	b.waitFor("#strip .cell")
	b.waitJS("a turn of every node in the rotation strip", `
const seen = new Set();
document.querySelectorAll('#strip .cell').forEach(c => (c.dataset.pollers || '').split(' ').filter(Boolean).forEach(p => seen.add(p)));
return arguments[0].every(n => seen.has(n));`, names)
	b.waitFor(`#nodes tr[data-node="node-c"]`)

	// Jobs: retry the dead job from the list; it runs and is done.
	b.open(dashA + "#/jobs")
	b.waitFor(`#jobs tr[data-job]`)
	b.waitFor(`#counts a[data-state="dead"]`)
	shots("jobs", b)
	b.click(`#counts a[data-state="dead"]`)
	b.waitJS("the list filtered on dead", `return [...document.querySelectorAll('#jobs tr[data-job]')].every(r => r.dataset.state === 'dead') && !!document.querySelector('#jobs tr[data-job="'+arguments[0]+'"]')`, dead)
	failFlaky.Store(false)
	before := flakyCalls.Load()
	b.click(fmt.Sprintf(`#jobs tr[data-job="%d"] button[data-action="retry"]`, dead))
	b.open(fmt.Sprintf("%s#/jobs/%d", dashA, dead))
	b.waitJS("the retried job done on its page", `return !!document.querySelector('h1 .badge.done')`)
	require.Greater(t, flakyCalls.Load(), before, "the endpoint was called again")
	b.waitFor("#timeline li")
	shots("job", b)

	// Schedules: pause tick; no occurrence is written after; a trigger
	// writes exactly one.
	b.open(dashA + "#/schedules")
	b.waitFor(`#schedules tr[data-schedule="tick"]`)
	waitFor(t, 20*time.Second, "tick occurrences run", func() bool { return len(occurrencesOf(t, s, "tick")) >= 2 })
	shots("schedules", b)
	b.click(`#schedules tr[data-schedule="tick"] button[data-action="pause"]`)
	b.waitFor(`#schedules tr[data-schedule="tick"][data-enabled="false"]`)
	paused := len(occurrencesOf(t, s, "tick"))
	time.Sleep(2 * time.Second) // eight slots: nodes that would write one had their turns
	require.Equal(t, paused, len(occurrencesOf(t, s, "tick")), "no occurrence after the pause")
	b.click(`#schedules tr[data-schedule="tick"] button[data-action="trigger"]`)
	waitFor(t, 10*time.Second, "the triggered occurrence", func() bool { return len(occurrencesOf(t, s, "tick")) == paused+1 })
	waitFor(t, 10*time.Second, "the triggered occurrence done", func() bool {
		for _, j := range occurrencesOf(t, s, "tick") {
			if j.State != store.StateDone {
				return false
			}
		}
		return true
	})
	require.Equal(t, paused+1, len(occurrencesOf(t, s, "tick")), "one occurrence per trigger")

	// Tasks: each owned by a node.
	b.open(dashA + "#/tasks")
	b.waitJS("both tasks owned", `return [...document.querySelectorAll('#tasks tr[data-task]')].filter(r => r.children[4].textContent !== '–').length === 2`)
	shots("tasks", b)

	// Throughput: the chart of the jobs done.
	b.open(dashA + "#/throughput")
	b.waitFor("#chart-jobs rect")
	shots("throughput", b)

	// Farm again, its strip full by now, for the picture.
	b.open(dashA + "#/farm")
	b.waitFor(`#nodes tr[data-node="node-c"]`)
	shots("farm", b)

	// node-b needs its token: the browser is sent to the sign-in form, a
	// wrong token is refused, the right one signs in, and a write
	// (resume) works with the session's CSRF header.
	dashB := fmt.Sprintf("http://127.0.0.1:%d/", portB)
	b.open(dashB + "#/schedules")
	b.waitFor("#token")
	b.typeInto("#token", "not-the-token-at-all")
	b.click("#signin")
	b.waitJS("the wrong token refused", `return document.body.innerText.includes("not this node's admin.token")`)
	shots("login", b)
	b.typeInto("#token", token)
	b.click("#signin")
	b.waitFor("#nav")
	b.open(dashB + "#/schedules")
	b.waitFor(`#schedules tr[data-schedule="tick"][data-enabled="false"]`)
	b.click(`#schedules tr[data-schedule="tick"] button[data-action="resume"]`)
	b.waitFor(`#schedules tr[data-schedule="tick"][data-enabled="true"]`)
	sc, err := s.ScheduleGet(ctx, "tick")
	require.NoError(t, err)
	require.True(t, sc.Enabled, "resumed through node-b's API with the session")
	var status int
	require.NoError(t, b.eval(`return fetch('/api/v1/schedules/tick/pause', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: '{}'}).then(r => r.status)`, &status))
	require.Equal(t, http.StatusForbidden, status, "a write without the CSRF header is refused")
}

// costEnv switches on the measurement of what one viewer costs:
// SLOTPOLLER_E2E_DASHBOARD_COST=20s watches each page that long.
const costEnv = "SLOTPOLLER_E2E_DASHBOARD_COST"

// measureViewerCost opens each page through a counting relay in front of
// node-a's admin endpoint and logs the requests one viewer sends per
// minute, by route (docs/benchmarks.md, "Dashboard").
func measureViewerCost(t *testing.T, b *browser, port int) {
	watch, err := time.ParseDuration(os.Getenv(costEnv))
	require.NoError(t, err, costEnv)
	target, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", port))
	var mu sync.Mutex
	counts := map[string]int{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := r.URL.Path
		if strings.HasPrefix(route, "/api/v1/jobs/") && route != "/api/v1/jobs/counts" {
			route = "/api/v1/jobs/{id}"
		}
		mu.Lock()
		counts[route]++
		mu.Unlock()
		r.Host = target.Host // the node wants its loopback Host
		proxy.ServeHTTP(w, r)
	}))
	defer relay.Close()
	for _, page := range []string{"farm", "jobs", "jobs/1", "schedules", "tasks", "throughput"} {
		b.open(relay.URL + "/#/" + page)
		b.waitFor("main h1")
		mu.Lock()
		clear(counts)
		mu.Unlock()
		time.Sleep(watch) // a viewer watching the page
		mu.Lock()
		var per []string
		total := 0
		for route, n := range counts {
			per = append(per, fmt.Sprintf("%s %.1f", route, float64(n)*float64(time.Minute)/float64(watch)))
			total += n
		}
		mu.Unlock()
		sort.Strings(per)
		t.Logf("dashboard cost: page %-10s %5.1f requests/min per viewer: %s", page, float64(total)*float64(time.Minute)/float64(watch), strings.Join(per, ", "))
	}
}

// seedLastHour writes finished jobs over the hour before the farm
// started (done, some failed, with start delays), so that the throughput
// charts have an hour to draw; the minutes the test runs add their own.
func seedLastHour(t *testing.T, s *store.Store) {
	t.Helper()
	q := store.Expand(s.Dialect(), `INSERT INTO {jobs} (endpoint, method, state, run_at, started_at, finished_at, attempt, max_attempts, idem_key, created_at, last_status)
VALUES ('/jobs/history', 'POST', ?, {now+?}, {now+?}, {now+?}, 1, 3, 'seed', {now+?}, ?)`)
	for m := 2; m < 60; m++ {
		n := 8 + int(6*math.Sin(float64(m)/7)) + m%3
		delay := int64(40 + 30*math.Sin(float64(m)/5))
		for i := range n {
			end := -int64(m*60_000 + i*3_000)
			state, status := store.StateDone, 204
			if (m+i)%17 == 0 {
				state, status = store.StateFailed, 422
			}
			_, err := s.DB().ExecContext(context.Background(), q, state, end-120-delay-int64(i*7), end-120, end, end-5_000, status)
			require.NoError(t, err)
		}
	}
}

func occurrencesOf(t *testing.T, s *store.Store, schedule string) []store.Job {
	all, err := s.JobsList(context.Background(), store.JobFilter{Limit: 1000})
	require.NoError(t, err)
	var out []store.Job
	for _, j := range all {
		if j.Schedule == schedule {
			out = append(out, j)
		}
	}
	return out
}

// screenshots returns what saves a page's screenshot as
// docs/dashboard-<page>.png when screenshotsEnv is set (from the SQLite
// run only, so that one set is kept).
func screenshots(t *testing.T, driver string) func(page string, b *browser) {
	dir := os.Getenv(screenshotsEnv)
	return func(page string, b *browser) {
		t.Helper()
		png := b.screenshot()
		require.Greater(t, len(png), 1000, "a screenshot of %s", page)
		if dir == "" || driver != "sqlite" {
			return
		}
		out := dir
		if !filepath.IsAbs(out) {
			out = filepath.Join("..", out) // the test runs in e2e/
		}
		require.NoError(t, os.WriteFile(filepath.Join(out, "dashboard-"+page+".png"), png, 0o644))
	}
}
