package admin

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/nodetest"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/service"
	"github.com/stretchr/testify/require"
)

// These are integration tests: a real node on a real database, its admin
// endpoint on a real socket. Waits are generous; nothing asserts speed.

// storeNode is a node that does not run, on a store of the test's: enough
// for every route but those that need jobs run.
type storeNode struct {
	*service.Node
	s *store.Store
}

func (n storeNode) Store() *store.Store { return n.s }

// adminFamilies are the metric families /metrics must always show once the
// node is up and its database answers.
var adminFamilies = []string{
	"slotpoller_polls_total", "slotpoller_claims_total", "slotpoller_calls_total", "slotpoller_calls_cancelled_total",
	"slotpoller_call_duration_seconds", "slotpoller_offset_seconds", "slotpoller_offset_error_seconds",
	"slotpoller_slot_lag_seconds", "slotpoller_live_nodes", "slotpoller_lease_renewals_total",
	"slotpoller_leases_lost_total", "slotpoller_tasks_held", "slotpoller_task_calls_total",
	"slotpoller_task_failures_total", "slotpoller_task_leases_lost_total", "slotpoller_jobs", "slotpoller_jobs_count_cap",
	"slotpoller_statements_total", "slotpoller_calls_running", "slotpoller_capacity", "slotpoller_ready",
	"go_goroutines", "process_start_time_seconds",
}

// testConfig is a node with fast slots and heartbeats on db.
func testConfig(t testing.TB, db storetest.DB, name, baseURL string) config.Config {
	return nodetest.Config(t, db, name, baseURL)
}

// runningNode is a node running in the test.
type runningNode struct {
	n      *service.Node
	srv    *Server // its admin endpoint, served as cmd run serves it
	logs   *nodetest.Log
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func runNode(t *testing.T, cfg config.Config) *runningNode {
	t.Helper()
	logs := &nodetest.Log{}
	rn := &runningNode{n: service.NewNode(cfg, service.NewLogger(logs, config.LogConfig{Level: "debug", Format: "text"}), nil),
		logs: logs, done: make(chan error, 1)}
	rn.srv = NewServer(rn.n)
	rn.n.Serve(rn.srv)
	ctx, cancel := context.WithCancel(context.Background())
	rn.cancel = cancel
	go func() { rn.done <- rn.n.Run(ctx) }()
	t.Cleanup(func() {
		rn.stop(t)
		if t.Failed() {
			t.Logf("node log:\n%s", logs.String())
		}
	})
	return rn
}

// stop stops the node gracefully and checks that it stopped cleanly.
func (rn *runningNode) stop(t *testing.T) {
	t.Helper()
	rn.once.Do(func() {
		rn.cancel()
		select {
		case err := <-rn.done:
			require.NoError(t, err)
		case <-time.After(60 * time.Second):
			t.Fatal("the node did not stop")
		}
	})
}

// adminURL waits until the node's admin endpoint listens.
func (rn *runningNode) adminURL(t *testing.T) string {
	t.Helper()
	require.Eventually(t, func() bool { return rn.srv.Addr() != "" }, 30*time.Second, 20*time.Millisecond,
		"the admin endpoint should listen")
	return "http://" + rn.srv.Addr()
}

var httpClient = &http.Client{Timeout: 15 * time.Second}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := httpClient.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// scrape reads /metrics through the Prometheus text parser.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/plain")
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err, "/metrics must be valid Prometheus text format")
	return mfs
}

// metricValue is the value of the family's series with the given label
// pairs (name, value, ...): a counter's or gauge's value, a histogram's
// sample count.
func metricValue(mfs map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	mf, ok := mfs[name]
	if !ok {
		return 0, false
	}
series:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue series
			}
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
		return m.GetUntyped().GetValue(), true
	}
	return 0, false
}

// outage takes the database away from the node and gives it back.
type outage struct {
	// dsn is what the node connects with.
	dsn string
	// begin takes the database away; end gives it back.
	begin, end func()
	// reason is what /readyz must name while the database is away.
	reason string
}

// newOutage prepares an outage of db. For PostgreSQL and SQL Server the node
// reaches the database through a TCP proxy that the test cuts: the database
// goes away as it does when the network or the server fails. A SQLite file
// cannot go away from a process that holds it open (unlinking or chmod do
// not touch an open descriptor), so for SQLite another process takes the
// database's write lock and holds it: the node can no longer write its
// heartbeat nor have its single connection answer in time, as when a
// runaway process locks the file.
func newOutage(t *testing.T, db storetest.DB) outage {
	t.Helper()
	if db.Driver == "sqlite" {
		o := outage{dsn: db.DSN, reason: "checked in: no successful registry write"}
		var conn *sql.Conn
		var locker *store.Store
		o.begin = func() {
			ctx := context.Background()
			var err error
			locker, err = db.Open(ctx)
			require.NoError(t, err)
			conn, err = locker.DB().Conn(ctx)
			require.NoError(t, err)
			_, err = conn.ExecContext(ctx, "BEGIN EXCLUSIVE")
			require.NoError(t, err)
		}
		o.end = func() {
			_, err := conn.ExecContext(context.Background(), "ROLLBACK")
			require.NoError(t, err)
			require.NoError(t, conn.Close())
			require.NoError(t, locker.Close())
		}
		return o
	}
	if db.Driver == "mysql" {
		// user@tcp(host:port)/db?...: the address between the parentheses.
		head, rest, ok := strings.Cut(db.DSN, "tcp(")
		addr, tail, ok2 := strings.Cut(rest, ")")
		require.True(t, ok && ok2, "a MySQL DSN over TCP: %s", db.DSN)
		p := storetest.NewProxy(t, addr)
		return outage{dsn: head + "tcp(" + p.Addr + ")" + tail, begin: p.Cut, end: p.Restore, reason: "database: "}
	}
	u, err := url.Parse(db.DSN)
	require.NoError(t, err)
	require.NotEmpty(t, u.Host, "the %s DSN names a host", db.Driver)
	p := storetest.NewProxy(t, u.Host)
	u.Host = p.Addr
	return outage{dsn: u.String(), begin: p.Cut, end: p.Restore, reason: "database: "}
}

func TestAdminEndpoint(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		ctx := context.Background()
		s, db := storetest.OpenDB(t, driver)
		// Long enough for the lease renewals (every lease/3) to run while
		// the call is in flight.
		callTime := 800 * time.Millisecond
		if driver == "sqlserver" {
			callTime = 2500 * time.Millisecond // its lease is 6 s: renewals every 2 s
		}
		endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(callTime)
			w.WriteHeader(http.StatusOK)
		}))
		defer endpoint.Close()

		out := newOutage(t, db)
		nodeDB := db
		nodeDB.DSN = out.dsn
		cfg := testConfig(t, nodeDB, "admin-a", endpoint.URL)
		cfg.Admin.Listen = "127.0.0.1:0"
		rn := runNode(t, cfg)
		base := rn.adminURL(t)

		code, body := get(t, base+"/healthz")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "ok\n", body)

		require.Eventually(t, func() bool { code, _ := get(t, base+"/readyz"); return code == http.StatusOK },
			60*time.Second, 50*time.Millisecond, "/readyz should turn 200 once the node is checked in")

		id, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/metered", MaxAttempts: 1})
		require.NoError(t, err)
		var mfs map[string]*dto.MetricFamily
		require.Eventually(t, func() bool {
			mfs = scrape(t, base)
			polls, _ := metricValue(mfs, "slotpoller_polls_total")
			done, _ := metricValue(mfs, "slotpoller_jobs", "state", "done")
			calls, _ := metricValue(mfs, "slotpoller_calls_total", "result", "succeeded")
			timed, _ := metricValue(mfs, "slotpoller_call_duration_seconds")
			return polls >= 3 && done == 1 && calls == 1 && timed == 1
		}, 60*time.Second, 100*time.Millisecond, "the metrics should show the polls and the job's call")
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.StateDone, j.State)

		for _, name := range adminFamilies {
			require.Contains(t, mfs, name, "metric family %s", name)
		}
		for _, result := range []string{"succeeded", "retried", "failed", "dead", "released"} {
			_, ok := metricValue(mfs, "slotpoller_calls_total", "result", result)
			require.True(t, ok, "calls_total{result=%q}", result)
		}
		for _, state := range []string{"ready", "retrying", "running", "done", "failed", "dead", "cancelled", "missed"} {
			_, ok := metricValue(mfs, "slotpoller_jobs", "state", state)
			require.True(t, ok, "jobs{state=%q}", state)
		}
		hist := mfs["slotpoller_call_duration_seconds"].GetMetric()[0].GetHistogram()
		require.GreaterOrEqual(t, hist.GetSampleSum(), callTime.Seconds(), "the call took at least the endpoint's %v", callTime)
		claims, _ := metricValue(mfs, "slotpoller_claims_total")
		require.Equal(t, 1.0, claims)
		renewals, _ := metricValue(mfs, "slotpoller_lease_renewals_total")
		require.Positive(t, renewals, "the lease was renewed during the %v call", callTime)
		lagCount, _ := metricValue(mfs, "slotpoller_slot_lag_seconds")
		require.Positive(t, lagCount)
		live, _ := metricValue(mfs, "slotpoller_live_nodes")
		require.Equal(t, 1.0, live)
		ready, _ := metricValue(mfs, "slotpoller_ready")
		require.Equal(t, 1.0, ready)
		capacity, _ := metricValue(mfs, "slotpoller_capacity")
		require.Equal(t, 4.0, capacity)
		errBound, _ := metricValue(mfs, "slotpoller_offset_error_seconds")
		require.Positive(t, errBound)
		stmts, _ := metricValue(mfs, "slotpoller_statements_total")
		require.Positive(t, stmts)

		// /status is the JSON of `slotpoller status -json`.
		resp, err := httpClient.Get(base + "/status")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		var rep service.StatusReport
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&rep))
		resp.Body.Close()
		require.Len(t, rep.Nodes, 1)
		require.Equal(t, "admin-a", rep.Nodes[0].Name)
		require.True(t, rep.Nodes[0].Live)
		require.Equal(t, 1, rep.Jobs[store.StateDone])
		require.Positive(t, rep.SchemaVersion)

		// The database goes away: /readyz turns 503 and says why, while
		// /healthz and /metrics go on answering.
		out.begin()
		var why string
		require.Eventually(t, func() bool {
			code, body := get(t, base+"/readyz")
			why = body
			return code == http.StatusServiceUnavailable && strings.Contains(body, out.reason)
		}, 60*time.Second, 100*time.Millisecond, "/readyz should turn 503 naming %q", out.reason)
		require.True(t, strings.HasPrefix(why, "not ready\n"), why)
		t.Logf("/readyz while the database is away:\n%s", why)
		code, _ = get(t, base+"/healthz")
		require.Equal(t, http.StatusOK, code, "the process is still up")
		mfs = scrape(t, base)
		ready, _ = metricValue(mfs, "slotpoller_ready")
		require.Equal(t, 0.0, ready)

		// It comes back: ready again.
		out.end()
		require.Eventually(t, func() bool { code, _ := get(t, base+"/readyz"); return code == http.StatusOK },
			60*time.Second, 100*time.Millisecond, "/readyz should turn 200 again once the database is back")

		// A graceful stop closes the endpoint.
		rn.stop(t)
		require.Empty(t, rn.srv.Addr())
		_, err = httpClient.Get(base + "/healthz")
		require.Error(t, err, "the endpoint should be closed after the stop")
	})
}

// Before the node has a database, /readyz names every missing part and the
// other endpoints still answer.
func TestAdminEndpointBeforeTheDatabase(t *testing.T) {
	cfg := testConfig(t, storetest.DB{Driver: "sqlite", DSN: t.TempDir() + "/never-opened.db"}, "admin-b", "http://localhost")
	srv := httptest.NewServer(Handler(service.NewNode(cfg, service.NewLogger(io.Discard, cfg.Log), nil)))
	defer srv.Close()

	code, body := get(t, srv.URL+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)

	code, body = get(t, srv.URL+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not ready\ndatabase: not connected yet\nclock offset: not measured yet\nchecked in: not yet\n", body)

	code, _ = get(t, srv.URL+"/status")
	require.Equal(t, http.StatusServiceUnavailable, code)

	mfs := scrape(t, srv.URL)
	polls, ok := metricValue(mfs, "slotpoller_polls_total")
	require.True(t, ok)
	require.Zero(t, polls)
	require.NotContains(t, mfs, "slotpoller_offset_seconds", "no offset before it is measured")
	require.NotContains(t, mfs, "slotpoller_jobs", "no job counts without a database")
	ready, _ := metricValue(mfs, "slotpoller_ready")
	require.Zero(t, ready)

	code, _ = get(t, srv.URL+"/nothing-here")
	require.Equal(t, http.StatusNotFound, code)
}

// The admin endpoint is off unless admin.listen is set.
func TestAdminEndpointOffByDefault(t *testing.T) {
	_, db := storetest.OpenDB(t, "sqlite")
	cfg := testConfig(t, db, "admin-c", "http://localhost")
	require.Empty(t, cfg.Admin.Listen)
	rn := runNode(t, cfg)
	require.Eventually(t, func() bool { return rn.n.Stats().Jobs.Polls >= 3 }, 60*time.Second, 20*time.Millisecond)
	require.Empty(t, rn.srv.Addr())
	require.NotContains(t, rn.logs.String(), "admin endpoint")
}

// A taken port does not stop the node: it logs the failure, runs on, and
// listens once the port is free.
func TestAdminEndpointPortInUse(t *testing.T) {
	_, db := storetest.OpenDB(t, "sqlite")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := taken.Addr().String()
	cfg := testConfig(t, db, "admin-d", "http://localhost")
	cfg.Admin.Listen = addr
	rn := runNode(t, cfg)

	require.Eventually(t, func() bool {
		return strings.Contains(rn.logs.String(), "could not listen on admin.listen")
	}, 60*time.Second, 20*time.Millisecond, "the failure to listen should be logged")
	require.Eventually(t, func() bool { return rn.n.Stats().Jobs.Polls >= 3 }, 60*time.Second, 20*time.Millisecond,
		"the node should work without its admin endpoint")
	require.Empty(t, rn.srv.Addr())

	require.NoError(t, taken.Close())
	require.Eventually(t, func() bool { return rn.srv.Addr() == addr }, 60*time.Second, 20*time.Millisecond,
		"the endpoint should listen once the port is free")
	code, _ := get(t, "http://"+addr+"/healthz")
	require.Equal(t, http.StatusOK, code)
}
