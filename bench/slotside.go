package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/slotpoller/slotpoller/admin"
	"github.com/slotpoller/slotpoller/bench/benchkit"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/jobs"
	dbschema "github.com/slotpoller/slotpoller/schema"
)

// slotSide is slotpoller's side of the River comparison: in-process nodes
// wired as `slotpoller run` wires them (service.NewNode).
type slotSide struct {
	name   string
	logger *slog.Logger
	// queues spreads the jobs round robin over this many queues (q0, q1,
	// …) instead of the default one; with limited, each gets limits
	// (queueLimits) that send its jobs through the managed claim.
	queues  int
	limited bool
}

// queueLimits are the settings of the limited side's queues: a farm-wide
// limit and a node limit of twice their share of the farm's calls, so that
// the claim counts and holds back under them but the limits leave room
// for every call the farm can make, and the burn-down measures the claim's
// cost rather than a queue waiting for room.
func queueLimits(queues int, spec benchkit.Spec) []store.QueueSettings {
	share := func(calls int) int { return (2*calls + queues - 1) / queues }
	out := make([]store.QueueSettings, queues)
	for i := range out {
		out[i] = store.QueueSettings{Name: queueName(i), Limit: share(spec.Nodes * spec.Concurrency), NodeLimit: share(spec.Concurrency)}
	}
	return out
}

func queueName(i int) string { return "q" + strconv.Itoa(i) }

func (s slotSide) Name() string  { return s.name }
func (s slotSide) Slotted() bool { return true }

func (s slotSide) Migrate(ctx context.Context, db *benchkit.Database) error {
	st, err := open.Store(ctx, db.Driver, db.FeederDSN)
	if err != nil {
		return err
	}
	defer st.Close()
	_, err = dbschema.Migrate(ctx, st)
	return err
}

type slotFarm struct {
	*farm
	feeder *store.Store
	// apis serve each node's admin handler: a job enqueued alone goes
	// through a node's own API, as an application on that node would
	// send it, round robin over the nodes.
	apis []*httptest.Server
	next atomic.Int64
	// queues is slotSide.queues; seq numbers the jobs enqueued one by one
	// to spread them over the queues.
	queues int
	seq    atomic.Int64
}

// queue is the queue of the i-th job: "" (the default) without queues.
func (f *slotFarm) queue(i int) string {
	if f.queues == 0 {
		return ""
	}
	return queueName(i % f.queues)
}

func (s slotSide) Start(ctx context.Context, db *benchkit.Database, spec benchkit.Spec) (benchkit.Farm, error) {
	feeder, err := open.Store(ctx, db.Driver, db.FeederDSN)
	if err != nil {
		return nil, err
	}
	var cfgs []config.Config
	for _, name := range nodeNames(spec.Nodes) {
		c := nodeConfig(options{slot: spec.Slot}, db.FarmDSN, name)
		c.Database.Driver = db.Driver
		c.Node.Capacity = spec.Concurrency
		c.Jobs.BaseURL = spec.Endpoint
		cfgs = append(cfgs, c)
	}
	f, err := startFarm(cfgs, s.logger)
	if err != nil {
		feeder.Close()
		return nil, err
	}
	sf := &slotFarm{farm: f, feeder: feeder, queues: s.queues}
	for _, n := range f.nodes {
		sf.apis = append(sf.apis, httptest.NewServer(admin.Handler(n)))
	}
	if err := f.waitLive(ctx, feeder, time.Duration(cfgs[0].Checkin.TTL)); err != nil {
		_ = sf.Stop(ctx)
		return nil, err
	}
	// Written by the feeder, as a node writes its config's at start (and
	// after the nodes' start, which may write theirs), so not counted.
	if s.limited {
		if err := feeder.QueueSettingsPut(ctx, queueLimits(s.queues, spec)); err != nil {
			_ = sf.Stop(ctx)
			return nil, err
		}
	}
	// One heartbeat for every node to see the whole farm.
	if err := benchkit.Sleep(ctx, spec.Slot); err != nil {
		_ = sf.Stop(ctx)
		return nil, err
	}
	return sf, nil
}

// PrepareBurst checks the jobs; release enqueues them all due now in one
// transaction (store.JobInsertMany, as River's side inserts its burst in
// one statement), so that both sides start from rows freshly written. (The
// burst used to be enqueued an hour ahead and released by an UPDATE of
// every row, which left a dead version of each in the table and its
// indexes for slotpoller's side alone to step over.)
func (f *slotFarm) PrepareBurst(ctx context.Context, keys []string) (func(context.Context) error, error) {
	burst := make([]store.NewJob, len(keys))
	for i, key := range keys {
		burst[i] = store.NewJob{Endpoint: "/job/" + key, Method: "POST", MaxAttempts: 1, Queue: f.queue(i)}
		if err := jobs.CheckNewJob(&burst[i]); err != nil {
			return nil, err
		}
	}
	return func(ctx context.Context) error {
		_, err := f.feeder.JobInsertMany(ctx, burst)
		return err
	}, nil
}

// Enqueue sends one job through a node's own API (POST /api/v1/jobs, the
// local fast path: a node with room inserts it already claimed and calls
// it at once), and several through jobs.Enqueue from the feeder, once per
// job from 8 connections.
func (f *slotFarm) Enqueue(ctx context.Context, keys []string) error {
	if len(keys) == 1 {
		return f.enqueueLocal(ctx, keys[0])
	}
	// Several at once go as the application's batch door writes them
	// (client.EnqueueMany): multi-row inserts in one transaction, as
	// River's InsertMany does on its side.
	// Each checked as the client checks it, which gives it its own
	// idempotency key: jobs written with none (which no door writes)
	// share one key in the hash index on keys, where each insert walks
	// the whole bucket of the equal keys before it.
	js := make([]store.NewJob, len(keys))
	for i, k := range keys {
		js[i] = store.NewJob{Endpoint: "/job/" + k, Method: "POST", MaxAttempts: 1, Queue: f.queue(int(f.seq.Add(1)))}
		if err := jobs.CheckNewJob(&js[i]); err != nil {
			return err
		}
	}
	_, err := f.feeder.JobInsertMany(ctx, js)
	return err
}

func (f *slotFarm) enqueueLocal(ctx context.Context, key string) error {
	api := f.apis[int(f.next.Add(1))%len(f.apis)]
	body := `{"endpoint":"/job/` + key + `","method":"POST","max_attempts":1,"queue":"` + f.queue(int(f.seq.Add(1))) + `"}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/api/v1/jobs", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := api.Client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 500))
		return fmt.Errorf("node API answered %s: %s", resp.Status, msg)
	}
	return nil
}

// EnqueueByApp enqueues one job as the application does, through the Go
// client's insert (the store, on the feeder's connections), not through a
// node: the farm hears of it by a note on PostgreSQL, at its next turn
// elsewhere.
func (f *slotFarm) EnqueueByApp(ctx context.Context, key string) error { return f.enqueue(ctx, key, 0) }

func (f *slotFarm) enqueue(ctx context.Context, key string, delay time.Duration) error {
	j := store.NewJob{Endpoint: "/job/" + key, Method: "POST", Delay: delay, MaxAttempts: 1, Queue: f.queue(int(f.seq.Add(1)))}
	_, err := jobs.Enqueue(ctx, f.feeder, j)
	return err
}

func (f *slotFarm) Finished(ctx context.Context) (int, error) {
	var n int
	err := f.feeder.DB().QueryRowContext(ctx, "SELECT count(*) FROM slotpoller_jobs WHERE state = 'done'").Scan(&n)
	return n, err
}

func (f *slotFarm) Stop(context.Context) error {
	for _, api := range f.apis {
		api.Close()
	}
	err := f.farm.stop()
	f.feeder.Close()
	if err != nil {
		return fmt.Errorf("slotpoller farm: %w", err)
	}
	return nil
}
