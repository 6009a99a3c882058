//go:build unix

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// TestPriorityDrainsTheHighQueueFirst: a backlog of 24 jobs of a queue of
// priority -5, enqueued first, and 24 of a queue of priority 10, enqueued
// after them, all due before any node starts; then 2 node processes of
// capacity 4 drain it.
//
// What is asserted, on the database clock (each job's started_at): no
// low job starts before the last high job started, except with it, in
// its claim. Why that is exact: the claims of managed queues take turns
// under the queues' lock (a later claim's started_at is after an earlier
// one's commit), and each takes the due jobs in priority order, at most
// the node's capacity. So every claim before the one that takes the last
// high job takes highs only (that job was there to be taken first), and
// that claim may fill its capacity with lows: at most 3 lows, by the same
// node, may start before the last high one. On SQLite a claim's rows all
// read the same millisecond: a low that started in the same millisecond
// as the last high is not counted as before it.
//
// Without priorities the claims go by run time and the lows, enqueued
// first, would start first: the test fails.
func TestPriorityDrainsTheHighQueueFirst(t *testing.T) {
	t.Parallel()
	eachDatabaseParallel(t, priorityDrainsTheHighQueueFirst)
}

func priorityDrainsTheHighQueueFirst(t *testing.T, driver string) {
	const each, capacity = 24, 4
	began := time.Now()
	s, db := storetest.OpenDB(t, driver)
	ctx := context.Background()
	rec := newSpanRecorder(func(int64) time.Duration { return 50 * time.Millisecond })
	srv := httptest.NewServer(http.HandlerFunc(rec.handler))
	defer srv.Close()

	// No node has written the routes yet: the jobs name their queues.
	queueOf := map[int64]string{}
	for _, queue := range []string{"low", "high"} {
		for i := range each {
			id, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: fmt.Sprintf("/jobs/%s/%d", queue, i), MaxAttempts: 3, Queue: queue})
			require.NoError(t, err)
			queueOf[id] = queue
		}
	}
	dir := configDir(t, `queues:
  - name: low
    endpoints: ["/jobs/low/"]
    priority: -5
  - name: high
    endpoints: ["/jobs/high/"]
    priority: 10
`)
	var nodes []*node
	for _, name := range []string{"node-a", "node-b"} {
		environ := append(env(driver, db.DSN, name, srv.URL, db.ExtraEnv()...), fmt.Sprintf("SLOTPOLLER_NODE_CAPACITY=%d", capacity))
		nodes = append(nodes, startNodeIn(t, environ, name, dir))
	}
	waitFor(t, 3*time.Minute, "every job to be done", func() bool {
		counts, err := s.JobCounts(ctx)
		require.NoError(t, err)
		return counts[store.StateDone] == 2*each
	})
	for _, n := range nodes {
		n.stop(t)
	}
	requireSettings(t, s, store.QueueSettings{Name: "low", Priority: -5})
	requireSettings(t, s, store.QueueSettings{Name: "high", Priority: 10})

	got := map[int64]store.Job{}
	var lastHigh store.Job
	for id, queue := range queueOf {
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.StateDone, j.State, "job %d", id)
		require.Equal(t, 1, j.Attempt, "job %d ran once", id)
		require.Equal(t, queue, j.Queue, "job %d", id)
		require.NotNil(t, j.Started, "job %d", id)
		got[id] = j
		if queue == "high" && (lastHigh.Started == nil || j.Started.After(*lastHigh.Started)) {
			lastHigh = j
		}
	}
	var early []string
	for _, j := range got {
		if j.Queue == "low" && j.Started.Before(*lastHigh.Started) {
			early = append(early, fmt.Sprintf("job %d by %s at %s", j.ID, j.OwnerNode, j.Started.Format("15:04:05.000000")))
			require.Equal(t, lastHigh.OwnerNode, j.OwnerNode, "a low job started before the last high one (%s at %s) by another node: %s",
				lastHigh.OwnerNode, lastHigh.Started.Format("15:04:05.000000"), early)
		}
	}
	t.Logf("%s: the last high job started by %s; low jobs started before it: %v; took %v",
		driver, lastHigh.OwnerNode, early, time.Since(began).Round(100*time.Millisecond))
	require.LessOrEqual(t, len(early), capacity-1, "low jobs started before the last high one: %s", early)
	require.Len(t, rec.snapshot(), 2*each, "one call per job")
}
