//go:build unix

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// A burst far larger than the farm's capacity, due at one instant, drains
// as fast as the nodes' calls end (each node claims again as it has room)
// and still spreads by capacity: no node runs less than half its share.
//
// A node's share is its calls over its claims' round trips, and so follows
// the CPU its process gets. The test runs its databases one after another
// (and, calling no t.Parallel, before Go releases the suite's parallel
// tests): side by side, twelve node processes and three database servers
// on two cores starved one node of a burst now and then (190 of 1,500 on
// SQLite, 88 of 600 on the T-SQL server).
func TestFarmSpreadsABurstByCapacity(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, db := storetest.OpenDB(t, driver)
		ctx := context.Background()
		rec := &recorder{}
		srv := httptest.NewServer(http.HandlerFunc(rec.handler))
		defer srv.Close()

		names := []string{"node-a", "node-b", "node-c"}
		var nodes []*node
		for _, name := range names {
			nodes = append(nodes, startNode(t, env(driver, db.DSN, name, srv.URL, db.ExtraEnv()...), name))
		}
		waitSettled(t, s, 3)

		c, err := client.New(s.DB(), s.Driver(), client.WithSchema(db.Schema))
		require.NoError(t, err)
		// burst enqueues n jobs due at one database instant a little
		// ahead, written in a few statements so that it does not trickle
		// in, and waits until each was called.
		burst := func(name string, n int) map[string]bool {
			js := make([]client.Job, n)
			for i := range js {
				js[i] = client.Job{Endpoint: fmt.Sprintf("/jobs/%s?n=%d", name, i), MaxAttempts: 3, Delay: 2 * time.Second}
			}
			ids, err := c.EnqueueMany(ctx, js)
			require.NoError(t, err)
			want := map[string]bool{}
			for _, id := range ids {
				want[strconv.FormatInt(id, 10)] = true
			}
			waitFor(t, 180*time.Second, name+": all jobs called", func() bool {
				seen := map[string]bool{}
				for _, c := range rec.snapshot() {
					if want[c.job] {
						seen[c.job] = true
					}
				}
				return len(seen) == n
			})
			return want
		}
		total := 1500
		if driver == "sqlserver" {
			total = 600 // the T-SQL test server is slow at every statement
			// Babelfish compiles each statement on each new connection,
			// for seconds under load (real SQL Server caches plans for the
			// server): a node whose claims compile during the burst sits
			// it out. A first burst warms every node's connections; the
			// spread is judged on the second (node-a ran 88 of 600, cold).
			burst("warmup", 300)
		}
		want := burst("burst", total)
		for _, n := range nodes {
			n.stop(t)
		}
		perNode := map[string]int{}
		perJob := map[string]int{}
		for _, c := range rec.snapshot() {
			if !want[c.job] {
				continue
			}
			perNode[c.node]++
			perJob[c.job]++
		}
		require.Len(t, perJob, total)
		for job, n := range perJob {
			require.Equal(t, 1, n, "job %s called %d times", job, n)
		}
		fair := total / len(names)
		t.Logf("%s: jobs per node %v", driver, perNode)
		for _, name := range names {
			require.GreaterOrEqual(t, perNode[name], fair/2, "node %s ran %d of %d jobs (fair share %d): %v", name, perNode[name], total, fair, perNode)
		}
	})
}
