//go:build unix

package e2e

import (
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	mysqlconf "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

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
			producerContract(t, d.driver, "node-example-node", nodeProducer(d.driver))
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

// nodeProducer is producer.js: a refusal is an EnqueueError with the
// database's code.
func nodeProducer(driver string) exampleProducer {
	code := "(SQLSTATE 22023)"
	if driver == "sqlserver" {
		code = "(error 51000)"
	}
	return exampleProducer{env: nodeAppEnv, run: runNodeProducer,
		refusal: []string{"the entry point refused the job", code}, maxAttempts: 5}
}

// runNodeProducer runs examples/node/producer.js (runExampleProducer).
func runNodeProducer(t *testing.T, appEnv []string, status int, args ...string) (produced, string) {
	t.Helper()
	return runExampleProducer(t, appEnv, status, append([]string{"node", filepath.Join("..", "examples", "node", "producer.js")}, args...)...)
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
