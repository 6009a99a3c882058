//go:build unix

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mysqlconf "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// The PHP example (examples/php) run as an application runs it, against a
// real node: the job it enqueues in a transaction that rolls back never
// exists nor runs, the one whose transaction commits is called once with
// the payload PHP sent, beside the application's own row, and the entry
// point's refusal reaches PHP as a PDOException (SQLSTATE 22023; on SQL
// Server the procedure's message) with nothing written.
func TestPHPExampleEnqueuesInItsTransaction(t *testing.T) {
	for _, d := range phpDrivers {
		t.Run(d.driver, func(t *testing.T) {
			requirePHPFor(t, d)
			t.Parallel()
			phpExample(t, d.driver)
		})
	}
}

// requirePHP skips the test, saying what to install, when the php command
// or its PDO driver for the database is missing (.ci/run installs both).
func requirePHP(t *testing.T, extension, debian string) {
	t.Helper()
	php, err := exec.LookPath("php")
	if err != nil {
		t.Skip("php is not installed: skipping the PHP example's test (on Debian: apt-get install php-cli php-mysql php-pgsql php-sybase)")
	}
	out, err := exec.Command(php, "-r", `exit(extension_loaded($argv[1]) ? 0 : 3);`, extension).CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 3 {
		t.Skipf("PHP has no %s extension: skipping the PHP example's test (on Debian: apt-get install %s)", extension, debian)
	}
	require.NoError(t, err, "ask php for its %s extension: %s", extension, out)
}

// requestsSeen records each call's method, path and body by its job's id,
// beside what the recorder keeps of its headers.
type requestsSeen struct{ byJob sync.Map }

func (q *requestsSeen) wrap(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		q.byJob.Store(r.Header.Get("X-Slotpoller-Job"), r.Method+" "+r.URL.Path+" "+string(body))
		next(w, r)
	}
}

// produced is the line producer.php prints.
type produced struct {
	Outcome string `json:"outcome"`
	Order   int64  `json:"order"`
	Job     int64  `json:"job"`
	Payload string `json:"payload"`
}

func phpExample(t *testing.T, driver string) {
	s, db := storetest.OpenDB(t, driver)
	ctx := context.Background()
	rec, seen := &recorder{}, &requestsSeen{}
	srv := httptest.NewServer(seen.wrap(rec.handler))
	defer srv.Close()
	n := startNode(t, env(driver, db.DSN, "php-node", srv.URL, db.ExtraEnv()...), "php-node")
	waitSettled(t, s, 1)
	appEnv := phpDBEnv(t, db)

	orders := func() int {
		var count int
		require.NoError(t, s.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM "+exampleTable(db, "example_orders")).Scan(&count))
		return count
	}
	noJobs := func(when string) {
		counts, err := s.JobCounts(ctx)
		require.NoError(t, err)
		require.Empty(t, counts, "jobs %s", when)
	}

	// Rolled back: neither the order nor the job exists, and the node,
	// polling its slots meanwhile, calls nothing.
	out, _ := runProducer(t, appEnv, 0, "rollback")
	require.Equal(t, "rolled back", out.Outcome)
	require.Positive(t, out.Job, "the entry point gave the job an id inside the transaction")
	_, err := s.JobGet(ctx, out.Job)
	require.ErrorIs(t, err, store.ErrNotFound, "job %d of the rolled back transaction", out.Job)
	noJobs("after a rollback")
	require.Zero(t, orders(), "orders after a rollback")

	// Refused: the entry point's check reaches PHP as SQLSTATE 22023 with
	// the field at fault, and the order written before it is rolled back.
	// pdo_dblib shows the procedure's message (error 51000, severity 16)
	// under SQLSTATE HY000, without the server's number.
	_, stderr := runProducer(t, appEnv, 2, "commit", "jobs/no-leading-slash")
	if driver == "sqlserver" {
		require.Contains(t, stderr, "SQLSTATE[HY000]")
		require.Contains(t, stderr, "(severity 16)")
	} else {
		require.Contains(t, stderr, "SQLSTATE[22023]")
	}
	require.Contains(t, stderr, "endpoint: endpoint")
	require.Contains(t, stderr, "must start with /")
	noJobs("after a refused enqueue")
	require.Zero(t, orders(), "orders after a refused enqueue")

	// A job the rollback or the refusal had let through would have been
	// called within the node's next slots.
	heardFor(t, s, 1500*time.Millisecond)
	require.Empty(t, rec.snapshot(), "calls after a rollback and a refused enqueue")

	// Committed: the order is there and its job is called once, with the
	// payload PHP sent.
	out, _ = runProducer(t, appEnv, 0, "commit")
	require.Equal(t, "committed", out.Outcome)
	require.Equal(t, 1, orders(), "orders after the commit")
	var item string
	require.NoError(t, s.DB().QueryRowContext(ctx, store.Expand(s.Dialect(), "SELECT item FROM "+exampleTable(db, "example_orders")+" WHERE id = ?"), out.Order).Scan(&item),
		"the committed order %d", out.Order)
	require.Equal(t, "book", item)
	waitFor(t, 60*time.Second, "the committed job to be done", func() bool {
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
	require.Equal(t, "POST /jobs/send-invoice "+out.Payload, request, "the call's method, path and body: the payload PHP sent")
	var sent struct{ Order int64 }
	require.NoError(t, json.Unmarshal([]byte(out.Payload), &sent))
	require.Equal(t, out.Order, sent.Order, "the payload names the committed order")
	counts, err := s.JobCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{store.StateDone: 1}, counts, "jobs after the commit")
	n.stop(t)
}

// runProducer runs examples/php/producer.php, requires its exit status,
// and returns what it printed: the parsed line when it succeeded, and its
// standard error.
func runProducer(t *testing.T, appEnv []string, status int, args ...string) (produced, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "php", append([]string{filepath.Join("..", "examples", "php", "producer.php")}, args...)...)
	cmd.Env = append(os.Environ(), appEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("php producer.php %s: %v, %s%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	var out produced
	if status == 0 {
		require.NoError(t, err, "php producer.php %v: %s", args, stderr.String())
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), "the producer's line %q", stdout.String())
		return out, stderr.String()
	}
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "php producer.php %v should have failed: %s", args, stdout.String())
	require.Equal(t, status, exit.ExitCode(), "exit status of php producer.php %v: %s", args, stderr.String())
	require.Empty(t, stdout.String(), "a failed producer prints no outcome")
	return out, stderr.String()
}

// phpEnv gives the producer the test's database as a PDO DSN and login.
func phpEnv(t *testing.T, driver, dsn string) []string {
	t.Helper()
	switch driver {
	case "mysql":
		cfg, err := mysqlconf.ParseDSN(dsn)
		require.NoError(t, err)
		where := "unix_socket=" + cfg.Addr
		if cfg.Net == "tcp" {
			host, port, err := net.SplitHostPort(cfg.Addr)
			require.NoError(t, err)
			where = "host=" + host + ";port=" + port
		}
		return []string{
			"APP_DB_DSN=mysql:" + where + ";dbname=" + cfg.DBName + ";charset=utf8mb4",
			"APP_DB_USER=" + cfg.User, "APP_DB_PASSWORD=" + cfg.Passwd,
		}
	case "postgres":
		u, err := url.Parse(dsn)
		require.NoError(t, err, "the PHP example's test takes a URL-form %s", storetest.PostgresEnv)
		q := u.Query()
		pdo := "pgsql:host=" + u.Hostname() + ";dbname=" + strings.TrimPrefix(u.Path, "/")
		if p := u.Port(); p != "" {
			pdo += ";port=" + p
		}
		if m := q.Get("sslmode"); m != "" {
			pdo += ";sslmode=" + m
		}
		// The test's schema, as the node's DSN names it.
		if sp := q.Get("search_path"); sp != "" {
			pdo += ";options='-csearch_path=" + sp + "'"
		}
		password, _ := u.User.Password()
		return []string{"APP_DB_DSN=" + pdo, "APP_DB_USER=" + u.User.Username(), "APP_DB_PASSWORD=" + password}
	case "sqlserver":
		// FreeTDS through pdo_dblib: host:port, TDS 7.4 (SQL Server
		// 2012 and later), UTF-8 between PHP and FreeTDS. The schema is
		// not in a DSN: phpDBEnv adds it.
		u, err := url.Parse(dsn)
		require.NoError(t, err, "the PHP example's test takes a URL-form %s", storetest.SQLServerEnv)
		require.Empty(t, strings.Trim(u.Path, "/"), "the PHP example's test takes no instance name in %s", storetest.SQLServerEnv)
		port := u.Port()
		if port == "" {
			port = "1433"
		}
		pdo := "dblib:host=" + net.JoinHostPort(u.Hostname(), port) + ";version=7.4;charset=UTF-8"
		if d := u.Query().Get("database"); d != "" {
			pdo += ";dbname=" + d
		}
		password, _ := u.User.Password()
		return []string{"APP_DB_DSN=" + pdo, "APP_DB_USER=" + u.User.Username(), "APP_DB_PASSWORD=" + password}
	}
	t.Fatalf("the PHP example has no %s", driver)
	return nil
}
