package storetest

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/schema"
)

// The T-SQL test server (Babelfish) parses every batch with its ANTLR
// parser, afresh each time, and that parsing is most of its CPU: a
// migration of a new schema costs it about 1.5 s, and the suite's SQL
// Server tests ask for some 250 migrated schemas, beside the end-to-end
// tests whose nodes share the same two cores. So a test that asks for a
// migrated schema (OpenDB) takes one that an earlier test gave back, when
// there is one: emptied, every table but schema_version truncated (which
// restarts an identity as on a new table, as a fresh migration leaves
// it), its objects as the migration left them. The pool is a table on the
// test server, so the test processes of every package share it, and a
// schema is taken by one test at a time (a conditional UPDATE).
//
// What keeps a test from seeing another's traces:
//   - only a test that passed gives its schema back; a failed one's is
//     dropped, as before the pool;
//   - a schema whose objects, columns, indexes or recorded versions
//     differ from what its migration made (a test that altered it) is
//     dropped, not given back;
//   - a schema is taken only by a test of the same migrations (their
//     text's SHA-256): the others' are left to their own runs.
//
// A process killed in a test leaves its schema taken for good: a schema
// of the test server's, never used again.
const sqlServerPoolTable = "[dbo].[slotpoller_test_pool]"

// sqlServerPoolFormat names how the pool keeps and checks its schemas; a
// change to that (what the fingerprint covers, what is emptied) changes
// it, so that schemas given back under the old rules, which the test
// server keeps between runs, are not handed out.
const sqlServerPoolFormat = "pool 2: fingerprint of objects, columns, indexes and versions; checked when taken"

// sqlServerMigrationsSignature is the SHA-256 of the SQL Server
// migrations' text and the pool's format: the pool hands a schema only to
// tests of the same.
func sqlServerMigrationsSignature() (string, error) {
	ms, err := schema.Migrations(store.SQLServer{})
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", sqlServerPoolFormat)
	for _, m := range ms {
		fmt.Fprintf(h, "%d\x00%s\x00", m.Version, m.SQL)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// openPooledSQLServer is OpenDB on the T-SQL test server: a migrated
// schema from the pool, or a new one, given back to the pool when the
// test passed.
func openPooledSQLServer(t testing.TB) (*store.Store, DB) {
	t.Helper()
	sig, err := sqlServerMigrationsSignature()
	if err != nil {
		t.Fatalf("the SQL Server migrations: %v", err)
	}
	return openFromSQLServerPool(t, sig)
}

// openFromSQLServerPool is openPooledSQLServer with the schemas of
// signature sig.
func openFromSQLServerPool(t testing.TB, sig string) (*store.Store, DB) {
	t.Helper()
	dsn := RequireSQLServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := sql.Open("sqlserver", dsn)
	if err != nil {
		t.Fatalf("open the T-SQL test server: %v", err)
	}
	name, pristine, err := takePooledSchema(ctx, admin, sig)
	if err != nil {
		admin.Close()
		t.Fatalf("take a schema from the T-SQL test server's pool: %v", err)
	}
	pooled := name != ""
	if !pooled {
		name = "sp_test_" + randomHex(6)
	}
	db := DB{Driver: "sqlserver", DSN: dsn, Schema: name}
	// Registered first, so it runs last: after the store is closed and
	// the test's node processes are stopped.
	t.Cleanup(func() {
		defer admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := giveBackSchema(ctx, t, admin, name, sig, pristine, pooled); err != nil {
			t.Errorf("give back test schema %s: %v", name, err)
		}
	})
	if pooled {
		s, err := db.Open(ctx)
		if err != nil {
			t.Fatalf("open pooled test schema %s: %v", name, err)
		}
		t.Cleanup(func() { s.Close() })
		return s, db
	}
	s := OpenMigrated(t, db)
	if pristine, err = sqlServerFingerprint(ctx, admin, name); err != nil {
		t.Fatalf("read test schema %s as migrated: %v", name, err)
	}
	return s, db
}

// takePooledSchema takes a free schema of these migrations from the pool:
// its name and fingerprint, or "" when there is none. A schema that no
// longer has the fingerprint it was given back with (changed since, by
// hand or by a process that outlived its test) is dropped, and the next
// one taken.
func takePooledSchema(ctx context.Context, db *sql.DB, sig string) (name, fingerprint string, err error) {
	if err := createSQLServerPool(ctx, db); err != nil {
		return "", "", err
	}
	for {
		err = db.QueryRowContext(ctx, `UPDATE TOP (1) `+sqlServerPoolTable+` SET taken = 1
OUTPUT inserted.schema_name, inserted.fingerprint
WHERE taken = 0 AND signature = @p1`, sig).Scan(&name, &fingerprint)
		if errors.Is(err, sql.ErrNoRows) {
			return "", "", nil
		}
		if err != nil {
			return "", "", err
		}
		now, err := sqlServerFingerprint(ctx, db, name)
		if err == nil && now == fingerprint {
			return name, fingerprint, nil
		}
		if err := dropPooledSchema(ctx, db, name); err != nil {
			return "", "", err
		}
	}
}

// dropPooledSchema removes a schema from the pool and drops it.
func dropPooledSchema(ctx context.Context, db *sql.DB, name string) error {
	if _, err := db.ExecContext(ctx, `DELETE FROM `+sqlServerPoolTable+` WHERE schema_name = @p1`, name); err != nil {
		return err
	}
	return DropSQLServerSchema(ctx, db, name)
}

// createSQLServerPool creates the pool's table unless it exists. Two
// processes may both find it missing: the one whose CREATE fails finds it
// there when it looks again.
func createSQLServerPool(ctx context.Context, db *sql.DB) error {
	q := `IF OBJECT_ID(N'dbo.slotpoller_test_pool', N'U') IS NULL
CREATE TABLE ` + sqlServerPoolTable + ` (schema_name NVARCHAR(64) NOT NULL PRIMARY KEY,
  signature NVARCHAR(64) NOT NULL, fingerprint NVARCHAR(64) NOT NULL, taken INT NOT NULL)`
	_, err := db.ExecContext(ctx, q)
	if err != nil {
		_, err = db.ExecContext(ctx, q)
	}
	return err
}

// giveBackSchema empties the test's schema and frees it in the pool, or
// drops it: when the test failed, or changed the schema's objects.
func giveBackSchema(ctx context.Context, t testing.TB, db *sql.DB, name, sig, pristine string, pooled bool) error {
	keep := !t.Failed() && !t.Skipped() && pristine != ""
	if keep {
		now, err := sqlServerFingerprint(ctx, db, name)
		keep = err == nil && now == pristine
	}
	if keep {
		if err := truncateSQLServerSchema(ctx, db, name); err == nil {
			return freePooledSchema(ctx, db, name, sig, pristine, pooled)
		}
	}
	// A drop of its own time: the give-back's may have run out on the
	// way here.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if pooled {
		return dropPooledSchema(ctx, db, name)
	}
	return DropSQLServerSchema(ctx, db, name)
}

// freePooledSchema marks the schema free in the pool, adding it when it
// is new.
func freePooledSchema(ctx context.Context, db *sql.DB, name, sig, fingerprint string, pooled bool) error {
	if pooled {
		_, err := db.ExecContext(ctx, `UPDATE `+sqlServerPoolTable+` SET taken = 0 WHERE schema_name = @p1`, name)
		return err
	}
	_, err := db.ExecContext(ctx, `INSERT INTO `+sqlServerPoolTable+` (schema_name, signature, fingerprint, taken)
VALUES (@p1, @p2, @p3, 0)`, name, sig, fingerprint)
	return err
}

// truncateSQLServerSchema empties every table of the schema but the one
// that records its versions. TRUNCATE restarts each identity, so the next
// test's first job is 1, as in a new schema.
func truncateSQLServerSchema(ctx context.Context, db *sql.DB, name string) error {
	tables, err := sqlServerStrings(ctx, db, `SELECT name FROM sys.objects
WHERE schema_id = SCHEMA_ID(@p1) AND type = 'U' AND name <> 'schema_version' ORDER BY name`, name)
	if err != nil {
		return err
	}
	for _, table := range tables {
		if _, err := db.ExecContext(ctx, `TRUNCATE TABLE [`+name+`].[`+table+`]`); err != nil {
			return fmt.Errorf("truncate %s: %w", table, err)
		}
	}
	return nil
}

// sqlServerFingerprint is the SHA-256 of the schema's objects (name, type,
// last change), its tables' columns (name, type, length, nullability) and
// indexes, and the versions it records: what a test that altered the
// schema would have changed. The name is ours (a prefix and hex).
func sqlServerFingerprint(ctx context.Context, db *sql.DB, name string) (string, error) {
	var parts []string
	for _, q := range []string{
		`SELECT o.name, o.type, o.modify_date FROM sys.objects o
WHERE o.schema_id = SCHEMA_ID(@p1) ORDER BY o.name, o.type`,
		`SELECT o.name, c.name, c.system_type_id, c.max_length, c.is_nullable
FROM sys.columns c JOIN sys.objects o ON o.object_id = c.object_id
WHERE o.schema_id = SCHEMA_ID(@p1) AND o.type = 'U' ORDER BY o.name, c.name`,
		`SELECT o.name, i.name FROM sys.indexes i JOIN sys.objects o ON o.object_id = i.object_id
WHERE o.schema_id = SCHEMA_ID(@p1) AND o.type = 'U' ORDER BY o.name, i.name`,
		// The versions, which a truncation keeps: a test that records a
		// version of its own (a newer binary's) changes the schema too.
		`IF OBJECT_ID(@p1 + N'.schema_version', N'U') IS NOT NULL
  SELECT version, description FROM [` + name + `].[schema_version] ORDER BY version`,
	} {
		rows, err := sqlServerStrings(ctx, db, q, name)
		if err != nil {
			return "", err
		}
		parts = append(parts, strings.Join(rows, "\n"))
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, "\n--\n")))
	return hex.EncodeToString(sum[:]), nil
}

// sqlServerStrings runs a query and returns each row's columns as text,
// joined by spaces (a NULL as "NULL").
func sqlServerStrings(ctx context.Context, db *sql.DB, q string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			switch v := v.(type) {
			case nil:
				parts[i] = "NULL"
			case []byte:
				parts[i] = string(v)
			case time.Time:
				parts[i] = v.UTC().Format(time.RFC3339Nano)
			default:
				parts[i] = fmt.Sprint(v)
			}
		}
		out = append(out, strings.Join(parts, " "))
	}
	return out, rows.Err()
}
