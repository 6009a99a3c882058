package main

import "time"

// cpuTally adds up the CPU time of a set of processes that come and go,
// from samples of each one's running total (benchkit.CPU's Database map):
// in a soak the database's backends end with the node that opened them,
// and a single reading at the end (benchkit.CPU.Since) would lose all a
// killed node's backends ever spent. A process that ended between two
// samples keeps what the last sample saw of it; what it spent after that
// is lost, at most one sampling interval of its work.
type cpuTally struct {
	started bool
	base    map[int]time.Duration // each process's total when it was first seen: 0 when it started after the first sample
	last    map[int]time.Duration
	gone    time.Duration // spent by processes that ended
}

// add takes a sample. The first one is the baseline: only what is spent
// after it counts.
func (t *cpuTally) add(sample map[int]time.Duration) {
	if !t.started {
		t.started = true
		t.base, t.last = map[int]time.Duration{}, map[int]time.Duration{}
		for pid, v := range sample {
			t.base[pid], t.last[pid] = v, v
		}
		return
	}
	for pid, prev := range t.last {
		if _, ok := sample[pid]; !ok {
			t.gone += prev - t.base[pid]
			delete(t.last, pid)
			delete(t.base, pid)
		}
	}
	for pid, v := range sample {
		prev, seen := t.last[pid]
		switch {
		case !seen:
			t.base[pid] = 0 // started since the last sample: all of it counts
		case v < prev:
			// The id went to a new process between samples.
			t.gone += prev - t.base[pid]
			t.base[pid] = 0
		}
		t.last[pid] = v
	}
}

// total is the CPU time spent since the first sample.
func (t *cpuTally) total() time.Duration {
	sum := t.gone
	for pid, v := range t.last {
		sum += v - t.base[pid]
	}
	return sum
}
