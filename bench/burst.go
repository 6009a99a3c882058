package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/slotpoller/slotpoller/bench/benchkit"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/rotation"
	"github.com/slotpoller/slotpoller/service"
)

// Scenario B: burst

type jobRow struct {
	run, started, finished time.Time
	node                   string
}

type burstResult struct {
	names      []string
	jobs       int
	enqueue    time.Duration // wall time to enqueue all jobs
	lead       time.Duration // database time left before run_at when enqueueing ended
	runAt      time.Time
	counts     map[string]int
	rows       []jobRow
	stats      []service.Stats
	statsDelta []service.Stats // from just before run_at to the end
}

func burstScenario(ctx context.Context, o options, logger *slog.Logger, stderr io.Writer) (res burstResult, err error) {
	sc, err := newSchema(ctx, o.dsn)
	if err != nil {
		return res, err
	}
	defer sc.drop()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	var cfgs []config.Config
	for _, name := range nodeNames(o.burstNodes) {
		c := sc.nodeConfig(o, name)
		c.Node.Capacity = o.capacity
		c.Jobs.BaseURL = srv.URL
		cfgs = append(cfgs, c)
	}
	f, err := startFarm(cfgs, logger)
	if err != nil {
		return res, err
	}
	defer func() {
		if serr := f.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	res.names, res.jobs = f.names, o.jobs
	if err := f.waitLive(ctx, sc.store, time.Duration(cfgs[0].Checkin.TTL)); err != nil {
		return res, err
	}
	// Give every node one heartbeat to see the whole farm, as in scenario A.
	if err := benchkit.Sleep(ctx, o.warmup); err != nil {
		return res, err
	}

	now, err := sc.store.Now(ctx)
	if err != nil {
		return res, err
	}
	runAt := now.Add(o.burstLead)
	res.runAt = runAt
	t0 := time.Now()
	if err := enqueueAll(ctx, sc.store, o.jobs, runAt); err != nil {
		return res, err
	}
	res.enqueue = time.Since(t0)
	after, err := sc.store.Now(ctx)
	if err != nil {
		return res, err
	}
	res.lead = runAt.Sub(after)
	if res.lead <= 0 {
		fmt.Fprintf(stderr, "bench: warning: enqueueing took %v, past run_at; start delays include it\n", res.enqueue)
	}
	// Counters from just before the jobs fall due.
	if err := benchkit.Sleep(ctx, max(0, res.lead-100*time.Millisecond)); err != nil {
		return res, err
	}
	before := f.stats()

	deadline := time.Now().Add(o.burstLead + 2*time.Minute)
	for {
		counts, err := sc.store.JobCounts(ctx)
		if err != nil {
			return res, err
		}
		if counts[store.StateReady] == 0 && counts[store.StateRunning] == 0 {
			res.counts = counts
			break
		}
		if err := f.failed(); err != nil {
			return res, err
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("jobs not finished after 2 minutes: %v", counts)
		}
		if err := benchkit.Sleep(ctx, 20*time.Millisecond); err != nil {
			return res, err
		}
	}
	res.stats = f.stats()
	for i := range res.stats {
		a, b := res.stats[i], before[i]
		res.statsDelta = append(res.statsDelta, service.Stats{Statements: a.Statements - b.Statements,
			Jobs: jobs.Stats{Polls: a.Jobs.Polls - b.Jobs.Polls, Claimed: a.Jobs.Claimed - b.Jobs.Claimed}})
	}

	// Read back through the store, newest first a page at a time: the same
	// on PostgreSQL and SQL Server.
	f0 := store.JobFilter{Limit: 1000}
	for {
		page, err := sc.store.JobsList(ctx, f0)
		if err != nil {
			return res, err
		}
		for _, j := range page {
			if j.Started == nil {
				continue
			}
			r := jobRow{run: j.RunAt.UTC(), started: j.Started.UTC(), node: j.OwnerNode}
			if j.Finished != nil {
				r.finished = j.Finished.UTC()
			}
			res.rows = append(res.rows, r)
		}
		if len(page) < f0.Limit {
			return res, nil
		}
		f0.Before = page[len(page)-1].ID
	}
}

// enqueueAll inserts n jobs due at runAt through jobs.Enqueue, from a few
// connections at once so that the burst is in place well before it is due.
func enqueueAll(ctx context.Context, s *store.Store, n int, runAt time.Time) error {
	return parallel(n, func(i int) error {
		t := runAt
		_, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/bench/" + strconv.Itoa(i), Method: "POST", RunAt: &t, MaxAttempts: 1})
		return err
	})
}

// parallel runs op(0) … op(n-1) on 8 goroutines (the bench store's
// connections) and returns the first error; after one, no new op starts.
func parallel(n int, op func(i int) error) error {
	const workers = 8
	next := make(chan int)
	errc := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := op(i); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	var err error
feed:
	for i := range n {
		select {
		case next <- i:
		case err = <-errc:
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errc:
		default:
		}
	}
	return err
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func printBurst(w io.Writer, o options, b burstResult) {
	fmt.Fprintf(w, "## B. Burst (%d jobs due at one instant, %d nodes × capacity %d, slot %v, endpoint answers 204 at once)\n\n",
		b.jobs, len(b.names), o.capacity, o.slot)
	fmt.Fprintf(w, "Target: p99 start delay ≤ slot + 100 ms = %s while nodes have free capacity.\n\n", ms(o.slot+100*time.Millisecond))
	fmt.Fprintf(w, "run_at = database now + %v once the farm was live. Enqueued in %s (through jobs.Enqueue, 8 connections); %s of database time to spare before run_at. Final states: %v.\n\n",
		o.burstLead, ms(b.enqueue), ms(b.lead), b.counts)

	var delays []time.Duration
	var lastFinish time.Time
	for _, r := range b.rows {
		delays = append(delays, r.started.Sub(r.run))
		if r.finished.After(lastFinish) {
			lastFinish = r.finished
		}
	}
	slices.Sort(delays)
	span := lastFinish.Sub(b.runAt)
	fmt.Fprintln(w, "| jobs | start delay p50 | p99 | max | min | last finish − run_at | throughput |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|")
	fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %.0f jobs/s |\n\n", len(b.rows),
		ms(benchkit.Percentile(delays, 0.50)), ms(benchkit.Percentile(delays, 0.99)), ms(benchkit.Percentile(delays, 1)), ms(benchkit.Percentile(delays, 0)),
		ms(span), float64(len(b.rows))/span.Seconds())

	perNode := map[string]int{}
	for _, r := range b.rows {
		perNode[r.node]++
	}
	fmt.Fprintln(w, "| node | jobs run | polls during burst | statements during burst |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for i, name := range b.names {
		fmt.Fprintf(w, "| %s | %d | %d | %d |\n", name, perNode[name], b.statsDelta[i].Jobs.Polls, b.statsDelta[i].Statements)
	}
	fmt.Fprintln(w)

	fmt.Fprintf(w, "Claims by slot (slot 0 is the slot run_at falls in; run_at is %s into it):\n\n",
		ms(b.runAt.Sub(rotation.Start(rotation.Slot(b.runAt, o.slot), o.slot))))
	printClaims(w, b.rows, b.runAt, o.slot, b.names)
}

// claimBatch is the jobs one node took in one claim.
type claimBatch struct {
	slot        int64 // the slot the batch's first start fell in
	node        string
	n           int
	first, last time.Duration // start delays, from the job's run time
}

// claimGap splits a node's starts into claims. One claim stamps its rows
// within a few milliseconds of each other (about 0.1 ms per row here); a
// node's next claim comes at its next turn, a quarter slot or more later.
const claimGap = 25 * time.Millisecond

// claimBatches groups jobs into claims: per node, starts no more than
// claimGap apart. A claim that straddles a slot boundary counts in the slot
// of its first start. They come in order of slot and then of start.
func claimBatches(rows []jobRow, slot time.Duration) []*claimBatch {
	byNode := map[string][]jobRow{}
	for _, r := range rows {
		byNode[r.node] = append(byNode[r.node], r)
	}
	var out []*claimBatch
	for node, rs := range byNode {
		sort.Slice(rs, func(i, j int) bool { return rs[i].started.Before(rs[j].started) })
		var bt *claimBatch
		var prev time.Time
		for _, r := range rs {
			d := r.started.Sub(r.run)
			if bt == nil || r.started.Sub(prev) > claimGap {
				bt = &claimBatch{slot: rotation.Slot(r.started, slot), node: node, first: d, last: d}
				out = append(out, bt)
			}
			bt.n++
			bt.first, bt.last = min(bt.first, d), max(bt.last, d)
			prev = r.started
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].slot != out[j].slot {
			return out[i].slot < out[j].slot
		}
		return out[i].first < out[j].first
	})
	return out
}

// printClaims prints which slot each claim was made in, counted from the
// slot ref falls in, with the slot's owner and the claimer's rank in it (0 =
// owner; >0 = a widened turn).
func printClaims(w io.Writer, rows []jobRow, ref time.Time, slot time.Duration, names []string) {
	k0 := rotation.Slot(ref, slot)
	fmt.Fprintln(w, "| slot | slot owner | claimed by | rank | jobs | start delay of the batch | cumulative |")
	fmt.Fprintln(w, "|---:|---|---|---:|---:|---:|---:|")
	cum := 0
	for _, bt := range claimBatches(rows, slot) {
		cum += bt.n
		delay := ms(bt.first)
		if bt.last-bt.first >= time.Millisecond {
			delay += " – " + ms(bt.last)
		}
		fmt.Fprintf(w, "| %d | %s | %s | %d | %d | %s | %d (%.1f%%) |\n", bt.slot-k0, rotation.Owner(bt.slot, names), bt.node,
			rotation.Rank(bt.slot, bt.node, names), bt.n, delay, cum, 100*float64(cum)/float64(len(rows)))
	}
	fmt.Fprintln(w)
}
