package service

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/slotpoller/slotpoller/clocksync"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
)

// metricPrefix starts the name of every slotpoller metric.
const metricPrefix = "slotpoller_"

// jobsScrapeTimeout bounds the job count query a scrape makes: a scrape
// must answer even while the database does not.
const jobsScrapeTimeout = 2 * time.Second

// JobCountCap is where the job counts of /metrics and status stop: each
// state's count reads at most this many index entries, whatever the size
// of the table.
const JobCountCap = 10000

// metrics is a node's Prometheus instrumentation, on a registry of the
// node's own (never the default registry: a process may run several nodes,
// as the benchmark does). Counters are read from the parts' own counters
// at scrape time; only the histograms are fed as things happen.
type metrics struct {
	reg *prometheus.Registry
	// callDuration is fed by the runner's OnCall hook.
	callDuration prometheus.Histogram
	// slotLag is fed by the poll loop.
	slotLag prometheus.Histogram
	// pruned is fed by the slot owner's retention turns.
	pruned *prometheus.CounterVec
	// startDelay is fed by the runner's OnStart hook, per queue.
	startDelay *queueHistogram
	// collectors are everything registered on reg: the families a
	// dashboard may name (docs/grafana-dashboard.json).
	collectors []prometheus.Collector
}

// maxStartDelayQueues bounds the queues the start delay histogram has a
// series of: the jobs of the queues past it, in the order this node first
// started one, are observed under otherQueues. Queue names come from
// enqueuers, and each series is a dozen buckets on every scrape.
const maxStartDelayQueues = 100

// otherQueues is the queue label of the jobs past maxStartDelayQueues: a
// % is no queue's name.
const otherQueues = "%other"

// queueHistogram is a histogram per queue, with at most maxStartDelayQueues
// queues.
type queueHistogram struct {
	vec  *prometheus.HistogramVec
	mu   sync.Mutex
	seen map[string]prometheus.Observer
}

// observe records v under queue, or under otherQueues past the bound.
func (h *queueHistogram) observe(queue string, v float64) {
	h.mu.Lock()
	o, ok := h.seen[queue]
	if !ok {
		label := queue
		if len(h.seen) >= maxStartDelayQueues {
			label = otherQueues
		}
		o = h.vec.WithLabelValues(label)
		if label == queue {
			h.seen[queue] = o
		}
	}
	h.mu.Unlock()
	o.Observe(v)
}

func newMetrics(n *Node) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		callDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    metricPrefix + "call_duration_seconds",
			Help:    "How long job endpoint calls took, from sending the request to the end of the response (or the timeout, error or cancellation).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}),
		slotLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    metricPrefix + "slot_lag_seconds",
			Help:    "How late after the start of its turn, in database time, the node polled (guard band and schedule writing included).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		pruned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "retention_deleted_total",
			Help: "Rows this node deleted past their retention: finished jobs (jobs.retention_*) and departed nodes (checkin.retention).",
		}, []string{"table"}),
	}
	m.startDelay = &queueHistogram{seen: map[string]prometheus.Observer{}, vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: metricPrefix + "job_start_delay_seconds",
		Help: "How late after its run time this node started each job it claimed: the node's estimate of the database clock at the claim " +
			"minus the job's run time. A queue beyond the first " + fmt.Sprint(maxStartDelayQueues) + " this node started jobs of counts as queue=\"" + otherQueues + "\".",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
	}, []string{"queue"})}
	m.collectors = []prometheus.Collector{m.callDuration, m.slotLag, m.pruned, m.startDelay.vec, &nodeCollector{n: n},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
	m.reg.MustRegister(m.collectors...)
	return m
}

// Metrics is the node's Prometheus registry, which the admin endpoint
// serves at /metrics. Nothing else is registered on it.
func (n *Node) Metrics() prometheus.Gatherer { return n.metrics.reg }

// observeCall is the runner's OnCall hook.
func (m *metrics) observeCall(_ jobs.Verdict, d time.Duration) {
	m.callDuration.Observe(d.Seconds())
}

// onStart is the runner's OnStart hook: it observes how late the job
// started, by est's reading of the database clock now (the claim has just
// returned) against the job's run time, a database time. Before the first
// measurement of the clock nothing is observed.
func (m *metrics) onStart(est *clocksync.Estimator) func(store.Claim) {
	return func(c store.Claim) {
		now, _, ok := est.Now()
		if !ok {
			return
		}
		m.startDelay.observe(c.Queue, max(0, now.Sub(c.RunAt)).Seconds())
	}
}

// observeSlotLag records how late a poll came after its turn began.
func (m *metrics) observeSlotLag(lag time.Duration) {
	m.slotLag.Observe(max(0, lag).Seconds())
}

// observePrune counts what a retention turn deleted.
func (m *metrics) observePrune(r jobs.PruneResult) {
	if r.Jobs > 0 {
		m.pruned.WithLabelValues("jobs").Add(float64(r.Jobs))
	}
	if r.Nodes > 0 {
		m.pruned.WithLabelValues("nodes").Add(float64(r.Nodes))
	}
	if r.Audit > 0 {
		m.pruned.WithLabelValues("audit").Add(float64(r.Audit))
	}
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(metricPrefix+name, help, labels, nil)
}

var (
	descPolls  = desc("polls_total", "Polls the node made in its rotation turns.")
	descClaims = desc("claims_total", "Jobs the node claimed.")
	descCalls  = desc("calls_total", "Job calls by how their result was recorded: succeeded; retried (runs again after a back-off); "+
		"failed (will not be retried); dead (out of attempts); released (given back unrun, at a stop or as an orphaned claim).", "result")
	descCancelled    = desc("calls_cancelled_total", "Job calls cut off because their lease was lost or could not be confirmed in time.")
	descRenewals     = desc("lease_renewals_total", "Successful job lease renewals (one statement renews every running job of the node).")
	descLeasesLost   = desc("leases_lost_total", "Job results not recorded because the job's lease was lost: the farm had reclaimed the job.")
	descRunning      = desc("calls_running", "Job calls in flight.")
	descCapacity     = desc("capacity", "Concurrent job calls the node takes (node.capacity).")
	descTasksHeld    = desc("tasks_held", "Endless tasks this node is working.")
	descTaskCalls    = desc("task_calls_total", "Task endpoint calls.")
	descTaskFailures = desc("task_failures_total", "Task endpoint calls that failed.")
	descTaskLost     = desc("task_leases_lost_total", "Tasks this node found it had lost to another node at a renewal.")
	descStatements   = desc("statements_total", "Statements the node sent to the database (scrapes of this endpoint included).")
	descOffset       = desc("offset_seconds", "Database clock minus this node's clock, as last measured; absent until measured.")
	descOffsetError  = desc("offset_error_seconds", "Error bound of offset_seconds (half the round trip of the best sample, plus half the database clock's tick).")
	descLiveNodes    = desc("live_nodes", "Live nodes in the farm as this node last read the registry; 0 while its reading is older than the TTL.")
	descJobs         = desc("jobs", "Jobs in the database by state, counted at scrape time up to slotpoller_jobs_count_cap (a value at the cap means at least that many); "+
		"retrying counts the ready jobs backing off after a failed attempt (also in ready). Absent when the database did not answer in time.", "state")
	descJobsCap      = desc("jobs_count_cap", "Where each state's count in slotpoller_jobs stops, so that a scrape costs the same whatever the size of the table.")
	descQueuePaused  = desc("queue_paused", "1 while the queue is paused (its jobs are not started), else 0; read at scrape time with the queues' jobs.", "queue")
	descQueueWaiting = desc("queue_waiting", "Jobs of the queue that are ready and due now (a paused queue's wait for its resume).", "queue")
	descQueueRunning = desc("queue_running", "Jobs of the queue that a node is calling.", "queue")
	descQueuePrio    = desc("queue_priority", "The queue's priority (queues[].priority): a node claims higher first. Absent for a queue at 0 without settings.", "queue")
	descQueueLimit   = desc("queue_limit", "The most of the queue's jobs running across the farm (queues[].limit); absent without one.", "queue")
	descQueueNodeLim = desc("queue_node_limit", "The most of the queue's jobs running on one node (queues[].node_limit); absent without one.", "queue")
	descQueueRate    = desc("queue_rate_limit", "The most of the queue's jobs started per rate period (queues[].rate); absent without one.", "queue")
	descQueuePeriod  = desc("queue_rate_period_seconds", "The queue's rate period: its rate is counted in fixed windows of this length on the database clock.", "queue")
	descQueueRateUse = desc("queue_rate_used", "Jobs of the queue started in the current rate window (of the database clock); absent without a rate.", "queue")
	descReady        = desc("ready", "1 when /readyz answers 200: the database answers, the clock offset is known and the node is checked in; else 0.")
)

// nodeCollector reads a node's counters and state at scrape time.
type nodeCollector struct{ n *Node }

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPolls, descClaims, descCalls, descCancelled, descRenewals, descLeasesLost,
		descRunning, descCapacity, descTasksHeld, descTaskCalls, descTaskFailures, descTaskLost, descStatements,
		descOffset, descOffsetError, descLiveNodes, descJobs, descJobsCap, descReady,
		descQueuePaused, descQueueWaiting, descQueueRunning, descQueuePrio, descQueueLimit, descQueueNodeLim, descQueueRate,
		descQueuePeriod, descQueueRateUse} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	st := n.Stats()
	p := n.parts()
	counter(descPolls, st.Jobs.Polls)
	counter(descClaims, st.Jobs.Claimed)
	counter(descCalls, st.Jobs.Succeeded, "succeeded")
	counter(descCalls, st.Jobs.Retried, "retried")
	counter(descCalls, st.Jobs.Failed, "failed")
	counter(descCalls, st.Jobs.Dead, "dead")
	counter(descCalls, st.Jobs.Released, "released")
	counter(descCancelled, st.Jobs.Cancelled)
	counter(descRenewals, st.Jobs.Renewals)
	counter(descLeasesLost, st.Jobs.LeasesLost)
	running := 0
	if p.runner != nil {
		running = p.runner.Running()
	}
	gauge(descRunning, float64(running))
	gauge(descCapacity, float64(n.cfg.Node.Capacity))
	gauge(descTasksHeld, float64(st.Tasks.Held))
	counter(descTaskCalls, st.Tasks.Calls)
	counter(descTaskFailures, st.Tasks.Failures)
	counter(descTaskLost, st.Tasks.Lost)
	counter(descStatements, st.Statements)
	if p.est != nil {
		if e, ok := p.est.Current(); ok {
			gauge(descOffset, e.Offset.Seconds())
			gauge(descOffsetError, e.Error.Seconds())
		}
	}
	live := 0
	if p.reg != nil {
		live = len(p.reg.Membership().Members)
	}
	gauge(descLiveNodes, float64(live))
	ready := 0.0
	if len(n.NotReady()) == 0 {
		ready = 1
	}
	gauge(descReady, ready)

	if p.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), jobsScrapeTimeout)
	defer cancel()
	tally, err := p.store.JobCountsCapped(ctx, JobCountCap)
	if err != nil {
		n.log.Debug("metrics: jobs by state left out: the database did not answer", "err", n.maskDSN(err.Error()))
		return
	}
	gauge(descJobsCap, JobCountCap)
	for _, s := range store.CountStates {
		gauge(descJobs, float64(tally.Counts[s]), s)
	}
	// One read of the queues a scrape, under the same deadline, bounded as
	// the counts are: the per-queue read passes over every ready and
	// running row, so past the cap (the counts above say so) a scrape
	// reads only the paused queues and those with settings, a few rows of
	// the queues table, and leaves the waiting and running gauges out.
	full := !tally.AtCap(store.StateReady) && !tally.AtCap(store.StateRunning)
	read := p.store.QueuesHeld
	if full {
		read = p.store.Queues
	}
	qs, err := read(ctx)
	if err != nil {
		n.log.Debug("metrics: queues left out: the database did not answer", "err", n.maskDSN(err.Error()))
		return
	}
	for _, q := range qs {
		paused := 0.0
		if q.Paused {
			paused = 1
		}
		gauge(descQueuePaused, paused, q.Name)
		if full {
			gauge(descQueueWaiting, float64(q.Waiting), q.Name)
			gauge(descQueueRunning, float64(q.Running), q.Name)
		}
		queueSettingGauges(gauge, q)
	}
}

// queueSettingGauges are q's settings as gauges, each only when set.
func queueSettingGauges(gauge func(*prometheus.Desc, float64, ...string), q store.QueueState) {
	if q.Priority != 0 || q.Limited() {
		gauge(descQueuePrio, float64(q.Priority), q.Name)
	}
	if q.Limit > 0 {
		gauge(descQueueLimit, float64(q.Limit), q.Name)
	}
	if q.NodeLimit > 0 {
		gauge(descQueueNodeLim, float64(q.NodeLimit), q.Name)
	}
	if q.Rate > 0 {
		gauge(descQueueRate, float64(q.Rate), q.Name)
		gauge(descQueuePeriod, q.RatePeriod.Seconds(), q.Name)
		gauge(descQueueRateUse, float64(q.RateUsed), q.Name)
	}
}
