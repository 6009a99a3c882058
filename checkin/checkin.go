// Package checkin is the node registry: a node checks in at start under a
// fresh incarnation id, heartbeats its row with the database's time, reads
// who else is live (heartbeat younger than the TTL, judged by the database
// clock), and marks itself left on a graceful stop.
//
// Registry is an interface so that a cheaper liveness signal (a
// session-scoped database lock released when a process dies) can replace or
// complement heartbeats later.
package checkin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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

// Member is a live node as the registry last read it.
type Member struct {
	Name        string
	Incarnation string
	Capacity    int
	Free        int
	Backlog     bool
	Tasks       int // endless tasks the member's incarnation holds
}

// Membership is the live part of the farm at one reading.
type Membership struct {
	Members []Member  // live, sorted by name
	Read    time.Time // local time of the reading
	OK      bool      // false until the first successful reading
}

// Names returns the members' names in rotation order.
func (m Membership) Names() []string {
	out := make([]string, len(m.Members))
	for i, n := range m.Members {
		out[i] = n.Name
	}
	return out
}

// Backlog reports whether any live node reported due work it left behind.
func (m Membership) Backlog() bool {
	for _, n := range m.Members {
		if n.Backlog {
			return true
		}
	}
	return false
}

// TasksOf returns how many endless tasks the member with the incarnation
// holds, as last read.
func (m Membership) TasksOf(incarnation string) int {
	for _, n := range m.Members {
		if n.Incarnation == incarnation {
			return n.Tasks
		}
	}
	return 0
}

// Capacity returns the total capacity and the total free capacity of the
// live nodes.
func (m Membership) Capacity() (total, free int) {
	for _, n := range m.Members {
		total += n.Capacity
		free += n.Free
	}
	return total, free
}

// Registry is how a node takes part in the farm's membership.
type Registry interface {
	Join(ctx context.Context) error
	Run(ctx context.Context) error
	Membership() Membership
	SignalBacklog(ctx context.Context, hold time.Duration) error
	Leave(ctx context.Context) error
	Incarnation() string
}

// Status is what the node reports about itself at each heartbeat.
type Status struct {
	Free        int
	Offset      time.Duration
	OffsetError time.Duration
	Turns       string // the slots it polled lately, for the dashboard (store.NodeState.Turns)
}

// Options configure a heartbeat registry.
type Options struct {
	Name      string
	Capacity  int
	Heartbeat time.Duration
	TTL       time.Duration
	Clock     clock.Clock
	Logger    *slog.Logger
	// Incarnation is this process's id in the registry; "" draws a fresh
	// one. A node draws it first (NewIncarnation) so that the parts that
	// hold work under it can be built before the registry reads them.
	Incarnation string
	// Status is read at every heartbeat; nil reports all capacity free.
	Status func() Status
	// Changed is called after every membership reading (to nudge the poller).
	Changed func(Membership)
}

// Heartbeats is the registry kept by heartbeats in the nodes table.
type Heartbeats struct {
	store       *store.Store
	opts        Options
	incarnation string

	mu         sync.Mutex
	membership Membership
}

// New returns a heartbeat registry for one process start.
func New(s *store.Store, opts Options) *Heartbeats {
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
	return &Heartbeats{store: s, opts: opts, incarnation: inc}
}

// NewIncarnation draws a fresh incarnation id for one process start.
func NewIncarnation() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Incarnation is this process's id in the registry: jobs it claims are held
// by the incarnation, so a restarted node never inherits its old leases.
func (h *Heartbeats) Incarnation() string { return h.incarnation }

func (h *Heartbeats) state() store.NodeState {
	st := Status{Free: h.opts.Capacity}
	if h.opts.Status != nil {
		st = h.opts.Status()
	}
	return store.NodeState{Name: h.opts.Name, Incarnation: h.incarnation, Capacity: h.opts.Capacity,
		Free: st.Free, Offset: st.Offset, OffsetError: st.OffsetError, Turns: st.Turns}
}

// Join checks the node in and reads the membership.
//
// While another incarnation holds the node's name and is live, Join waits
// for its heartbeat to grow older than the TTL: a node restarted after a
// crash finds its previous incarnation's row still live for up to the TTL,
// and takes it then. If the holder heartbeats meanwhile (its last_seen
// moves on), another running process has the name: Join returns
// ErrNameInUse rather than evict it, and the node must not retry.
func (h *Heartbeats) Join(ctx context.Context) error {
	var prev *store.NodeNameInUse
	for {
		err := h.store.NodeCheckIn(ctx, h.state(), h.opts.TTL)
		var held *store.NodeNameInUse
		if !errors.As(err, &held) {
			if err != nil {
				return err
			}
			return h.refresh(ctx)
		}
		if prev != nil && held.Incarnation == prev.Incarnation && held.LastSeen.After(prev.LastSeen) {
			return fmt.Errorf("%w: %v, and it heartbeats: another slotpoller process runs as %q; give each node a unique node.name",
				ErrNameInUse, held, h.opts.Name)
		}
		// Look again once its heartbeat would be older than the TTL, and
		// never sooner than a heartbeat, which a live holder sends.
		wait := max(h.opts.TTL-held.Age, h.opts.Heartbeat) + h.opts.Heartbeat/4
		if prev == nil || held.Incarnation != prev.Incarnation {
			h.opts.Logger.Warn("node name is held by another process; waiting to see whether it is alive (a restart after a crash takes the name once the old heartbeat is older than the TTL)",
				"node", h.opts.Name, "holder", held.Incarnation, "last_seen_ago", held.Age, "ttl", h.opts.TTL, "wait", wait)
		}
		prev = held
		if err := clock.Sleep(ctx, h.opts.Clock, wait); err != nil {
			return err
		}
	}
}

// Beat writes one heartbeat and reads the membership.
func (h *Heartbeats) Beat(ctx context.Context) error {
	ok, err := h.store.NodeHeartbeat(ctx, h.state())
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("node %q: %w", h.opts.Name, ErrReplaced)
	}
	return h.refresh(ctx)
}

func (h *Heartbeats) refresh(ctx context.Context) error {
	nodes, _, err := h.store.Nodes(ctx, h.opts.TTL)
	if err != nil {
		return err
	}
	m := Membership{Read: h.opts.Clock.Now(), OK: true}
	for _, n := range nodes {
		if n.Live {
			m.Members = append(m.Members, Member{Name: n.Name, Incarnation: n.Incarnation, Capacity: n.Capacity, Free: n.Free,
				Backlog: n.Backlog, Tasks: n.Tasks})
		}
	}
	h.mu.Lock()
	h.membership = m
	h.mu.Unlock()
	if h.opts.Changed != nil {
		h.opts.Changed(m)
	}
	return nil
}

// Run heartbeats every interval until ctx ends. Database errors are logged
// and retried at the next beat: a node that cannot reach its database simply
// stops being live for the others. It returns ErrReplaced if another process
// took the node's row.
func (h *Heartbeats) Run(ctx context.Context) error {
	failing := false
	for {
		if err := clock.Sleep(ctx, h.opts.Clock, h.opts.Heartbeat); err != nil {
			return err
		}
		err := h.Beat(ctx)
		switch {
		case errors.Is(err, ErrReplaced):
			return err
		case err != nil && ctx.Err() == nil:
			if !failing {
				h.opts.Logger.Error("heartbeat failed; the other nodes will count this node out after the TTL if it goes on",
					"err", err, "ttl", h.opts.TTL)
			}
			failing = true
		case err == nil && failing:
			h.opts.Logger.Info("heartbeat restored")
			failing = false
		}
	}
}

// Membership returns the live members as last read. A reading older than
// the TTL is reported empty: a node cut off from the database must not keep
// acting on an old picture of the farm.
func (h *Heartbeats) Membership() Membership {
	h.mu.Lock()
	m := h.membership
	h.mu.Unlock()
	if m.OK && h.opts.Clock.Now().Sub(m.Read) > h.opts.TTL {
		return Membership{Read: m.Read}
	}
	return m
}

// SignalBacklog tells the farm this node left due work behind.
func (h *Heartbeats) SignalBacklog(ctx context.Context, hold time.Duration) error {
	return h.store.NodeSignalBacklog(ctx, h.opts.Name, h.incarnation, hold)
}

// Leave marks the node as gone.
func (h *Heartbeats) Leave(ctx context.Context) error {
	return h.store.NodeLeave(ctx, h.opts.Name, h.incarnation)
}
