package store

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// PostgreSQL's plain claim is a function of the schema (version 16, returning trace_parent since 17, its
// due bound read once since 20), the
// other databases' a statement built here: the function must take the
// rows claimable takes, and hold them as holdMillis holds them.
func TestPostgresClaimFunctionIsTheClaim(t *testing.T) {
	b, err := os.ReadFile("../../schema/migrations/postgres/0020_claim_seek.sql")
	require.NoError(t, err)
	fn := strings.Join(strings.Fields(string(b)), " ")
	same := func(what, sql string) {
		t.Helper()
		require.Contains(t, fn, strings.Join(strings.Fields(sql), " "), "the function's %s", what)
	}
	same("due bound", expand(Postgres{}, "c.run_at <= {now_once}"))
	same("claimable condition", expand(Postgres{}, claimable("c", "")))
	same("order", "ORDER BY c.run_at, c.id LIMIT p_limit FOR UPDATE OF c SKIP LOCKED")
	same("hold", holdMillis("j.timeout_ms", "p_h1", "p_h2", "p_h3", "p_h4"))
	same("token bump", "j.token + "+bumpBelow("j.token", maxToken))
	same("attempt bump", "j.attempt + "+bumpBelow("j.attempt", maxAttempt))
	same("columns", "RETURNING "+qualified("j", claimedColumns))
}
