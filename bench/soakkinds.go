package main

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/slotpoller/slotpoller/bench/benchkit"
)

// kindsShown is how many statement texts a window's log lists: those the
// database spent most time on.
const kindsShown = 8

// kindLog logs, at each window's end, what the database did in the
// window (-statement-kinds): its server CPU, and the statements of the
// farm and the feeder by text, the most server time first. It is how a
// cost that grows with the run is traced to the statement that grows.
type kindLog struct {
	srv  *benchkit.Server
	db   *benchkit.Database
	logf func(string, ...any)

	mu      sync.Mutex
	cpu     time.Duration // the database's CPU so far, as the sampler last added it up
	prevCPU time.Duration
	prev    map[string]benchkit.StatementKind
	t0      time.Time
}

// setCPU records the database's CPU so far (the soak's tally).
func (k *kindLog) setCPU(d time.Duration) {
	k.mu.Lock()
	k.cpu = d
	k.mu.Unlock()
}

// start takes the baseline at the load's start.
func (k *kindLog) start(ctx context.Context, at time.Time) {
	k.prev, _ = k.read(ctx)
	k.t0 = at
}

// window logs what changed since the last call.
func (k *kindLog) window(ctx context.Context, at time.Time) {
	now, err := k.read(ctx)
	if err != nil {
		k.logf("statement kinds: %v", err)
		return
	}
	k.mu.Lock()
	cpu := k.cpu - k.prevCPU
	k.prevCPU = k.cpu
	k.mu.Unlock()
	var diff []benchkit.StatementKind
	var calls int64
	var exec float64
	for q, n := range now {
		p := k.prev[q]
		d := benchkit.StatementKind{Query: q, Calls: n.Calls - p.Calls, Rows: n.Rows - p.Rows, Millis: n.Millis - p.Millis}
		if d.Calls > 0 {
			diff = append(diff, d)
			calls += d.Calls
			exec += d.Millis
		}
	}
	slices.SortFunc(diff, func(a, b benchkit.StatementKind) int { return cmp.Compare(b.Millis, a.Millis) })
	k.logf("window ending %s after the start: database CPU %s, %d statements, %.0f ms executing them; the most time:",
		at.Sub(k.t0).Round(time.Second), cpu.Round(time.Millisecond), calls, exec)
	for _, d := range diff[:min(len(diff), kindsShown)] {
		k.logf("  %9.0f ms %8d calls %10d rows  %s", d.Millis, d.Calls, d.Rows, d.Query)
	}
	k.prev = now
}

// read is the database's statements by text, the same text summed.
func (k *kindLog) read(ctx context.Context) (map[string]benchkit.StatementKind, error) {
	kinds, err := k.srv.DatabaseStatementKinds(ctx, k.db)
	if err != nil {
		return nil, err
	}
	out := map[string]benchkit.StatementKind{}
	for _, s := range kinds {
		t := out[s.Query]
		t.Query, t.Calls, t.Rows, t.Millis = s.Query, t.Calls+s.Calls, t.Rows+s.Rows, t.Millis+s.Millis
		out[s.Query] = t
	}
	return out, nil
}
