package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// ThroughputMinute is what finished in one minute: Ago is how many whole
// minutes before the database's now the minute ends (0: the last minute).
type ThroughputMinute struct {
	Ago    int
	Done   int
	Failed int // failed and dead
	// DelaySumMS and DelayMaxMS are the start delays (started_at - run_at,
	// of the last attempt) of the jobs counted, for an average and a peak.
	DelaySumMS int64
	DelayMaxMS int64
}

// Throughput is the jobs finished per minute over a window.
type Throughput struct {
	Minutes []ThroughputMinute // only minutes with jobs, newest first
	Rows    int                // finished jobs read
	// Capped: the window held more finished jobs than the limit, so the
	// oldest minutes are counted short.
	Capped bool
}

// JobThroughput counts the jobs that finished done, failed or dead within
// window before the database's now, per minute, with their start delays.
// One statement that reads at most limit rows (the newest finished jobs,
// a seek on the index on (state, finished_at) from the window's start,
// read once for the statement so that it bounds the seek) whatever the
// table's size: a dashboard refreshing it costs the same on a busy farm.
func (s *Store) JobThroughput(ctx context.Context, window time.Duration, limit int) (Throughput, error) {
	if limit < 1 {
		limit = 1
	}
	q, args, err := s.throughputStatement(ctx, window, limit)
	if err != nil {
		return Throughput{}, fmt.Errorf("read job throughput: %w", err)
	}
	type row struct {
		ago         int
		state       string
		n           int
		sum, maxDel int64
	}
	rows, err := queryAll(ctx, s, "read job throughput", q, args, func(r rowScanner) (row, error) {
		var x row
		var ago sql.NullInt64
		err := r.Scan(&ago, &x.state, &x.n, &x.sum, &x.maxDel)
		x.ago = int(ago.Int64)
		return x, err
	})
	if err != nil {
		return Throughput{}, err
	}
	var t Throughput
	byAgo := map[int]int{} // ago -> index in t.Minutes
	for _, r := range rows {
		if r.ago < 0 {
			r.ago = 0 // finished a moment "after" now: clock resolution
		}
		i, ok := byAgo[r.ago]
		if !ok {
			i = len(t.Minutes)
			byAgo[r.ago] = i
			t.Minutes = append(t.Minutes, ThroughputMinute{Ago: r.ago})
		}
		m := &t.Minutes[i]
		if r.state == StateDone {
			m.Done += r.n
		} else {
			m.Failed += r.n
		}
		m.DelaySumMS += r.sum
		m.DelayMaxMS = max(m.DelayMaxMS, r.maxDel)
		t.Rows += r.n
	}
	t.Capped = t.Rows >= limit
	if t.Rows > limit {
		return t, fmt.Errorf("read job throughput: %d rows counted, more than the limit %d", t.Rows, limit)
	}
	return t, nil
}

// throughputStatement is JobThroughput's statement and its arguments,
// planned for them on every call: a plan made for any window would not
// know the window's rows are few.
func (s *Store) throughputStatement(ctx context.Context, window time.Duration, limit int) (string, []any, error) {
	d := s.d
	pick, args := s.firstRows(
		"state, "+d.MillisBetween("finished_at", "{now}")+" / 60000 AS ago, "+d.MillisBetween("run_at", "started_at")+" AS delay_ms",
		"FROM {jobs} WHERE state IN ('done', 'failed', 'dead') AND finished_at IS NOT NULL AND finished_at > {seeknow+?} ORDER BY finished_at DESC",
		[]any{seekOffset(-millis(window))}, limit)
	args, err := s.seekArgs(ctx, args)
	if err != nil {
		return "", nil, err
	}
	q, args := s.planPerCall(s.statement(`SELECT ago, state, COUNT(*), CAST(COALESCE(SUM(delay_ms), 0) AS BIGINT), CAST(COALESCE(MAX(delay_ms), 0) AS BIGINT)
FROM (`+pick+`) x GROUP BY ago, state ORDER BY ago`), args)
	return q, args, nil
}
