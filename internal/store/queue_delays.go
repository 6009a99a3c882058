package store

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// StartDelays are how late a queue's recent jobs started: the time from
// each one's run time (when it was due) to its start, both on the
// database clock.
type StartDelays struct {
	Jobs int // the jobs read
	P50  time.Duration
	P99  time.Duration
	Max  time.Duration
}

// startDelayStates are the finished states whose jobs started: a
// cancelled or missed job may never have.
var startDelayStates = []string{StateDone, StateFailed, StateDead}

// QueueStartDelays reads the start delays of each queue's jobs that
// finished done, failed or dead within the last within on the database
// clock, and of its running jobs: started_at minus run_at of each (of its
// last attempt), its percentiles computed here.
//
// One statement, bounded whatever the table's size: per finished state,
// at most limit of the newest finished rows (a seek on the index on
// (state, finished_at) from the window's start), and at most limit
// running rows; so at most 4·limit rows in all. A busy farm's window is
// then its newest jobs, not all of it.
func (s *Store) QueueStartDelays(ctx context.Context, within time.Duration, limit int) (map[string]StartDelays, error) {
	if limit < 1 {
		limit = 1
	}
	q, args, err := s.startDelaysStatement(ctx, within, limit)
	if err != nil {
		return nil, fmt.Errorf("read queue start delays: %w", err)
	}
	type row struct {
		queue string
		ms    int64
	}
	rows, err := queryAll(ctx, s, "read queue start delays", q, args, func(r rowScanner) (row, error) {
		var x row
		return x, r.Scan(&x.queue, &x.ms)
	})
	if err != nil {
		return nil, err
	}
	byQueue := map[string][]int64{}
	for _, r := range rows {
		byQueue[r.queue] = append(byQueue[r.queue], max(r.ms, 0)) // started "before" due: clock resolution
	}
	out := make(map[string]StartDelays, len(byQueue))
	for name, ms := range byQueue {
		slices.Sort(ms)
		out[name] = StartDelays{Jobs: len(ms), P50: rankMS(ms, 0.50), P99: rankMS(ms, 0.99), Max: rankMS(ms, 1)}
	}
	return out, nil
}

// rankMS is the p-th percentile of sorted, by nearest rank: the least
// value at or above which a fraction p of them lie.
func rankMS(sorted []int64, p float64) time.Duration {
	i := max(int(math.Ceil(p*float64(len(sorted))))-1, 0)
	return time.Duration(sorted[i]) * time.Millisecond
}

// startDelaysStatement is QueueStartDelays's statement and its arguments,
// planned for them on every call, as the throughput's is: a plan made for
// any window would not know the window's rows are few.
func (s *Store) startDelaysStatement(ctx context.Context, within time.Duration, limit int) (string, []any, error) {
	cols := "queue, " + s.d.MillisBetween("run_at", "started_at") + " AS delay_ms"
	var parts []string
	var args []any
	for i, st := range startDelayStates {
		pick, a := s.firstRows(cols, "FROM {jobs} WHERE state = '"+st+"' AND finished_at IS NOT NULL AND finished_at > {seeknow+?}"+
			" AND started_at IS NOT NULL ORDER BY finished_at DESC", []any{seekOffset(-millis(within))}, limit)
		parts = append(parts, fmt.Sprintf("SELECT queue, delay_ms FROM (%s) f%d", pick, i))
		args = append(args, a...)
	}
	pick, a := s.firstRows(cols, "FROM {jobs} WHERE state = 'running' AND started_at IS NOT NULL", nil, limit)
	parts = append(parts, "SELECT queue, delay_ms FROM ("+pick+") r")
	args, err := s.seekArgs(ctx, append(args, a...))
	if err != nil {
		return "", nil, err
	}
	q, args := s.planPerCall(s.statement(strings.Join(parts, "\nUNION ALL ")), args)
	return q, args, nil
}
