package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// A node's statements run in milliseconds, but PostgreSQL's estimate of a
// turn's count over a deep queue is far past jit_above_cost, and with JIT
// on (the default of builds with LLVM) each count compiled for 20 to 400 ms
// of the database's CPU to run for 2. Every connection of a store turns JIT
// off, unless its DSN sets jit.
func TestPostgresStatementsAreNotJITCompiled(t *testing.T) {
	s, dsn := storetest.Open(t, "postgres")
	ctx := context.Background()

	// Three connections held at once: each was opened by the pool, and
	// each must have JIT off.
	var conns []*sql.Conn
	for range 3 {
		c, err := s.DB().Conn(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	for i, c := range conns {
		var jit string
		require.NoError(t, c.QueryRowContext(ctx, "SHOW jit").Scan(&jit))
		assert.Equal(t, "off", jit, "connection %d", i)
	}
	for _, c := range conns {
		require.NoError(t, c.Close())
	}

	// A queue as deep as the load count's limit, with statistics, as a
	// farm that has run a while has.
	const due = 20_000
	jobs := make([]store.NewJob, due)
	for i := range jobs {
		jobs[i] = store.NewJob{Endpoint: "/job/" + strconv.Itoa(i), Method: "POST", MaxAttempts: 1,
			IdempotencyKey: "k" + strconv.Itoa(i)}
	}
	_, err := s.JobInsertMany(ctx, jobs)
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, "ANALYZE slotpoller_jobs")
	require.NoError(t, err)

	q, args := s.LoadStatement(time.Second, 0, 16_000)
	plan := func(c *sql.Conn) map[string]any {
		t.Helper()
		var out string
		require.NoError(t, c.QueryRowContext(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+q, args...).Scan(&out))
		var plans []map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &plans))
		require.Len(t, plans, 1)
		return plans[0]
	}

	c, err := s.DB().Conn(ctx)
	require.NoError(t, err)
	defer c.Close()
	compiled, jit := plan(c)["JIT"]
	assert.False(t, jit, "the turn's count was JIT-compiled: %v", compiled)

	// The check above can see JIT: on a server that has it, the same count
	// with JIT forced on says so in its plan.
	_, err = c.ExecContext(ctx, "SET jit = on")
	require.NoError(t, err)
	var available bool // true when a JIT provider loads and jit is on
	require.NoError(t, c.QueryRowContext(ctx, "SELECT pg_jit_available()").Scan(&available))
	if available {
		_, err = c.ExecContext(ctx, "SET jit_above_cost = 0")
		require.NoError(t, err)
		_, jit = plan(c)["JIT"]
		assert.True(t, jit, "with JIT forced on, the plan must report it")
		_, err = c.ExecContext(ctx, "RESET jit_above_cost")
		require.NoError(t, err)
	} else {
		t.Log("this server has no JIT provider: the control case that forces JIT on is not run")
	}
	_, err = c.ExecContext(ctx, "SET jit = off") // the pool keeps the connection
	require.NoError(t, err)

	// A DSN that sets jit is obeyed.
	u, err := url.Parse(dsn)
	require.NoError(t, err, "the test's PostgreSQL DSN must be a URL")
	params := u.Query()
	params.Set("jit", "on")
	u.RawQuery = params.Encode()
	on, err := open.Store(ctx, "postgres", u.String())
	require.NoError(t, err)
	defer on.Close()
	var setting string
	require.NoError(t, on.DB().QueryRowContext(ctx, "SHOW jit").Scan(&setting))
	assert.Equal(t, "on", setting)
}
