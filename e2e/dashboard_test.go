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
	"slices"
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
	"github.com/slotpoller/slotpoller/rotation"
	"github.com/stretchr/testify/require"
)

// screenshotsEnv names the folder the dashboard test saves a PNG of each
// page in (relative to the repository's root): SLOTPOLLER_E2E_SCREENSHOTS=docs.
const screenshotsEnv = "SLOTPOLLER_E2E_SCREENSHOTS"

// The dashboard in a real headless Chromium against a farm of three node
// processes: every page opens and its buttons lie inside their cards; the
// rotation strip shows each slot polled by its owner; the time range cuts
// the job list; retry on a dead job runs it, cancel stops a waiting one,
// retry-all runs the dead jobs of a filter; a paused schedule gets no
// further occurrence and a trigger exactly one call; a task's delete (and
// its confirm) removes it; the throughput charts count the jobs run; the
// DSN's password shows nowhere; every page fits a window 1280 and 1600 px
// wide, its slot number and cron rules each on one line and its
// "updated" time in UTC; a node killed and restarted under its name
// keeps on the strip the slots it polled before; and a node with
// admin.token signs the browser in with its form and takes its writes
// with the CSRF header.
func TestDashboardInABrowser(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(driver, func(t *testing.T) {
			switch driver {
			case "postgres":
				storetest.RequirePostgres(t)
			case "mysql":
				storetest.RequireMySQL(t)
			}
			dashboardInABrowser(t, driver)
		})
	}
}

func dashboardInABrowser(t *testing.T, driver string) {
	b := startBrowser(t)
	s, db := storetest.OpenDB(t, driver)
	ctx := context.Background()

	var failFlaky, failPartner atomic.Bool
	failFlaky.Store(true)
	failPartner.Store(true)
	var flakyCalls, tickCalls, partnerCalls atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/jobs/tick", counted(&tickCalls, nil))
	mux.HandleFunc("/jobs/partner", counted(&partnerCalls, &failPartner))
	mux.HandleFunc("/jobs/flaky", counted(&flakyCalls, &failFlaky))
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
	// The nodes' DSN carries a password where the database takes one
	// (PostgreSQL here trusts any): the dashboard must show it masked.
	const dsnSecret = "s3cretpw"
	nodeDSN := db.DSN
	if driver == "postgres" {
		u, err := url.Parse(db.DSN)
		require.NoError(t, err)
		u.User = url.UserPassword(u.User.Username(), dsnSecret)
		nodeDSN = u.String()
	}
	nodes, envs := map[string]*node{}, map[string][]string{}
	for i, name := range names {
		extra := db.ExtraEnv()
		switch i {
		case 0:
			extra = append(extra, "SLOTPOLLER_ADMIN_LISTEN=127.0.0.1:"+strconv.Itoa(portA))
		case 1:
			extra = append(extra, "SLOTPOLLER_ADMIN_LISTEN=127.0.0.1:"+strconv.Itoa(portB), "SLOTPOLLER_ADMIN_TOKEN="+token)
		}
		envs[name] = env(driver, nodeDSN, name, srv.URL, extra...)
		nodes[name] = startNode(t, envs[name], name)
	}
	waitFor(t, 30*time.Second, "3 live nodes", func() bool { return liveNodes(t, s) == 3 })
	seededDone := seedLastHour(t, s)

	require.NoError(t, jobs.AddSchedule(ctx, s, store.Schedule{Name: "tick", Every: time.Second, Endpoint: "/jobs/tick",
		Method: "POST", MaxAttempts: 3, Tolerance: 5 * time.Second, Misfire: store.MisfireOnce, Overlap: store.OverlapForbid,
		Enabled: true, Source: store.SourceCommand}))
	require.NoError(t, jobs.AddSchedule(ctx, s, store.Schedule{Name: "nightly-report", Cron: "0 2 * * 1-5", TimeZone: "Europe/Berlin",
		Endpoint: "/jobs/report", Method: "POST", MaxAttempts: 3, Tolerance: 5 * time.Minute, Misfire: store.MisfireSkip,
		Overlap: store.OverlapForbid, Enabled: true, Source: store.SourceConfig}))
	// A long name, rule, zone and endpoint, as the schedules table must
	// fit them (paused: it never fires during the test).
	require.NoError(t, jobs.AddSchedule(ctx, s, store.Schedule{Name: "quarter-hourly-billing-export", Cron: "*/15 6-22 * * 1-5",
		TimeZone: "America/Los_Angeles", Endpoint: "/jobs/billing/export-quarter-hourly-invoices", Method: "POST", MaxAttempts: 3,
		Tolerance: time.Minute, Misfire: store.MisfireOnce, Overlap: store.OverlapForbid, Enabled: false, Source: store.SourceCommand}))
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
	waiting, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/later", Method: "POST", MaxAttempts: 1,
		IdempotencyKey: "e2e-later", Delay: time.Hour})
	require.NoError(t, err)
	var partner []int64
	for i := range 3 {
		id, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/partner", Method: "POST", MaxAttempts: 1,
			IdempotencyKey: fmt.Sprintf("e2e-partner-%d", i)})
		require.NoError(t, err)
		partner = append(partner, id)
	}
	for _, id := range append([]int64{dead}, partner...) {
		waitFor(t, 30*time.Second, fmt.Sprintf("job %d dead", id), func() bool { return jobIn(t, s, id) == store.StateDead })
	}

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
	var farmText string
	require.NoError(t, b.eval(`return document.body.innerText`, &farmText))
	require.NotContains(t, farmText, dsnSecret, "the farm page shows the DSN's password")
	if nodeDSN != db.DSN {
		require.Contains(t, farmText, "xxxxx", "the farm page shows the DSN, masked")
	}

	// Jobs: retry the dead job from the list; it runs and is done.
	b.open(dashA + "#/jobs")
	b.waitFor(`#jobs tr[data-job]`)
	b.waitFor(`#counts a[data-state="dead"]`)
	shots("jobs", b)
	b.requireInCard(`#jobs button[data-action]`)
	// A time range: created from 24 h to 15 min ago holds only the
	// seeded history (the test's own jobs are younger).
	b.click(`#f-since option[value="24h"]`)
	b.click(`#f-until option[value="15m"]`)
	b.click(`form.filters button[type="submit"]`)
	b.waitJS("the list cut to the range", `const rows = [...document.querySelectorAll('#jobs tr[data-job]')];
return location.hash.includes('until=15m') && rows.length > 0 && rows.every(r => r.children[1].textContent === 'POST /jobs/history')`)
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

	// Cancel the waiting job from the list: it is cancelled.
	b.open(dashA + "#/jobs?endpoint=/jobs/later")
	b.click(fmt.Sprintf(`#jobs tr[data-job="%d"] button[data-action="cancel"]`, waiting))
	b.waitFor(fmt.Sprintf(`#jobs tr[data-job="%d"][data-state="cancelled"]`, waiting))
	require.Equal(t, store.StateCancelled, jobIn(t, s, waiting))

	// Retry all the dead jobs of a filter (and its confirm): they run.
	b.open(dashA + "#/jobs?state=dead&endpoint=/jobs/partner")
	b.waitJS("the three dead partner jobs listed", `return document.querySelectorAll('#jobs tr[data-job][data-state="dead"]').length === 3`)
	failPartner.Store(false)
	calls := partnerCalls.Load()
	b.click("#retry-all")
	b.waitJS("retry-all armed", `return document.getElementById('retry-all').textContent.includes('confirm')`)
	b.click("#retry-all")
	for _, id := range partner {
		waitFor(t, 20*time.Second, fmt.Sprintf("partner job %d done", id), func() bool { return jobIn(t, s, id) == store.StateDone })
	}
	require.Equal(t, calls+3, partnerCalls.Load(), "each retried job called once")
	require.Equal(t, store.StateCancelled, jobIn(t, s, waiting), "retry-all of dead jobs left the cancelled one")

	// Schedules: pause tick; no occurrence is written after; a trigger
	// writes exactly one.
	b.open(dashA + "#/schedules")
	b.waitFor(`#schedules tr[data-schedule="tick"]`)
	waitFor(t, 20*time.Second, "tick occurrences run", func() bool { return len(occurrencesOf(t, s, "tick")) >= 2 })
	shots("schedules", b)
	b.requireInCard(`#schedules button[data-action]`)
	b.click(`#schedules tr[data-schedule="tick"] button[data-action="pause"]`)
	b.waitFor(`#schedules tr[data-schedule="tick"][data-enabled="false"]`)
	paused := len(occurrencesOf(t, s, "tick"))
	time.Sleep(2 * time.Second) // eight slots: nodes that would write one had their turns
	require.Equal(t, paused, len(occurrencesOf(t, s, "tick")), "no occurrence after the pause")
	allDone := func() bool {
		for _, j := range occurrencesOf(t, s, "tick") {
			if j.State != store.StateDone {
				return false
			}
		}
		return true
	}
	waitFor(t, 10*time.Second, "the occurrences before the pause done", allDone)
	ticks := tickCalls.Load()
	b.click(`#schedules tr[data-schedule="tick"] button[data-action="trigger"]`)
	waitFor(t, 10*time.Second, "the triggered occurrence", func() bool { return len(occurrencesOf(t, s, "tick")) == paused+1 })
	waitFor(t, 10*time.Second, "the triggered occurrence done", allDone)
	require.Equal(t, paused+1, len(occurrencesOf(t, s, "tick")), "one occurrence per trigger")
	require.Equal(t, ticks+1, tickCalls.Load(), "one call of the endpoint per trigger")

	// Tasks: each owned by a node.
	b.open(dashA + "#/tasks")
	b.waitJS("both tasks owned", `return [...document.querySelectorAll('#tasks tr[data-task]')].filter(r => r.children[4].textContent !== '–').length === 2`)
	shots("tasks", b)
	b.requireInCard(`#tasks button[data-action]`)
	// Delete one (the second click confirms): it leaves the list.
	b.click(`#tasks tr[data-task="mailbox"] button[data-action="delete"]`)
	b.waitJS("delete armed", `return document.querySelector('#tasks tr[data-task="mailbox"] button[data-action="delete"]').textContent.includes('confirm')`)
	b.click(`#tasks tr[data-task="mailbox"] button[data-action="delete"]`)
	b.waitJS("the deleted task gone", `return !document.querySelector('#tasks tr[data-task="mailbox"]') && !!document.querySelector('#tasks tr[data-task="partner-feed"]')`)
	task, err := s.TaskGet(ctx, "mailbox")
	require.NoError(t, err)
	require.Equal(t, store.TaskDeleted, task.State)

	// Throughput: the chart of the jobs done.
	b.open(dashA + "#/throughput")
	b.waitFor("#chart-jobs[data-done-total]")
	b.waitFor("#chart-delay[data-minutes]")
	shots("throughput", b)
	var chart struct {
		Done, Minutes int
		MaxDelay      float64
		Lines         int
	}
	require.NoError(t, b.eval(`const j = document.getElementById('chart-jobs'), d = document.getElementById('chart-delay');
return {Done: +j.dataset.doneTotal, Minutes: +d.dataset.minutes, MaxDelay: +d.dataset.maxDelayMs,
  Lines: d.querySelectorAll('polyline, circle').length}`, &chart))
	// The seeded hour (but its oldest minutes, which may have left the
	// window) and the 40 invoices, the retried jobs and the ticks.
	require.GreaterOrEqual(t, chart.Done, seededDone+40, "jobs done in the last hour: %+v", chart)
	require.GreaterOrEqual(t, chart.Minutes, 50, "minutes with a start delay: %+v", chart)
	require.Positive(t, chart.MaxDelay, "%+v", chart)
	require.Positive(t, chart.Lines, "the delay lines drawn: %+v", chart)

	// Farm again, its strip full by now: the slots are polled by their
	// owners.
	b.open(dashA + "#/farm")
	b.waitFor(`#nodes tr[data-node="node-c"]`)
	requireOwnersPolled(t, b, s, names)
	shots("farm", b)

	// Every page at a narrow and a wide window.
	dashB := fmt.Sprintf("http://127.0.0.1:%d/", portB)
	requireLayouts(t, b, dashA, dashB, dead)

	// node-c killed and restarted under its name: the slots it polled
	// before stay polled.
	b.open(dashA + "#/farm")
	requireRestartKeepsTurns(t, b, s, nodes["node-c"], envs["node-c"])

	// node-b needs its token: the browser is sent to the sign-in form, a
	// wrong token is refused, the right one signs in, and a write
	// (resume) works with the session's CSRF header.
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
// It returns how many done jobs it wrote that stay within the hour for
// the next five minutes.
func seedLastHour(t *testing.T, s *store.Store) int {
	t.Helper()
	done := 0
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
			if state == store.StateDone && m < 54 {
				done++
			}
		}
	}
	return done
}

// counted is an endpoint that counts its calls and answers 502 while
// fail (when given) is set.
func counted(calls *atomic.Int64, fail *atomic.Bool) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		if fail != nil && fail.Load() {
			http.Error(w, "the partner API is down", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

func jobIn(t *testing.T, s *store.Store, id int64) string {
	t.Helper()
	j, err := s.JobGet(context.Background(), id)
	require.NoError(t, err)
	return j.State
}

// requireOwnersPolled reads the rotation strip and requires that the
// slots since the farm settled were polled by their owners, computed here
// from the sorted live node names (slot k belongs to live[k mod N]): most
// of them by the owner alone (a slot at start-up, a widened one under a
// backlog, or one missed to a load spike may differ), each node owning
// several, and the strip's own owner attribute the same.
func requireOwnersPolled(t *testing.T, b *browser, s *store.Store, live []string) {
	t.Helper()
	live = slices.Sorted(slices.Values(live))
	nodes, _, err := s.Nodes(context.Background(), 3*time.Second)
	require.NoError(t, err)
	const slot = 250 * time.Millisecond // SLOTPOLLER_ROTATION_SLOT
	var settled int64                   // the first slot in which every node had started, and two more
	for _, n := range nodes {
		settled = max(settled, rotation.Slot(n.Started, slot)+2)
	}
	type cell struct {
		Slot    int64  `json:"slot"`
		Owner   string `json:"owner"`
		Pollers string `json:"pollers"`
		Pending bool   `json:"pending"`
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var cells []cell
		require.NoError(t, b.eval(`return [...document.querySelectorAll('#strip .cell')].map(c => ({slot: +c.dataset.slot,
  owner: c.dataset.owner, pollers: c.dataset.pollers, pending: c.classList.contains('pending')}))`, &cells))
		judged, matched := 0, 0
		owned := map[string]int{}
		var wrong []string
		for _, c := range cells {
			want := live[int(((c.Slot%int64(len(live)))+int64(len(live)))%int64(len(live)))]
			require.Equal(t, want, c.Owner, "slot %d: the strip's owner", c.Slot)
			if c.Slot < settled || c.Pending {
				continue
			}
			judged++
			if c.Pollers == want {
				matched++
				owned[want]++
			} else if len(wrong) < 10 {
				wrong = append(wrong, fmt.Sprintf("slot %d: owner %s, polled by %q", c.Slot, want, c.Pollers))
			}
		}
		enough := judged >= 30 && matched*10 >= judged*8
		for _, n := range live {
			enough = enough && owned[n] >= 5
		}
		if enough {
			t.Logf("rotation strip: %d of %d settled slots polled by their owner alone, by node %v", matched, judged, owned)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rotation strip: %d of %d settled slots (from slot %d) polled by their owner alone, by node %v; want 80%% of at least 30 and 5 per node; e.g.\n%s",
				matched, judged, settled, owned, strings.Join(wrong, "\n"))
		}
		time.Sleep(time.Second)
	}
}

// requireLayouts opens every page in a window 1280 and 1600 px wide and
// requires that none shows what an operator misreads (layoutProblems),
// then sets the window back to the size the screenshots are taken at.
func requireLayouts(t *testing.T, b *browser, dashA, dashB string, job int64) {
	t.Helper()
	defer b.resize(1360, 1000)
	pages := map[string]string{ // page: what shows it is drawn
		"farm":                      "#strip .cell",
		"jobs":                      "#jobs tr[data-job]",
		fmt.Sprintf("jobs/%d", job): "#timeline li",
		"schedules":                 `#schedules tr[data-schedule="quarter-hourly-billing-export"]`,
		"tasks":                     "#tasks tr[data-task]",
		"throughput":                "#chart-jobs[data-done-total]",
	}
	var problems []string
	for _, width := range []int{1280, 1600} {
		b.resize(width, 1000)
		for page, drawn := range pages {
			b.open(dashA + "#/" + page)
			b.waitFor(drawn)
			// The header's time is written after the page's first refresh.
			b.waitJS("the page refreshed", `return document.getElementById('live').className === 'live' && document.getElementById('updated').textContent.startsWith('updated')`)
			for _, p := range b.layoutProblems() {
				problems = append(problems, fmt.Sprintf("%d px, %s: %s", width, page, p))
			}
		}
		b.open(dashB + "#/farm") // node-b signs the browser in first
		b.waitFor("#token")
		for _, p := range b.layoutProblems() {
			problems = append(problems, fmt.Sprintf("%d px, sign-in form: %s", width, p))
		}
	}
	if len(problems) > 0 {
		t.Fatalf("what an operator misreads on the dashboard:\n%s", strings.Join(problems, "\n"))
	}
}

// requireRestartKeepsTurns kills the node n (as a crash would) and starts
// it again under its name a second later, with the farm page open, and
// requires that the strip keeps every slot it showed polled before as
// polled by the same nodes, and that its only new gaps are slots within
// the outage: from the kill to the restarted node's first turns (and a
// rotation more, while the others learn of it). A restarted node that
// forgot the turns its previous incarnation wrote would show the slots
// that incarnation polled as slots nobody polled.
func requireRestartKeepsTurns(t *testing.T, b *browser, s *store.Store, n *node, environ []string) {
	t.Helper()
	const slot = 250 * time.Millisecond // SLOTPOLLER_ROTATION_SLOT
	type cell struct {
		Slot    int64  `json:"slot"`
		Pollers string `json:"pollers"`
		Gap     bool   `json:"gap"`
		Pending bool   `json:"pending"`
	}
	// strip reads the cells and the number of gaps the legend gives for
	// them, drawn together.
	strip := func() ([]cell, int) {
		var got struct {
			Cells  []cell `json:"cells"`
			Legend string `json:"legend"`
		}
		require.NoError(t, b.eval(`return {cells: [...document.querySelectorAll('#strip .cell')].map(c => ({slot: +c.dataset.slot,
  pollers: c.dataset.pollers, gap: !['polled', 'pending', 'before'].some(k => c.classList.contains(k)),
  pending: c.classList.contains('pending')})), legend: document.querySelector('#strip ~ .legend').innerText}`, &got))
		i := strings.Index(got.Legend, "gap (")
		require.GreaterOrEqual(t, i, 0, "the legend counts the gaps: %q", got.Legend)
		gaps, err := strconv.Atoi(got.Legend[i+5 : i+5+strings.IndexByte(got.Legend[i+5:], ')')])
		require.NoError(t, err, got.Legend)
		return got.Cells, gaps
	}
	b.waitFor("#strip .cell")
	first, _ := strip()
	before := map[int64]cell{}
	for _, c := range first {
		before[c.Slot] = c
	}
	registry := func() map[string]store.Node {
		nodes, _, err := s.Nodes(context.Background(), 3*time.Second)
		require.NoError(t, err)
		m := map[string]store.Node{}
		for _, x := range nodes {
			m[x.Name] = x
		}
		return m
	}
	old := registry()[n.name].Incarnation
	require.NoError(t, n.cmd.Process.Kill())
	_ = n.cmd.Wait()
	_, now, err := s.Nodes(context.Background(), 3*time.Second)
	require.NoError(t, err)
	killed := rotation.Slot(now, slot)
	time.Sleep(time.Second)
	startNode(t, environ, n.name)
	var back int64 // the slot the restarted node started in
	waitFor(t, 30*time.Second, n.name+" restarted and polling", func() bool {
		x := registry()[n.name]
		back = rotation.Slot(x.Started, slot)
		return x.Live && x.Incarnation != old && x.LastSeen.Sub(x.Started) > 4*slot
	})
	settled := back + 3 + 2 // a rotation of three nodes and two slots: every node knows it is back
	// The strip past the outage, and reported: no slot after it pending.
	b.waitJS("the strip past the restart", `const cells = [...document.querySelectorAll('#strip .cell')];
const last = cells.filter(c => !c.classList.contains('pending')).pop();
return !!last && +last.dataset.slot >= arguments[0]`, settled+4)
	after, shown := strip()
	var lost, gaps, strays []string
	missed := 0 // the gaps the strip may show: those it showed before, and slots of the outage nobody polled
	for _, c := range after {
		was, ok := before[c.Slot]
		for _, p := range strings.Fields(was.Pollers) {
			if !slices.Contains(strings.Fields(c.Pollers), p) {
				lost = append(lost, fmt.Sprintf("slot %d: polled by %q, now by %q", c.Slot, was.Pollers, c.Pollers))
				break
			}
		}
		inOutage := c.Slot >= killed-1 && c.Slot <= settled
		switch {
		case c.Gap && (ok && was.Gap || inOutage):
			missed++
		case c.Gap && (!ok || was.Pending):
			// Not reported at the first reading: a slot missed to a load
			// spike on a busy machine, as requireOwnersPolled allows.
			strays = append(strays, fmt.Sprintf("slot %d", c.Slot))
		case c.Gap:
			gaps = append(gaps, fmt.Sprintf("slot %d", c.Slot))
		}
	}
	if len(lost) > 0 || len(gaps) > 0 || len(strays) > 2 || shown > missed+len(strays) {
		t.Fatalf("%s killed in slot %d, back in slot %d: the legend counts %d gaps, for %d slots missed before or in the outage (to slot %d);\n"+
			"slots polled before and not now:\n%s\ngaps outside the outage: %s\nunpolled slots since the first reading, outside the outage (2 allowed): %s",
			n.name, killed, back, shown, missed, settled, strings.Join(lost, "\n"), strings.Join(gaps, ", "), strings.Join(strays, ", "))
	}
	t.Logf("restart of %s: killed in slot %d, back in slot %d; the strip shows %d gaps, %d slots missed", n.name, killed, back, shown, missed)
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
