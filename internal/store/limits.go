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
	set := `managed = ?, priority = ?, max_running = ?, max_per_node = ?, rate_limit = ?, rate_period_ms = ?`
	upd := s.statement(`UPDATE {queues} SET ` + set + ` WHERE name = ?`)
	ins := s.statement(`INSERT INTO {queues} (name, paused, managed, priority, max_running, max_per_node, rate_limit, rate_period_ms)
SELECT ?, 0, ?, ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM {queues} WHERE name = ?)`)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
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
			n, err := s.txExec(ctx, tx, upd, append(vals, q.Name)...)
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
	})
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
	rate     bool
}

// JobsClaimManaged claims up to limit due jobs for owner, as JobsClaim
// does, from every queue: the managed queues within their limits and
// rates, the others as the plain claim would; all in priority order, then
// by run time. It is one transaction: lock the managed queues that have
// due work (rolling their rate windows), count their running jobs, claim,
// count the starts.
func (s *Store) JobsClaimManaged(ctx context.Context, owner, ownerNode string, limit int, hold Hold) ([]Claim, error) {
	if limit <= 0 {
		return nil, nil
	}
	if f, ok := s.d.(managedClaimer); ok {
		rows, err := queryAll(ctx, s, "claim jobs of limited queues", s.statement(f.ClaimManaged()),
			append([]any{owner, ownerNode, limit}, hold.args()...), scanClaimRow)
		if err != nil {
			return nil, err
		}
		return s.setAsideOdd(ctx, owner, rows)
	}
	lock := s.statement(`UPDATE {queues} SET rate_used = CASE WHEN rate_window = ` + rateWindow("{queues}") + ` THEN rate_used ELSE 0 END,
  rate_window = ` + rateWindow("{queues}") + `
WHERE managed = 1 AND paused = 0`)
	read := s.statement(`SELECT q.name, q.priority, q.max_running, q.max_per_node, q.rate_limit, q.rate_used,
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
		if s.writesBack() {
			rows, err = s.managedClaimIDs(ctx, tx, rooms, owner, ownerNode, limit, hold)
		} else {
			q, args := s.managedClaimStatement(rooms, owner, ownerNode, limit, hold)
			rows, err = s.txQueryClaims(ctx, tx, q, args)
		}
		if err != nil {
			return err
		}
		return s.countStarts(ctx, tx, rooms, rows)
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
		var maxRunning, maxPerNode, rateLimit sql.NullInt64
		var rateUsed, running, mine int64
		if err := rs.Scan(&m.name, &m.priority, &maxRunning, &maxPerNode, &rateLimit, &rateUsed, &running, &mine); err != nil {
			return nil, err
		}
		m.room, m.rate = roomOf(maxRunning, running, maxPerNode, mine, rateLimit, rateUsed), rateLimit.Valid
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
// managed queue with room (its due jobs in order, at most its room), one
// for the jobs of every other queue (the plain claim's candidates), and
// the first limit of them by priority, then run time.
func (s *Store) managedClaimStatement(rooms []managedRoom, owner, ownerNode string, limit int, hold Hold) (string, []any) {
	picked, pargs := s.managedPick(rooms, limit)
	q := s.statement(`UPDATE {jobs} SET state = 'running', owner = ?, owner_node = ?, token = token + ` + bumpBelow("token", maxToken) + `,
  attempt = attempt + ` + bumpBelow("attempt", maxAttempt) + `, started_at = {now}, start_by = NULL, lease_until = {now+hold}
{output ` + claimedColumns + `}
WHERE state = 'ready' AND id IN (` + picked + `)
{returning ` + claimedColumns + `}`)
	return q, append(append([]any{owner, ownerNode}, hold.args()...), pargs...)
}

// managedClaimIDs is the managed claim where the dialect writes back: the
// pick, read without locks, then its rows still ready locked in id order
// (skipping those another claim holds), claimed and read back.
func (s *Store) managedClaimIDs(ctx context.Context, tx *sql.Tx, rooms []managedRoom, owner, ownerNode string, limit int, hold Hold) ([]claimRow, error) {
	picked, pargs := s.managedPick(rooms, limit)
	ids, err := s.txIDs(ctx, tx, s.statement(picked), pargs)
	if err != nil {
		return nil, err
	}
	if ids, err = s.lockReady(ctx, tx, ids); err != nil {
		return nil, err
	}
	return s.claimIDs(ctx, tx, ids, owner, ownerNode, hold)
}

// managedPick is the SELECT of the ids a managed claim takes, and its
// arguments.
func (s *Store) managedPick(rooms []managedRoom, limit int) (string, []any) {
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
	b, bargs := rowLimit(s.d, `SELECT c.id, c.run_at FROM {jobs} c
    WHERE c.state = 'ready' AND c.run_at <= {now} AND `+claimable("c", hint)+`
    ORDER BY c.run_at, c.id`, nil, limit)
	branches = append(branches, `SELECT b.id, b.run_at, 0 AS pr FROM (`+b+`) b`)
	args = append(args, bargs...)
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

// countStarts adds this claim's starts to the rate windows of the queues
// that have a rate.
func (s *Store) countStarts(ctx context.Context, tx *sql.Tx, rooms []managedRoom, rows []claimRow) error {
	started := map[string]int{}
	for _, r := range rows {
		started[r.claim.Queue]++
	}
	upd := s.statement(`UPDATE {queues} SET rate_used = rate_used + ? WHERE name = ?`)
	for _, m := range rooms {
		if n := started[m.name]; m.rate && n > 0 {
			if _, err := s.txExec(ctx, tx, upd, n, m.name); err != nil {
				return err
			}
		}
	}
	return nil
}
