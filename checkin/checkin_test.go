package checkin_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/checkin"
	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
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
func join(t *testing.T, c *clock.Fake, h *checkin.Heartbeats, step time.Duration, whileWaiting func()) (error, time.Duration) {
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
func heldName(t *testing.T, driver string) (*store.Store, *clock.Fake, checkin.Options, *checkin.Heartbeats) {
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
