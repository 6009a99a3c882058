package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"time"
)

// NodeState is what a node writes about itself at check-in and heartbeat.
type NodeState struct {
	Name        string
	Incarnation string // fresh per process start
	Capacity    int    // concurrent calls it can make
	Free        int    // of which free now
	Offset      time.Duration
	OffsetError time.Duration
	// Turns are the slots the node polled lately, as the dashboard's
	// rotation strip reads them (service encodes them; at most 1000
	// characters).
	Turns string
	// LiveFor is how long the node stays live after this write without
	// another one (live_until = database now + LiveFor). 0 promises nothing:
	// the node heartbeats, and is live while its last heartbeat is younger
	// than the TTL of whoever reads the registry.
	LiveFor time.Duration
	// LockKey is the key of the session lock the node holds (NodeLock);
	// 0 where the dialect has none and the node heartbeats.
	LockKey int64
}

// liveFor is the write's promise in milliseconds, NULL when it makes none
// (then live_until = {now+NULL} is NULL too).
func (n NodeState) liveFor() sql.NullInt64 {
	return sql.NullInt64{Int64: millis(n.LiveFor), Valid: n.LiveFor > 0}
}

// Node is one row of the registry as read back, with liveness judged by the
// database clock.
type Node struct {
	NodeState
	State    string // up | left
	Started  time.Time
	LastSeen time.Time
	Live     bool
	Backlog  bool // the node saw more due work than its share in its last slot
	Tasks    int  // endless tasks its incarnation holds: how it learns it was given one
}

// NodeNameInUse is NodeCheckIn's answer when another incarnation holds the
// node's name and is live: its last heartbeat is younger than the TTL on
// the database clock.
type NodeNameInUse struct {
	Name        string
	Incarnation string        // the holder's
	LastSeen    time.Time     // its last heartbeat, database time
	Age         time.Duration // how long before the check-in, by the database clock
	LiveFor     time.Duration // how much longer its last write keeps it live (0 when only its lock or heartbeat does)
}

func (e *NodeNameInUse) Error() string {
	return fmt.Sprintf("node name %q is held by a live process (incarnation %s, last heartbeat %v ago)",
		e.Name, e.Incarnation, e.Age.Round(time.Millisecond))
}

// NodeCheckIn registers the node under a new incarnation. It takes the
// name's row only when the row is free: its holder is not live by the
// registry's rule (see live: it left, its promise and heartbeat ran out, or
// the database released its session lock), or it is this incarnation's
// already (a check-in sent again). Otherwise it
// returns *NodeNameInUse: two live processes under one name must not evict
// each other. It is an UPDATE, then an INSERT if no row was there, rather
// than a dialect upsert: it is the same SQL everywhere, and a duplicate-key
// error from a racing insert just sends it round again.
func (s *Store) NodeCheckIn(ctx context.Context, n NodeState, ttl time.Duration) error {
	upd := s.statement(`UPDATE {nodes} SET incarnation = ?, state = 'up', capacity = ?, free = ?,
  offset_us = ?, offset_error_us = ?, started_at = {now}, last_seen = {now}, live_until = {now+?}, lock_key = ?,
  left_at = NULL, backlog_until = NULL
WHERE name = ? AND (incarnation = ? OR CASE WHEN ` + s.live("") + ` THEN 1 ELSE 0 END = 0)`)
	holder := s.statement(`SELECT incarnation, last_seen, {now}, CASE WHEN ` + s.live("") + ` THEN 1 ELSE 0 END,
  CASE WHEN live_until > {now} THEN ` + s.d.MillisBetween(s.d.Now(), "live_until") + ` ELSE 0 END
FROM {nodes} WHERE name = ?`)
	ins := s.statement(`INSERT INTO {nodes} (name, incarnation, state, capacity, free, offset_us, offset_error_us, started_at, last_seen,
  live_until, lock_key)
VALUES (?, ?, 'up', ?, ?, ?, ?, {now}, {now}, {now+?}, ?)`)
	for range 5 {
		var res sql.Result
		err := s.retry(ctx, func() (err error) {
			res, err = s.exec(ctx, upd, n.Incarnation, n.Capacity, n.Free, n.Offset.Microseconds(), n.OffsetError.Microseconds(),
				n.liveFor(), nullInt64(n.LockKey), n.Name, n.Incarnation, -millis(ttl))
			return err
		})
		if err != nil {
			return fmt.Errorf("check in node %q: %w", n.Name, err)
		}
		if c, _ := res.RowsAffected(); c > 0 {
			return nil
		}
		var inc string
		var seen, now dbTime
		var live int
		var liveForMS int64
		err = s.retry(ctx, func() error {
			return s.queryRow(ctx, holder, -millis(ttl), n.Name).Scan(&inc, &seen, &now, &live, &liveForMS)
		})
		switch {
		case err == nil && live == 1:
			return &NodeNameInUse{Name: n.Name, Incarnation: inc, LastSeen: seen.T, Age: now.T.Sub(seen.T),
				LiveFor: time.Duration(liveForMS) * time.Millisecond}
		case err == nil:
			continue // freed between the two statements: take it now
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("check in node %q: read who holds the name: %w", n.Name, err)
		}
		err = s.retry(ctx, func() error {
			_, err := s.exec(ctx, ins, n.Name, n.Incarnation, n.Capacity, n.Free, n.Offset.Microseconds(), n.OffsetError.Microseconds(),
				n.liveFor(), nullInt64(n.LockKey))
			return err
		})
		if err == nil {
			return nil
		}
		if !s.drv.UniqueViolation(err) {
			return fmt.Errorf("check in node %q: %w", n.Name, err)
		}
	}
	return fmt.Errorf("check in node %q: the row kept changing under concurrent check-ins", n.Name)
}

// NodeHeartbeat refreshes the node's row (a heartbeat, and the write of a
// turn). It reports false when the row no longer belongs to this
// incarnation (another process checked in under the same name, or the
// node was marked left).
func (s *Store) NodeHeartbeat(ctx context.Context, n NodeState) (bool, error) {
	q := s.statement(`UPDATE {nodes} SET free = ?, offset_us = ?, offset_error_us = ?, turns = ?, last_seen = {now},
  live_until = {now+?}, lock_key = ?
WHERE name = ? AND incarnation = ? AND state = 'up'`)
	var res sql.Result
	err := s.retry(ctx, func() (err error) {
		res, err = s.exec(ctx, q, n.Free, n.Offset.Microseconds(), n.OffsetError.Microseconds(), nullString(n.Turns),
			n.liveFor(), nullInt64(n.LockKey), n.Name, n.Incarnation)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("heartbeat of node %q: %w", n.Name, err)
	}
	c, err := res.RowsAffected()
	return c > 0, err
}

// NodeSignalBacklog marks that the node left due work behind in its slot, so
// that other nodes widen the rotation until it drains.
func (s *Store) NodeSignalBacklog(ctx context.Context, name, incarnation string, hold time.Duration) error {
	q := s.statement(`UPDATE {nodes} SET backlog_until = {now+?} WHERE name = ? AND incarnation = ?`)
	return s.retry(ctx, func() error {
		_, err := s.exec(ctx, q, millis(hold), name, incarnation)
		return err
	})
}

// NodeLeave marks the node as gone, so that it drops out of the rotation at
// once instead of after its TTL.
func (s *Store) NodeLeave(ctx context.Context, name, incarnation string) error {
	q := s.statement(`UPDATE {nodes} SET state = 'left', free = 0, left_at = {now}, backlog_until = NULL
WHERE name = ? AND incarnation = ?`)
	err := s.retry(ctx, func() error {
		_, err := s.exec(ctx, q, name, incarnation)
		return err
	})
	if err != nil {
		return fmt.Errorf("leave node registry as %q: %w", name, err)
	}
	return nil
}

// Nodes reads the registry, judging liveness (see live) with the database
// clock, and returns the database time of the read. The list is sorted by
// name in byte order, the order the rotation uses.
func (s *Store) Nodes(ctx context.Context, ttl time.Duration) ([]Node, time.Time, error) {
	nodes, now, _, err := s.readNodes(ctx, "read node registry", "", nil, ttl)
	return nodes, now, err
}

// readNodes reads the registry with extra columns (each a scalar that is
// the same on every row, read into extra from the first row).
func (s *Store) readNodes(ctx context.Context, what, extraCols string, extraArgs []any, ttl time.Duration,
	extra ...any) ([]Node, time.Time, bool, error) {
	q := s.statement(`SELECT name, incarnation, state, capacity, free, offset_us, offset_error_us, started_at, last_seen,
  CASE WHEN ` + s.live("") + ` THEN 1 ELSE 0 END,
  CASE WHEN backlog_until > {now} THEN 1 ELSE 0 END,
  (SELECT COUNT(*) FROM {tasks} t WHERE t.owner = {nodes}.incarnation AND t.state IN ('running', 'deleting')),
  {now}, turns` + extraCols + `
FROM {nodes}`)
	var now dbTime
	got := false
	args := append([]any{-millis(ttl)}, extraArgs...)
	nodes, err := queryAll(ctx, s, what, q, args, func(r rowScanner) (Node, error) {
		var n Node
		var offUS, errUS int64
		var started, seen dbTime
		var live, backlog int
		var turns sql.NullString
		dest := []any{&n.Name, &n.Incarnation, &n.State, &n.Capacity, &n.Free, &offUS, &errUS,
			&started, &seen, &live, &backlog, &n.Tasks, &now, &turns}
		err := r.Scan(append(dest, extra...)...)
		got = true
		n.Turns = turns.String
		n.Offset, n.OffsetError = time.Duration(offUS)*time.Microsecond, time.Duration(errUS)*time.Microsecond
		n.Started, n.LastSeen, n.Live, n.Backlog = started.T, seen.T, live == 1, backlog == 1
		return n, err
	})
	if err != nil {
		return nil, time.Time{}, false, err
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	return nodes, now.T, got, nil
}
