package store_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// liveOf returns the reading's liveness of each node by name.
func liveOf(nodes []store.Node) map[string]bool {
	out := map[string]bool{}
	for _, n := range nodes {
		out[n.Name] = n.Live
	}
	return out
}

// A turn is two statements whatever the farm holds, and its hints say which
// of the turn's duties have work: an idle farm's turn ends there.
func TestNodeTurnReadsTheRegistryAndTheHints(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		a := store.NodeState{Name: "node-a", Incarnation: "inc-a", Capacity: 4, Free: 4}
		require.NoError(t, s.NodeCheckIn(ctx, a, time.Hour))
		require.NoError(t, s.NodeCheckIn(ctx, store.NodeState{Name: "node-b", Incarnation: "inc-b", Capacity: 2, Free: 2}, time.Hour))

		before := s.Statements()
		r, err := s.NodeTurn(ctx, a, time.Hour, 2*time.Second, time.Second)
		require.NoError(t, err)
		require.Equal(t, int64(2), s.Statements()-before, "a turn is one write and one read")
		require.True(t, r.Mine)
		require.False(t, r.Now.IsZero())
		require.Equal(t, map[string]bool{"node-a": true, "node-b": true}, liveOf(r.Nodes))
		require.False(t, r.Jobs || r.Schedules || r.Tasks, "an empty farm has nothing for the turn: %+v", r)

		// A job due later is no work yet; one due now is.
		_, err = s.JobInsert(ctx, store.NewJob{Endpoint: "/later", Method: "POST", Delay: time.Hour, MaxAttempts: 1})
		require.NoError(t, err)
		r, err = s.NodeTurn(ctx, a, time.Hour, 2*time.Second, time.Second)
		require.NoError(t, err)
		require.False(t, r.Jobs, "a job due in an hour")
		_, err = s.JobInsert(ctx, store.NewJob{Endpoint: "/now", Method: "POST", MaxAttempts: 1})
		require.NoError(t, err)
		r, err = s.NodeTurn(ctx, a, time.Hour, 2*time.Second, time.Second)
		require.NoError(t, err)
		require.True(t, r.Jobs, "a job due now")
		require.False(t, r.Schedules || r.Tasks)

		// A running job whose lease ran out is work too (reclaiming it).
		claims, err := s.JobsClaim(ctx, "inc-a", "node-a", 1, store.Lease(time.Millisecond))
		require.NoError(t, err)
		require.Len(t, claims, 1)
		time.Sleep(5 * time.Millisecond) // database time must pass the lease; no fake clock reaches the database
		r, err = s.NodeTurn(ctx, a, time.Hour, 2*time.Second, time.Second)
		require.NoError(t, err)
		require.True(t, r.Jobs, "an expired lease")

		// A task without an owner asks for the balancer.
		require.NoError(t, s.TaskInsert(ctx, store.NewTask{Name: "feed", Endpoint: "/t", Method: "POST", Every: time.Second}))
		r, err = s.NodeTurn(ctx, a, time.Hour, 2*time.Second, time.Second)
		require.NoError(t, err)
		require.True(t, r.Tasks)
		require.Zero(t, r.TaskLeaseEnds)

		// A held lease that ends within the task window (its owner stopped
		// renewing) is announced with how soon; one beyond it is not.
		ok, err := s.TaskAssignIfUnowned(ctx, "feed", "inc-a", "node-a", store.Lease(600*time.Millisecond), time.Hour)
		require.NoError(t, err)
		require.True(t, ok)
		r, err = s.NodeTurn(ctx, a, time.Hour, 2*time.Second, time.Second)
		require.NoError(t, err)
		require.False(t, r.Tasks)
		require.Positive(t, r.TaskLeaseEnds)
		require.LessOrEqual(t, r.TaskLeaseEnds, 600*time.Millisecond)
		r, err = s.NodeTurn(ctx, a, time.Hour, 2*time.Second, 100*time.Millisecond)
		require.NoError(t, err)
		require.Zero(t, r.TaskLeaseEnds, "beyond the window")

		// Another incarnation under the name: the turn's write finds the
		// row not its own.
		r, err = s.NodeTurn(ctx, store.NodeState{Name: "node-a", Incarnation: "inc-old", Capacity: 4}, time.Hour, time.Second, time.Second)
		require.NoError(t, err)
		require.False(t, r.Mine)
	})
}

// Every row the reclaim takes is work the turn's hint sees, whatever else
// the farm holds: a row the hint missed would wait for other work to bring
// a poll (on PostgreSQL, where pushed jobs need no poll, for ever). A held
// lease is neither.
func TestTheTurnSeesEveryRowTheReclaimTakes(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		a := store.NodeState{Name: "node-a", Incarnation: "inc-a", Capacity: 4, Free: 4}
		require.NoError(t, s.NodeCheckIn(ctx, a, time.Hour))
		exec := func(q string, args ...any) {
			t.Helper()
			_, err := s.DB().ExecContext(ctx, store.Expand(s.Dialect(), q), args...)
			require.NoError(t, err)
		}
		hinted := func() bool {
			t.Helper()
			r, err := s.NodeTurn(ctx, a, time.Hour, time.Second, time.Second)
			require.NoError(t, err)
			return r.Jobs
		}
		ms := func(d time.Duration) int64 { return d.Milliseconds() }
		for _, c := range []struct {
			what, set string
			args      []any
			taken     bool
		}{
			{"a lease that ran out", "state = 'running', owner = 'gone', lease_until = {now+?}", []any{ms(-time.Second)}, true},
			{"a running job without a lease", "state = 'running', owner = 'gone', lease_until = NULL", nil, true},
			{"a lease further ahead than any claim writes", "state = 'running', owner = 'gone', lease_until = {now+?}", []any{ms(store.MaxHold + time.Hour)}, true},
			{"an occurrence past its start_by", "state = 'ready', run_at = {now+?}, start_by = {now+?}", []any{ms(-2 * time.Second), ms(-time.Second)}, true},
			{"a held lease", "state = 'running', owner = 'node-a', lease_until = {now+?}", []any{ms(time.Hour)}, false},
		} {
			id, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/x", Method: "POST", Delay: time.Hour, MaxAttempts: 3})
			require.NoError(t, err)
			require.False(t, hinted(), "%s: before it, the farm holds nothing for the turn", c.what)
			exec("UPDATE {jobs} SET "+c.set+" WHERE id = ?", append(c.args, id)...)
			require.Equal(t, c.taken, hinted(), "%s: the turn's hint", c.what)
			n, err := s.JobsReclaimExpired(ctx, time.Time{})
			require.NoError(t, err)
			require.Equal(t, c.taken, n == 1, "%s: the reclaim took %d rows", c.what, n)
			exec("UPDATE {jobs} SET state = 'done', owner = NULL, lease_until = NULL, finished_at = {now} WHERE id = ?", id)
		}
	})
}

// A node promises in each write how long it stays live without another:
// past that, and past the reader's TTL, it is not live.
func TestLiveUntilKeepsANodeLiveBetweenItsTurns(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		a := store.NodeState{Name: "node-a", Incarnation: "inc-a", Capacity: 4, LiveFor: time.Hour}
		require.NoError(t, s.NodeCheckIn(ctx, a, time.Second))
		nodes, _, err := s.Nodes(ctx, 0)
		require.NoError(t, err)
		require.True(t, nodes[0].Live, "a TTL of zero, but its promise holds")

		// The promise ran out (as if written an hour ago).
		_, err = s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {nodes} SET live_until = {now+?}, last_seen = {now+?}`),
			-1000, -10_000)
		require.NoError(t, err)
		nodes, _, err = s.Nodes(ctx, 3*time.Second)
		require.NoError(t, err)
		require.False(t, nodes[0].Live)
		// Its name is free: another process checks in under it at once.
		err = s.NodeCheckIn(ctx, store.NodeState{Name: "node-a", Incarnation: "inc-new", Capacity: 4}, 3*time.Second)
		require.NoError(t, err)

		// A node that promises nothing (it heartbeats) is live by its last
		// heartbeat and the reader's TTL, as before there were promises.
		nodes, _, err = s.Nodes(ctx, time.Hour)
		require.NoError(t, err)
		require.True(t, nodes[0].Live)
		nodes, _, err = s.Nodes(ctx, 0)
		require.NoError(t, err)
		require.False(t, nodes[0].Live)
		var inUse *store.NodeNameInUse
		require.ErrorAs(t, s.NodeCheckIn(ctx, store.NodeState{Name: "node-a", Incarnation: "inc-third", Capacity: 4}, time.Hour), &inUse)
		require.Equal(t, "inc-new", inUse.Incarnation)
		require.Zero(t, inUse.LiveFor, "it promised nothing")
	})
}

// On PostgreSQL and MySQL a node is live while the database holds its
// session lock: when the lock's connection ends (the process died), the
// node is out at once, its promise notwithstanding; and its name is free
// at once.
func TestSessionLockIsLiveness(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		if driver == "postgres" || driver == "mysql" {
			sessionLockIsLiveness(t, driver)
		}
	})
}

func sessionLockIsLiveness(t *testing.T, driver string) {
	s, _ := storetest.Open(t, driver)
	ctx := context.Background()
	require.True(t, s.SessionLocks())
	lock, ok, err := s.NodeLockTake(ctx, 424242)
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = s.NodeLockTake(ctx, 424242)
	require.NoError(t, err)
	require.False(t, ok, "a key held by another session is refused")

	a := store.NodeState{Name: "node-a", Incarnation: "inc-a", Capacity: 4, LiveFor: time.Hour, LockKey: lock.Key}
	require.NoError(t, s.NodeCheckIn(ctx, a, time.Second))
	r, err := s.NodeTurn(ctx, a, time.Second, time.Second, time.Second)
	require.NoError(t, err)
	require.True(t, liveOf(r.Nodes)["node-a"])
	err = s.NodeCheckIn(ctx, store.NodeState{Name: "node-a", Incarnation: "inc-b", Capacity: 4}, time.Second)
	var inUse *store.NodeNameInUse
	require.ErrorAs(t, err, &inUse)
	require.Greater(t, inUse.LiveFor, 50*time.Minute, "the holder's promise")

	lock.Release() // the process died: its session ended
	_, _, err = s.Nodes(ctx, time.Second)
	require.NoError(t, err)
	// MySQL's lock connection waits in SLEEP, which checks every 5 s that
	// its client is still there: the lock goes within 5 s of the close.
	gone := 5 * time.Second
	if driver == "mysql" {
		gone = 12 * time.Second
	}
	require.Eventually(t, func() bool {
		nodes, _, err := s.Nodes(ctx, 0)
		return err == nil && !nodes[0].Live
	}, gone, 10*time.Millisecond, "a node whose lock is gone is not live, whatever it promised")
	require.NoError(t, s.NodeCheckIn(ctx, store.NodeState{Name: "node-a", Incarnation: "inc-b", Capacity: 4}, time.Hour),
		"a restart after a crash takes the name at once, not after the promise")

	// The key is free again for whoever draws it.
	again, ok, err := s.NodeLockTake(ctx, 424242)
	require.NoError(t, err)
	require.True(t, ok)
	again.Release()
}

func TestSessionLocksOnlyWherePostgresOrMySQL(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		locks := driver == "postgres" || driver == "mysql"
		require.Equal(t, locks, s.SessionLocks())
		require.Equal(t, driver == "postgres", s.HearsNotes(), "only PostgreSQL's nodes hear notes")
		require.Equal(t, locks, s.HearsWakes(), "a node holding a session lock is woken between its turns")
		if !locks {
			_, _, err := s.NodeLockTake(context.Background(), 1)
			require.ErrorContains(t, err, "no session locks")
		}
	})
}

// MySQL has no notes: a note wakes every node listening in the farm's
// database instead, by interrupting the statement its lock's connection
// waits in. Each hears NoteWake, keeps its lock, and waits again for the
// next; a node of a farm in another database sleeps on. The wake costs a
// statement to list the listeners and one for each.
func TestMySQLNoteWakesTheFarmsNodesAndKeepsTheirLocks(t *testing.T) {
	s, _ := storetest.Open(t, "mysql")
	other, _ := storetest.Open(t, "mysql")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.True(t, s.HearsWakes())
	take := func(s *store.Store) *store.NodeLock {
		l, ok, err := s.NodeLockTake(ctx, rand.Int64N(1<<30)+1)
		require.NoError(t, err)
		require.True(t, ok)
		t.Cleanup(l.Release)
		return l
	}
	a, b, elsewhere := take(s), take(s), take(other)
	for round := 1; round <= 2; round++ {
		require.Eventually(t, func() bool { return storetest.MySQLListeners(ctx, t, s) == 2 }, 5*time.Second, 5*time.Millisecond,
			"round %d: both nodes wait for a wake", round)
		before := s.Statements()
		require.NoError(t, s.NodeNotify(ctx, "backlog"))
		require.Equal(t, before+3, s.Statements(), "round %d: one listing, one wake per node", round)
		for _, l := range []*store.NodeLock{a, b} {
			select {
			case n := <-l.Notes():
				require.Equal(t, store.NoteWake, n, "round %d", round)
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: a node was not woken", round)
			}
			select {
			case <-l.Lost():
				t.Fatalf("round %d: the wake ended a node's session, and its lock", round)
			default:
			}
		}
		require.Empty(t, notesIn(elsewhere, 200*time.Millisecond), "round %d: another farm's node", round)
	}
	_, ok, err := s.NodeLockTake(ctx, a.Key)
	require.NoError(t, err)
	require.False(t, ok, "the woken node still holds its lock")
}
