package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/slotpoller/slotpoller/bench/benchkit"
	"github.com/slotpoller/slotpoller/config"
)

// Scenario A: idle farm

type idleResult struct {
	nodes        int
	window       time.Duration // measured wall time
	polls, stmts int64         // farm totals over the window
	nodePolls    []int64       // per node, rotation order
	nodeStmts    []int64
}

func (r idleResult) pollsPerSec() float64 { return float64(r.polls) / r.window.Seconds() }
func (r idleResult) stmtsPerSec() float64 { return float64(r.stmts) / r.window.Seconds() }

func idleScenario(ctx context.Context, o options, n int, logger *slog.Logger) (res idleResult, err error) {
	sc, err := newSchema(ctx, o.dsn)
	if err != nil {
		return res, err
	}
	defer sc.drop()
	var cfgs []config.Config
	for _, name := range nodeNames(n) {
		cfgs = append(cfgs, sc.nodeConfig(o, name))
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
	if err := f.waitLive(ctx, sc.store, time.Duration(cfgs[0].Checkin.TTL)); err != nil {
		return res, err
	}
	if err := benchkit.Sleep(ctx, o.warmup); err != nil {
		return res, err
	}
	before, t0 := f.stats(), time.Now()
	if err := benchkit.Sleep(ctx, o.idle); err != nil {
		return res, err
	}
	after, t1 := f.stats(), time.Now()
	res = idleResult{nodes: n, window: t1.Sub(t0)}
	for i := range after {
		p := after[i].Jobs.Polls - before[i].Jobs.Polls
		s := after[i].Statements - before[i].Statements
		res.nodePolls = append(res.nodePolls, p)
		res.nodeStmts = append(res.nodeStmts, s)
		res.polls += p
		res.stmts += s
	}
	return res, f.failed()
}

func printIdle(w io.Writer, o options, rs []idleResult) {
	fmt.Fprintf(w, "## A. Idle farm (slot %v, window %v)\n\n", o.slot, o.idle)
	fmt.Fprintf(w, "Target: the farm polls ≈ 1/slot = %.2f/s whatever the node count.\n\n", 1/o.slot.Seconds())
	fmt.Fprintln(w, "| nodes | farm polls/s | polls/s ÷ target | polls per node (min–max) | farm statements/s | statements/s per node |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		fmt.Fprintf(w, "| %d | %.2f | %.2f× | %d–%d | %.1f | %.2f |\n",
			r.nodes, r.pollsPerSec(), r.pollsPerSec()*o.slot.Seconds(), slices.Min(r.nodePolls), slices.Max(r.nodePolls),
			r.stmtsPerSec(), r.stmtsPerSec()/float64(r.nodes))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Measured window per run (wall clock):", func() string {
		var s []string
		for _, r := range rs {
			s = append(s, fmt.Sprintf("%d nodes %.2fs", r.nodes, r.window.Seconds()))
		}
		return strings.Join(s, ", ")
	}())
	fmt.Fprintln(w)
}
