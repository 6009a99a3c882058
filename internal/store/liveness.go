package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"
)

// sessionLocker is a dialect whose nodes can prove they are alive by a
// session-scoped lock that the database releases when the session ends:
// held, it costs no statement at all.
type sessionLocker interface {
	// TryLock is a statement taking the lock of one key (the ?) for the
	// session, answering true or false at once.
	TryLock() string
	// LockHeld is an SQL condition: the session lock under the key in
	// column col is held by some session. It must read the lock table once
	// per statement, not once per row.
	LockHeld(col string) string
}

// TryLock takes the node's advisory lock in the two-key form: the first
// key, 21255, keeps slotpoller's node locks apart from any other advisory
// locks an application takes in the same database (the migration lock uses
// the one-key form).
func (Postgres) TryLock() string { return "SELECT pg_try_advisory_lock(21255, CAST(? AS integer))" }

// LockHeld reads pg_locks in an uncorrelated subquery, which PostgreSQL
// runs once per statement (a hashed subplan). A row without a key is a
// node that heartbeats instead (an older version): the condition holds.
func (Postgres) LockHeld(col string) string {
	return "(" + col + " IS NULL OR " + col + ` IN (SELECT CAST(l.objid AS bigint) FROM pg_locks l
  WHERE l.locktype = 'advisory' AND l.classid = 21255 AND l.objsubid = 2 AND l.granted))`
}

// SessionLocks reports whether the database can hold a node's liveness by
// a session lock (NodeLockTake); where it cannot, nodes heartbeat.
func (s *Store) SessionLocks() bool {
	_, ok := s.d.(sessionLocker)
	return ok
}

// live is the registry's liveness rule for the nodes row under alias a (""
// or "n."), judged by the database clock: the node is up and within the
// time its last write promised (live_until) or heartbeated within the TTL
// (the one ?, minus the TTL in milliseconds); where the dialect has session
// locks, the lock it took is still held. The lock catches a dead process at
// once; live_until catches a frozen one, whose connection and lock live on.
func (s *Store) live(a string) string {
	q := a + "state = 'up' AND (" + a + "live_until > {now} OR " + a + "last_seen > {now+?})"
	if l, ok := s.d.(sessionLocker); ok {
		q += " AND " + l.LockHeld(a+"lock_key")
	}
	return q
}

// NodeLock is a node's liveness lock, held by a connection of its own
// taken out of the pool for as long as the node runs. The same session
// listens for the farm's notes (NodeNotify), which wake a node between its
// turns at no cost while nothing happens.
type NodeLock struct {
	conn *sql.Conn
	Key  int64

	notes  chan string
	due    chan struct{} // NoteDue, apart: a flood of enqueues crowds out no other note
	lost   chan struct{} // closed when the session ended under the listener
	stop   context.CancelFunc
	done   chan struct{}
	closed bool
}

// Notes delivers the payloads of the farm's notes, as they arrive (a slow
// reader misses some: a note is a nudge to read the registry, not data).
func (l *NodeLock) Notes() <-chan string { return l.notes }

// Due delivers NoteDue, the note of an enqueue, apart from the others:
// notes heard before the reader took the last one are one wake-up, and at
// a thousand enqueues a second they neither fill the buffer of Notes nor
// crowd out a backlog's note or a task's.
func (l *NodeLock) Due() <-chan struct{} { return l.due }

// Lost is closed when the lock's session ended (the database restarted, the
// connection broke): the lock is gone with it.
func (l *NodeLock) Lost() <-chan struct{} { return l.lost }

// NodeLockTake takes the session lock under key on a connection of its
// own. It reports false when another session holds that key (the caller
// draws another).
func (s *Store) NodeLockTake(ctx context.Context, key int64) (*NodeLock, bool, error) {
	d, ok := s.d.(sessionLocker)
	if !ok {
		return nil, false, fmt.Errorf("take node lock: the %s dialect has no session locks", s.d.Name())
	}
	listener, ok := s.drv.(NotesListener)
	if !ok {
		return nil, false, fmt.Errorf("take node lock: the %s driver cannot listen for the farm's notes", s.d.Name())
	}
	conn, err := s.pool.Conn(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("take node lock: open its connection: %w", err)
	}
	var got bool
	s.stmts.Add(1)
	if err := conn.QueryRowContext(ctx, s.statement(d.TryLock()), key).Scan(&got); err != nil {
		discard(conn)
		return nil, false, fmt.Errorf("take node lock: %w", err)
	}
	if !got {
		discard(conn)
		return nil, false, nil
	}
	l := &NodeLock{conn: conn, Key: key, notes: make(chan string, 16), due: make(chan struct{}, 1), lost: make(chan struct{}), done: make(chan struct{})}
	var lctx context.Context
	lctx, l.stop = context.WithCancel(context.Background())
	ready := make(chan error, 1)
	go l.listen(lctx, listener, ready)
	if err := <-ready; err != nil {
		l.Release()
		return nil, false, fmt.Errorf("take node lock: listen for the farm's notes: %w", err)
	}
	return l, true, nil
}

// listen holds the lock's connection, listening on the farm's channel
// through the driver, until Release or until the session ends.
func (l *NodeLock) listen(ctx context.Context, listener NotesListener, ready chan<- error) {
	defer close(l.done)
	started := false
	err := l.conn.Raw(func(dc any) error {
		return listener.ListenNotes(ctx, dc, notesChannel, func() {
			started = true
			ready <- nil
		}, func(payload string) {
			if payload == NoteDue {
				select {
				case l.due <- struct{}{}:
				default:
				}
				return
			}
			select {
			case l.notes <- payload:
			default:
			}
		})
	})
	if !started {
		if err == nil {
			err = errors.New("the listener stopped before it began")
		}
		ready <- err
	}
	if ctx.Err() == nil {
		close(l.lost)
	}
}

// notesChannel names the farm's notification channel: one per schema, so
// that farms sharing a database do not wake each other. The jobs table's
// trigger (NoteDue) names it by the table's schema, which is the nodes'
// current_schema(): the first schema of their search_path holds the tables.
const notesChannel = `'slotpoller:' || current_schema()`

// notifier is a dialect whose nodes hear the farm's notes between their
// turns (PostgreSQL's NOTIFY, heard on the node lock's connection).
type notifier interface {
	// Notify is the statement that sends a note (the ?) to every node.
	Notify() string
}

func (Postgres) Notify() string { return `SELECT pg_notify(` + notesChannel + `, ?)` }

// waker is a dialect with session locks and no notes (MySQL), whose nodes
// are woken between their turns all the same: each node's lock connection
// waits in one statement (the driver's ListenNotes), and a wake interrupts
// it, which the node hears as NoteWake. A wake carries no payload, and
// costs a statement per node woken: it is for the backlog, which every
// node must hear of before its own turn, not for every enqueue.
type waker interface {
	// Listening lists the connection ids of the farm's nodes waiting for a
	// wake in their lock's connection, whose statement is the ?.
	Listening() string
	// Wake interrupts the statement of the connection whose id is the ?.
	Wake() string
}

// NoteWake is what a node hears when it is woken without a note (MySQL):
// something changed that the node learns by reading the registry.
const NoteWake = "wake"

// wakeRefusals is a driver that tells a wake that found its listener gone
// (the node stopped between the listing and the wake: nothing to wake).
type wakeRefusals interface {
	ListenerGone(err error) bool
}

// HearsNotes reports whether the farm's notes, with their payloads, reach
// nodes between their turns (NodeNotify, NodeLock.Notes).
func (s *Store) HearsNotes() bool {
	_, ok := s.d.(notifier)
	return ok && s.SessionLocks()
}

// HearsWakes reports whether a node hears of news between its turns at all:
// by a note (HearsNotes) or by a wake without a payload (MySQL, NoteWake).
// Where it does not, nodes find out at their turns and heartbeats.
func (s *Store) HearsWakes() bool {
	_, ok := s.d.(waker)
	return s.HearsNotes() || ok && s.SessionLocks()
}

// NodeNotify sends a note to every node of the farm that listens. On
// PostgreSQL it is one statement, and each node hears the payload. On
// MySQL every listening node is woken and hears NoteWake instead: a
// statement to list them and one for each. Elsewhere it sends nothing:
// nodes find out at their turns there.
func (s *Store) NodeNotify(ctx context.Context, payload string) error {
	if !s.SessionLocks() {
		return nil
	}
	switch d := s.d.(type) {
	case notifier:
		return s.retry(ctx, func() error {
			_, err := s.exec(ctx, s.statement(d.Notify()), payload)
			return err
		})
	case waker:
		return s.wakeNodes(ctx, d)
	}
	return nil
}

// wakeNodes wakes every node listening in the farm's database, this one's
// own listener too (as a note reaches its sender on PostgreSQL). A node
// that stopped meanwhile is passed over; a wake that fails otherwise (the
// login may not interrupt that connection) is reported after the others
// were tried: those nodes find out at their turns.
func (s *Store) wakeNodes(ctx context.Context, d waker) error {
	ids, err := queryAll(ctx, s, "list the nodes listening for wakes", s.statement(d.Listening()), []any{MySQLListening},
		func(r rowScanner) (int64, error) {
			var id int64
			return id, r.Scan(&id)
		})
	if err != nil {
		return err
	}
	gone, _ := s.drv.(wakeRefusals)
	var errs []error
	for _, id := range ids {
		_, err := s.exec(ctx, s.statement(d.Wake()), id)
		if err != nil && (gone == nil || !gone.ListenerGone(err)) {
			errs = append(errs, fmt.Errorf("wake the node listening on connection %d: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// Release ends the lock's session: the database releases the lock with it.
// The connection is closed rather than put back in the pool, where the lock
// would stay held.
func (l *NodeLock) Release() {
	if l == nil || l.closed {
		return
	}
	l.closed = true
	l.stop()
	<-l.done
	discard(l.conn)
}

// discard closes a connection taken from the pool for good.
func discard(c *sql.Conn) {
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
	_ = c.Close()
}

// TurnReading is what a node reads in its turn: the registry, the database
// time, and hints that say which of the turn's duties have anything to do.
type TurnReading struct {
	Nodes []Node
	Now   time.Time
	// Mine: the write found the node's row still its own. False means
	// another process checked in under its name, or it was marked left.
	Mine bool
	// Jobs: a ready job is due, or a running one's lease ran out: the turn
	// polls.
	Jobs bool
	// Schedules: a schedule fires within the lookahead: its occurrences are
	// written.
	Schedules bool
	// Tasks: a task waits for an owner, or a deleted one for its owner to
	// let go: the turn balances.
	Tasks bool
	// TaskLeaseEnds: a running task's lease, not renewed so far, ends this
	// soon (within the task window; 0: none does). Its owner stopped
	// renewing (died, froze, lost the database): the turn may wait for it
	// and give the task away at once rather than leave it to the next turn.
	TaskLeaseEnds time.Duration
}

// NodeTurn is a node's turn in the registry: it refreshes the node's row
// (as NodeHeartbeat), then reads the registry and the hints in one SELECT.
// An idle farm's turn is these two statements and nothing else.
func (s *Store) NodeTurn(ctx context.Context, n NodeState, ttl, lookahead, taskWindow time.Duration) (TurnReading, error) {
	var r TurnReading
	mine, err := s.NodeHeartbeat(ctx, n)
	if err != nil {
		return r, fmt.Errorf("turn of node %q: %w", n.Name, err)
	}
	r.Mine = mine
	// Each hint is an EXISTS on an index (due, lease, start_by, the
	// schedules' next fire, the tasks' state), uncorrelated: read once.
	// Whether a job is due is the earliest ready run_at, the due index's
	// first entry, against the clock. An EXISTS of a due row let
	// PostgreSQL's planner, which counts the retained jobs' past run_at
	// among the ready ones, walk the table for the first due row, through
	// every row when none was (and its clock is no index bound).
	jobsHint := "(SELECT MIN(run_at) FROM {jobs} WHERE state = 'ready') <= {now}"
	var args []any
	for _, r := range reclaimable {
		jobsHint += "\n    OR EXISTS (SELECT 1 FROM {jobs} WHERE " + r.cond + ")"
		args = append(args, r.args...)
	}
	args = append(args, millis(lookahead), millis(taskWindow))
	hints := `,
  CASE WHEN ` + jobsHint + ` THEN 1 ELSE 0 END,
  CASE WHEN EXISTS (SELECT 1 FROM {schedules} WHERE enabled = 1 AND next_fire_at <= {now+?}) THEN 1 ELSE 0 END,
  CASE WHEN EXISTS (SELECT 1 FROM {tasks} WHERE state = 'created')
    OR EXISTS (SELECT 1 FROM {tasks} WHERE state = 'running' AND (lease_until IS NULL OR lease_until < {now}))
    OR EXISTS (SELECT 1 FROM {tasks} WHERE state = 'deleting' AND (owner IS NULL OR lease_until IS NULL OR lease_until < {now}))
    THEN 1 ELSE 0 END,
  COALESCE((SELECT MIN(` + s.d.MillisBetween(s.d.Now(), "lease_until") + `) FROM {tasks}
    WHERE state = 'running' AND lease_until >= {now} AND lease_until < {now+?}), 0)`
	var jobs, schedules, tasks int
	var leaseEndsMS int64
	nodes, now, _, err := s.readNodes(ctx, "read node registry in its turn", hints, args, ttl,
		&jobs, &schedules, &tasks, &leaseEndsMS)
	if err != nil {
		return r, err
	}
	r.Nodes, r.Now = nodes, now
	r.Jobs, r.Schedules, r.Tasks = jobs == 1, schedules == 1, tasks == 1
	r.TaskLeaseEnds = time.Duration(max(leaseEndsMS, 0)) * time.Millisecond
	return r, nil
}

// nullInt64 is n, or NULL when n is 0.
func nullInt64(n int64) sql.NullInt64 { return sql.NullInt64{Int64: n, Valid: n != 0} }
