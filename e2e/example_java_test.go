//go:build unix

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net"
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

// The Java example (examples/java) run as an application runs it, against
// a real node, on each database a Java farm uses: the job it enqueues in a
// transaction that rolls back never exists nor runs, the one whose
// transaction commits is called once with the payload Java sent, beside
// the application's own row, and the entry point's refusal reaches Java as
// a Slotpoller.RefusedException naming the field, with nothing written.
func TestJavaExampleEnqueuesInItsTransaction(t *testing.T) {
	for _, driver := range []string{"postgres", "mysql", "sqlserver", "sqlite"} {
		t.Run(driver, func(t *testing.T) {
			requireJavaDatabase(t, driver)
			t.Parallel()
			producerContract(t, driver, "java-node", javaProducer())
		})
	}
}

// Each setting of Slotpoller.enqueue reaches the job as given, bound as
// each database's entry point takes it (a run time is a timestamptz, a UTC
// DATETIME or datetime2, or Unix milliseconds), and a taken unique key is a
// RefusedException of unique_key that names the holder.
func TestJavaExampleEnqueueOptions(t *testing.T) {
	for _, driver := range []string{"postgres", "mysql", "sqlserver", "sqlite"} {
		t.Run(driver, func(t *testing.T) {
			requireJavaDatabase(t, driver)
			t.Parallel()
			s, db := storetest.OpenDB(t, driver)
			ctx := context.Background()
			cmd := exec.Command("java", "-cp", javaClasspath(), "EnqueueOptions")
			cmd.Env = append(os.Environ(), javaEnv(t, db)...)
			raw, err := cmd.Output()
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				t.Fatalf("java EnqueueOptions: %v: %s", err, exit.Stderr)
			}
			require.NoError(t, err)
			var out struct {
				Full, Delayed  int64
				RunAt          int64 `json:"run_at"`
				Field, Message string
			}
			require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)

			j, err := s.JobGet(ctx, out.Full)
			require.NoError(t, err)
			require.Equal(t, "/jobs/options?x=%20y", j.Endpoint)
			require.Equal(t, "PUT", j.Method)
			payload := make([]byte, 8000)
			for i := range payload {
				payload[i] = byte(i)
			}
			require.Equal(t, payload, j.Payload, "the payload's bytes")
			require.Equal(t, time.UnixMilli(out.RunAt).UTC(), j.RunAt.UTC(), "the run time")
			require.Equal(t, 7, j.MaxAttempts)
			require.Equal(t, 2500*time.Millisecond, j.Timeout)
			require.Equal(t, "options-é", j.UniqueKey)
			require.Equal(t, "options-idem", j.IdempotencyKey)
			require.Equal(t, "java", j.Queue)

			// Two hours on the database clock, which the test reads as the
			// job's creation time.
			d, err := s.JobGet(ctx, out.Delayed)
			require.NoError(t, err)
			require.WithinDuration(t, d.Created.Add(2*time.Hour), d.RunAt, time.Second, "the delayed job's run time")
			require.Equal(t, "POST", d.Method, "the default method")

			require.Equal(t, "unique_key", out.Field)
			require.True(t, strings.HasPrefix(out.Message, "unique_key: "), "%q", out.Message)
			if driver != "sqlite" { // SQLite's trigger cannot put the id in its message
				require.Contains(t, out.Message, "(id "+strconv.FormatInt(out.Full, 10)+")")
			}
			counts, err := s.JobCounts(ctx)
			require.NoError(t, err)
			require.Equal(t, map[string]int{store.StateReady: 2}, counts, "the two jobs, and none for the taken key")
		})
	}
}

// requireJavaDatabase skips the test when the database is not configured
// or the example cannot run on it, before anything is compiled.
func requireJavaDatabase(t *testing.T, driver string) {
	t.Helper()
	requireDatabase(t, driver)
	requireJava(t, driver)
}

// javaDrivers are the Debian packages of the JDBC drivers the example
// runs with, by the database's driver name and the jar they install.
var javaDrivers = map[string]struct{ jar, debian string }{
	"postgres":  {"/usr/share/java/postgresql.jar", "libpostgresql-jdbc-java"},
	"mysql":     {"/usr/share/java/mariadb-java-client.jar", "libmariadb-java"},
	"sqlserver": {"/usr/share/java/jtds.jar", "libjtds-java"},
	"sqlite":    {"/usr/share/java/sqlite-jdbc.jar", "libxerial-sqlite-jdbc-java"},
}

// The example compiled once for every test of the binary: javac takes a
// few seconds of a 2-core machine's CPU, the same each time.
var javaBuild struct {
	once sync.Once
	dir  string // the classes, beside the node's binary: TestMain removes both
	err  error
}

// requireJava skips the test, saying what to install, when java, javac or
// the database's JDBC driver (none for driver "") is missing, and compiles
// the example the first time.
func requireJava(t *testing.T, driver string) {
	t.Helper()
	for _, tool := range []string{"java", "javac"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: skipping the Java example's test (on Debian: apt-get install openjdk-17-jdk-headless)", tool)
		}
	}
	if d, ok := javaDrivers[driver]; ok {
		if _, err := os.Stat(d.jar); err != nil {
			t.Skipf("no JDBC driver %s: skipping the Java example's test (on Debian: apt-get install %s)", d.jar, d.debian)
		}
	}
	javaBuild.once.Do(func() {
		javaBuild.dir = filepath.Join(filepath.Dir(binary), "java-example")
		src := filepath.Join("..", "examples", "java")
		files, err := filepath.Glob(filepath.Join(src, "*.java"))
		if err != nil {
			javaBuild.err = err
			return
		}
		for _, dir := range []string{filepath.Join(src, "src", "slotpoller"), filepath.Join(src, "test")} {
			more, _ := filepath.Glob(filepath.Join(dir, "*.java"))
			files = append(files, more...)
		}
		cmd := exec.Command("javac", append([]string{"-Xlint:all", "-Werror", "-d", javaBuild.dir}, files...)...)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			javaBuild.err = errors.New("javac: " + err.Error() + "\n" + string(out))
		}
		t.Logf("javac examples/java: %v", time.Since(start).Round(time.Millisecond))
	})
	require.NoError(t, javaBuild.err)
}

// javaClasspath is the compiled example and every JDBC driver there is.
func javaClasspath() string {
	cp := []string{javaBuild.dir}
	for _, d := range javaDrivers {
		if _, err := os.Stat(d.jar); err == nil {
			cp = append(cp, d.jar)
		}
	}
	return strings.Join(cp, string(os.PathListSeparator))
}

// javaEnv gives the example the test's database as a JDBC URL and login,
// and on SQL Server the test's schema.
func javaEnv(t *testing.T, db storetest.DB) []string {
	t.Helper()
	switch db.Driver {
	case "postgres":
		u, err := url.Parse(db.DSN)
		require.NoError(t, err, "the Java example's test takes a URL-form %s", storetest.PostgresEnv)
		q := url.Values{}
		if m := u.Query().Get("sslmode"); m != "" {
			q.Set("sslmode", m)
		}
		// The test's schema, as the node's DSN names it.
		if sp := u.Query().Get("search_path"); sp != "" {
			q.Set("currentSchema", sp)
		}
		password, _ := u.User.Password()
		return []string{"APP_DB_URL=jdbc:postgresql://" + u.Host + u.Path + "?" + q.Encode(),
			"APP_DB_USER=" + u.User.Username(), "APP_DB_PASSWORD=" + password}
	case "mysql":
		cfg, err := mysqlconf.ParseDSN(db.DSN)
		require.NoError(t, err)
		require.Equal(t, "tcp", cfg.Net, "the Java example reaches MariaDB over TCP")
		return []string{"APP_DB_URL=jdbc:mariadb://" + cfg.Addr + "/" + cfg.DBName,
			"APP_DB_USER=" + cfg.User, "APP_DB_PASSWORD=" + cfg.Passwd}
	case "sqlserver":
		u, err := url.Parse(db.DSN)
		require.NoError(t, err)
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "1433")
		}
		password, _ := u.User.Password()
		// ssl=request: jTDS then opens with the PRELOGIN message that
		// Babelfish 4.2 waits for (without it, it closes the connection);
		// the login is encrypted where the server can.
		return []string{"APP_DB_URL=jdbc:jtds:sqlserver://" + host + "/" + u.Query().Get("database") + ";ssl=request",
			"APP_DB_USER=" + u.User.Username(), "APP_DB_PASSWORD=" + password, "APP_DB_SCHEMA=" + db.Schema}
	case "sqlite":
		return []string{"APP_DB_URL=jdbc:sqlite:" + db.DSN}
	}
	t.Fatalf("the Java example has no %s", db.Driver)
	return nil
}

// javaProducer is Producer: a refusal is a Slotpoller.RefusedException
// naming the field.
func javaProducer() exampleProducer {
	return exampleProducer{env: javaEnv, run: runJavaProducer,
		refusal: []string{"refused (endpoint): endpoint: endpoint"}, maxAttempts: 5}
}

// runJavaProducer runs the Java example's Producer (runExampleProducer).
func runJavaProducer(t *testing.T, appEnv []string, status int, args ...string) (produced, string) {
	t.Helper()
	return runExampleProducer(t, appEnv, status, append([]string{"java", "-cp", javaClasspath(), "Producer"}, args...)...)
}
