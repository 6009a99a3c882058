package jobs_test

import (
	"context"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// pushed is a runner of capacity, refilling, that acts on due notes while
// owner says it owns the slot, on a store of its own with an endpoint that
// holds its calls at the gate; signals counts the backlogs it flags.
type pushed struct {
	s       *store.Store
	g       *gate
	c       *clock.Fake
	r       *jobs.Runner
	owner   atomic.Bool
	signals atomic.Int64
}

func newPushed(t *testing.T, capacity int, owner bool, more ...func(*jobs.Options)) *pushed {
	p := &pushed{c: clock.NewFake(t0)}
	p.s, _ = storetest.Open(t, "sqlite")
	var base *url.URL
	p.g, base = newGate(t)
	p.owner.Store(owner)
	opts := jobs.Options{Node: "node-a", Incarnation: "inc-a", Capacity: capacity,
		Lease: 3 * time.Second, Timeout: 5 * time.Second, Clock: p.c, Rand: func() float64 { return 0 },
		BacklogSpread: time.Second,
		SlotOwner:     p.owner.Load,
		PushBacklog:   func(context.Context) error { p.signals.Add(1); return nil },
	}
	for _, f := range more {
		f(&opts)
	}
	p.r = jobs.NewRunner(p.s, &jobs.Invoker{Base: base}, opts)
	t.Cleanup(func() { p.r.Drain(time.Second) })
	return p
}

func TestADueNoteIsOneClaimPerCooldownHoweverManyNotesCome(t *testing.T) {
	p := newPushed(t, 8, true)
	s, c, r := p.s, p.c, p.r
	for range 3 {
		enqueue(t, s, "/gate", 1)
	}
	// A burst of notes before Refill looks: one wake-up, one claim.
	for range 5 {
		r.Due()
	}
	before := s.Statements()
	refilling(t, r)
	claimedReaches(t, r, 3)
	perClaim := s.Statements() - before
	require.Positive(t, perClaim)

	// More notes within the cooldown of that claim: nothing until it has
	// passed, then one claim for them all.
	for range 2 {
		enqueue(t, s, "/gate", 1)
	}
	before = s.Statements()
	for range 5 {
		r.Due()
	}
	require.Never(t, func() bool { return r.Stats().Claimed > 3 }, 100*time.Millisecond, 5*time.Millisecond,
		"claimed within the cooldown")
	c.Advance(jobs.DefaultPushCooldown)
	claimedReaches(t, r, 5)
	require.Never(t, func() bool { return s.Statements()-before > perClaim }, 100*time.Millisecond, 5*time.Millisecond,
		"one claim for five notes")
	require.Zero(t, p.signals.Load(), "room enough: no backlog")
}

func TestADueNoteHeardDuringAClaimMakesExactlyOneMoreClaim(t *testing.T) {
	ctx := context.Background()
	p := newPushed(t, 8, true)
	s, c, r := p.s, p.c, p.r
	enqueue(t, s, "/gate", 1)
	refilling(t, r)
	r.Due()
	claimedReaches(t, r, 1)
	c.Advance(jobs.DefaultPushCooldown)

	// Hold the store's one connection, so that the next claim waits, and
	// let two notes come while it does, with a job each committed after
	// the claim's statement was sent.
	conn, err := s.DB().Conn(ctx)
	require.NoError(t, err)
	before := s.Statements()
	r.Due()
	require.Eventually(t, func() bool { return s.Statements() > before }, 10*time.Second, time.Millisecond, "the claim was sent")
	perClaim := s.Statements() - before
	r.Due()
	r.Due()
	require.NoError(t, conn.Close())
	// The claim found no job: the notes' jobs come only now (as if their
	// transactions committed while it ran).
	require.Eventually(t, func() bool { return s.Statements() >= before+perClaim }, 10*time.Second, time.Millisecond)
	for range 2 {
		enqueue(t, s, "/gate", 1)
	}
	afterEnqueue := s.Statements()
	c.Advance(jobs.DefaultPushCooldown)
	claimedReaches(t, r, 3)
	require.Never(t, func() bool { return s.Statements()-afterEnqueue > perClaim }, 100*time.Millisecond, 5*time.Millisecond,
		"exactly one more claim for the notes heard during the claim")
}

func TestADueNoteIsIgnoredByANodeThatDoesNotOwnTheSlot(t *testing.T) {
	p := newPushed(t, 8, false)
	s, r := p.s, p.r
	enqueue(t, s, "/gate", 1)
	refilling(t, r)
	before := s.Statements()
	r.Due()
	require.Never(t, func() bool { return s.Statements() != before }, 200*time.Millisecond, 5*time.Millisecond,
		"a node that does not own the slot sends no statement for a note")
	p.owner.Store(true)
	r.Due()
	claimedReaches(t, r, 1)
}

func TestADueNoteWithoutRoomClaimsWhenACallEndsAndSignalsTheBacklog(t *testing.T) {
	p := newPushed(t, 2, true)
	s, g, c, r := p.s, p.g, p.c, p.r
	refilling(t, r)
	enqueue(t, s, "/gate", 1)
	r.Due()
	claimedReaches(t, r, 1)
	c.Advance(jobs.DefaultPushCooldown)
	require.Zero(t, p.signals.Load(), "room left after the claim")

	// A claim that fills the node may have left work: it tells the farm.
	enqueue(t, s, "/gate", 1)
	enqueue(t, s, "/gate", 1)
	r.Due()
	claimedReaches(t, r, 2)
	require.Eventually(t, func() bool { return p.signals.Load() == 1 }, 10*time.Second, time.Millisecond)

	// Full: a note claims nothing, and a second signal within the spread
	// is not sent.
	r.Due()
	require.Never(t, func() bool { return r.Stats().Claimed > 2 }, 100*time.Millisecond, 5*time.Millisecond,
		"claimed without room")
	require.Equal(t, int64(1), p.signals.Load())

	// A call ends: the pending note claims the waiting job.
	c.Advance(jobs.DefaultPushCooldown)
	g.release(1)
	claimedReaches(t, r, 3)
	require.Equal(t, 1, countState(t, s, store.StateDone))
}

// On a farm with managed queues a note's claim is the managed claim: a
// limited queue's job starts at its note, never past the queue's limit,
// and a plain job beside it starts too. (Without PushManaged the first
// claim takes only the plain job: the node's last count saw no managed
// job due.)
func TestADueNoteOfALimitedQueueStartsWithinTheLimit(t *testing.T) {
	ctx := context.Background()
	p := newPushed(t, 8, true, func(o *jobs.Options) { o.PushManaged = true })
	s, g, c, r := p.s, p.g, p.c, p.r
	require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{{Name: "one", Limit: 1}}))
	for range 2 {
		_, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/gate", MaxAttempts: 1, Queue: "one"})
		require.NoError(t, err)
	}
	enqueue(t, s, "/gate", 1)
	refilling(t, r)
	r.Due()
	claimedReaches(t, r, 2)
	c.Advance(jobs.DefaultPushCooldown)
	r.Due()
	require.Never(t, func() bool { return r.Stats().Claimed > 2 }, 100*time.Millisecond, 5*time.Millisecond,
		"claimed past the queue's limit")
	// Room under the limit is made when the call ends; the job held back
	// waits for the next note or turn (a short claim on a note does not
	// claim again as calls end: in a trickle that would double the claims).
	g.release(2)
	require.Eventually(t, func() bool { return countState(t, s, store.StateDone) == 2 }, 10*time.Second, time.Millisecond)
	r.Due()
	c.Advance(jobs.DefaultPushCooldown)
	claimedReaches(t, r, 3)
	g.release(1)
	require.Eventually(t, func() bool { return countState(t, s, store.StateDone) == 3 }, 10*time.Second, time.Millisecond)
	_, most := g.stats()
	require.LessOrEqual(t, most, 2, "the limited queue's one and the plain one")
}
