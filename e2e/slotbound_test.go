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
	"github.com/stretchr/testify/require"
)

// Where no note pushes an enqueue to the farm (SQLite, MySQL, SQL
// Server), a job enqueued elsewhere (here by the test's process, through
// the store, as the Go client does) waits for the farm's next turn: the
// farm polls once a slot whatever its size, so a job due now starts
// within a slot and the claim's time, p99 within slot + 50 ms. A rotation
// that left a slot with no poller, or a turn that looked at the queue
// before the job's commit and then slept a whole slot, would show here as
// waits past a slot.
func TestAnEnqueueElsewhereStartsWithinASlot(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		switch driver {
		case "postgres":
			t.Skip("PostgreSQL pushes enqueues to the farm: TestAnEnqueueStartsAtCommitOnPostgres")
		case "sqlserver":
			t.Skip("the T-SQL test server cannot measure a bound of slot + 50 ms: a turn's reading and claim take it 0.3-0.9 s alone, seconds under load (p99 2.3 s quiet, 5.1 s beside other tests); the rotation and the refill are the same code on every database")
		}
		s, db := storetest.OpenDB(t, driver)
		ctx := context.Background()
		rec := &pathRecorder{first: map[string]time.Time{}, calls: map[string]int{}}
		srv := httptest.NewServer(http.HandlerFunc(rec.handler))
		defer srv.Close()

		const slot = time.Second
		var nodes []*node
		for _, name := range []string{"node-a", "node-b", "node-c"} {
			e := env(driver, db.DSN, name, srv.URL, append(db.ExtraEnv(),
				"SLOTPOLLER_ROTATION_SLOT="+slot.String(), "SLOTPOLLER_CHECKIN_HEARTBEAT=1s")...)
			nodes = append(nodes, startNode(t, e, name))
		}
		waitSettled(t, s, 3)

		path := func(i int) string { return fmt.Sprintf("/trickle/%d", i) }
		const total = 150
		committed := map[string]time.Time{}
		for i := range total {
			_, err := s.JobInsert(ctx, store.NewJob{Endpoint: path(i), MaxAttempts: 3})
			require.NoError(t, err)
			committed[path(i)] = time.Now()
			time.Sleep(40 * time.Millisecond)
		}
		waitFor(t, 60*time.Second, "all jobs done", func() bool {
			counts, err := s.JobCounts(ctx)
			require.NoError(t, err)
			return counts[store.StateDone] == total
		})

		delays, q := startDelays(t, rec, committed)
		past := 0
		for _, d := range delays {
			if d > slot {
				past++
			}
		}
		t.Logf("%s, slot %v: enqueue to call over %d jobs: p50 %v, p90 %v, p99 %v, max %v; %d waited more than a slot",
			driver, slot, len(delays), q(.5), q(.9), q(.99), delays[len(delays)-1], past)
		// The goal is slot + 50 ms at p99. The allowance on top is for
		// CI's load: three nodes, the database and the test share 2 cores
		// with other work.
		goal, allowance := slot+50*time.Millisecond, 150*time.Millisecond
		require.LessOrEqual(t, q(.99), goal+allowance, "p99 from enqueue to call")
		require.LessOrEqual(t, q(.5), slot/2+allowance, "p50 from enqueue to call: half a slot's wait on average")

		for _, n := range nodes {
			n.stop(t)
		}
	})
}
