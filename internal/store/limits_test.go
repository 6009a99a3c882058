package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// The managed claim on every database: farm-wide and per-node limits,
// rate windows and priorities, counted under the queue's lock.

func enqueueTo(t *testing.T, s *store.Store, queue string, n int) []int64 {
	t.Helper()
	var ids []int64
	for i := 0; i < n; i++ {
		id, err := s.JobInsert(context.Background(), store.NewJob{Endpoint: fmt.Sprintf("/q/%s/%d", queue, i), Method: "POST",
			MaxAttempts: 3, IdempotencyKey: "k", Queue: queue})
		require.NoError(t, err)
		ids = append(ids, id)
	}
	return ids
}

func claimManaged(t *testing.T, s *store.Store, node string, n int) []store.Claim {
	t.Helper()
	cs, err := s.JobsClaimManaged(context.Background(), "inc-"+node, node, n, store.Lease(time.Minute), true)
	require.NoError(t, err)
	return cs
}

func TestManagedClaimLimits(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{{Name: "reports", Limit: 2, NodeLimit: 1}}))
		enqueueTo(t, s, "reports", 5)

		plain, err := s.JobsClaim(ctx, "inc-x", "node-x", 10, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Empty(t, plain, "the plain claim never takes a managed queue's job")
		load, err := s.JobsLoad(ctx, time.Second, time.Second, 100)
		require.NoError(t, err)
		require.Equal(t, 5, load.Due)
		require.Equal(t, 5, load.Managed)

		a := claimManaged(t, s, "node-a", 10)
		require.Len(t, a, 1, "one per node")
		require.Equal(t, "reports", a[0].Queue)
		require.Empty(t, claimManaged(t, s, "node-a", 10), "node-a is at its limit")
		b := claimManaged(t, s, "node-b", 10)
		require.Len(t, b, 1)
		require.Empty(t, claimManaged(t, s, "node-c", 10), "the farm is at its limit")

		ok, err := s.JobFinishIfRunning(ctx, a[0].ID, a[0].Token, store.Outcome{State: store.StateDone, Status: 200})
		require.NoError(t, err)
		require.True(t, ok)
		require.Len(t, claimManaged(t, s, "node-c", 10), 1, "a finish makes room")

		// Lowered below what runs: nothing starts until under it.
		require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{{Name: "reports", Limit: 1}}))
		require.Empty(t, claimManaged(t, s, "node-d", 10))

		// Limits removed: the plain claim takes the rest.
		require.NoError(t, s.QueueSettingsPut(ctx, nil))
		plain, err = s.JobsClaim(ctx, "inc-x", "node-x", 10, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, plain, 2)
	})
}

func TestManagedClaimRateAndPriority(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{
			{Name: "pay", Rate: 3, RatePeriod: time.Hour},
			{Name: "billing", Priority: 10},
			{Name: "news", Priority: -5},
		}))
		news := enqueueTo(t, s, "news", 2)
		enqueueTo(t, s, "default", 2)
		billing := enqueueTo(t, s, "billing", 2)
		enqueueTo(t, s, "pay", 5)

		got := claimManaged(t, s, "node-a", 4)
		require.Len(t, got, 4)
		var ids []int64
		for _, c := range got {
			ids = append(ids, c.ID)
		}
		require.Subset(t, ids, billing, "the higher priority first, though enqueued later")
		for _, c := range got {
			require.NotEqual(t, "news", c.Queue, "the low priority waits while priority 0 has due jobs")
		}
		rest := claimManaged(t, s, "node-a", 100)
		var pay, low int
		for _, c := range rest {
			switch c.Queue {
			case "pay":
				pay++
			case "news":
				low++
				require.Contains(t, news, c.ID)
			}
		}
		started := pay
		for _, c := range got {
			if c.Queue == "pay" {
				started++
			}
		}
		require.Equal(t, 3, started, "three starts in the hour's window, whatever was asked")
		require.Equal(t, 2, low, "the low priority runs when nothing above waits")
		require.Empty(t, claimManaged(t, s, "node-b", 100), "the window's rate is used up")
		qs, err := s.Queues(ctx)
		require.NoError(t, err)
		for _, q := range qs {
			if q.Name == "pay" {
				require.Equal(t, 2, q.Waiting)
			}
		}
	})
}

// Concurrent claimers on separate connections never run more than the
// limit, farm-wide and per node.
func TestManagedClaimConcurrent(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{{Name: "reports", Limit: 3, NodeLimit: 2}}))
		enqueueTo(t, s, "reports", 40)
		var mu sync.Mutex
		running := map[string][]store.Claim{}
		var wg sync.WaitGroup
		for w := 0; w < 6; w++ {
			node := fmt.Sprintf("node-%d", w%3)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 15; i++ {
					cs, err := s.JobsClaimManaged(ctx, "inc-"+node, node, 5, store.Lease(time.Minute), true)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					running[node] = append(running[node], cs...)
					total, mine := 0, len(running[node])
					for _, r := range running {
						total += len(r)
					}
					if total > 3 || mine > 2 {
						t.Errorf("%d running across the farm (limit 3), %d on %s (limit 2)", total, mine, node)
					}
					// Finish one now and then, so that room is made under way.
					var done *store.Claim
					if i%3 == 2 && len(running[node]) > 0 {
						c := running[node][0]
						running[node] = running[node][1:]
						done = &c
					}
					mu.Unlock()
					if done != nil {
						// Recorded outside the lock: the claim that follows may
						// still count it running, never the reverse.
						if _, err := s.JobFinishIfRunning(ctx, done.ID, done.Token, store.Outcome{State: store.StateDone, Status: 200}); err != nil {
							t.Error(err)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
	})
}

// A claim that comes while another transaction holds a managed queue's
// row and has made jobs of it running takes none of that queue: it waits
// for the lock and then counts them (SQL Server, SQLite), or leaves the
// queue to the claim that holds it (PostgreSQL skips a locked queue). It
// never claims on a count taken before they committed: without the lock,
// it would see none running and take the whole limit.
func TestManagedClaimRespectsTheLock(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{{Name: "reports", Limit: 3}}))
		ids := enqueueTo(t, s, "reports", 6)
		d := s.Dialect()
		p := func(n int) string { return d.Placeholder(n) }

		tx, err := s.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback()
		_, err = tx.ExecContext(ctx, "UPDATE "+d.Table("queues")+" SET rate_used = rate_used WHERE name = "+p(1), "reports")
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, "UPDATE "+d.Table("jobs")+" SET state = 'running', owner = 'inc-x', owner_node = 'node-x' WHERE id IN ("+
			p(1)+", "+p(2)+", "+p(3)+")", ids[3], ids[4], ids[5])
		require.NoError(t, err)

		type result struct {
			cs  []store.Claim
			err error
		}
		done := make(chan result, 1)
		go func() {
			cs, err := s.JobsClaimManaged(ctx, "inc-b", "node-b", 10, store.Lease(time.Minute), true)
			done <- result{cs, err}
		}()
		var r result
		select {
		case r = <-done: // it left the locked queue alone
			require.NoError(t, tx.Commit())
		case <-time.After(300 * time.Millisecond): // it waits for the lock
			require.NoError(t, tx.Commit())
			r = <-done
		}
		require.NoError(t, r.err)
		require.Empty(t, r.cs, "three run: the limit is reached, or the queue was another claim's")
		require.Empty(t, claimManaged(t, s, "node-c", 10), "three run: the limit is reached")
	})
}

// The rate is counted in fixed windows of the database clock: a window's
// budget used up, the next window starts afresh.
func TestManagedClaimRateWindowRolls(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		period := 400 * time.Millisecond
		if driver == "sqlserver" {
			period = 2 * time.Second // the T-SQL test server is slower
		}
		require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{{Name: "pay", Rate: 2, RatePeriod: period}, {Name: "warm", Limit: 9}}))
		// A claim of the same shape first: the T-SQL test server takes
		// seconds over a batch it has not seen.
		enqueueTo(t, s, "warm", 1)
		require.Len(t, claimManaged(t, s, "node-w", 10), 1)
		enqueueTo(t, s, "pay", 7)
		// Start at the beginning of a window, so that two claims fall in one.
		now, err := s.Now(ctx)
		require.NoError(t, err)
		next := now.Truncate(period).Add(period)
		time.Sleep(next.Sub(now) + 20*time.Millisecond)
		window := func() int64 {
			now, err := s.Now(ctx)
			require.NoError(t, err)
			return now.UnixMilli() / period.Milliseconds()
		}
		w := window()
		first := len(claimManaged(t, s, "node-a", 10))
		second := len(claimManaged(t, s, "node-b", 10))
		if window() != w {
			t.Skip("the two claims straddled a window boundary; the machine is too slow for this test's windows")
		}
		require.Equal(t, 2, first)
		require.Equal(t, 0, second, "the window's two starts are used")
		for window() == w {
			time.Sleep(20 * time.Millisecond)
		}
		require.Len(t, claimManaged(t, s, "node-b", 10), 2, "a new window, a new budget")
	})
}

// Without others, a managed claim takes only the managed queues' jobs;
// with it, the others' too, in priority order.
func TestManagedClaimOthers(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{{Name: "reports", Limit: 1}}))
		enqueueTo(t, s, "default", 2)
		enqueueTo(t, s, "reports", 2)
		cs, err := s.JobsClaimManaged(ctx, "inc-a", "node-a", 10, store.Lease(time.Minute), false)
		require.NoError(t, err)
		require.Len(t, cs, 1)
		require.Equal(t, "reports", cs[0].Queue)
		cs, err = s.JobsClaimManaged(ctx, "inc-a", "node-a", 10, store.Lease(time.Minute), false)
		require.NoError(t, err)
		require.Empty(t, cs, "no room, and no look at the others")
		cs, err = s.JobsClaimManaged(ctx, "inc-a", "node-a", 10, store.Lease(time.Minute), true)
		require.NoError(t, err)
		require.Len(t, cs, 2)
		for _, c := range cs {
			require.Equal(t, "default", c.Queue)
		}
	})
}

// Two nodes starting at once write the same queues' settings: neither
// fails on the other's first row.
func TestQueueSettingsPutConcurrently(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		settings := []store.QueueSettings{{Name: "a", Limit: 1}, {Name: "b", Rate: 5, RatePeriod: time.Second}, {Name: "c", Priority: 3}}
		for round := 0; round < 5; round++ {
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- s.QueueSettingsPut(ctx, settings)
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			_, err := s.DB().ExecContext(ctx, "DELETE FROM "+s.Dialect().Table("queues"))
			require.NoError(t, err)
		}
	})
}

// A queue whose rate period changes starts its count afresh: a longer
// period's window numbers are smaller than the shorter one's, and a count
// kept from before would never roll.
func TestRatePeriodChangeStartsAfresh(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{{Name: "pay", Rate: 2, RatePeriod: time.Second}}))
		enqueueTo(t, s, "pay", 6)
		require.Len(t, claimManaged(t, s, "node-a", 10), 2)
		require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{{Name: "pay", Rate: 3, RatePeriod: time.Hour}}))
		require.Len(t, claimManaged(t, s, "node-a", 10), 3, "a new period, a new count")
	})
}

// QueueWork counts one queue's running and waiting jobs, each capped.
func TestQueueWork(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{{Name: "reports", Limit: 2}}))
		enqueueTo(t, s, "reports", 5)
		enqueueTo(t, s, "other", 3)
		require.Len(t, claimManaged(t, s, "node-a", 10), 5, "two of reports, three of the other queue")
		running, waiting, err := s.QueueWork(ctx, "reports", 100)
		require.NoError(t, err)
		require.Equal(t, 2, running)
		require.Equal(t, 3, waiting)
		running, waiting, err = s.QueueWork(ctx, "reports", 1)
		require.NoError(t, err)
		require.Equal(t, 1, running, "capped")
		require.Equal(t, 1, waiting, "capped")
	})
}
