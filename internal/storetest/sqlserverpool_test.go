package storetest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"
)

// A schema given back by a test that passed comes to the next test
// emptied, its identities restarted; one a test altered, or one of a test
// that failed, is dropped and never handed out.
func TestSQLServerPoolHandsOutEmptiedSchemasOnly(t *testing.T) {
	dsn := RequireSQLServer(t)
	ctx := context.Background()
	// Schemas of a signature of this test's own: no other test process
	// takes them meanwhile.
	sig, err := sqlServerMigrationsSignature()
	require.NoError(t, err)
	sig = sig[:48] + randomHex(8)
	admin, err := sql.Open("sqlserver", dsn)
	require.NoError(t, err)
	defer admin.Close()
	// The schemas of this test's signature are never taken again: drop
	// them at the end.
	defer func() {
		names, err := sqlServerStrings(ctx, admin, `SELECT schema_name FROM `+sqlServerPoolTable+` WHERE signature = @p1`, sig)
		require.NoError(t, err)
		for _, name := range names {
			require.NoError(t, dropPooledSchema(ctx, admin, name))
		}
	}()
	state := func(name string) (inPool bool, taken int, exists bool) {
		err := admin.QueryRowContext(ctx, `SELECT taken FROM `+sqlServerPoolTable+` WHERE schema_name = @p1`, name).Scan(&taken)
		if err != sql.ErrNoRows {
			require.NoError(t, err)
			inPool = true
		}
		var n int
		require.NoError(t, admin.QueryRowContext(ctx, `SELECT COUNT(*) FROM sys.schemas WHERE name = @p1`, name).Scan(&n))
		return inPool, taken, n == 1
	}
	enqueue := func(t *testing.T, db DB) int64 {
		var id int64
		s, err := db.Open(ctx)
		require.NoError(t, err)
		defer s.Close()
		require.NoError(t, s.DB().QueryRowContext(ctx, `DECLARE @id BIGINT; EXEC [`+db.Schema+`].[enqueue_v1] @endpoint = N'/x', @id = @id OUTPUT; SELECT @id`).Scan(&id))
		return id
	}

	// A test that passed, with a job in its schema: the schema goes back
	// to the pool, free and empty.
	var kept string
	t.Run("passes", func(t *testing.T) {
		_, db := openFromSQLServerPool(t, sig)
		kept = db.Schema
		inPool, _, _ := state(kept)
		require.False(t, inPool, "the pool of a new signature had no schema to give")
		enqueue(t, db)
	})
	inPool, taken, exists := state(kept)
	require.True(t, inPool && exists, "the passed test's schema %s is in the pool", kept)
	require.Equal(t, 0, taken, "and free")
	var jobs int
	require.NoError(t, admin.QueryRowContext(ctx, `SELECT COUNT(*) FROM [`+kept+`].[jobs]`).Scan(&jobs))
	require.Zero(t, jobs, "the schema was emptied")

	// Taken and given back again: a truncation leaves the schema as its
	// fingerprint says, so it goes round and round.
	t.Run("passes again", func(t *testing.T) {
		_, db := openFromSQLServerPool(t, sig)
		require.Equal(t, kept, db.Schema, "the next test takes the schema given back")
		require.Equal(t, int64(1), enqueue(t, db), "a schema from the pool starts its identities again")
	})
	inPool, taken, exists = state(kept)
	require.True(t, inPool && exists && taken == 0, "the schema %s given back twice is in the pool, free", kept)

	// A free schema changed in the pool (by hand, or by a process that
	// outlived its test) is dropped when taken, and not handed out.
	changed := kept
	_, err = admin.ExecContext(ctx, `CREATE TABLE [`+changed+`].[stray] (id INT)`)
	require.NoError(t, err)
	t.Run("takes a changed schema", func(t *testing.T) {
		_, db := openFromSQLServerPool(t, sig)
		require.NotEqual(t, kept, db.Schema, "a schema changed in the pool is not handed out")
		kept = db.Schema
	})
	inPool, _, exists = state(changed)
	require.False(t, inPool || exists, "the schema %s changed in the pool is dropped", changed)
	inPool, _, exists = state(kept)
	require.True(t, inPool && exists, "the new schema %s is in the pool", kept)

	// A test that alters its schema: dropped, whether it came from the
	// pool or not.
	var altered string
	t.Run("alters", func(t *testing.T) {
		_, db := openFromSQLServerPool(t, sig)
		altered = db.Schema
		require.Equal(t, kept, altered, "the next test takes the schema given back")
		_, taken, _ := state(altered)
		require.Equal(t, 1, taken, "a schema in use is taken")
		require.Equal(t, int64(1), enqueue(t, db), "a schema from the pool starts its identities again")
		_, err := admin.ExecContext(ctx, `ALTER TABLE [`+db.Schema+`].[jobs] ADD extra INT NULL`)
		require.NoError(t, err)
	})
	inPool, _, exists = state(altered)
	require.False(t, inPool || exists, "the altered schema %s is dropped, not pooled", altered)

	// A test that records a version of a newer binary: its schema is
	// dropped too (a truncation keeps the versions).
	var versioned string
	t.Run("records a version", func(t *testing.T) {
		_, db := openFromSQLServerPool(t, sig)
		versioned = db.Schema
		_, err := admin.ExecContext(ctx, `INSERT INTO [`+db.Schema+`].[schema_version] (version, description, applied_at) VALUES (999, N'future', SYSUTCDATETIME())`)
		require.NoError(t, err)
	})
	inPool, _, exists = state(versioned)
	require.False(t, inPool || exists, "the schema %s with a version of its own is dropped, not pooled", versioned)

	// A test that fails: its schema is dropped. (The failure is a
	// subtest's own: the fake's.)
	fake := &failingTB{TB: t}
	_, db := openFromSQLServerPool(fake, sig)
	fake.failed = true
	fake.cleanup()
	inPool, _, exists = state(db.Schema)
	require.False(t, inPool || exists, "the failed test's schema %s is dropped", db.Schema)
}

// failingTB is a test that has failed, whose cleanups run when asked.
type failingTB struct {
	testing.TB
	failed   bool
	cleanups []func()
}

func (f *failingTB) Failed() bool      { return f.failed }
func (f *failingTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *failingTB) Helper()           {}
func (f *failingTB) cleanup() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}
