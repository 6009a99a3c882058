//go:build unix

package e2e

import (
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
	producerContract(t, "sqlserver", "csharp-node", csharpProducer(bin))
}

// csharpProducer is producer.exe under Mono: a refusal is a SqlException
// with the server's number.
func csharpProducer(bin csharpBuild) exampleProducer {
	return exampleProducer{
		env: csharpEnv,
		run: func(t *testing.T, appEnv []string, status int, args ...string) (produced, string) {
			t.Helper()
			return runCSharpProducer(t, bin, appEnv, status, args...)
		},
		refusal: []string{"SQL Server error 51000"},
	}
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

// runCSharpProducer runs the C# example's producer.exe under Mono
// (runExampleProducer).
func runCSharpProducer(t *testing.T, bin csharpBuild, appEnv []string, status int, args ...string) (produced, string) {
	t.Helper()
	return runExampleProducer(t, appEnv, status, append([]string{"mono", filepath.Join(bin.dir, "producer.exe")}, args...)...)
}
