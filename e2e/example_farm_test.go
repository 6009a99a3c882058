//go:build unix

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// exampleWait is how long an example's test waits for the node: the T-SQL
// test server compiles each statement of a new connection afresh, and a
// node there renews every few seconds.
func exampleWait(driver string) time.Duration {
	if driver == "sqlserver" {
		return time.Minute
	}
	return 30 * time.Second
}

// heardFor waits until the farm's one node has checked in d after now:
// a call it would make in that time (a second call of a job done once)
// has then been made. A node on the T-SQL test server checks in every few
// seconds, so its liveness is read with a longer TTL there.
func heardFor(t *testing.T, s *store.Store, d time.Duration) {
	t.Helper()
	ttl := 750 * time.Millisecond
	if s.Dialect().Name() == "sqlserver" {
		ttl = 5 * time.Second
	}
	_, now, err := s.Nodes(context.Background(), ttl)
	require.NoError(t, err)
	waitFor(t, exampleWait(s.Dialect().Name()), "the node to check in "+d.String()+" later", func() bool {
		nodes, _, err := s.Nodes(context.Background(), ttl)
		require.NoError(t, err)
		return len(nodes) == 1 && nodes[0].Live && !nodes[0].LastSeen.Before(now.Add(d))
	})
}

// exampleTable is an example's table as the test's SQL names it: on SQL
// Server the examples keep their tables in the farm's schema (T-SQL has no
// search path), so that a test's schema holds all it wrote.
func exampleTable(db storetest.DB, name string) string {
	if db.Schema == "" {
		return name
	}
	return "[" + db.Schema + "]." + name
}

// requireDatabase skips the test when the driver's test server is not
// configured; SQLite needs none.
func requireDatabase(t *testing.T, driver string) {
	t.Helper()
	switch driver {
	case "mysql":
		storetest.RequireMySQL(t)
	case "postgres":
		storetest.RequirePostgres(t)
	case "sqlserver":
		storetest.RequireSQLServer(t)
	}
}
