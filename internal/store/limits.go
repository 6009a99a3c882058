package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// Limits: what the nodes' config says of a queue beyond its routes — its
// priority, how many of its jobs may run across the farm and on one node,
// and how many may start per period. A queue with any of them set is
// managed (queues.managed = 1).
//
// Invariants:
//   - A job of a managed queue is claimed only by JobsClaimManaged, in a
//     transaction that first locks the queue's row: claims of one managed
//     queue take turns. The plain claim (JobsClaim) and the start-now
//     insert never take one (claimable, notHeld). So the running jobs a
//     managed claim counts after its lock are every running job of the
//     queue: none can start between the count and its own claim.
//   - Only a claim moves a job to running; a finish, a release, a reclaim
//     or a cancel only ever lowers the count. So a limit counted under the
//     lock is never exceeded, however many nodes claim at once, and a
//     lowered limit only stops new starts until the count is under it.
//   - A dead node's jobs count as running until they are reclaimed (their
//     hold has then ended, and with it their calls).
//   - The rate is counted in fixed windows of the database clock: window k
//     of a queue with period P is [k·P, (k+1)·P) in milliseconds since
//     1970 UTC. At most Rate of the queue's jobs start in each window; the
//     count (rate_used of rate_window) is written under the same lock as
//     the claim, in the same transaction.
//   - Priorities order what one claim takes: a managed queue's jobs by its
//     priority, every other job at 0; then by run time.

// QueueSettings is what the config says of one queue beyond its routes.
// A zero limit is no limit.
type QueueSettings struct {
	Name string
	// Priority orders claims: higher first, then by run time; the jobs of
	// a queue without settings are at 0.
	Priority int
	// Limit is the most of the queue's jobs running across the farm.
	Limit int
	// NodeLimit is the most of the queue's jobs running on one node.
	NodeLimit int
	// Rate is the most of the queue's jobs started in one window of
	// RatePeriod.
	Rate       int
	RatePeriod time.Duration
}

// Managed is whether the queue's jobs are claimed under its lock.
func (q QueueSettings) Managed() bool {
	return q.Priority != 0 || q.Limit > 0 || q.NodeLimit > 0 || (q.Rate > 0 && q.RatePeriod > 0)
}

// QueueSettingsPut replaces every queue's settings with settings, in one
// transaction: a node writes its config's at start, as it writes its
// routes. A queue not in settings keeps its pause and loses its limits.
func (s *Store) QueueSettingsPut(ctx context.Context, settings []QueueSettings) error {
	clear := s.statement(`UPDATE {queues} SET managed = 0, priority = 0, max_running = NULL, max_per_node = NULL,
  rate_limit = NULL, rate_period_ms = NULL WHERE managed = 1`)
	// A new period starts its count afresh: window numbers of another
	// period are not comparable (a longer period's are smaller, and would
	// never pass the stored one).
	set := `rate_window = CASE WHEN rate_period_ms = ? THEN rate_window ELSE 0 END,
  rate_used = CASE WHEN rate_period_ms = ? THEN rate_used ELSE 0 END,
  managed = ?, priority = ?, max_running = ?, max_per_node = ?, rate_limit = ?, rate_period_ms = ?`
	upd := s.statement(`UPDATE {queues} SET ` + set + ` WHERE name = ?`)
	ins := s.statement(`INSERT INTO {queues} (name, paused, managed, priority, max_running, max_per_node, rate_limit, rate_period_ms)
SELECT ?, 0, ?, ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM {queues} WHERE name = ?)`)
	put := func(tx *sql.Tx) error {
		if _, err := s.txExec(ctx, tx, clear); err != nil {
			return err
		}
		for _, q := range settings {
			if !q.Managed() {
				continue
			}
			managed, rate, period := 1, nullInt(0), nullInt(0)
			if q.Rate > 0 && q.RatePeriod > 0 {
				rate, period = nullInt(q.Rate), nullInt64(millis(q.RatePeriod))
			}
			vals := []any{managed, q.Priority, nullInt(q.Limit), nullInt(q.NodeLimit), rate, period}
			n, err := s.txExec(ctx, tx, upd, append(append([]any{period, period}, vals...), q.Name)...)
			if err != nil {
				return err
			}
			if n == 0 {
				if _, err := s.txExec(ctx, tx, ins, append(append([]any{q.Name}, vals...), q.Name)...); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := s.inTx(ctx, put)
	if err != nil && s.drv.UniqueViolation(err) {
		// Another node starting at the same time wrote a queue's first
		// row between our UPDATE and INSERT: the row exists now.
		err = s.inTx(ctx, put)
	}
	if err != nil {
		return fmt.Errorf("write the settings of %d queues: %w", len(settings), err)
	}
	return nil
}

// rateWindow is the number of the current rate window of a queue row
// (alias q, or the table itself): the database's epoch milliseconds
// divided by its period; 0 when it has no rate.
func rateWindow(q string) string {
	return `CASE WHEN ` + q + `.rate_period_ms > 0 THEN {now_ms} / ` + q + `.rate_period_ms ELSE 0 END`
}

// managedRoom is a managed queue as a claim sees it under its lock.
type managedRoom struct {
	name     string
	priority int
	room     int // how many of its jobs this claim may start
	// The limits and counts room is made of; the rate's are of the
	// window rateWindow, until fit moves them to the claim's.
	maxRunning, maxPerNode, rateLimit sql.NullInt64
	running, mine, rateUsed           int64
	rateWindow, ratePeriodMS          int64
}

// fit computes the room of a claim whose jobs start at at: the starts
// counted so far belong to its window unless that window has ended (a
// count of a later window, after a step back of the clock, still counts).
func (m *managedRoom) fit(at time.Time) {
	if m.ratePeriodMS > 0 && m.rateWindow < at.UnixMilli()/m.ratePeriodMS {
		m.rateUsed = 0
	}
	m.room = roomOf(m.maxRunning, m.running, m.maxPerNode, m.mine, m.rateLimit, m.rateUsed)
}

// JobsClaimManaged claims up to limit due jobs for owner, as JobsClaim
// does: the managed queues' within their limits and rates, and, with
// others, the other queues' as the plain claim would; all in priority
// order, then by run time. It is one transaction: lock the managed
// queues' rows, count their running jobs and their starts in the window,
// claim, count the starts. Without others it does not look at the other
// queues' jobs: in the transaction of SQL Server and SQLite that look
// steps over every due job of a managed queue (each one's queue checked),
// a backlog's worth per claim.
func (s *Store) JobsClaimManaged(ctx context.Context, owner, ownerNode string, limit int, hold Hold, others bool) ([]Claim, error) {
	if limit <= 0 {
		return nil, nil
	}
	if f, ok := s.d.(managedClaimer); ok {
		rows, err := queryAll(ctx, s, "claim jobs of limited queues", s.statement(f.ClaimManaged()),
			append(append([]any{owner, ownerNode, limit}, hold.args()...), others), scanClaimRow)
		if err != nil {
			return nil, err
		}
		return s.setAsideOdd(ctx, owner, rows)
	}
	// The lock reads no clock: a statement's clock is read as it starts,
	// and this one may wait. The claim's start time is read after the
	// rooms (so a job they see finished ended before it), and its starts
	// count in that time's window, which only ever moves forward.
	lock := s.statement(`UPDATE {queues} SET rate_used = rate_used WHERE managed = 1 AND paused = 0`)
	now := s.statement(`SELECT {now}`)
	read := s.statement(`SELECT q.name, q.priority, q.max_running, q.max_per_node, q.rate_limit, q.rate_used, q.rate_window, q.rate_period_ms,
  (SELECT COUNT(*) FROM {jobs} r WHERE r.queue = q.name AND r.state = 'running'),
  (SELECT COUNT(*) FROM {jobs} r WHERE r.queue = q.name AND r.state = 'running' AND r.owner_node = ?)
FROM {queues} q
WHERE q.managed = 1 AND q.paused = 0
  AND EXISTS (SELECT 1 FROM {jobs} d WHERE d.queue = q.name AND d.state = 'ready' AND d.run_at <= {now})
ORDER BY q.name`)
	var rows []claimRow
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		rows = nil
		if _, err := s.txExec(ctx, tx, lock); err != nil {
			return err
		}
		rooms, err := s.managedRooms(ctx, tx, read, ownerNode)
		if err != nil {
			return err
		}
		var at dbTime
		s.stmts.Add(1)
		if err := tx.QueryRowContext(ctx, now).Scan(&at); err != nil {
			return err
		}
		for i := range rooms {
			rooms[i].fit(at.T)
		}
		if s.writesBack() {
			rows, err = s.managedClaimIDs(ctx, tx, rooms, owner, ownerNode, limit, hold, others, at.T)
		} else if q, args := s.managedClaimStatement(rooms, owner, ownerNode, limit, hold, others, at.T); q != "" {
			rows, err = s.txQueryClaims(ctx, tx, q, args)
		}
		if err != nil {
			return err
		}
		return s.countStarts(ctx, tx, rooms, rows, at.T)
	})
	if err != nil {
		return nil, fmt.Errorf("claim jobs of limited queues: %w", err)
	}
	return s.setAsideOdd(ctx, owner, rows)
}

// managedRooms reads, under the lock, how many jobs of each managed queue
// with due work this claim may start.
func (s *Store) managedRooms(ctx context.Context, tx *sql.Tx, read, ownerNode string) ([]managedRoom, error) {
	s.stmts.Add(1)
	rs, err := tx.QueryContext(ctx, read, s.args([]any{ownerNode})...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []managedRoom
	for rs.Next() {
		var m managedRoom
		var window, period sql.NullInt64
		if err := rs.Scan(&m.name, &m.priority, &m.maxRunning, &m.maxPerNode, &m.rateLimit, &m.rateUsed, &window, &period,
			&m.running, &m.mine); err != nil {
			return nil, err
		}
		m.rateWindow, m.ratePeriodMS = window.Int64, period.Int64
		out = append(out, m)
	}
	return out, rs.Err()
}

// roomOf is how many more jobs may start under each limit that is set:
// the least of them, never below 0 (a lowered limit), and -1 when none is.
func roomOf(maxRunning sql.NullInt64, running int64, maxPerNode sql.NullInt64, mine int64, rate sql.NullInt64, used int64) int {
	room := int64(-1)
	for _, l := range []struct {
		limit sql.NullInt64
		used  int64
	}{{maxRunning, running}, {maxPerNode, mine}, {rate, used}} {
		if !l.limit.Valid {
			continue
		}
		r := max(l.limit.Int64-l.used, 0)
		if room < 0 || r < room {
			room = r
		}
	}
	return int(room)
}

// managedClaimStatement is the claim of one managed claim: a branch per
// managed queue with room (its due jobs in order, at most its room), with
// others one for the jobs of every other queue (the plain claim's
// candidates), and the first limit of them by priority, then run time;
// "" when there is no branch. Its jobs start at at, the time read under
// the lock.
func (s *Store) managedClaimStatement(rooms []managedRoom, owner, ownerNode string, limit int, hold Hold, others bool, at time.Time) (string, []any) {
	picked, pargs := s.managedPick(rooms, limit, others)
	if picked == "" {
		return "", nil
	}
	q := s.statement(`UPDATE {jobs} SET state = 'running', owner = ?, owner_node = ?, token = token + ` + bumpBelow("token", maxToken) + `,
  attempt = attempt + ` + bumpBelow("attempt", maxAttempt) + `, started_at = ?, start_by = NULL, lease_until = {now+hold}
{output ` + claimedColumns + `}
WHERE state = 'ready' AND id IN (` + picked + `)
{returning ` + claimedColumns + `}`)
	return q, append(append([]any{owner, ownerNode, s.d.TimeArg(at)}, hold.args()...), pargs...)
}

// managedClaimIDs is the managed claim where the dialect writes back: the
// pick, read without locks, then its rows still ready locked in id order
// (skipping those another claim holds), claimed at at and read back.
func (s *Store) managedClaimIDs(ctx context.Context, tx *sql.Tx, rooms []managedRoom, owner, ownerNode string, limit int, hold Hold, others bool, at time.Time) ([]claimRow, error) {
	picked, pargs := s.managedPick(rooms, limit, others)
	if picked == "" {
		return nil, nil
	}
	ids, err := s.txIDs(ctx, tx, s.statement(picked), pargs)
	if err != nil {
		return nil, err
	}
	if ids, err = s.lockReady(ctx, tx, ids); err != nil {
		return nil, err
	}
	return s.claimIDs(ctx, tx, ids, owner, ownerNode, hold, &at)
}

// managedPick is the SELECT of the ids a managed claim takes, and its
// arguments; "" when there is nothing to look at (no room, and not the
// other queues).
func (s *Store) managedPick(rooms []managedRoom, limit int, others bool) (string, []any) {
	hint := ""
	if h, ok := s.d.(scheduleLocker); ok {
		hint = h.ScheduleHint()
	}
	var branches []string
	var args []any
	for _, m := range rooms {
		n := m.room
		if n == 0 {
			continue
		}
		if n < 0 || n > limit {
			n = limit
		}
		b, bargs := rowLimit(s.d, `SELECT c.id, c.run_at FROM {jobs} c
    WHERE c.queue = ? AND c.state = 'ready' AND c.run_at <= {now} AND `+exclusiveOK("c", hint)+`
    ORDER BY c.run_at, c.id`, []any{m.name}, n)
		branches = append(branches, `SELECT b.id, b.run_at, CAST(? AS INTEGER) AS pr FROM (`+b+`) b`)
		args = append(append(args, m.priority), bargs...)
	}
	if others {
		b, bargs := rowLimit(s.d, `SELECT c.id, c.run_at FROM {jobs} c
    WHERE c.state = 'ready' AND c.run_at <= {now} AND `+claimable("c", hint)+`
    ORDER BY c.run_at, c.id`, nil, limit)
		branches = append(branches, `SELECT b.id, b.run_at, 0 AS pr FROM (`+b+`) b`)
		args = append(args, bargs...)
	}
	if len(branches) == 0 {
		return "", nil
	}
	return rowLimit(s.d, `SELECT p.id FROM (`+strings.Join(branches, "\nUNION ALL ")+`) p ORDER BY p.pr DESC, p.run_at, p.id`, args, limit)
}

// managedClaimer is a dialect that runs the managed claim in one round
// trip, as a function the schema defines: the same steps, in the same
// order, as JobsClaimManaged's transaction. Parameters: owner, owner_node,
// limit, and the hold (Hold.args).
type managedClaimer interface {
	ClaimManaged() string
}

// scheduleLocker is a dialect whose claims lock the row of an exclusive
// schedule whose occurrence they look at (see exclusiveOK): the managed
// claim takes such occurrences under the same hint as the plain one.
type scheduleLocker interface {
	ScheduleHint() string
}

// txQueryClaims runs a claim in tx and reads its rows.
func (s *Store) txQueryClaims(ctx context.Context, tx *sql.Tx, q string, args []any) ([]claimRow, error) {
	s.stmts.Add(1)
	rs, err := tx.QueryContext(ctx, q, s.args(args)...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []claimRow
	for rs.Next() {
		r, err := scanClaimRow(rs)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

// countStarts adds this claim's starts, made at at, to the rate windows
// of the queues that have a rate: to the count of at's window, a count of
// an ended window starting afresh.
func (s *Store) countStarts(ctx context.Context, tx *sql.Tx, rooms []managedRoom, rows []claimRow, at time.Time) error {
	started := map[string]int{}
	for _, r := range rows {
		started[r.claim.Queue]++
	}
	upd := s.statement(`UPDATE {queues} SET rate_used = CASE WHEN rate_window >= ? THEN rate_used ELSE 0 END + ?,
  rate_window = CASE WHEN rate_window >= ? THEN rate_window ELSE ? END
WHERE name = ?`)
	for _, m := range rooms {
		if n := started[m.name]; m.rateLimit.Valid && m.ratePeriodMS > 0 && n > 0 {
			k := at.UnixMilli() / m.ratePeriodMS
			if _, err := s.txExec(ctx, tx, upd, k, n, k, k, m.name); err != nil {
				return err
			}
		}
	}
	return nil
}
