package schema

import (
	"context"

	"github.com/slotpoller/slotpoller/internal/store"
)

// MigrateTo brings the database to version (and no further), as an older
// binary would have: for tests of an upgrade.
func MigrateTo(ctx context.Context, s *store.Store, version int) ([]int, error) {
	ms, err := Migrations(s.Dialect())
	if err != nil {
		return nil, err
	}
	return migrateTo(ctx, s, ms[:version])
}

// RunVersion runs the script of one version again on a database that has
// it, without recording it: what the next migration does after one was
// cut short on a database whose DDL commits statement by statement.
func RunVersion(ctx context.Context, s *store.Store, version int) error {
	ms, err := Migrations(s.Dialect())
	if err != nil {
		return err
	}
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := execScript(ctx, tx, store.ExpandScript(s.Dialect(), ms[version-1].SQL)); err != nil {
		return err
	}
	return tx.Commit()
}
