package admin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/service"
	"github.com/stretchr/testify/require"
)

// The queue routes of the API on a running node: a paused queue's job
// waits (neither started by its enqueue nor claimed by a poll), and runs
// once resumed; the node's config routes a job to its queue.
func TestAPIQueues(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, db := storetest.OpenDB(t, driver)
		_, epURL := newEndpoints(t)
		cfg := testConfig(t, db, "api-q", epURL)
		cfg.Queues = []config.QueueConfig{{Name: "reports", Endpoints: []string{"/reports/*"}}}
		rn := runNode(t, cfg)
		srv := httptest.NewServer(Handler(rn.n))
		t.Cleanup(srv.Close)
		base := srv.URL
		require.Eventually(t, func() bool { return callAPI(t, base, getReq("/api/v1/queues")).status == http.StatusOK },
			30*time.Second, 20*time.Millisecond, "the API answers once the node has its database")
		require.Eventually(t, func() bool { rs, err := s.QueueRoutes(context.Background()); return err == nil && len(rs) == 1 },
			30*time.Second, 20*time.Millisecond, "the node writes its config's routes once checked in")

		r := must(t, base, http.StatusOK, post("/api/v1/queues/reports/pause", ""))
		require.Equal(t, map[string]any{"name": "reports", "paused": true}, r.body)
		routed := idOf(t, must(t, base, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/reports/daily"}`)))
		named := idOf(t, must(t, base, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/other","queue":"reports"}`)))
		free := idOf(t, must(t, base, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/free"}`)))
		waitState(t, base, free, "done")
		job := must(t, base, http.StatusOK, getReq("/api/v1/jobs/"+itoa(routed))).body
		require.Equal(t, "reports", job["queue"], "routed by the node's config")
		require.Equal(t, "default", must(t, base, http.StatusOK, getReq("/api/v1/jobs/"+itoa(free))).body["queue"])

		// Several turns of the node pass: the paused jobs still wait.
		polls := rn.n.LocalRunner().Stats().Polls
		require.Eventually(t, func() bool { return rn.n.LocalRunner().Stats().Polls >= polls+3 }, 30*time.Second, 10*time.Millisecond)
		require.Equal(t, "ready", jobState(t, base, routed))
		require.Equal(t, "ready", jobState(t, base, named))

		qs := must(t, base, http.StatusOK, getReq("/api/v1/queues")).body["queues"].([]any)
		require.Len(t, qs, 1)
		q := qs[0].(map[string]any)
		require.Equal(t, "reports", q["name"])
		require.Equal(t, true, q["paused"])
		require.Equal(t, "api@api-q", q["paused_by"], "the actor is recorded")
		require.NotEmpty(t, q["paused_at"])
		require.EqualValues(t, 2, q["waiting"])

		// The metrics say so too, from the same read.
		metrics := callAPI(t, base, getReq("/metrics"))
		require.Equal(t, http.StatusOK, metrics.status)
		require.Contains(t, metrics.raw, `slotpoller_queue_paused{queue="reports"} 1`)
		require.Contains(t, metrics.raw, `slotpoller_queue_waiting{queue="reports"} 2`)
		require.Contains(t, metrics.raw, `slotpoller_queue_running{queue="reports"} 0`)

		must(t, base, http.StatusOK, post("/api/v1/queues/reports/resume", "{}"))
		waitState(t, base, routed, "done")
		waitState(t, base, named, "done")

		// Cancel the queue: its running calls are cut off by the node and
		// end cancelled; with waiting, its waiting job is cancelled at once.
		slow1 := idOf(t, must(t, base, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/slow","queue":"reports"}`)))
		slow2 := idOf(t, must(t, base, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/slow","queue":"reports"}`)))
		later := idOf(t, must(t, base, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/reports/later","delay":"1h"}`)))
		elsewhere := idOf(t, must(t, base, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/other","delay":"1h"}`)))
		waitState(t, base, slow1, "running")
		waitState(t, base, slow2, "running")
		r = must(t, base, http.StatusAccepted, post("/api/v1/queues/reports/cancel", `{"waiting":true}`))
		require.Equal(t, map[string]any{"name": "reports", "requested": float64(2), "cancelled": float64(1)}, r.body)
		require.Equal(t, "cancelled", jobState(t, base, later))
		require.Equal(t, "ready", jobState(t, base, elsewhere), "another queue's job waits on")
		for _, id := range []int64{slow1, slow2} {
			waitState(t, base, id, "cancelled")
			job := must(t, base, http.StatusOK, getReq("/api/v1/jobs/"+itoa(id))).body
			require.Equal(t, "cancelled by api@api-q while running", job["last_error"], "the actor is recorded")
		}
		r = must(t, base, http.StatusAccepted, post("/api/v1/queues/reports/cancel", ""))
		require.Equal(t, map[string]any{"name": "reports", "requested": float64(0), "cancelled": float64(0)}, r.body)
		e := must(t, base, http.StatusBadRequest, post("/api/v1/queues/reports/cancel", `{"waiting":"yes"}`)).err()
		require.Equal(t, "wrong_type", e["code"])
		must(t, base, http.StatusBadRequest, post("/api/v1/queues/reports/cancel", `{"running":true}`))
		must(t, base, http.StatusMethodNotAllowed, getReq("/api/v1/queues/reports/cancel"))

		e = must(t, base, http.StatusBadRequest, post("/api/v1/queues/%20x/pause", "")).err()
		require.Contains(t, e["message"], "queue name")
		must(t, base, http.StatusMethodNotAllowed, getReq("/api/v1/queues/reports/pause"))
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Past the job counts' cap a scrape reads only the paused queues and those
// with settings: the paused and settings gauges stay, the waiting and running gauges (a pass over every
// ready and running row) are left out, so a scrape's cost stays bounded
// whatever the backlog.
func TestMetricsQueuesPastTheCap(t *testing.T) {
	s, db := storetest.OpenDB(t, "sqlite")
	_, epURL := newEndpoints(t)
	cfg := testConfig(t, db, "api-cap", epURL)
	cfg.Queues = []config.QueueConfig{{Name: "limited", Limit: 2}}
	rn := runNode(t, cfg)
	srv := httptest.NewServer(Handler(rn.n))
	t.Cleanup(srv.Close)
	base := srv.URL
	require.Eventually(t, func() bool { return callAPI(t, base, getReq("/api/v1/queues")).status == http.StatusOK },
		30*time.Second, 20*time.Millisecond, "the API answers once the node has its database")
	require.Eventually(t, func() bool { qs, err := s.QueuesHeld(context.Background()); return err == nil && len(qs) == 1 },
		30*time.Second, 20*time.Millisecond, "the node writes its config's queue settings at start")
	must(t, base, http.StatusOK, post("/api/v1/queues/reports/pause", ""))
	must(t, base, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/later","queue":"bulk","delay":"1h"}`))

	scrape := func() string {
		m := callAPI(t, base, getReq("/metrics"))
		require.Equal(t, http.StatusOK, m.status)
		return m.raw
	}
	raw := scrape()
	require.Contains(t, raw, `slotpoller_queue_paused{queue="reports"} 1`)
	require.Contains(t, raw, `slotpoller_queue_waiting{queue="bulk"} 0`, "under the cap, every queue is read")
	require.Contains(t, raw, `slotpoller_queue_limit{queue="limited"} 2`)

	c, err := client.New(s.DB(), s.Driver())
	require.NoError(t, err)
	batch := make([]client.Job, service.JobCountCap)
	for i := range batch {
		batch[i] = client.Job{Endpoint: "/later", Queue: "bulk", Delay: time.Hour}
	}
	_, err = c.EnqueueMany(context.Background(), batch)
	require.NoError(t, err)

	raw = scrape()
	require.Contains(t, raw, `slotpoller_jobs{state="ready"} `+strconv.Itoa(service.JobCountCap), "the ready count is at its cap")
	require.Contains(t, raw, `slotpoller_queue_paused{queue="reports"} 1`, "the paused queues are still read")
	require.Contains(t, raw, `slotpoller_queue_limit{queue="limited"} 2`, "and those with settings")
	require.Contains(t, raw, `slotpoller_queue_paused{queue="limited"} 0`)
	require.NotContains(t, raw, `slotpoller_queue_waiting`, "past the cap the per-queue pass is left out")
	require.NotContains(t, raw, `slotpoller_queue_running`)
}

// A queue's limits, rate and start delays through the API and the
// metrics of a running node: a queue limited to one running job, with
// three slow jobs, runs one while two wait; each start counts in the rate
// window and in the node's start delay histogram.
func TestAPIQueueLimits(t *testing.T) {
	s, db := storetest.OpenDB(t, "sqlite")
	ep, epURL := newEndpoints(t)
	cfg := testConfig(t, db, "api-lim", epURL)
	cfg.Queues = []config.QueueConfig{{Name: "reports", Priority: 7, Limit: 1, NodeLimit: 1, Rate: "100/1h"}}
	rn := runNode(t, cfg)
	srv := httptest.NewServer(Handler(rn.n))
	t.Cleanup(srv.Close)
	base := srv.URL
	require.Eventually(t, func() bool {
		qs, err := s.QueuesHeld(context.Background())
		return err == nil && len(qs) == 1 && qs[0].Limit == 1
	}, 30*time.Second, 20*time.Millisecond, "the node writes its config's queue settings at start")
	var ids []int64
	for range 3 {
		ids = append(ids, idOf(t, must(t, base, http.StatusCreated, post("/api/v1/jobs", `{"endpoint":"/slow","queue":"reports"}`))))
	}
	queue := func() map[string]any {
		qs := must(t, base, http.StatusOK, getReq("/api/v1/queues")).body["queues"].([]any)
		require.Len(t, qs, 1)
		return qs[0].(map[string]any)
	}
	require.Eventually(t, func() bool { q := queue(); return q["running"] == float64(1) }, 30*time.Second, 20*time.Millisecond)
	// Several turns pass: the limit holds the other two.
	polls := rn.n.LocalRunner().Stats().Polls
	require.Eventually(t, func() bool { return rn.n.LocalRunner().Stats().Polls >= polls+3 }, 30*time.Second, 10*time.Millisecond)
	q := queue()
	require.Equal(t, "reports", q["name"])
	require.EqualValues(t, 1, q["running"])
	require.EqualValues(t, 2, q["waiting"])
	require.EqualValues(t, 7, q["priority"])
	require.EqualValues(t, 1, q["limit"])
	require.EqualValues(t, 1, q["node_limit"])
	require.Equal(t, map[string]any{"limit": float64(100), "period_ms": float64(3600000), "used": float64(1)}, q["rate"])
	delay := q["start_delay"].(map[string]any)
	require.EqualValues(t, 1, delay["jobs"], "the running job")
	require.EqualValues(t, 300000, delay["within_ms"])
	require.Less(t, delay["p99_ms"].(float64), float64(10000))

	raw := callAPI(t, base, getReq("/metrics")).raw
	for _, line := range []string{`slotpoller_queue_limit{queue="reports"} 1`, `slotpoller_queue_node_limit{queue="reports"} 1`,
		`slotpoller_queue_priority{queue="reports"} 7`, `slotpoller_queue_rate_limit{queue="reports"} 100`,
		`slotpoller_queue_rate_period_seconds{queue="reports"} 3600`, `slotpoller_queue_rate_used{queue="reports"} 1`,
		`slotpoller_queue_running{queue="reports"} 1`, `slotpoller_job_start_delay_seconds_count{queue="reports"} 1`} {
		require.Contains(t, raw, line)
	}
	require.NotContains(t, raw, `slotpoller_queue_limit{queue="default"}`, "a queue without a limit has no limit gauge")

	ep.releaseSlow()
	for _, id := range ids {
		waitState(t, base, id, "done")
	}
	q = queue()
	require.EqualValues(t, 3, q["rate"].(map[string]any)["used"], "three starts in the hour's window")
	require.EqualValues(t, 3, q["start_delay"].(map[string]any)["jobs"], "the three done")
	raw = callAPI(t, base, getReq("/metrics")).raw
	require.Contains(t, raw, `slotpoller_job_start_delay_seconds_count{queue="reports"} 3`)
}
