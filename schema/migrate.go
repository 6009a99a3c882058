// Package schema owns slotpoller's database schema: versioned migrations
// per dialect (including the database-side enqueue entry points), embedded
// in the binary, and the table that records which versions a database
// has. `slotpoller schema migrate`, a starting node (database.migrate) and
// the tests bring a database to this binary's version through Migrate.
//
// Invariants:
//   - Migrations run in one transaction under a lock, so nodes that start
//     together and all migrate at once apply each version exactly once.
//   - A database newer than the binary is never changed (ErrSchemaNewer);
//     a node that may not migrate refuses a database behind it
//     (ErrSchemaBehind). Waiting fixes neither: a node does not retry them.
//   - Versions run 1, 2, ... without gaps, one file per version per
//     dialect (migrations/<dialect>/NNNN_<what>.sql).
//
// The package imports only the SQL seam (internal/store), so the node,
// the CLI, the client's tests and the conformance suite all migrate
// through it without importing the OS service (install), which imports
// the node.
package schema

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/slotpoller/slotpoller/internal/store"
)

//go:embed migrations
var migrationFS embed.FS

// ErrSchemaNewer means the database was migrated by a newer slotpoller.
var ErrSchemaNewer = errors.New("the database schema is newer than this slotpoller binary")

// ErrSchemaBehind means the database needs migrations this binary has.
var ErrSchemaBehind = errors.New("the database schema is behind this slotpoller binary")

// Migration is one version of the schema.
type Migration struct {
	Version     int
	Description string
	SQL         string
}

// Migrations lists the migrations of a dialect in version order.
func Migrations(d store.Dialect) ([]Migration, error) {
	dir := path.Join("migrations", d.Name())
	entries, err := fs.ReadDir(migrationFS, dir)
	if err != nil {
		return nil, fmt.Errorf("no migrations for database %s: %w", d.Name(), err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		num, desc, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			continue // schema_version.sql and the like
		}
		b, err := migrationFS.ReadFile(path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Description: desc, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrations for %s: version %d is missing", d.Name(), i+1)
		}
	}
	return out, nil
}

// Latest is the schema version this binary brings.
func Latest(d store.Dialect) int {
	ms, _ := Migrations(d)
	return len(ms)
}

// Status reports the database's schema version and this binary's latest.
func Status(ctx context.Context, s *store.Store) (current, latest int, err error) {
	latest = Latest(s.Dialect())
	q := store.Expand(s.Dialect(), `SELECT COALESCE(MAX(version), 0) FROM {schema_version}`)
	if err := s.DB().QueryRowContext(ctx, q).Scan(&current); err != nil {
		if s.UndefinedTable(err) {
			return 0, latest, nil // never migrated: no version table yet
		}
		// Anything else (a dropped connection, a missing permission) is
		// not "version 0": say what it is, so a node retries it.
		return 0, latest, fmt.Errorf("read schema version: %w", err)
	}
	return current, latest, nil
}

// Check returns nil when the schema is exactly this binary's, and a clear
// error otherwise.
func Check(ctx context.Context, s *store.Store) error {
	cur, latest, err := Status(ctx, s)
	if err != nil {
		return err
	}
	switch {
	case cur > latest:
		return fmt.Errorf("%w: database is at version %d, this binary knows up to %d; upgrade slotpoller (nothing was changed)", ErrSchemaNewer, cur, latest)
	case cur < latest:
		return fmt.Errorf("%w: database is at version %d, this binary needs %d; run `slotpoller schema migrate`", ErrSchemaBehind, cur, latest)
	}
	return nil
}

// Migrate brings the schema up to this binary's latest version and returns
// the versions it applied. A database newer than the binary is refused and
// left untouched.
func Migrate(ctx context.Context, s *store.Store) ([]int, error) {
	ms, err := Migrations(s.Dialect())
	if err != nil {
		return nil, err
	}
	return migrateTo(ctx, s, ms)
}

// migrateTo applies the migrations of ms the database lacks: all of them
// for Migrate, the first few in tests of an upgrade.
func migrateTo(ctx context.Context, s *store.Store, ms []Migration) ([]int, error) {
	d := s.Dialect()
	versionTable, err := migrationFS.ReadFile(path.Join("migrations", d.Name(), "schema_version.sql"))
	if err != nil {
		return nil, fmt.Errorf("schema version table for %s: %w", d.Name(), err)
	}
	// One connection for the lock, the transaction and the unlock: a
	// dialect whose lock outlives the transaction (migrationUnlocker)
	// releases it on the connection that took it, once the transaction
	// has ended (the deferred unlock runs after the deferred rollback).
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Close()
	if u, ok := d.(migrationUnlocker); ok {
		defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), u.MigrationUnlock()) }()
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("migrate: begin: %w", err)
	}
	defer tx.Rollback()
	if lock := d.MigrationLock(); lock != "" {
		if _, err := tx.ExecContext(ctx, lock); err != nil {
			return nil, fmt.Errorf("migrate: take the migration lock: %w", err)
		}
	}
	if err := execScript(ctx, tx, store.ExpandScript(d, string(versionTable))); err != nil {
		return nil, fmt.Errorf("migrate: create schema version table: %w", err)
	}
	var cur int
	if err := tx.QueryRowContext(ctx, store.Expand(d, `SELECT COALESCE(MAX(version), 0) FROM {schema_version}`)).Scan(&cur); err != nil {
		return nil, fmt.Errorf("migrate: read schema version: %w", err)
	}
	if cur > len(ms) {
		return nil, fmt.Errorf("%w: database is at version %d, this binary knows up to %d; upgrade slotpoller (nothing was changed)", ErrSchemaNewer, cur, len(ms))
	}
	var applied []int
	for _, m := range ms[cur:] {
		if err := execScript(ctx, tx, store.ExpandScript(d, m.SQL)); err != nil {
			return nil, fmt.Errorf("migrate: version %d (%s): %w", m.Version, m.Description, err)
		}
		rec := store.Expand(d, `INSERT INTO {schema_version} (version, description, applied_at) VALUES (?, ?, {now})`)
		if _, err := tx.ExecContext(ctx, rec, m.Version, m.Description); err != nil {
			return nil, fmt.Errorf("migrate: record version %d: %w", m.Version, err)
		}
		applied = append(applied, m.Version)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("migrate: commit: %w", err)
	}
	return applied, nil
}

// migrationUnlocker is a dialect whose migration lock is not released when
// the transaction ends (MySQL's GET_LOCK: a session's lock, as its DDL
// commits the transaction implicitly): MigrationUnlock releases it.
type migrationUnlocker interface {
	MigrationUnlock() string
}

// execScript runs the statements of a migration file one by one, each in a
// batch of its own (which T-SQL needs for some DDL).
func execScript(ctx context.Context, tx *sql.Tx, script string) error {
	for _, stmt := range splitScript(script) {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// splitScript cuts a migration file into statements. Statements end with a
// semicolon at the end of a line; comment lines are dropped. A procedure,
// function or trigger has semicolons in its body (and T-SQL wants CREATE
// PROCEDURE alone in its batch): it ends only at a line reading GO, T-SQL's
// batch separator, which is not sent. A GO line ends any statement.
func splitScript(script string) []string {
	var out []string
	var stmt strings.Builder
	body := false
	flush := func() {
		if strings.TrimSpace(stmt.String()) != "" {
			out = append(out, stmt.String())
		}
		stmt.Reset()
		body = false
	}
	for _, line := range strings.Split(script, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		if strings.EqualFold(trimmed, "GO") {
			flush()
			continue
		}
		if stmt.Len() == 0 {
			body = bodyStart.MatchString(trimmed)
		}
		stmt.WriteString(line)
		stmt.WriteByte('\n')
		if !body && strings.HasSuffix(trimmed, ";") {
			flush()
		}
	}
	flush()
	return out
}

// bodyStart matches the first line of a statement with a body of
// statements of its own.
var bodyStart = regexp.MustCompile(`(?i)^((CREATE\s+(OR\s+(REPLACE|ALTER)\s+)?|ALTER\s+)(PROCEDURE|PROC|FUNCTION|TRIGGER)\b|DO\s)`)
