//go:build unix

package e2e

import (
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
			javaExample(t, driver)
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
	switch driver {
	case "mysql":
		storetest.RequireMySQL(t)
	case "postgres":
		storetest.RequirePostgres(t)
	case "sqlserver":
		storetest.RequireSQLServer(t)
	}
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

func javaExample(t *testing.T, driver string) {
	start := time.Now()
	s, db := storetest.OpenDB(t, driver)
	ctx := context.Background()
	rec, seen := &recorder{}, &requestsSeen{}
	srv := httptest.NewServer(seen.wrap(rec.handler))
	defer srv.Close()
	n := startNode(t, env(driver, db.DSN, "java-node", srv.URL, db.ExtraEnv()...), "java-node")
	waitSettled(t, s, 1)
	appEnv := javaEnv(t, db)
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
	out, _ := runJavaProducer(t, appEnv, 0, "rollback")
	require.Equal(t, "rolled back", out.Outcome)
	require.Positive(t, out.Job, "the entry point gave the job an id inside the transaction")
	_, err := s.JobGet(ctx, out.Job)
	require.ErrorIs(t, err, store.ErrNotFound, "job %d of the rolled back transaction", out.Job)
	noJobs("after a rollback")
	require.Zero(t, countOrders(), "orders after a rollback")

	// Refused: the entry point's check reaches Java as a RefusedException
	// naming the field at fault, and the order written before it is
	// rolled back.
	_, stderr := runJavaProducer(t, appEnv, 2, "commit", "jobs/no-leading-slash")
	require.Contains(t, stderr, "refused (endpoint): endpoint: endpoint")
	require.Contains(t, stderr, "must start with /")
	noJobs("after a refused enqueue")
	require.Zero(t, countOrders(), "orders after a refused enqueue")

	// A job the rollback or the refusal had let through would have been
	// called within the node's next slots.
	heardFor(t, s, 1500*time.Millisecond)
	require.Empty(t, rec.snapshot(), "calls after a rollback and a refused enqueue")

	// Committed: the order is there and its job is called once, with the
	// payload Java sent.
	out, _ = runJavaProducer(t, appEnv, 0, "commit")
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
	require.Equal(t, "POST /jobs/send-invoice "+out.Payload, request, "the call's method, path and body: the payload Java sent")
	var sent struct{ Order int64 }
	require.NoError(t, json.Unmarshal([]byte(out.Payload), &sent))
	require.Equal(t, out.Order, sent.Order, "the payload names the committed order")
	j, err := s.JobGet(ctx, out.Job)
	require.NoError(t, err)
	require.Equal(t, 5, j.MaxAttempts, "the max attempts Java gave")
	counts, err := s.JobCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{store.StateDone: 1}, counts, "jobs after the commit")
	n.stop(t)
	t.Logf("%s: %v", driver, time.Since(start).Round(time.Millisecond))
}

// runJavaProducer runs examples/java's Producer, requires its exit status,
// and returns what it printed: the parsed line when it succeeded, and its
// standard error.
func runJavaProducer(t *testing.T, appEnv []string, status int, args ...string) (produced, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "java", append([]string{"-cp", javaClasspath(), "Producer"}, args...)...)
	cmd.Env = append(os.Environ(), appEnv...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("java Producer %s: %v, %s%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	var out produced
	if status == 0 {
		require.NoError(t, err, "java Producer %v: %s", args, stderr.String())
		require.NoError(t, json.Unmarshal([]byte(stdout.String()), &out), "the producer's line %q", stdout.String())
		return out, stderr.String()
	}
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "java Producer %v should have failed: %s", args, stdout.String())
	require.Equal(t, status, exit.ExitCode(), "exit status of java Producer %v: %s", args, stderr.String())
	require.Empty(t, stdout.String(), "a failed producer prints no outcome")
	return out, stderr.String()
}
