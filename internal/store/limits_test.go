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
	cs, err := s.JobsClaimManaged(context.Background(), "inc-"+node, node, n, store.Lease(time.Minute))
	require.NoError(t, err)
	return cs
}

func TestManagedClaimLimits(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
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
	storetest.Each(t, func(t *testing.T, driver string) {
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
	storetest.Each(t, func(t *testing.T, driver string) {
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
					cs, err := s.JobsClaimManaged(ctx, "inc-"+node, node, 5, store.Lease(time.Minute))
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
