//go:build unix

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// claimsLogged counts the claims the nodes made between their turns (the
// refill's debug line), each one an answer to a due note in a trickle.
func claimsLogged(nodes []*node) int {
	n := 0
	for _, nd := range nodes {
		n += strings.Count(nd.output(), "claimed again as calls ended")
	}
	return n
}

// A foreign application enqueues through the SQL entry point, one job a
// transaction every 40 ms, into a farm of three PostgreSQL nodes at the
// default slot of 1 s: each job starts within milliseconds of the commit,
// where it waited for the next turn before (p50 ~190 ms, p99 ~930 ms),
// claimed by one node per enqueue, not by every node that heard of it. A
// rolled-back enqueue wakes nobody.
func TestAnEnqueueStartsAtCommitOnPostgres(t *testing.T) {
	s, db := storetest.OpenDB(t, "postgres")
	ctx := context.Background()
	rec := &pathRecorder{first: map[string]time.Time{}, calls: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(rec.handler))
	defer srv.Close()

	var nodes []*node
	for _, name := range []string{"node-a", "node-b", "node-c"} {
		e := env("postgres", db.DSN, name, srv.URL, append(db.ExtraEnv(),
			"SLOTPOLLER_ROTATION_SLOT=1s", "SLOTPOLLER_CHECKIN_HEARTBEAT=1s")...)
		nodes = append(nodes, startNode(t, e, name))
	}
	waitSettled(t, s, 3)

	// Each job has a path of its own, by which the endpoint tells them apart.
	path := func(i int) string { return fmt.Sprintf("/push/%d", i) }
	enqueue := func(i int, commit bool) (int64, time.Time) {
		tx, err := s.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback()
		var id int64
		require.NoError(t, tx.QueryRowContext(ctx, "SELECT slotpoller_enqueue_v1($1)", path(i)).Scan(&id))
		if !commit {
			return id, time.Time{}
		}
		require.NoError(t, tx.Commit())
		return id, time.Now()
	}
	const total = 150
	committed := map[string]time.Time{}
	claimsBefore := claimsLogged(nodes)
	for i := range total {
		_, at := enqueue(i, true)
		committed[path(i)] = at
		time.Sleep(40 * time.Millisecond)
	}
	waitFor(t, 30*time.Second, "all jobs done", func() bool {
		counts, err := s.JobCounts(ctx)
		require.NoError(t, err)
		return counts[store.StateDone] == total
	})
	claims := claimsLogged(nodes) - claimsBefore

	delays, q := startDelays(t, rec, committed)
	t.Logf("commit to call over %d jobs: p50 %v, p90 %v, p99 %v, max %v; claims between turns %d",
		len(delays), q(.5), q(.9), q(.99), delays[len(delays)-1], claims)
	// The goal is 50 ms at p99. The allowance on top is for CI's load:
	// three nodes, PostgreSQL and the test share 2 cores with other work,
	// and one scheduling stall of a node's goroutines shows as a slow job.
	const goal, allowance = 50 * time.Millisecond, 50 * time.Millisecond
	require.LessOrEqual(t, q(.99), goal+allowance, "p99 from commit to call")
	require.LessOrEqual(t, q(.5), 25*time.Millisecond, "p50 from commit to call")
	// One claimer per wake-up: about one claim per enqueue (a slot's
	// edge, where two nodes' estimates of the database clock disagree,
	// may add one), not one per node that heard it; the turns ran the
	// few that no claim found.
	require.LessOrEqual(t, claims, total+total/10, "claims between turns for %d enqueues", total)
	require.GreaterOrEqual(t, claims, total/2, "most jobs were claimed at their note, not at a turn")

	// A rolled-back enqueue: no job, and no node claims for it.
	claimsBefore = claimsLogged(nodes)
	id, _ := enqueue(total, false)
	time.Sleep(500 * time.Millisecond)
	_, err := s.JobGet(ctx, id)
	require.Error(t, err, "the rolled-back job exists")
	require.Equal(t, claimsBefore, claimsLogged(nodes), "a claim for a rolled-back enqueue")
	rec.mu.Lock()
	require.Zero(t, rec.calls[path(total)])
	rec.mu.Unlock()

	for _, n := range nodes {
		n.stop(t)
	}
}

// startDelays are the delays from each job's commit (committed, by path)
// to its first call, sorted, with a quantile function over them. Each job
// must have been called exactly once.
func startDelays(t *testing.T, rec *pathRecorder, committed map[string]time.Time) ([]time.Duration, func(float64) time.Duration) {
	t.Helper()
	rec.mu.Lock()
	var delays []time.Duration
	for p, at := range committed {
		first, ok := rec.first[p]
		require.True(t, ok, "job %s was never called", p)
		require.Equal(t, 1, rec.calls[p], "job %s called %d times", p, rec.calls[p])
		delays = append(delays, first.Sub(at))
	}
	rec.mu.Unlock()
	sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
	q := func(p float64) time.Duration { return delays[int(p*float64(len(delays)-1))] }
	return delays, q
}
