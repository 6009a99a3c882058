//go:build unix

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// The C# example (examples/csharp) run as an application runs it, against
// a real node on SQL Server: the job it enqueues in a transaction that
// rolls back never exists nor runs, the one whose transaction commits is
// called once with the payload C# sent, beside the application's own row,
// and the entry point's refusal reaches C# as a SqlException 51000 with
// nothing written.
func TestCSharpExampleEnqueuesInItsTransaction(t *testing.T) {
	storetest.RequireSQLServer(t)
	bin := buildCSharpExample(t)
	t.Parallel()
	start := time.Now()
	s, db := storetest.OpenDB(t, "sqlserver")
	ctx := context.Background()
	rec, seen := &recorder{}, &requestsSeen{}
	srv := httptest.NewServer(seen.wrap(rec.handler))
	defer srv.Close()
	n := startNode(t, env("sqlserver", db.DSN, "csharp-node", srv.URL, db.ExtraEnv()...), "csharp-node")
	waitSettled(t, s, 1)
	appEnv := csharpEnv(t, db)
	orders := "[" + db.Schema + "].[example_orders]"

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
	out, _ := runCSharpProducer(t, bin, appEnv, 0, "rollback")
	require.Equal(t, "rolled back", out.Outcome)
	require.Positive(t, out.Job, "the entry point gave the job an id inside the transaction")
	_, err := s.JobGet(ctx, out.Job)
	require.ErrorIs(t, err, store.ErrNotFound, "job %d of the rolled back transaction", out.Job)
	noJobs("after a rollback")
	require.Zero(t, countOrders(), "orders after a rollback")

	// Refused: the entry point's check reaches C# as SQL Server error
	// 51000 with the field at fault, and the order written before it is
	// rolled back.
	_, stderr := runCSharpProducer(t, bin, appEnv, 2, "commit", "jobs/no-leading-slash")
	require.Contains(t, stderr, "SQL Server error 51000")
	require.Contains(t, stderr, "endpoint: endpoint")
	require.Contains(t, stderr, "must start with /")
	noJobs("after a refused enqueue")
	require.Zero(t, countOrders(), "orders after a refused enqueue")

	// A job the rollback or the refusal had let through would have been
	// called within the node's next slots.
	heardFor(t, s, 1500*time.Millisecond)
	require.Empty(t, rec.snapshot(), "calls after a rollback and a refused enqueue")

	// Committed: the order is there and its job is called once, with the
	// payload C# sent.
	out, _ = runCSharpProducer(t, bin, appEnv, 0, "commit")
	require.Equal(t, "committed", out.Outcome)
	require.Equal(t, 1, countOrders(), "orders after the commit")
	var item string
	require.NoError(t, s.DB().QueryRowContext(ctx, "SELECT item FROM "+orders+" WHERE id = @p1", out.Order).Scan(&item),
		"the committed order %d", out.Order)
	require.Equal(t, "book", item)
	// The T-SQL test server is slow, not wrong: a generous wait.
	waitFor(t, time.Minute, "the committed job to be done", func() bool {
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
	require.Equal(t, "POST /jobs/send-invoice "+out.Payload, request, "the call's method, path and body: the payload C# sent")
	var sent struct{ Order int64 }
	require.NoError(t, json.Unmarshal([]byte(out.Payload), &sent))
	require.Equal(t, out.Order, sent.Order, "the payload names the committed order")
	counts, err := s.JobCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{store.StateDone: 1}, counts, "jobs after the commit")
	n.stop(t)
	t.Logf("sqlserver: %v", time.Since(start).Round(time.Millisecond))
}

// csharpBuild is the example compiled: its folder holds producer.exe and
// endpoint.exe.
type csharpBuild struct{ dir string }

// buildCSharpExample compiles examples/csharp with Mono's C# compiler into
// a folder of the test's, or skips the test, saying what to install, when
// Mono or the assemblies the example uses are missing (.ci/run installs
// them).
func buildCSharpExample(t *testing.T) csharpBuild {
	t.Helper()
	const install = "on Debian: apt-get install mono-devel"
	for _, tool := range []string{"mcs", "mono"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: skipping the C# example's test (%s)", tool, install)
		}
	}
	src, err := filepath.Abs(filepath.Join("..", "examples", "csharp"))
	require.NoError(t, err)
	dir := t.TempDir()
	for _, build := range []struct {
		out   string
		files []string
	}{
		{"producer.exe", []string{"Producer.cs", "src/Slotpoller.cs"}},
		{"endpoint.exe", []string{"EndpointServer.cs", "src/Endpoint.cs", "src/Slotpoller.cs"}},
	} {
		args := []string{"-r:System.Data.dll", "-r:System.Web.Extensions.dll", "-out:" + filepath.Join(dir, build.out)}
		cmd := exec.Command("mcs", append(args, build.files...)...)
		cmd.Dir = src
		out, err := cmd.CombinedOutput()
		// CS0006: an assembly given with -r was not found.
		if err != nil && strings.Contains(string(out), "CS0006") {
			t.Skipf("Mono lacks an assembly the C# example uses: skipping its test (%s): %s", install, out)
		}
		require.NoError(t, err, "mcs %s: %s", build.out, out)
	}
	return csharpBuild{dir: dir}
}

// csharpEnv gives the example the test's database as an ADO.NET connection
// string, and the test's schema for the farm's tables and its own.
func csharpEnv(t *testing.T, db storetest.DB) []string {
	t.Helper()
	u, err := url.Parse(db.DSN)
	require.NoError(t, err, "the C# example's test takes a URL-form %s", storetest.SQLServerEnv)
	q := u.Query()
	port := u.Port()
	if port == "" {
		port = "1433"
	}
	password, _ := u.User.Password()
	conn := "Server=" + u.Hostname() + "," + port + ";Database=" + q.Get("database") +
		";User ID=" + u.User.Username() + ";Password=" + password
	// go-mssqldb's encrypt=disable is SqlClient's Encrypt=false.
	switch q.Get("encrypt") {
	case "disable", "false":
		conn += ";Encrypt=false"
	case "true", "strict":
		conn += ";Encrypt=true"
	}
	return []string{"APP_DB_CONNECTION=" + conn, "APP_SLOTPOLLER_SCHEMA=" + db.Schema, "APP_DB_SCHEMA=" + db.Schema}
}

// runCSharpProducer runs producer.exe, requires its exit status, and
// returns what it printed: the parsed line when it succeeded, and its
// standard error.
func runCSharpProducer(t *testing.T, bin csharpBuild, appEnv []string, status int, args ...string) (produced, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mono", append([]string{filepath.Join(bin.dir, "producer.exe")}, args...)...)
	cmd.Env = append(os.Environ(), appEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("mono producer.exe %s: %v, %s%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	var out produced
	if status == 0 {
		require.NoError(t, err, "mono producer.exe %v: %s", args, stderr.String())
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), "the producer's line %q", stdout.String())
		return out, stderr.String()
	}
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "mono producer.exe %v should have failed: %s", args, stdout.String())
	require.Equal(t, status, exit.ExitCode(), "exit status of mono producer.exe %v: %s", args, stderr.String())
	require.Empty(t, stdout.String(), "a failed producer prints no outcome")
	return out, stderr.String()
}
