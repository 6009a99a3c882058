// Package checkin is the node registry: a node checks in at start under a
// fresh incarnation id, keeps its row live, reads who else is live (judged
// by the database clock), and marks itself left on a graceful stop.
//
// A node with a slot (Options.Slot, every node `slotpoller run` runs) writes its
// row only in its own turn, once per rotation, promising to stay live until
// a little after its next turn (live_until): an idle farm's registry costs
// one write and one read per slot, whatever its size, on every database.
// Where the database has session locks (PostgreSQL) the node also holds an
// advisory lock on a connection of its own, which the database releases
// when the process or the connection dies, so a dead node is out at once
// rather than when its promise ends; the lock's session also listens for
// notes (a backlog flagged, a task given) that make a node read the
// registry before its turn. SQL Server and SQLite have neither here
// (docs/sqlserver.md, "Where Babelfish differs"): a dead node is out when its promise
// ends, and nodes learn of a backlog or a given task at their turns.
// Without a slot (tests of the registry alone) a node heartbeats: a write
// and a reading every heartbeat, out of phase with the other nodes, live
// while the last heartbeat is younger than the TTL. Each turn writes and
// reads once (Turn), with the hints of what the turn has to do.
//
// Files: checkin.go (the Registry: join, a turn's write and reading,
// leave), liveness.go (the loop that keeps the row live between turns),
// membership.go (who is live, as a turn read it), notes.go (the notes
// that wake other nodes before their turns).
package checkin

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
)

// ErrReplaced means another process checked in under this node's name.
var ErrReplaced = errors.New("another slotpoller process checked in under this node name; two nodes must not share a name")

// ErrNameInUse means another live process runs under this node's name:
// the node refuses to start instead of taking the name from it.
var ErrNameInUse = errors.New("the node name is in use by another running slotpoller process")

// Hints say which of a turn's duties have anything to do, as the turn's
// reading found the queue: an idle farm's turn does nothing more.
type Hints struct {
	Jobs      bool // due jobs, or running ones whose lease ran out: poll
	Schedules bool // a schedule fires within two slots: write its occurrences
	Tasks     bool // a task waits for an owner, or a deleted one for its owner to let go: balance
	// TaskLeaseEnds: a task's lease that its owner stopped renewing ends
	// this soon (0: none within the task window, see taskWindow).
	TaskLeaseEnds time.Duration
}

// Status is what the node reports about itself at each write of its row
// (its turns; heartbeats without a slot).
type Status struct {
	Free        int
	Offset      time.Duration
	OffsetError time.Duration
	Turns       string // the slots it polled lately, for the dashboard (store.NodeState.Turns)
}

// Options configure a Registry.
type Options struct {
	// Name is the node's name (node.name), unique in the farm.
	Name string
	// Capacity is how many calls the node runs at once (node.capacity).
	Capacity int
	// Heartbeat is checkin.heartbeat: how often a node without a slot
	// writes its row, and the pace of the liveness checks.
	Heartbeat time.Duration
	// TTL is checkin.ttl: how long after its last write a heartbeating
	// node counts as live.
	TTL time.Duration
	// Clock is the local clock; nil means the real one.
	Clock clock.Clock
	// Logger is the node's logger, which names the node (the registry's
	// lines do not name it again); nil discards.
	Logger *slog.Logger
	// Incarnation is this process's id in the registry; "" draws a fresh
	// one. A node draws it first (NewIncarnation) so that the parts that
	// hold work under it can be built before the registry reads them.
	Incarnation string
	// Status is read at every write of the node's row; nil reports all
	// capacity free.
	Status func() Status
	// Changed is called after every membership reading (to nudge the poller).
	Changed func(Membership)
	// Slot is the rotation's slot length. A turn's write keeps the node
	// live for a rotation and two slots (plus the TTL), and Run writes only
	// when no turn came for that long: an idle farm's registry costs a
	// write and a read a slot whatever its size. Zero heartbeats (every
	// node writes and reads each heartbeat).
	Slot time.Duration
	// TaskGiven is called when a note says another node gave this one a
	// task (locking: it reads the registry only in its turns otherwise).
	TaskGiven func()
	// Due is called when a note says an enqueue committed a job due now
	// (store.NoteDue; PostgreSQL only).
	Due func()
	// Timed runs a reading that returns the database time, so that it
	// serves as a clock sample (clocksync's Estimator.Observe); nil runs it
	// plainly.
	Timed func(ctx context.Context, read func(context.Context) (time.Time, error)) error
}

// Registry is the node registry, kept in the nodes table: a node checks
// in at its turns (Turn), live by their promise (and a session lock where
// the database has them), or, without a slot, by heartbeats (Run).
type Registry struct {
	store       *store.Store
	opts        Options
	incarnation string
	locking     bool // writes only in turns, live by their promise
	sessionLock bool // and by a session lock (PostgreSQL, MySQL)

	mu         sync.Mutex
	membership Membership
	lock       *store.NodeLock
	liveUntil  time.Duration // monotonic: when the last successful write's promise ends
	readAt     time.Duration // monotonic: the last successful reading
}

// New returns the registry of one process start: one incarnation, checked
// in by Join.
func New(s *store.Store, opts Options) *Registry {
	if opts.Clock == nil {
		opts.Clock = clock.Real()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	inc := opts.Incarnation
	if inc == "" {
		inc = NewIncarnation()
	}
	turns := opts.Slot > 0
	return &Registry{store: s, opts: opts, incarnation: inc, locking: turns, sessionLock: turns && s.SessionLocks()}
}

// Locking reports whether the node writes its row only in its turns, live
// by their promise (and a session lock where the database has them), rather
// than by heartbeats.
func (reg *Registry) Locking() bool { return reg.locking }

// NewIncarnation draws a fresh incarnation id for one process start.
func NewIncarnation() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Incarnation is this process's id in the registry: jobs it claims are held
// by the incarnation, so a restarted node never inherits its old leases.
func (reg *Registry) Incarnation() string { return reg.incarnation }

// state is the node's row as written now, with the promise the write makes.
func (reg *Registry) state() store.NodeState {
	st := Status{Free: reg.opts.Capacity}
	if reg.opts.Status != nil {
		st = reg.opts.Status()
	}
	n := store.NodeState{Name: reg.opts.Name, Incarnation: reg.incarnation, Capacity: reg.opts.Capacity,
		Free: st.Free, Offset: st.Offset, OffsetError: st.OffsetError, Turns: st.Turns}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if reg.locking {
		n.LiveFor = reg.turnGap() + reg.opts.TTL
	}
	if reg.lock != nil {
		n.LockKey = reg.lock.Key
	}
	return n
}

// turnGap is how long the node may go without a turn before it reads the
// membership (and, locking, writes its row) on its own: a rotation of the
// farm as last read, and two slots for a turn skipped or a member joining.
// reg.mu is held.
func (reg *Registry) turnGap() time.Duration {
	if reg.opts.Slot <= 0 {
		return 0
	}
	return time.Duration(len(reg.membership.Members)+2) * reg.opts.Slot
}

// wrote records a successful write of n, just confirmed. The node trusts
// its reading for the write's promise from now, not from when the write
// was sent: on a slow database (a statement taking most of a short TTL)
// counting from the sending would leave the node no moment in which it
// trusts any reading, and it would never take a turn. Safety does not
// rest on this (claims and leases are fenced); it only keeps a node cut
// off from its database from acting on an old picture of the farm.
func (reg *Registry) wrote(n store.NodeState) {
	promise := n.LiveFor
	if promise == 0 { // a heartbeat: live for the TTL
		promise = reg.opts.TTL
	}
	reg.mu.Lock()
	reg.liveUntil = reg.opts.Clock.Monotonic() + promise
	reg.mu.Unlock()
}

// Join checks the node in and reads the membership.
//
// While another incarnation holds the node's name and is live, Join waits
// for its heartbeat to grow older than the TTL: a node restarted after a
// crash finds its previous incarnation's row still live for up to the TTL,
// and takes it then. If the holder heartbeats meanwhile (its last_seen
// moves on), another running process has the name: Join returns
// ErrNameInUse rather than evict it, and the node must not retry.
func (reg *Registry) Join(ctx context.Context) error {
	if reg.sessionLock {
		if err := reg.takeLock(ctx); err != nil {
			return err
		}
	}
	var prev *store.NodeNameInUse
	for {
		n := reg.state()
		err := reg.store.NodeCheckIn(ctx, n, reg.opts.TTL)
		var held *store.NodeNameInUse
		if !errors.As(err, &held) {
			if err != nil {
				return err
			}
			_, err := reg.read(ctx, &n, func(ctx context.Context) (store.TurnReading, error) {
				nodes, now, err := reg.store.Nodes(ctx, reg.opts.TTL)
				return store.TurnReading{Nodes: nodes, Now: now, Mine: true}, err
			})
			return err
		}
		if prev != nil && held.Incarnation == prev.Incarnation && held.LastSeen.After(prev.LastSeen) {
			return fmt.Errorf("%w: %v, and it heartbeats: another slotpoller process runs as %q; give each node a unique node.name",
				ErrNameInUse, held, reg.opts.Name)
		}
		// Look again once its heartbeat would be older than the TTL and its
		// last write's promise ran out, and never sooner than a heartbeat,
		// which a live holder sends.
		wait := max(reg.opts.TTL-held.Age, held.LiveFor, reg.opts.Heartbeat) + reg.opts.Heartbeat/4
		if prev == nil || held.Incarnation != prev.Incarnation {
			reg.opts.Logger.Warn("node name is held by another process; waiting to see whether it is alive (a restart after a crash takes the name once the old heartbeat is older than the TTL)",
				"holder", held.Incarnation, "last_seen_ago", held.Age, "ttl", reg.opts.TTL, "wait", wait)
		}
		prev = held
		if err := clock.Sleep(ctx, reg.opts.Clock, wait); err != nil {
			return err
		}
	}
}

// takeLock takes a session lock under a fresh key on a connection of its
// own, releasing the one held before (whose session the database ended, or
// will end).
func (reg *Registry) takeLock(ctx context.Context) error {
	reg.mu.Lock()
	old := reg.lock
	reg.lock = nil
	reg.mu.Unlock()
	old.Release()
	for range 5 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		key := int64(binary.BigEndian.Uint32(b[:])&0x7fffffff) | 1
		l, ok, err := reg.store.NodeLockTake(ctx, key)
		if err != nil {
			return fmt.Errorf("node %q: %w", reg.opts.Name, err)
		}
		if ok {
			reg.mu.Lock()
			reg.lock = l
			reg.mu.Unlock()
			return nil
		}
	}
	return fmt.Errorf("node %q: take node lock: five random keys were all held by other sessions", reg.opts.Name)
}

// Beat writes the node's row and reads the membership: a turn's reading
// without the hints, which only a turn acts on (a heartbeat would read
// them for nothing, every heartbeat).
func (reg *Registry) Beat(ctx context.Context) error {
	_, err := reg.turn(ctx, false)
	return err
}

// Turn is the node's turn in the registry: it writes its row, reads the
// membership (nudging Changed) and the hints of what the turn has to do.
// The reading is also a clock sample (Options.Timed).
func (reg *Registry) Turn(ctx context.Context) (Hints, error) {
	r, err := reg.turn(ctx, true)
	if err != nil {
		return Hints{Jobs: true, Schedules: true, Tasks: true}, err
	}
	return Hints{Jobs: r.Jobs, Schedules: r.Schedules, Tasks: r.Tasks, TaskLeaseEnds: r.TaskLeaseEnds}, nil
}

// taskWindow is how far ahead a turn looks for a task lease about to end:
// two slots, and never as far as a lease its owner renews (every
// heartbeat, for the TTL) ever comes. One slot left the lease to the next
// turn's owner, which may be the very node that stopped renewing: a dead
// node keeps its place in the rotation until its TTL runs out, and its
// slot passed with no turn, so the task waited for the slot after (3.6 s
// after a kill, at a TTL of 3 s).
func (reg *Registry) taskWindow() time.Duration {
	return max(0, min(2*reg.opts.Slot, reg.opts.TTL-reg.opts.Heartbeat))
}

func (reg *Registry) turn(ctx context.Context, hints bool) (store.TurnReading, error) {
	write := func(ctx context.Context, n store.NodeState) (store.TurnReading, error) {
		if hints {
			return reg.store.NodeTurn(ctx, n, reg.opts.TTL, 2*reg.opts.Slot, reg.taskWindow())
		}
		mine, err := reg.store.NodeHeartbeat(ctx, n)
		if err != nil {
			return store.TurnReading{}, err
		}
		nodes, now, err := reg.store.Nodes(ctx, reg.opts.TTL)
		return store.TurnReading{Nodes: nodes, Now: now, Mine: mine}, err
	}
	n := reg.state()
	r, err := reg.read(ctx, &n, func(ctx context.Context) (store.TurnReading, error) { return write(ctx, n) })
	if err != nil {
		return r, err
	}
	if reg.sessionLock && !reg.liveIn(r) {
		// The write went through but the node is not live: the database
		// ended the lock's session (it restarted, or the connection broke).
		// Take a lock again and say so at once, not a rotation later.
		reg.opts.Logger.Warn("the node's liveness lock was lost (its database session ended); taking it again")
		if err := reg.takeLock(ctx); err != nil {
			return r, err
		}
		n = reg.state()
		if r, err = reg.read(ctx, &n, func(ctx context.Context) (store.TurnReading, error) { return write(ctx, n) }); err != nil {
			return r, err
		}
	}
	return r, nil
}

// liveIn reports whether the reading counts this incarnation live.
func (reg *Registry) liveIn(r store.TurnReading) bool {
	for _, n := range r.Nodes {
		if n.Incarnation == reg.incarnation {
			return n.Live
		}
	}
	return false
}

// read runs one registry reading, timed as a clock sample, and keeps the
// membership it found, with the promise of n, the write that went with it.
// A reading whose write found the row no longer this incarnation's is
// ErrReplaced.
func (reg *Registry) read(ctx context.Context, n *store.NodeState, f func(context.Context) (store.TurnReading, error)) (store.TurnReading, error) {
	var r store.TurnReading
	get := func(ctx context.Context) (time.Time, error) {
		var err error
		r, err = f(ctx)
		return r.Now, err
	}
	var err error
	if reg.opts.Timed != nil {
		err = reg.opts.Timed(ctx, get)
	} else {
		_, err = get(ctx)
	}
	if err != nil {
		return r, err
	}
	if !r.Mine {
		return r, fmt.Errorf("node %q: %w", reg.opts.Name, ErrReplaced)
	}
	m := Membership{Read: reg.opts.Clock.Now(), OK: true}
	for _, n := range r.Nodes {
		// The node counts itself in once its write went through, even where
		// a slow database read it back older than the TTL.
		if n.Live || n.Incarnation == reg.incarnation && n.State == "up" {
			m.Members = append(m.Members, Member{Name: n.Name, Incarnation: n.Incarnation, Capacity: n.Capacity, Free: n.Free,
				Backlog: n.Backlog, Tasks: n.Tasks})
		}
	}
	reg.wrote(*n) // before the reading is published: Changed wakes readers of Membership
	reg.mu.Lock()
	reg.membership, reg.readAt = m, reg.opts.Clock.Monotonic()
	reg.mu.Unlock()
	if reg.opts.Changed != nil {
		reg.opts.Changed(m)
	}
	return r, nil
}

// Phase is where in a period of length d this incarnation's periodic work
// falls (its heartbeats, its task renewals): nodes started together (a
// deploy) would otherwise write in step for as long as they run.
func (reg *Registry) Phase(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	f := fnv.New64a()
	_, _ = f.Write([]byte(reg.incarnation))
	return time.Duration(f.Sum64() % uint64(d))
}

// Membership returns the live members as last read, while the node's last
// successful write keeps it live: a node cut off from the database must
// stop acting on its picture of the farm once the others may have counted
// it out.
func (reg *Registry) Membership() Membership {
	reg.mu.Lock()
	m, liveUntil := reg.membership, reg.liveUntil
	reg.mu.Unlock()
	if m.OK && reg.opts.Clock.Monotonic() >= liveUntil {
		return Membership{Read: m.Read}
	}
	return m
}

// Leave marks the node as gone and lets go of its lock.
func (reg *Registry) Leave(ctx context.Context) error {
	err := reg.store.NodeLeave(ctx, reg.opts.Name, reg.incarnation)
	reg.mu.Lock()
	l := reg.lock
	reg.lock = nil
	reg.mu.Unlock()
	l.Release()
	return err
}
