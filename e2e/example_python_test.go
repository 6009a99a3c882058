//go:build unix

package e2e

import (
	"errors"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	mysqlconf "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

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
			producerContract(t, d.driver, "python-node", pythonProducer(python, d.refusal))
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

// pythonProducer is producer.py run by python: a refusal is a
// slotpoller.FieldError with the driver's code.
func pythonProducer(python, refusal string) exampleProducer {
	return exampleProducer{
		env: pythonEnv,
		run: func(t *testing.T, appEnv []string, status int, args ...string) (produced, string) {
			t.Helper()
			return runPythonProducer(t, python, appEnv, status, args...)
		},
		refusal: []string{"FieldError [" + refusal},
	}
}

// runPythonProducer runs examples/python/producer.py (runExampleProducer).
func runPythonProducer(t *testing.T, python string, appEnv []string, status int, args ...string) (produced, string) {
	t.Helper()
	return runExampleProducer(t, appEnv, status, append([]string{python, filepath.Join("..", "examples", "python", "producer.py")}, args...)...)
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
