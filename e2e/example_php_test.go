//go:build unix

package e2e

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	mysqlconf "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

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
			producerContract(t, d.driver, "php-node", phpProducer(d.driver))
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

// phpProducer is producer.php. pdo_dblib shows the procedure's message
// (error 51000, severity 16) under SQLSTATE HY000, without the server's
// number.
func phpProducer(driver string) exampleProducer {
	refusal := []string{"SQLSTATE[22023]"}
	if driver == "sqlserver" {
		refusal = []string{"SQLSTATE[HY000]", "(severity 16)"}
	}
	return exampleProducer{env: phpDBEnv, run: runProducer, refusal: refusal}
}

// runProducer runs examples/php/producer.php (runExampleProducer).
func runProducer(t *testing.T, appEnv []string, status int, args ...string) (produced, string) {
	t.Helper()
	return runExampleProducer(t, appEnv, status, append([]string{"php", filepath.Join("..", "examples", "php", "producer.php")}, args...)...)
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
