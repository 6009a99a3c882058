package jobs_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// A step of the database clock ahead makes leases and start windows
// written before it look run out though their holders live and renew. A
// turn that knows of a recent step reclaims nothing and marks nothing
// missed (it still claims); the first turn after the quiet period does
// both, by then on leases renewed on the clock as it now reads.
func TestAPollAfterAClockStepReclaimsNothing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		held := enqueue(t, s, "/ok", 3)
		cs, err := s.JobsClaim(ctx, "inc-b", "node-b", 1, store.Lease(-time.Second)) // looks run out
		require.NoError(t, err)
		require.Len(t, cs, 1)
		late, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/ok", MaxAttempts: 3, StartBy: ptr(time.Now().Add(-time.Hour))})
		require.NoError(t, err)
		fresh := enqueue(t, s, "/ok", 3)

		rec := &seen{}
		r := newRunner(t, s, endpoint(t, rec), clock.NewFake(t0), 4)
		turn := alone(4)
		turn.ClockStepped = true
		res, err := r.Poll(ctx, turn)
		require.NoError(t, err)
		require.Zero(t, res.Reclaimed)
		r.Wait()
		require.Equal(t, store.StateRunning, get(t, s, held).State, "the lease is left to its holder")
		require.Equal(t, "node-b", get(t, s, held).OwnerNode)
		require.Equal(t, 1, get(t, s, held).Attempt, "no attempt burned")
		require.Equal(t, store.StateDone, get(t, s, late).State, "not marked missed across a step: claimed and run")
		require.Equal(t, store.StateDone, get(t, s, fresh).State, "claims go on")

		// A step that lands between the turn's sample and the reclaim: the
		// database's clock reads an hour past the node's estimate.
		dbNow := nowOf(t, s)
		turn = alone(4)
		turn.DBClock = func() (time.Time, time.Duration, bool) { return dbNow.Add(-time.Hour), time.Millisecond, true }
		res, err = r.Poll(ctx, turn)
		require.NoError(t, err)
		require.Zero(t, res.Reclaimed, "the statement itself refuses a clock past the node's estimate")
		require.Equal(t, store.StateRunning, get(t, s, held).State)

		turn.DBClock = func() (time.Time, time.Duration, bool) { return nowOf(t, s), time.Millisecond, true }
		res, err = r.Poll(ctx, turn) // the quiet period is over, and the clocks agree
		require.NoError(t, err)
		require.Equal(t, int64(1), res.Reclaimed, "an expired lease is reclaimed when the clock is trusted again")
		r.Wait()
	})
}

func ptr[T any](v T) *T { return &v }

// Across a step, the balancer leaves a task whose lease looks run out to
// its owner, which renews it on the clock as it now reads; a new task is
// still given out.
func TestBalanceAfterAClockStepLeavesLapsedLeasesToTheirOwners(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	k := newKeeper(s, &url.URL{Scheme: "http", Host: "localhost"}, clock.NewFake(t0), "node-a")
	members := []jobs.Member{{Name: "node-a", Incarnation: "inc-node-a", Capacity: 4}, {Name: "node-b", Incarnation: "inc-node-b", Capacity: 4}}
	for _, m := range members {
		require.NoError(t, s.NodeCheckIn(ctx, store.NodeState{Name: m.Name, Incarnation: m.Incarnation, Capacity: 4, Free: 4}, time.Hour))
	}
	require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "lapsed", Endpoint: "/t", Every: time.Second}))
	ok, err := s.TaskAssignIfUnowned(ctx, "lapsed", "inc-node-b", "node-b", store.Lease(-time.Second), time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "new", Endpoint: "/t", Every: time.Second}))

	res, err := k.Balance(ctx, members, time.Hour, true)
	require.NoError(t, err)
	require.Equal(t, 1, res.Assigned, "only the new task")
	got, err := s.TaskGet(ctx, "lapsed")
	require.NoError(t, err)
	require.Equal(t, "node-b", got.OwnerNode)
	require.Equal(t, int64(1), got.Token, "not moved")

	res, err = k.Balance(ctx, members, time.Hour, false)
	require.NoError(t, err)
	require.Equal(t, 1, res.Assigned, "moved once the clock is trusted again")
}

// A task row no door wrote (its token at the bigint maximum: no new token
// can fence it) is never assigned, and never keeps another task from its
// owner.
func TestATaskAtItsLargestTokenKeepsNoOtherFromItsOwner(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		k := newKeeper(s, &url.URL{Scheme: "http", Host: "localhost"}, clock.NewFake(t0), "node-a")
		require.NoError(t, s.NodeCheckIn(ctx, store.NodeState{Name: "node-a", Incarnation: "inc-node-a", Capacity: 4, Free: 4}, time.Hour))
		require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "a-odd", Endpoint: "/t", Every: time.Second}))
		require.NoError(t, jobs.AddTask(ctx, s, store.NewTask{Name: "b-good", Endpoint: "/t", Every: time.Second}))
		_, err := s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {tasks} SET token = 9223372036854775807 WHERE name = ?`), "a-odd")
		require.NoError(t, err)
		res, err := k.Balance(ctx, []jobs.Member{{Name: "node-a", Incarnation: "inc-node-a", Capacity: 4}}, time.Hour, false)
		require.NoError(t, err)
		require.Equal(t, 1, res.Assigned)
		good, err := s.TaskGet(ctx, "b-good")
		require.NoError(t, err)
		require.Equal(t, "node-a", good.OwnerNode)
		odd, err := s.TaskGet(ctx, "a-odd")
		require.NoError(t, err)
		require.Equal(t, store.TaskCreated, odd.State, "left unowned, visible in task list")
	})
}
