package schema_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/schema"
)

// An application's role that was granted the PostgreSQL entry point keeps
// it across the migration that replaces the function (version 12 gave it a
// queue parameter: a drop and a create), and PUBLIC, revoked before, stays
// revoked.
func TestPostgresEntryPointGrantsSurviveItsReplacement(t *testing.T) {
	db := storetest.New(t, "postgres")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := db.Open(ctx)
	require.NoError(t, err)
	defer s.Close()
	_, err = schema.MigrateTo(ctx, s, 11)
	require.NoError(t, err)

	b := make([]byte, 4)
	_, _ = rand.Read(b)
	role := "sp_app_" + hex.EncodeToString(b)
	_, err = s.DB().ExecContext(ctx, "CREATE ROLE "+role+" NOLOGIN")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = s.DB().ExecContext(context.Background(), "DROP OWNED BY "+role)
		_, _ = s.DB().ExecContext(context.Background(), "DROP ROLE "+role)
	})
	const old = "slotpoller_enqueue_v1(text, bytea, text, bigint, timestamptz, integer, bigint, text, text)"
	_, err = s.DB().ExecContext(ctx, "REVOKE EXECUTE ON FUNCTION "+old+" FROM PUBLIC")
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, "GRANT EXECUTE ON FUNCTION "+old+" TO "+role)
	require.NoError(t, err)

	applied, err := schema.Migrate(ctx, s)
	require.NoError(t, err)
	require.Contains(t, applied, 12)

	const current = "slotpoller_enqueue_v1(text, bytea, text, bigint, timestamptz, integer, bigint, text, text, text)"
	var roleMay, publicMay bool
	require.NoError(t, s.DB().QueryRowContext(ctx,
		`SELECT EXISTS (SELECT 1 FROM pg_proc p, aclexplode(p.proacl) a
		 WHERE p.oid = $2::regprocedure AND a.grantee = $1::regrole AND a.privilege_type = 'EXECUTE')`, role, current).Scan(&roleMay))
	require.True(t, roleMay, "the application's role is granted the new entry point")
	require.NoError(t, s.DB().QueryRowContext(ctx,
		// A NULL ACL is the default: PUBLIC may execute.
		`SELECT p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
		 FROM pg_proc p WHERE p.oid = $1::regprocedure`,
		current).Scan(&publicMay))
	require.False(t, publicMay, "PUBLIC, revoked from the old entry point, is not granted the new one")
}
