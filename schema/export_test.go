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
