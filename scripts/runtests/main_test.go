package main

import (
	"bufio"
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/canned.golden from the output")

// report runs the reporter on a canned `go test -json` stream.
func report(t *testing.T, path string, verbose bool) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	rep := newReporter(&out, verbose)
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		rep.line(append(sc.Bytes(), '\n'))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	rep.finish()
	return out.String()
}

// testdata/canned.json is a real stream of go test -json on packages that
// pass, fail, skip, do not build, have no tests, and time out.
func TestReportOfACannedStream(t *testing.T) {
	out := report(t, filepath.Join("testdata", "canned.json"), false)
	golden := filepath.Join("testdata", "canned.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err, "; run go test -update to write it")
	}
	if out != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it):\n%s", golden, out)
	}

	for _, s := range []string{
		// each package's line, as go test prints it
		"ok  \texample.com/canned/good\t",
		"ok  \texample.com/canned/skippy\t",
		"?   \texample.com/canned/notests\t[no test files]\n",
		"FAIL\texample.com/canned/bad\t",
		"FAIL\texample.com/canned/broken [build failed]\n",
		"FAIL\texample.com/canned/hang\t",
		// the failing tests' full output
		"--- FAIL: TestBroken (0.00s)\n    bad_test.go:8: first log line\n    bad_test.go:9: got 1, want 2\n        second line of the error\n",
		"--- FAIL: TestParent/fails (0.00s)\n    bad_test.go:14: sub failed\n--- FAIL: TestParent (0.00s)\n",
		// the compile error
		`broken/broken.go:3:23: cannot use "x"`,
		// the timed-out test, which never ends: its log and the panic
		"    hang_test.go:11: waiting for a reply that never comes\npanic: test timed out after 1s\n",
		// one summary line per package that skipped, first lines only
		"skipped in example.com/canned/bad: TestSkipped (SLOTPOLLER_TEST_SQLSERVER_DSN unset)\n",
		"skipped in example.com/canned/skippy: TestPostgres (SLOTPOLLER_TEST_POSTGRES_DSN unset: set it to a PostgreSQL database to run the conformance suite), " +
			"TestNoReason, TestLoggedThenSkipped (no chromium at /usr/bin/chromium), TestSubs/wine (wine not installed)\n",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("the output lacks %q:\n%s", s, out)
		}
	}
	for _, s := range []string{"noise that a passing test logs", "=== RUN", "second line\n", "--- PASS", "--- SKIP"} {
		if strings.Contains(out, s) {
			t.Errorf("the output has %q, which go test without -v does not print:\n%s", s, out)
		}
	}
	if n := strings.Count(out, "skipped in "); n != 2 {
		t.Errorf("%d skip summaries, want one for each of the 2 packages that skipped", n)
	}
}

// With -v every line of output is printed as it comes, and the skips are
// still summed up.
func TestReportVerbose(t *testing.T) {
	out := report(t, filepath.Join("testdata", "canned.json"), true)
	for _, s := range []string{"=== RUN   TestGood\n", "noise that a passing test logs", "--- SKIP: TestNoReason",
		"skipped in example.com/canned/bad: TestSkipped (SLOTPOLLER_TEST_SQLSERVER_DSN unset)\n"} {
		if !strings.Contains(out, s) {
			t.Errorf("the -v output lacks %q", s)
		}
	}
	if n := strings.Count(out, "--- FAIL: TestBroken"); n != 1 {
		t.Errorf("a failure is printed %d times with -v, want once", n)
	}
}

func TestGoTestArgs(t *testing.T) {
	base := "test -json -race -timeout 25m "
	for _, c := range []struct{ args, want string }{
		{"", base + "./..."},
		{"./client", base + "./client"},
		{"-run TestX/sub ./client ./jobs", base + "-run TestX/sub ./client ./jobs"},
		{"-count=1 -v -short", base + "-count=1 -v -short ./..."},
		{"-timeout 5m ./e2e", base + "-timeout 5m ./e2e"},
		{"./e2e -run TestY -args -slow", base + "-run TestY ./e2e -args -slow"},
	} {
		if got := strings.Join(goTestArgs(strings.Fields(c.args)), " "); got != c.want {
			t.Errorf("%q: go %s, want go %s", c.args, got, c.want)
		}
	}
	if !verbose([]string{"-v"}) || verbose([]string{"-run", "v"}) || verbose([]string{"-args", "-v"}) {
		t.Error("verbose: -v is a go test flag; a value or a test binary's argument is not")
	}
}

func TestTrimLogPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"store_test.go:45: SLOTPOLLER_TEST_POSTGRES_DSN unset": "SLOTPOLLER_TEST_POSTGRES_DSN unset",
		"no chromium":                "no chromium",
		"see x.go:12 for why":        "see x.go:12 for why",
		"a.go:: empty":               "a.go:: empty",
		"deep/path/a_test.go:7: why": "why",
	} {
		if got := trimLogPrefix(in); got != want {
			t.Errorf("trimLogPrefix(%q) = %q, want %q", in, got, want)
		}
	}
}

// One real run: go test on the fixture module, a test that passes and
// one that skips.
func TestRunOnAFixture(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the real go test run (with -race) is left out")
	}
	t.Setenv("RUNTESTS_FIXTURE_DSN", "")
	var out, errOut bytes.Buffer
	code := run([]string{"-count=1"}, filepath.Join("testdata", "fixture"), &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, &out, &errOut)
	}
	want := "skipped in runtests.example/fixture: TestSkips (RUNTESTS_FIXTURE_DSN unset: set it to run this test)\n"
	if !strings.HasPrefix(out.String(), "ok  \truntests.example/fixture\t") || !strings.HasSuffix(out.String(), "\n"+want) ||
		strings.Count(out.String(), "\n") != 2 {
		t.Errorf("got:\n%s\nwant the ok line, then:\n%s", &out, want)
	}

	// A package that does not exist: go test's own status and message.
	out.Reset()
	errOut.Reset()
	if code := run([]string{"./nothing-here"}, filepath.Join("testdata", "fixture"), &out, &errOut); code == 0 {
		t.Errorf("exit 0 for a missing package; stdout %q, stderr %q", &out, &errOut)
	}
	if !strings.Contains(out.String()+errOut.String(), "nothing-here") {
		t.Errorf("go test's message is lost: stdout %q, stderr %q", &out, &errOut)
	}
}

// The fixture is under testdata and its own module: the project's ./...
// does not hold it, so the project's test run never runs it.
func TestFixtureIsNotInTheProject(t *testing.T) {
	out, err := exec.Command("go", "list", "./...").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "fixture") || !strings.Contains(string(out), "scripts/runtests") {
		t.Errorf("go list ./... in scripts/runtests:\n%s", out)
	}
	root, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(root)) != "github.com/slotpoller/slotpoller" {
		t.Errorf("scripts/runtests is in module %s, not the project's", root)
	}
}

// The run ends with the slowest tests that ran no subtests, slowest
// first: where a run near CI's 30 minutes spent them.
func TestReportNamesTheSlowestTests(t *testing.T) {
	var out bytes.Buffer
	rep := newReporter(&out, false)
	for _, ev := range []string{
		`{"Action":"pass","Package":"github.com/slotpoller/slotpoller/e2e","Test":"TestChaos/sqlite","Elapsed":40.5}`,
		`{"Action":"fail","Package":"github.com/slotpoller/slotpoller/e2e","Test":"TestChaos/sqlserver","Elapsed":178.6}`,
		`{"Action":"fail","Package":"github.com/slotpoller/slotpoller/e2e","Test":"TestChaos","Elapsed":180}`,
		`{"Action":"pass","Package":"github.com/slotpoller/slotpoller/jobs","Test":"TestQuick","Elapsed":0.4}`,
		`{"Action":"pass","Package":"example.com/other","Test":"TestElsewhere","Elapsed":61}`,
		`{"Action":"fail","Package":"github.com/slotpoller/slotpoller/e2e","Elapsed":200}`,
		`{"Action":"pass","Package":"github.com/slotpoller/slotpoller/jobs","Elapsed":1}`,
		`{"Action":"pass","Package":"example.com/other","Elapsed":62}`,
	} {
		rep.line([]byte(ev + "\n"))
	}
	rep.finish()
	want := "slowest tests: e2e TestChaos/sqlserver 178.6s, example.com/other TestElsewhere 61.0s, e2e TestChaos/sqlite 40.5s\n"
	if !strings.HasSuffix(out.String(), want) {
		t.Errorf("the report ends\n%s\nwant it to end %q (a parent and a test under a second left out)", out.String(), want)
	}
}
