package checkin_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/checkin"
	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

func TestJoinLeaveAndMembership(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		c := clock.NewFake(t0)
		opts := func(name string, free int) checkin.Options {
			return checkin.Options{Name: name, Capacity: 8, Heartbeat: time.Second, TTL: time.Hour, Clock: c,
				Status: func() checkin.Status { return checkin.Status{Free: free, Offset: 3 * time.Millisecond} }}
		}
		b := checkin.New(s, opts("b", 2))
		a := checkin.New(s, opts("a", 5))
		require.NotEqual(t, a.Incarnation(), b.Incarnation())
		require.NoError(t, b.Join(ctx))
		require.NoError(t, a.Join(ctx))

		m := a.Membership()
		require.True(t, m.OK)
		require.Equal(t, []string{"a", "b"}, m.Names())
		total, free := m.Capacity()
		require.Equal(t, 16, total)
		require.Equal(t, 7, free)

		require.NoError(t, b.SignalBacklog(ctx, time.Hour))
		require.NoError(t, a.Beat(ctx))
		require.True(t, a.Membership().Backlog())

		require.NoError(t, b.Leave(ctx))
		require.NoError(t, a.Beat(ctx))
		require.Equal(t, []string{"a"}, a.Membership().Names(), "a node that left drops out at once")
		require.ErrorIs(t, b.Beat(ctx), checkin.ErrReplaced, "a node that left cannot heartbeat back in")

		// A membership not refreshed for longer than the TTL is not trusted.
		short := checkin.New(s, checkin.Options{Name: "c", Capacity: 1, Heartbeat: time.Second, TTL: 3 * time.Second, Clock: c})
		require.NoError(t, short.Join(ctx))
		require.True(t, short.Membership().OK)
		c.Advance(4 * time.Second)
		require.False(t, short.Membership().OK)
		require.Empty(t, short.Membership().Members)
	})
}

// lastSeen sets a node's last heartbeat to ago before now on the database
// clock, as if that much time had passed since.
func lastSeen(t *testing.T, s *store.Store, name string, ago time.Duration) {
	t.Helper()
	_, err := s.DB().ExecContext(context.Background(),
		store.Expand(s.Dialect(), `UPDATE {nodes} SET last_seen = {now+?} WHERE name = ?`), -ago.Milliseconds(), name)
	require.NoError(t, err)
}

// join runs Join in the background, advancing the fake clock by step
// whenever it waits, and returns its answer and how far the clock went.
func join(t *testing.T, c *clock.Fake, h *checkin.Registry, step time.Duration, whileWaiting func()) (error, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := c.Now()
	done := make(chan error, 1)
	go func() { done <- h.Join(ctx) }()
	for range 50 {
		for c.Waiters() == 0 { // until Join sleeps, or returns
			select {
			case err := <-done:
				return err, c.Now().Sub(start)
			case <-ctx.Done():
				t.Fatal("Join neither waited nor returned")
			case <-time.After(time.Millisecond):
			}
		}
		if whileWaiting != nil {
			whileWaiting()
		}
		c.Advance(step)
	}
	t.Fatal("Join did not return")
	return nil, 0
}

// heldName checks in a node "web1" whose last heartbeat was a second ago,
// and returns the options for another process under its name.
func heldName(t *testing.T, driver string) (*store.Store, *clock.Fake, checkin.Options, *checkin.Registry) {
	s, _ := storetest.Open(t, driver)
	c := clock.NewFake(t0)
	o := checkin.Options{Name: "web1", Capacity: 1, Heartbeat: time.Second, TTL: 3 * time.Second, Clock: c}
	holder := checkin.New(s, o)
	require.NoError(t, holder.Join(context.Background()))
	lastSeen(t, s, "web1", time.Second)
	return s, c, o, holder
}

func TestSecondNodeWithTheSameNameIsRefusedWhileTheFirstHeartbeats(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, c, o, first := heldName(t, driver) // its last heartbeat was a second ago
		ctx := context.Background()

		second := checkin.New(s, o)
		err, waited := join(t, c, second, time.Second, func() {
			require.NoError(t, first.Beat(ctx)) // the first goes on heartbeating
		})
		require.ErrorIs(t, err, checkin.ErrNameInUse)
		require.ErrorContains(t, err, `"web1"`)
		require.ErrorContains(t, err, "node.name")
		require.LessOrEqual(t, waited, o.TTL+o.Heartbeat)
		require.NoError(t, first.Beat(ctx), "the first keeps its name")
		require.Equal(t, first.Incarnation(), first.Membership().Members[0].Incarnation)
	})
}

func TestRestartAfterACrashTakesItsNameOnceTheOldHeartbeatIsOlderThanTheTTL(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, c, o, old := heldName(t, driver) // killed a second after its last heartbeat
		ctx := context.Background()

		restarted := checkin.New(s, o)
		seen := time.Second
		err, waited := join(t, c, restarted, time.Second, func() {
			seen += time.Second // time passes; nobody heartbeats
			lastSeen(t, s, "web1", seen)
		})
		require.NoError(t, err)
		require.LessOrEqual(t, waited, o.TTL+o.Heartbeat, "waits about the TTL at most")
		require.Equal(t, restarted.Incarnation(), restarted.Membership().Members[0].Incarnation)
		require.ErrorIs(t, old.Beat(ctx), checkin.ErrReplaced)

		// A node that left can be replaced at once.
		require.NoError(t, restarted.Leave(ctx))
		third := checkin.New(s, o)
		require.NoError(t, third.Join(ctx))
	})
}

func TestRunHeartbeatsOnTheClockAndSurvivesDatabaseErrors(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c := clock.NewFake(t0)
		var beats atomic.Int64
		h := checkin.New(s, checkin.Options{Name: "a", Capacity: 1, Heartbeat: time.Second, TTL: time.Hour, Clock: c,
			Status: func() checkin.Status {
				beats.Add(1)
				return checkin.Status{Free: 1}
			}})
		require.NoError(t, h.Join(ctx))
		before := s.Statements()
		done := make(chan error, 1)
		go func() { done <- h.Run(ctx) }()
		for range 3 {
			require.NoError(t, c.BlockUntil(ctx, 1))
			c.Advance(time.Second)
		}
		require.NoError(t, c.BlockUntil(ctx, 1))
		require.Equal(t, int64(4), beats.Load(), "one status read at join and one per heartbeat")
		require.Equal(t, int64(6), s.Statements()-before, "each heartbeat is one write and one read")

		// Another process takes the name: Run stops with ErrReplaced.
		require.NoError(t, s.NodeCheckIn(ctx, store.NodeState{Name: "a", Incarnation: "intruder", Capacity: 1}, 0))
		c.Advance(time.Second)
		require.ErrorIs(t, <-done, checkin.ErrReplaced)
	})
}

func TestRunKeepsGoingWhenTheDatabaseIsGone(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := clock.NewFake(t0)
	h := checkin.New(s, checkin.Options{Name: "a", Capacity: 1, Heartbeat: time.Second, TTL: 3 * time.Second, Clock: c})
	require.NoError(t, h.Join(ctx))
	require.NoError(t, s.Close()) // every statement now fails
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(runCtx) }()
	for range 5 {
		require.NoError(t, c.BlockUntil(ctx, 1))
		c.Advance(time.Second)
	}
	require.NoError(t, c.BlockUntil(ctx, 1))
	select {
	case err := <-done:
		t.Fatalf("Run gave up on a database error: %v", err)
	default:
	}
	require.False(t, h.Membership().OK, "after the TTL without a reading, membership is not trusted")
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
}

// On every database a node with a slot writes its row only in its turns
// (PostgreSQL adds a session lock; SQL Server and SQLite are live by the
// promise alone): Run sends nothing while they come, a turn is one write
// and one read, and the promise of each write covers the rotation until
// the next. Without a slot nodes heartbeat.
func TestLockingNodeWritesOnlyInItsTurns(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		h := checkin.New(s, checkin.Options{Name: "x", Capacity: 1, Heartbeat: time.Second, TTL: 3 * time.Second})
		require.False(t, h.Locking(), "without a slot, nodes heartbeat")
		lockingNodeWritesOnlyInItsTurns(t, s)
	})
}

func lockingNodeWritesOnlyInItsTurns(t *testing.T, s *store.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := clock.NewFake(t0)
	opts := func(name string) checkin.Options {
		return checkin.Options{Name: name, Capacity: 1, Heartbeat: time.Second, TTL: 3 * time.Second, Slot: time.Second, Clock: c}
	}
	var nodes []*checkin.Registry
	for _, name := range []string{"a", "b", "c", "d"} {
		h := checkin.New(s, opts(name))
		require.True(t, h.Locking())
		require.NoError(t, h.Join(ctx))
		nodes = append(nodes, h)
	}
	a := nodes[0]
	// The first turn reads the four of them; its write promised a rotation
	// of the one node a knew of when it joined. The second promises four.
	for range 2 {
		_, err := a.Turn(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, []string{"a", "b", "c", "d"}, a.Membership().Names())

	done := make(chan error, 1)
	runCtx, stop := context.WithCancel(ctx)
	go func() { done <- a.Run(runCtx) }()
	before := s.Statements()
	// Four nodes: a's turn comes every 4 slots. Over 12 s of turns, Run
	// writes nothing; the turns write and read twice each.
	for i := range 12 {
		require.NoError(t, c.BlockUntil(ctx, 1))
		if i%4 == 3 {
			_, err := a.Turn(ctx)
			require.NoError(t, err)
		}
		c.Advance(time.Second)
	}
	require.NoError(t, c.BlockUntil(ctx, 1))
	require.Equal(t, int64(3*2), s.Statements()-before, "three turns, two statements each, and nothing from Run")

	// No turn for (4 + 2) slots: the promise nears its end and Run writes
	// and reads on its own.
	before = s.Statements()
	for range 8 {
		require.NoError(t, c.BlockUntil(ctx, 1))
		c.Advance(time.Second)
	}
	require.NoError(t, c.BlockUntil(ctx, 1))
	require.Positive(t, s.Statements()-before, "an overdue turn is made up by Run")
	require.True(t, a.Membership().OK)
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
}

// When the database ends the lock's session (a restart, a broken
// connection), the node's next turn finds itself not live, takes a lock
// again and is live in the same turn.
func TestLockingNodeTakesItsLockAgainWhenItsSessionEnds(t *testing.T) {
	for _, driver := range []string{"postgres", "mysql"} {
		t.Run(driver, func(t *testing.T) { lockingNodeTakesItsLockAgain(t, driver) })
	}
}

func lockingNodeTakesItsLockAgain(t *testing.T, driver string) {
	s, _ := storetest.Open(t, driver)
	ctx := context.Background()
	c := clock.NewFake(t0)
	a := checkin.New(s, checkin.Options{Name: "a", Capacity: 1, Heartbeat: time.Second, TTL: 3 * time.Second, Slot: time.Second, Clock: c})
	b := checkin.New(s, checkin.Options{Name: "b", Capacity: 1, Heartbeat: time.Second, TTL: 3 * time.Second, Slot: time.Second, Clock: c})
	require.NoError(t, a.Join(ctx))
	require.NoError(t, b.Join(ctx))
	t.Cleanup(func() { _ = a.Leave(ctx); _ = b.Leave(ctx) })

	// End a's lock session from outside, as a database restart would.
	var key int64
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT lock_key FROM slotpoller_nodes WHERE name = 'a'`).Scan(&key))
	endLockSession(t, s, driver, key)
	require.Eventually(t, func() bool {
		_, err := b.Turn(ctx)
		return err == nil && len(b.Membership().Members) == 1
	}, 5*time.Second, 10*time.Millisecond, "b counts a out once its session is gone")

	_, err := a.Turn(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, a.Membership().Names(), "a took a lock again in its turn")
	_, err = b.Turn(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, b.Membership().Names())
}

// endLockSession ends, from another connection, the database session that
// holds the lock under key, as a restart or a broken connection would.
func endLockSession(t *testing.T, s *store.Store, driver string, key int64) {
	ctx := context.Background()
	switch driver {
	case "postgres":
		var ended bool
		require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
WHERE locktype = 'advisory' AND classid = 21255 AND objid = $1 AND objsubid = 2`, key).Scan(&ended))
		require.True(t, ended)
	case "mysql":
		var holder *int64
		require.NoError(t, s.DB().QueryRowContext(ctx,
			`SELECT IS_USED_LOCK(CONCAT('slotpoller:', MD5(DATABASE()), ':', ?))`, key).Scan(&holder))
		require.NotNil(t, holder, "the node's named lock is held")
		_, err := s.DB().ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(*holder, 10))
		require.NoError(t, err)
	default:
		t.Fatalf("no way to end a lock's session on %s", driver)
	}
}

// Heartbeating nodes started together beat out of phase.
func TestHeartbeatsOfNodesStartedTogetherAreOutOfPhase(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	seen := map[time.Duration]bool{}
	for range 8 {
		h := checkin.New(s, checkin.Options{Name: "a", Capacity: 1, Heartbeat: time.Second, TTL: 3 * time.Second})
		p := h.Phase(time.Second)
		require.GreaterOrEqual(t, p, time.Duration(0))
		require.Less(t, p, time.Second)
		seen[p.Truncate(10*time.Millisecond)] = true
	}
	require.Greater(t, len(seen), 4, "eight incarnations should spread over the heartbeat: %v", seen)
}

// A backlog flagged by one locking node reaches the others at once, by a
// note on the lock's session, not at their next turn.
func TestLockingNodesLearnOfABacklogByANote(t *testing.T) {
	storetest.RequirePostgres(t)
	sb, dsn := storetest.Open(t, "postgres")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := open.Store(ctx, "postgres", dsn) // a's own, to count only a's statements
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	c := clock.NewFake(t0)
	o := func(name string) checkin.Options {
		return checkin.Options{Name: name, Capacity: 1, Heartbeat: time.Second, TTL: 3 * time.Second, Slot: time.Second, Clock: c}
	}
	a, b := checkin.New(s, o("a")), checkin.New(sb, o("b"))
	require.NoError(t, a.Join(ctx))
	require.NoError(t, b.Join(ctx))
	t.Cleanup(func() { _ = a.Leave(context.Background()); _ = b.Leave(context.Background()) })
	c.Advance(1500 * time.Millisecond) // b's reading is older than a slot
	done := make(chan error, 1)
	runCtx, stop := context.WithCancel(ctx)
	go func() { done <- b.Run(runCtx) }()
	require.NoError(t, c.BlockUntil(ctx, 1)) // and its next beat a heartbeat away
	require.False(t, b.Membership().Backlog())

	before := s.Statements()
	require.NoError(t, a.SignalBacklog(ctx, time.Hour))
	require.Equal(t, int64(2), s.Statements()-before, "the flag and one note")
	require.Eventually(t, func() bool { return b.Membership().Backlog() }, 5*time.Second, 5*time.Millisecond,
		"b reads the registry on the note")

	// Already up as a read it: a signals again without a note.
	_, err = a.Turn(ctx)
	require.NoError(t, err)
	before = s.Statements()
	require.NoError(t, a.SignalBacklog(ctx, time.Hour))
	require.Equal(t, int64(1), s.Statements()-before, "no note while the backlog is up")
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
}

// On a slow database a reading may come back later than the TTL after its
// write was sent: the node must still trust it (from when it came back), or
// it would never hold a membership and never take a turn.
func TestSlowDatabaseReadingIsTrustedFromWhenItCameBack(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	c := clock.NewFake(t0)
	h := checkin.New(s, checkin.Options{Name: "a", Capacity: 1, Heartbeat: time.Second, TTL: time.Second, Clock: c,
		Timed: func(ctx context.Context, read func(context.Context) (time.Time, error)) error {
			c.Advance(1500 * time.Millisecond) // the statements take longer than the TTL
			_, err := read(ctx)
			return err
		}})
	require.NoError(t, h.Join(ctx))
	require.True(t, h.Membership().OK)
	require.Equal(t, []string{"a"}, h.Membership().Names())
	require.NoError(t, h.Beat(ctx))
	require.True(t, h.Membership().OK)
	c.Advance(time.Second)
	require.False(t, h.Membership().OK, "a TTL after the last reading came back, it is not trusted")
}

// A backlog note is news to a node whose reading showed no backlog: it
// reads at once, however fresh its reading (a burst is over in a fraction
// of a slot). A node that knows of a backlog already reads a note that
// comes within a slot of its reading when the slot is up, not at once,
// and does not drop it. On MySQL the note is a wake (store.NoteWake).
func TestLockingNodeReadsABacklogNoteAtOnceUnlessItKnows(t *testing.T) {
	for _, driver := range []string{"postgres", "mysql"} {
		t.Run(driver, func(t *testing.T) { lockingNodeReadsABacklogNote(t, driver) })
	}
}

func lockingNodeReadsABacklogNote(t *testing.T, driver string) {
	sb, dsn := storetest.Open(t, driver)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := open.Store(ctx, driver, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	c := clock.NewFake(t0)
	o := func(name string) checkin.Options {
		return checkin.Options{Name: name, Capacity: 1, Heartbeat: 5 * time.Second, TTL: 15 * time.Second, Slot: time.Second, Clock: c}
	}
	a, b := checkin.New(s, o("a")), checkin.New(sb, o("b"))
	require.NoError(t, a.Join(ctx))
	require.NoError(t, b.Join(ctx)) // b's reading is fresh
	t.Cleanup(func() { _ = a.Leave(context.Background()); _ = b.Leave(context.Background()) })
	done := make(chan error, 1)
	runCtx, stop := context.WithCancel(ctx)
	go func() { done <- b.Run(runCtx) }()
	require.NoError(t, c.BlockUntil(ctx, 1))

	require.NoError(t, a.SignalBacklog(ctx, time.Hour))
	require.Eventually(t, func() bool { return b.Membership().Backlog() }, 5*time.Second, 5*time.Millisecond,
		"the note is read at once, with no time passing")

	// Another backlog note, as a node that had not heard of it yet sends:
	// b knows already, and reads it when the slot since its reading is up.
	require.Eventually(t, func() bool { return c.Waiters() == 1 }, 5*time.Second, time.Millisecond)
	if driver == "mysql" {
		// A woken listener waits again before the next wake can find it.
		require.Eventually(t, func() bool { return storetest.MySQLListeners(ctx, t, s) == 2 }, 5*time.Second, 5*time.Millisecond)
	}
	before := sb.Statements()
	require.NoError(t, s.NodeNotify(ctx, checkin.NoteBacklog))
	time.Sleep(100 * time.Millisecond) // the note reaches b's Run, which rearms its timer
	require.Equal(t, before, sb.Statements(), "no reading within the slot of the last one")
	c.Advance(time.Second)
	require.Eventually(t, func() bool { return sb.Statements() > before }, 5*time.Second, 5*time.Millisecond,
		"the note is read once the slot is up, well before the next heartbeat")
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
}

// A turn announces a task lease its owner stopped renewing when it ends
// within two slots, not one: the next slot's owner may be that very node,
// dead and still in the rotation until its TTL runs out, and a lease left
// to it waited a slot more. Never as far as a renewed lease comes (the TTL
// after each heartbeat).
func TestATurnSeesATaskLeaseEndingBeforeTheSlotAfterNext(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		c := clock.NewFake(t0)
		a := checkin.New(s, checkin.Options{Name: "a", Capacity: 1, Heartbeat: time.Second, TTL: 3 * time.Second, Slot: time.Second, Clock: c})
		require.NoError(t, a.Join(ctx))
		// A lease just renewed ends the TTL from now: not announced.
		require.NoError(t, s.TaskInsert(ctx, store.NewTask{Name: "renewed", Endpoint: "/t", Method: "POST", Every: time.Second}))
		ok, err := s.TaskAssignIfUnowned(ctx, "renewed", a.Incarnation(), "a", store.Lease(3*time.Second), time.Hour)
		require.NoError(t, err)
		require.True(t, ok)
		h, err := a.Turn(ctx)
		require.NoError(t, err)
		require.Zero(t, h.TaskLeaseEnds, "a lease beyond TTL - heartbeat")

		require.NoError(t, s.TaskInsert(ctx, store.NewTask{Name: "feed", Endpoint: "/t", Method: "POST", Every: time.Second}))
		ok, err = s.TaskAssignIfUnowned(ctx, "feed", a.Incarnation(), "a", store.Lease(1500*time.Millisecond), time.Hour)
		require.NoError(t, err)
		require.True(t, ok)
		h, err = a.Turn(ctx)
		require.NoError(t, err)
		require.Positive(t, h.TaskLeaseEnds, "a lease ending in 1.5 s, past the next slot")
		require.LessOrEqual(t, h.TaskLeaseEnds, 1500*time.Millisecond)
	})
}
