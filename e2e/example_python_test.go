//go:build unix

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

// pythonDrivers are the databases of the Python example, each with the
// DB-API driver it imports, the Debian package that has it, and the code
// the entry point's refusal of a bad endpoint carries.
var pythonDrivers = []struct{ driver, module, debian, refusal string }{
	{"mysql", "pymysql", "python3-pymysql", "1644"},
	{"postgres", "psycopg", "python3-psycopg", "22023"},
	{"sqlserver", "pymssql", "python3-pymssql", "51000"},
	{"sqlite", "sqlite3", "python3", "SQLITE_CONSTRAINT"}, // _TRIGGER from Python 3.11
}

// The Python example (examples/python) run as an application runs it,
// against a real node: the job it enqueues in a transaction that rolls
// back never exists nor runs, the one whose transaction commits is called
// once with the payload Python sent, beside the application's own row,
// and the entry point's refusal reaches Python as a slotpoller.FieldError
// with the database's code and nothing written.
func TestPythonExampleEnqueuesInItsTransaction(t *testing.T) {
	for _, d := range pythonDrivers {
		t.Run(d.driver, func(t *testing.T) {
			python := requirePython(t, d.module, d.debian)
			requireDatabase(t, d.driver)
			t.Parallel()
			pythonExample(t, python, d.driver, d.refusal)
		})
	}
}

// requirePython returns a python3 that imports module, skipping the test,
// saying what to install, when there is none. Debian's /usr/bin/python3
// comes first: the drivers are Debian packages, and a python3 earlier on
// PATH (pyenv's) does not see them.
func requirePython(t *testing.T, module, debian string) string {
	t.Helper()
	var candidates []string
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		candidates = append(candidates, "/usr/bin/python3")
	}
	if p, err := exec.LookPath("python3"); err == nil && p != "/usr/bin/python3" {
		candidates = append(candidates, p)
	}
	if len(candidates) == 0 {
		t.Skipf("python3 is not installed: skipping the Python example's test (on Debian: apt-get install python3 %s)", debian)
	}
	for _, python := range candidates {
		out, err := exec.Command(python, "-c", "import sys, importlib.util; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 3)", module).CombinedOutput()
		if err == nil {
			return python
		}
		var exit *exec.ExitError
		require.True(t, errors.As(err, &exit) && exit.ExitCode() == 3, "ask %s for the module %s: %v %s", python, module, err, out)
	}
	t.Skipf("no python3 (of %s) imports %s: skipping the Python example's test (on Debian: apt-get install %s)", strings.Join(candidates, ", "), module, debian)
	return ""
}

func pythonExample(t *testing.T, python, driver, refusal string) {
	start := time.Now()
	s, db := storetest.OpenDB(t, driver)
	ctx := context.Background()
	rec, seen := &recorder{}, &requestsSeen{}
	srv := httptest.NewServer(seen.wrap(rec.handler))
	defer srv.Close()
	n := startNode(t, env(driver, db.DSN, "python-node", srv.URL, db.ExtraEnv()...), "python-node")
	waitSettled(t, s, 1)
	appEnv := pythonEnv(t, db)
	orders := exampleTable(db, "example_orders")

	countOrders := func() int {
		t.Helper()
		var count int
		require.NoError(t, s.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM "+orders).Scan(&count))
		return count
	}
	noJobs := func(when string) {
		t.Helper()
		counts, err := s.JobCounts(ctx)
		require.NoError(t, err)
		require.Empty(t, counts, "jobs %s", when)
	}

	// Rolled back: neither the order nor the job exists, and the node,
	// polling its slots meanwhile, calls nothing.
	out, _ := runPythonProducer(t, python, appEnv, 0, "rollback")
	require.Equal(t, "rolled back", out.Outcome)
	require.Positive(t, out.Job, "the entry point gave the job an id inside the transaction")
	_, err := s.JobGet(ctx, out.Job)
	require.ErrorIs(t, err, store.ErrNotFound, "job %d of the rolled back transaction", out.Job)
	noJobs("after a rollback")
	require.Zero(t, countOrders(), "orders after a rollback")

	// Refused: the entry point's check reaches Python as a FieldError with
	// the database's code and the field at fault, and the order written
	// before it is rolled back.
	_, stderr := runPythonProducer(t, python, appEnv, 2, "commit", "jobs/no-leading-slash")
	require.Contains(t, stderr, "FieldError ["+refusal)
	require.Contains(t, stderr, "endpoint: endpoint")
	require.Contains(t, stderr, "must start with /")
	noJobs("after a refused enqueue")
	require.Zero(t, countOrders(), "orders after a refused enqueue")

	// A job the rollback or the refusal had let through would have been
	// called within the node's next slots.
	heardFor(t, s, 1500*time.Millisecond)
	require.Empty(t, rec.snapshot(), "calls after a rollback and a refused enqueue")

	// Committed: the order is there and its job is called once, with the
	// payload Python sent.
	out, _ = runPythonProducer(t, python, appEnv, 0, "commit")
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
	require.Equal(t, "POST /jobs/send-invoice "+out.Payload, request, "the call's method, path and body: the payload Python sent")
	var sent struct{ Order int64 }
	require.NoError(t, json.Unmarshal([]byte(out.Payload), &sent))
	require.Equal(t, out.Order, sent.Order, "the payload names the committed order")
	counts, err := s.JobCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{store.StateDone: 1}, counts, "jobs after the commit")
	n.stop(t)
	t.Logf("%s: %v", driver, time.Since(start).Round(time.Millisecond))
}

// runPythonProducer runs examples/python/producer.py, requires its exit
// status, and returns what it printed: the parsed line when it succeeded,
// and its standard error.
func runPythonProducer(t *testing.T, python string, appEnv []string, status int, args ...string) (produced, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, append([]string{filepath.Join("..", "examples", "python", "producer.py")}, args...)...)
	cmd.Env = append(os.Environ(), appEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("python3 producer.py %s: %v, %s%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	var out produced
	if status == 0 {
		require.NoError(t, err, "python3 producer.py %v: %s", args, stderr.String())
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), "the producer's line %q", stdout.String())
		return out, stderr.String()
	}
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "python3 producer.py %v should have failed: %s", args, stdout.String())
	require.Equal(t, status, exit.ExitCode(), "exit status of python3 producer.py %v: %s", args, stderr.String())
	require.Empty(t, stdout.String(), "a failed producer prints no outcome")
	return out, stderr.String()
}

// pythonEnv gives the example the test's database as its APP_DB_URL
// (examples/python/appdb.py); PYTHONDONTWRITEBYTECODE keeps __pycache__
// out of the repository's folder.
func pythonEnv(t *testing.T, db storetest.DB) []string {
	t.Helper()
	var u url.URL
	switch db.Driver {
	case "mysql":
		cfg, err := mysqlconf.ParseDSN(db.DSN)
		require.NoError(t, err)
		u = url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/" + cfg.DBName}
		if cfg.Net != "tcp" {
			u.Host = "localhost"
			u.RawQuery = url.Values{"unix_socket": {cfg.Addr}}.Encode()
		}
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	case "postgres":
		p, err := url.Parse(db.DSN)
		require.NoError(t, err, "the Python example's test takes a URL-form %s", storetest.PostgresEnv)
		u = *p
		q := u.Query()
		// libpq knows no search_path parameter: the test's schema goes
		// through options.
		if sp := q.Get("search_path"); sp != "" {
			q.Del("search_path")
			q.Set("options", "-csearch_path="+sp)
		}
		u.Scheme, u.RawQuery = "postgresql", q.Encode()
	case "sqlserver":
		p, err := url.Parse(db.DSN)
		require.NoError(t, err)
		host := p.Hostname()
		if host == "" {
			host = "localhost"
		}
		port := p.Port()
		if port == "" {
			port = "1433"
		}
		u = url.URL{Scheme: "mssql", User: p.User, Host: net.JoinHostPort(host, port), Path: "/" + p.Query().Get("database")}
		u.RawQuery = url.Values{"schema": {db.Schema}}.Encode()
	case "sqlite":
		u = url.URL{Scheme: "sqlite", Path: db.DSN}
	default:
		t.Fatalf("the Python example has no %s", db.Driver)
	}
	return []string{"APP_DB_URL=" + u.String(), "PYTHONDONTWRITEBYTECODE=1"}
}
