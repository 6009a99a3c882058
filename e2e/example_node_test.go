//go:build unix

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	mysqlconf "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// nodeExampleDrivers are the databases of the Node.js example, each with
// the npm package it reaches it through.
var nodeExampleDrivers = []struct{ driver, npm string }{
	{"mysql", "mysql2"},
	{"postgres", "pg"},
	{"sqlserver", "tedious"},
}

// The Node.js example (examples/node) run as an application runs it,
// against a real node: the job it enqueues in a transaction that rolls
// back never exists nor runs, the one whose transaction commits is called
// once with the payload Node sent, beside the application's own row, and
// the entry point's refusal reaches Node as an EnqueueError with nothing
// written.
func TestNodeExampleEnqueuesInItsTransaction(t *testing.T) {
	for _, d := range nodeExampleDrivers {
		t.Run(d.driver, func(t *testing.T) {
			requireNodeJS(t, d.npm)
			requireDatabase(t, d.driver)
			t.Parallel()
			nodeExample(t, d.driver)
		})
	}
}

// requireNodeJS skips the test, saying what to install, when the node
// command or the example's npm package for the database is missing (CI
// installs both).
func requireNodeJS(t *testing.T, npm string) {
	t.Helper()
	requireNodeCommand(t)
	if _, err := os.Stat(filepath.Join("..", "examples", "node", "node_modules", npm, "package.json")); err != nil {
		t.Skipf("examples/node/node_modules has no %s: skipping the Node.js example's test (run npm ci --prefix examples/node)", npm)
	}
}

// requireNodeCommand skips the test when there is no node command.
func requireNodeCommand(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: skipping the Node.js example's test (Node.js 20 or newer; on Debian: apt-get install nodejs npm)")
	}
}

func nodeExample(t *testing.T, driver string) {
	start := time.Now()
	s, db := storetest.OpenDB(t, driver)
	ctx := context.Background()
	rec, seen := &recorder{}, &requestsSeen{}
	srv := httptest.NewServer(seen.wrap(rec.handler))
	defer srv.Close()
	n := startNode(t, env(driver, db.DSN, "node-example-node", srv.URL, db.ExtraEnv()...), "node-example-node")
	waitSettled(t, s, 1)
	appEnv := nodeAppEnv(t, db)
	orders := exampleTable(db, "example_orders")

	countOrders := func() int {
		var count int
		require.NoError(t, s.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM "+orders).Scan(&count))
		return count
	}
	noJobs := func(when string) {
		counts, err := s.JobCounts(ctx)
		require.NoError(t, err)
		require.Empty(t, counts, "jobs %s", when)
	}

	// Rolled back: neither the order nor the job exists, and the node,
	// polling its slots meanwhile, calls nothing.
	out, _ := runNodeProducer(t, appEnv, 0, "rollback")
	require.Equal(t, "rolled back", out.Outcome)
	require.Positive(t, out.Job, "the entry point gave the job an id inside the transaction")
	_, err := s.JobGet(ctx, out.Job)
	require.ErrorIs(t, err, store.ErrNotFound, "job %d of the rolled back transaction", out.Job)
	noJobs("after a rollback")
	require.Zero(t, countOrders(), "orders after a rollback")

	// Refused: the entry point's check reaches Node as an EnqueueError
	// with the database's code and the field at fault, and the order
	// written before it is rolled back.
	_, stderr := runNodeProducer(t, appEnv, 2, "commit", "jobs/no-leading-slash")
	code := "(SQLSTATE 22023)"
	if driver == "sqlserver" {
		code = "(error 51000)"
	}
	require.Contains(t, stderr, code)
	require.Contains(t, stderr, "the entry point refused the job")
	require.Contains(t, stderr, "endpoint: endpoint")
	require.Contains(t, stderr, "must start with /")
	noJobs("after a refused enqueue")
	require.Zero(t, countOrders(), "orders after a refused enqueue")

	// A job the rollback or the refusal had let through would have been
	// called within the node's next slots.
	heardFor(t, s, 1500*time.Millisecond)
	require.Empty(t, rec.snapshot(), "calls after a rollback and a refused enqueue")

	// Committed: the order is there and its job is called once, with the
	// payload Node sent.
	out, _ = runNodeProducer(t, appEnv, 0, "commit")
	require.Equal(t, "committed", out.Outcome)
	require.Equal(t, 1, countOrders(), "orders after the commit")
	var item string
	require.NoError(t, s.DB().QueryRowContext(ctx, store.Expand(s.Dialect(), "SELECT item FROM "+orders+" WHERE id = ?"), out.Order).Scan(&item),
		"the committed order %d", out.Order)
	require.Equal(t, "book", item)
	waitFor(t, exampleWait(driver), "the committed job to be done", func() bool {
		j, err := s.JobGet(ctx, out.Job)
		require.NoError(t, err)
		return j.State == store.StateDone
	})
	// A second call would come at one of the node's next slots.
	heardFor(t, s, time.Second)
	calls := rec.snapshot()
	require.Len(t, calls, 1, "calls after the commit: %+v", calls)
	job := strconv.FormatInt(out.Job, 10)
	require.Equal(t, job, calls[0].job, "X-Slotpoller-Job")
	request, _ := seen.byJob.Load(job)
	require.Equal(t, "POST /jobs/send-invoice "+out.Payload, request, "the call's method, path and body: the payload Node sent")
	var sent struct{ Order int64 }
	require.NoError(t, json.Unmarshal([]byte(out.Payload), &sent))
	require.Equal(t, out.Order, sent.Order, "the payload names the committed order")
	j, err := s.JobGet(ctx, out.Job)
	require.NoError(t, err)
	require.Equal(t, 5, j.MaxAttempts, "the producer's maxAttempts reached the entry point")
	counts, err := s.JobCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{store.StateDone: 1}, counts, "jobs after the commit")
	n.stop(t)
	t.Logf("%s: %v", driver, time.Since(start).Round(time.Millisecond))
}

// runNodeProducer runs examples/node/producer.js, requires its exit
// status, and returns what it printed: the parsed line when it succeeded,
// and its standard error.
func runNodeProducer(t *testing.T, appEnv []string, status int, args ...string) (produced, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{filepath.Join("..", "examples", "node", "producer.js")}, args...)...)
	cmd.Env = append(os.Environ(), appEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("node producer.js %s: %v, %s%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	var out produced
	if status == 0 {
		require.NoError(t, err, "node producer.js %v: %s", args, stderr.String())
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), "the producer's line %q", stdout.String())
		return out, stderr.String()
	}
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "node producer.js %v should have failed: %s", args, stdout.String())
	require.Equal(t, status, exit.ExitCode(), "exit status of node producer.js %v: %s", args, stderr.String())
	require.Empty(t, stdout.String(), "a failed producer prints no outcome")
	return out, stderr.String()
}

// nodeAppEnv gives the example the test's database as the URL its drivers
// take (APP_DB_URL) and, on SQL Server, the test's schema (APP_DB_SCHEMA).
func nodeAppEnv(t *testing.T, db storetest.DB) []string {
	t.Helper()
	switch db.Driver {
	case "mysql":
		cfg, err := mysqlconf.ParseDSN(db.DSN)
		require.NoError(t, err)
		require.Equal(t, "tcp", cfg.Net, "the Node.js example's test takes a TCP %s", storetest.MySQLEnv)
		host, port, err := net.SplitHostPort(cfg.Addr)
		require.NoError(t, err)
		u := url.URL{Scheme: "mysql", User: url.UserPassword(cfg.User, cfg.Passwd), Host: net.JoinHostPort(host, port), Path: "/" + cfg.DBName}
		return []string{"APP_DB_URL=" + u.String()}
	case "postgres":
		u, err := url.Parse(db.DSN)
		require.NoError(t, err, "the Node.js example's test takes a URL-form %s", storetest.PostgresEnv)
		// pg takes the test's schema as a server option, not as pgx's
		// search_path parameter.
		q := u.Query()
		if sp := q.Get("search_path"); sp != "" {
			q.Del("search_path")
			q.Set("options", "-c search_path="+sp)
		}
		u.RawQuery = q.Encode()
		return []string{"APP_DB_URL=" + u.String()}
	case "sqlserver":
		u, err := url.Parse(db.DSN)
		require.NoError(t, err)
		require.Equal(t, "sqlserver", u.Scheme, "the Node.js example's test takes a URL-form %s", storetest.SQLServerEnv)
		return []string{"APP_DB_URL=" + db.DSN, "APP_DB_SCHEMA=" + db.Schema}
	}
	t.Fatalf("the Node.js example has no %s", db.Driver)
	return nil
}
