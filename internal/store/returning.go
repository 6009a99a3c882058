package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// writesBack is a dialect whose writes hand back no rows: no RETURNING
// and no OUTPUT (MySQL: MariaDB returns rows from an INSERT or a DELETE
// only, MySQL from none). There a statement written with {returning} and
// {output} markers is a plain write (the markers expand to nothing), and
// what it would have handed back is read in another way:
//   - an insert of one job: its id is the driver's last insert id; a
//     start-now insert then reads its row by that id;
//   - an insert of many jobs: one statement's rows get consecutive ids from
//     the first (an INSERT of a VALUES list is a "simple insert", whose
//     ids InnoDB allocates at once in every autoinc lock mode), read back
//     from it with their idempotency keys in the caller's transaction;
//   - a claim: in one short READ COMMITTED transaction, the pick locks its
//     rows (SELECT ... FOR UPDATE SKIP LOCKED), the UPDATE writes them by
//     primary key, and a SELECT by primary key reads them back as written
//     (claimIDs);
//   - a lease renewal (jobs, tasks): the UPDATE (ids first: idsfirst.go),
//     then a read of what the owner holds. A row lost between the two is
//     missing from the answer, as it should be; a row claimed between them
//     is held with a fresh lease;
//   - a batch of results: in one transaction, the batch's rows are locked
//     by primary key in id order, those still running under their token
//     are kept, and only those are written.
type writesBack interface{ writesBack() }

func (s *Store) writesBack() bool {
	_, ok := s.d.(writesBack)
	return ok
}

// txOptions are the options of the store's own transactions: READ
// COMMITTED where the dialect writes back (MySQL), whatever the session's
// level (an application's pool may be at InnoDB's default, REPEATABLE
// READ, whose gap and next-key locks on the ranges a claim or a prune
// reads are where concurrent claims, finishes and retention deadlock).
// nil elsewhere: the database's default, and on a pool whose connections
// are all at READ COMMITTED already (Open's on MySQL): there the option
// would cost a statement per transaction (SET TRANSACTION ISOLATION
// LEVEL, a sixth of a claim's).
func (s *Store) txOptions() *sql.TxOptions {
	if s.writesBack() && !s.readCommitted {
		return &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	return nil
}

// placeholders is n comma-separated ?, for an IN list.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func int64Args(ids []int64) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// txIDs runs q in tx and reads the first column of its rows.
func (s *Store) txIDs(ctx context.Context, tx *sql.Tx, q string, args []any) ([]int64, error) {
	s.stmts.Add(1)
	rs, err := tx.QueryContext(ctx, q, s.args(args)...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var ids []int64
	for rs.Next() {
		var id int64
		if err := rs.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rs.Err()
}

// claimPicked is the claim of a dialect that writes back: pick (which
// locks its rows) then claimIDs, in one transaction.
func (s *Store) claimPicked(ctx context.Context, what, pick string, pickArgs []any, owner, ownerNode string, hold Hold) ([]claimRow, error) {
	var rows []claimRow
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		ids, err := s.txIDs(ctx, tx, pick, pickArgs)
		if err != nil {
			return err
		}
		rows, err = s.claimIDs(ctx, tx, ids, owner, ownerNode, hold, nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return rows, nil
}

// claimIDs claims the jobs ids, which tx has locked, and reads them back
// as the claim left them, in id order. The UPDATE repeats state = 'ready':
// the rows were ready when locked, and stay so under the lock.
func (s *Store) claimIDs(ctx context.Context, tx *sql.Tx, ids []int64, owner, ownerNode string, hold Hold, at *time.Time) ([]claimRow, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	in := placeholders(len(ids))
	// A managed claim's jobs start at the time it read under its lock.
	started, args := "{now}", []any{owner, ownerNode}
	if at != nil {
		started, args = "?", append(args, s.d.TimeArg(*at))
	}
	upd := s.statement(`UPDATE {jobs}` + byID + ` SET state = 'running', owner = ?, owner_node = ?, token = token + ` + bumpBelow("token", maxToken) + `,
  attempt = attempt + ` + bumpBelow("attempt", maxAttempt) + `, started_at = ` + started + `, start_by = NULL, lease_until = {now+hold}
WHERE id IN (` + in + `) AND state = 'ready'`)
	if _, err := s.txExec(ctx, tx, upd, append(append(args, hold.args()...), int64Args(ids)...)...); err != nil {
		return nil, err
	}
	read := s.statement(`SELECT ` + claimedColumns + ` FROM {jobs}` + byID + ` WHERE id IN (` + in + `) AND state = 'running' AND owner = ? ORDER BY id`)
	return s.txQueryClaims(ctx, tx, read, append(int64Args(ids), owner))
}

// lockReady locks, in id order, those of ids that are still ready,
// skipping the rows another transaction holds, and returns them: the
// managed claim's candidates, picked without a lock (a UNION of derived
// tables takes none), become its rows here.
func (s *Store) lockReady(ctx context.Context, tx *sql.Tx, ids []int64) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	q := s.statement(`SELECT id FROM {jobs}` + byID + ` WHERE id IN (` + placeholders(len(ids)) + `) AND state = 'ready'
ORDER BY id FOR UPDATE SKIP LOCKED`)
	return s.txIDs(ctx, tx, q, int64Args(ids))
}

// byID is the index hint of a statement, on a dialect that writes back,
// that reaches rows by a list of their keys (jobs by id, tasks by name:
// idsfirst.go): the primary key, never an index on the state, which the
// optimizer may take for a few keys on a small table, and through which
// the statement would lock every running job it passes, waiting on those
// other writers hold (MySQL and MariaDB both take FORCE INDEX).
const byID = " FORCE INDEX (PRIMARY)"

// insertedID runs an INSERT of one row and returns its id (the driver's
// last insert id), or sql.ErrNoRows when it wrote none.
func (s *Store) insertedID(ctx context.Context, q string, args []any) (int64, error) {
	res, err := s.exec(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, err
	} else if n == 0 {
		return 0, sql.ErrNoRows
	}
	return res.LastInsertId()
}

// finishLocked is JobsFinish where the dialect writes back: it locks the
// batch's rows, keeps those still running under their token, writes them
// and returns their ids.
func (s *Store) finishLocked(ctx context.Context, rows []finishRow) ([]int64, error) {
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.id
	}
	lock := s.statement(`SELECT id, token FROM {jobs}` + byID + ` WHERE id IN (` + placeholders(len(ids)) + `) AND state = 'running'
ORDER BY id FOR UPDATE`)
	var written []int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		written = written[:0]
		s.stmts.Add(1)
		rs, err := tx.QueryContext(ctx, lock, s.args(int64Args(ids))...)
		if err != nil {
			return err
		}
		held := map[int64]int64{}
		for rs.Next() {
			var id, token int64
			if err := rs.Scan(&id, &token); err != nil {
				rs.Close()
				return err
			}
			held[id] = token
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return err
		}
		var keep []finishRow
		for _, r := range rows {
			if t, ok := held[r.id]; ok && t == r.token {
				keep, written = append(keep, r), append(written, r.id)
			}
		}
		if len(keep) == 0 {
			return nil
		}
		q, args := s.finishStatement(keep)
		for _, r := range keep {
			args = append(args, r.id) // finishJobs' id list
		}
		_, err = s.txExec(ctx, tx, q, args...)
		return err
	})
	return written, err
}

// MySQL writes a batch of results with a multiple-table UPDATE joined to
// the rows, a UNION ALL of one SELECT each (the first names the columns):
// its rows come before its SET list (finishRowsFirst). The rows' ids are
// listed again after the SET's parameters, so that the jobs are reached by
// primary key: joined the other way, the UPDATE walks the jobs table,
// waiting on rows other batches hold, which wait on this one.
func (MySQL) finishRow() string { return "SELECT ?, ?, ?, ?, ?, ?, ?" }
func (d MySQL) finishJobs(rows []string) string {
	first := "SELECT ? AS v_id, ? AS v_token, ? AS v_state, ? AS v_retry, ? AS v_status, ? AS v_err, ? AS v_suffix"
	return `UPDATE {jobs} AS j` + byID + ` INNER JOIN (` + first + strings.Repeat("\n  UNION ALL SELECT ?, ?, ?, ?, ?, ?, ?", len(rows)-1) + `) AS v
  ON j.id = v.v_id AND j.token = v.v_token
SET ` + finishSet(d, "j", retryAtOf(d)) + `
WHERE j.state = 'running' AND j.id IN (` + placeholders(len(rows)) + `)`
}
