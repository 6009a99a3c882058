package store

import (
	"context"
	"database/sql"
	"slices"
)

// Writes of several rows on MySQL and MariaDB (writesBack): ids first.
//
// InnoDB locks, for each row a write reads through an index, the index's
// entry first and the row second; a write that changes an indexed column
// then locks that index's entry of the row. A write that finds its rows
// through a secondary index (an owner's jobs, a queue's running jobs, a
// task's owner) so takes the order opposite to a write that reaches the
// same row by primary key and changes the index (a batch of results, a
// release, a claim's update): each holds what the other waits for, and
// InnoDB breaks the deadlock. READ COMMITTED (every connection's level)
// drops the gap and next-key locks, not this order.
//
// So such a write reads the keys of its rows first, without locks, then
// writes them by primary key (FORCE INDEX (PRIMARY)) in key order, a
// statement for at most keysPerWrite of them: writes that each lock their
// rows in ascending key order never wait for each other in a cycle. Each
// statement checks the write's condition again on each row under its
// lock: a row that changed between the read and the write is left as it
// is, and one that came to match is left to the next write, as if the
// write had come just before it. The other databases write in one
// statement, as written.

// keysPerWrite is the most keys a write by primary key lists in one
// statement: MySQL's prepared statements take at most 65,535 parameters,
// and a statement's row locks are held until it ends (a cancel of a
// queue's every job would otherwise hold them all at once).
const keysPerWrite = 1000

// keyed is a table and its primary key's column, whose values are K.
type keyed[K int64 | string] struct{ table, key string }

var (
	jobsByID    = keyed[int64]{"{jobs}", "id"}
	tasksByName = keyed[string]{"{tasks}", "name"}
)

// updateWhere runs UPDATE t SET set WHERE where (the arguments: setArgs,
// then whereArgs) in tx, or on its own where tx is nil, and returns how
// many rows it changed. Where the dialect writes back, the keys first:
// see above.
func updateWhere[K int64 | string](ctx context.Context, s *Store, tx *sql.Tx, what string, t keyed[K], set string, setArgs []any,
	where string, whereArgs []any) (int64, error) {
	if !s.writesBack() {
		q := s.statement(`UPDATE ` + t.table + ` SET ` + set + `
WHERE ` + where)
		return s.execIn(ctx, tx, what, q, slices.Concat(setArgs, whereArgs))
	}
	keys, err := keysOf(ctx, s, tx, what, t, where, whereArgs)
	if err != nil || len(keys) == 0 {
		return 0, err
	}
	return updateKeys(ctx, s, tx, what, t, set, setArgs, keys, where, whereArgs)
}

// keysOf reads, without locks, the keys of the rows of t where selects,
// in key order.
func keysOf[K int64 | string](ctx context.Context, s *Store, tx *sql.Tx, what string, t keyed[K], where string, args []any) ([]K, error) {
	q := s.statement(`SELECT ` + t.key + ` FROM ` + t.table + ` WHERE ` + where + ` ORDER BY ` + t.key)
	return queryKeys[K](ctx, s, tx, what, q, args)
}

// queryKeys reads the first column of q's rows, in tx or on its own.
func queryKeys[K int64 | string](ctx context.Context, s *Store, tx *sql.Tx, what, q string, args []any) ([]K, error) {
	scan := func(r rowScanner) (K, error) {
		var k K
		return k, r.Scan(&k)
	}
	if tx == nil {
		return queryAll(ctx, s, what, q, args, scan)
	}
	s.stmts.Add(1)
	rs, err := tx.QueryContext(ctx, q, s.args(args)...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var keys []K
	for rs.Next() {
		k, err := scan(rs)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rs.Err()
}

// updateKeys writes the rows of t whose keys are keys (in key order, as
// the database orders them) and where still selects: UPDATE t SET set, by
// primary key, keysPerWrite keys a statement. It returns how many rows it
// changed.
func updateKeys[K int64 | string](ctx context.Context, s *Store, tx *sql.Tx, what string, t keyed[K], set string, setArgs []any,
	keys []K, where string, whereArgs []any) (int64, error) {
	var n int64
	for chunk := range slices.Chunk(keys, keysPerWrite) {
		q := s.statement(`UPDATE ` + t.table + byID + ` SET ` + set + `
WHERE ` + t.key + ` IN (` + placeholders(len(chunk)) + `) AND ` + where)
		m, err := s.execIn(ctx, tx, what, q, slices.Concat(setArgs, keyArgs(chunk), whereArgs))
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func keyArgs[K int64 | string](keys []K) []any {
	out := make([]any, len(keys))
	for i, k := range keys {
		out[i] = k
	}
	return out
}

// execIn runs a write in tx, or on its own (retrying transient conflicts,
// its error saying what it was for) where tx is nil, and returns how many
// rows it changed.
func (s *Store) execIn(ctx context.Context, tx *sql.Tx, what, q string, args []any) (int64, error) {
	if tx == nil {
		return s.execCount(ctx, what, q, args...)
	}
	return s.txExec(ctx, tx, q, args...)
}
