// Command runtests runs the project's tests as the README and CI do:
//
//	go run ./scripts/runtests [go test flags] [packages]
//
// It runs `go test -json -race -timeout 25m ./...` and prints what go test
// prints without -v: each package's ok or FAIL line, and the full output
// of the tests that fail. Then, for each package that skipped tests, one
// line names them with the first line of their skip message:
//
//	skipped in github.com/slotpoller/slotpoller/internal/store: TestConformancePostgres (SLOTPOLLER_TEST_POSTGRES_DSN unset)
//
// so that an integration test switched off by a missing variable is seen,
// not mistaken for a pass. A last line names the slowest tests and their
// seconds, to tell where a run near CI's 30 minutes spent them. It exits
// with go test's status.
//
// Flags are passed to go test after the defaults, so -timeout 5m or -v
// (which prints every test's output as it comes) override them; package
// arguments replace ./... . It uses the standard library only, so that it
// runs before any download.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], "", os.Stdout, os.Stderr))
}

// run runs go test in dir ("" for the working directory) and returns its
// exit status.
func run(args []string, dir string, stdout, stderr io.Writer) int {
	cmd := exec.Command("go", goTestArgs(args)...)
	cmd.Dir = dir
	cmd.Stderr = stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(stderr, "runtests:", err)
		return 1
	}
	// Ctrl-C reaches go test too, which then stops its tests and prints
	// what failed: keep reading until it exits, rather than die first.
	signal.Notify(make(chan os.Signal, 1), os.Interrupt)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, "runtests: cannot run go test:", err)
		return 1
	}
	rep := newReporter(stdout, verbose(args))
	r := bufio.NewReader(pipe)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			rep.line(line)
		}
		if err != nil {
			break
		}
	}
	err = cmd.Wait()
	rep.finish()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() > 0:
		return exit.ExitCode()
	default:
		fmt.Fprintln(stderr, "runtests: go test:", err)
		return 1
	}
}

// boolFlag reports whether the go test or build flag name takes no
// value: any other flag without "=" takes the next argument as its value.
func boolFlag(name string) bool {
	switch name {
	case "a", "n", "x", "v", "race", "msan", "asan", "cover", "short", "failfast", "json", "benchmem",
		"trimpath", "work", "linkshared", "modcacherw", "buildvcs", "fullpath":
		return true
	}
	return false
}

// goTestArgs is the go command line: the defaults, then the flags of
// args, then its packages or ./..., then what follows -args.
func goTestArgs(args []string) []string {
	flags, pkgs, tail, _ := splitArgs(args)
	if len(pkgs) == 0 {
		pkgs = []string{"./..."}
	}
	// The slowest package, the e2e suite, takes about 18 minutes in CI
	// (beside the store's, whose T-SQL tests share the 2 cores): a test
	// that hangs is reported by go test's own timeout, with every
	// goroutine's stack, inside CI's 30 minutes.
	out := []string{"test", "-json", "-race", "-timeout", "25m"}
	out = append(out, flags...)
	out = append(out, pkgs...)
	return append(out, tail...)
}

// verbose reports whether args ask for every test's output (-v).
func verbose(args []string) bool {
	_, _, _, v := splitArgs(args)
	return v
}

// splitArgs splits go test's arguments into flags (with their values),
// packages, and -args with what follows it; v is whether -v is among the
// flags.
func splitArgs(args []string) (flags, pkgs, tail []string, v bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-args" || a == "--args":
			return flags, pkgs, args[i:], v
		case strings.HasPrefix(a, "-"):
			flags = append(flags, a)
			name := strings.TrimPrefix(strings.TrimLeft(a, "-"), "test.")
			v = v || name == "v" || name == "v=true"
			if !strings.Contains(name, "=") && !boolFlag(name) && i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
		default:
			pkgs = append(pkgs, a)
		}
	}
	return flags, pkgs, nil, v
}

// event is one line of `go test -json` (cmd/test2json), with the build
// events go test adds.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	// ImportPath names the package of a build-output or build-fail
	// event.
	ImportPath string
	// Elapsed is a test's seconds, on its pass or fail event.
	Elapsed float64
}

// testRun is a test that has not ended yet: its output so far.
type testRun struct {
	name   string
	output strings.Builder
}

// pkgRun is a package whose tests run: its tests that have not ended,
// its own output (the ok or FAIL line, a panic outside any test), and the
// tests it skipped.
type pkgRun struct {
	name    string
	running []*testRun // in start order
	output  strings.Builder
	skipped []string // "TestX (reason)"
}

func (p *pkgRun) test(name string) *testRun {
	for _, t := range p.running {
		if t.name == name {
			return t
		}
	}
	t := &testRun{name: name}
	p.running = append(p.running, t)
	return t
}

func (p *pkgRun) end(t *testRun) {
	for i, r := range p.running {
		if r == t {
			p.running = append(p.running[:i], p.running[i+1:]...)
			return
		}
	}
}

// reporter turns go test's events into the compact output.
type reporter struct {
	w       io.Writer
	verbose bool
	open    map[string]*pkgRun
	order   []string // packages in start order
	// skips are the summary lines, in the order the packages ended.
	skips []string
	// timed are the tests that ended, with their seconds; parents names
	// the tests that ran subtests, whose time is their subtests'.
	timed   []timedTest
	parents map[string]bool
}

// timedTest is a test that passed or failed, and how long it ran.
type timedTest struct {
	pkg, name string
	seconds   float64
}

func newReporter(w io.Writer, verbose bool) *reporter {
	return &reporter{w: w, verbose: verbose, open: map[string]*pkgRun{}, parents: map[string]bool{}}
}

func (r *reporter) pkg(name string) *pkgRun {
	p, ok := r.open[name]
	if !ok {
		p = &pkgRun{name: name}
		r.open[name] = p
		r.order = append(r.order, name)
	}
	return p
}

// line takes one line of go test's standard output.
func (r *reporter) line(b []byte) {
	var ev event
	if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &ev) != nil {
		r.w.Write(b) // not an event: go's own message
		return
	}
	switch {
	case ev.Action == "build-output":
		io.WriteString(r.w, ev.Output) // a compile error, as it comes
		return
	case ev.Package == "":
		io.WriteString(r.w, ev.Output)
		return
	}
	if r.verbose {
		io.WriteString(r.w, ev.Output)
	}
	p := r.pkg(ev.Package)
	if ev.Test == "" {
		switch ev.Action {
		case "output":
			p.output.WriteString(ev.Output)
		case "pass", "skip":
			r.pass(p)
		case "fail":
			r.fail(p)
		}
		return
	}
	t := p.test(ev.Test)
	if ev.Action == "pass" || ev.Action == "fail" {
		r.timed = append(r.timed, timedTest{ev.Package, ev.Test, ev.Elapsed})
		if i := strings.LastIndexByte(ev.Test, '/'); i > 0 {
			r.parents[ev.Package+" "+ev.Test[:i]] = true
		}
	}
	switch ev.Action {
	case "output":
		t.output.WriteString(ev.Output)
	case "pass":
		p.end(t)
	case "skip":
		p.skipped = append(p.skipped, skipText(t.name, t.output.String()))
		p.end(t)
	case "fail":
		if !r.verbose {
			io.WriteString(r.w, testOutput(t.name, t.output.String()))
		}
		p.end(t)
	}
}

// pass ends a package that passed, or had no tests: its ok or "?" line.
func (r *reporter) pass(p *pkgRun) {
	if !r.verbose {
		for _, l := range lines(p.output.String()) {
			if strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "?") {
				io.WriteString(r.w, l)
			}
		}
	}
	r.close(p)
}

// fail ends a package that failed: the output of the tests that never
// ended (a timeout's panic names them) and its own, FAIL line last.
func (r *reporter) fail(p *pkgRun) {
	if !r.verbose {
		for _, t := range p.running {
			io.WriteString(r.w, testOutput(t.name, t.output.String()))
		}
		io.WriteString(r.w, p.output.String())
	}
	r.close(p)
}

func (r *reporter) close(p *pkgRun) {
	if len(p.skipped) > 0 {
		r.skips = append(r.skips, fmt.Sprintf("skipped in %s: %s\n", p.name, strings.Join(p.skipped, ", ")))
	}
	delete(r.open, p.name)
}

// finish writes what is left when go test has exited: packages that
// never ended (go test was killed) as failed, then the skip summary.
func (r *reporter) finish() {
	for _, name := range r.order {
		if p, ok := r.open[name]; ok {
			r.fail(p)
		}
	}
	for _, s := range r.skips {
		io.WriteString(r.w, s)
	}
	if slow := r.slowest(slowestShown); slow != "" {
		io.WriteString(r.w, "slowest tests: "+slow+"\n")
	}
}

// slowestShown is how many tests the slowest-tests line names: enough to
// tell where a run near CI's 30 minutes spent them.
const slowestShown = 12

// slowest names the n slowest tests that ran no subtests of their own, as
// "e2e TestChaos/sqlserver 178.6s", slowest first, the module's path cut
// from their packages'; "" when no test took a second.
func (r *reporter) slowest(n int) string {
	var leaves []timedTest
	for _, t := range r.timed {
		if !r.parents[t.pkg+" "+t.name] && t.seconds >= 1 {
			leaves = append(leaves, t)
		}
	}
	sort.SliceStable(leaves, func(i, j int) bool { return leaves[i].seconds > leaves[j].seconds })
	var parts []string
	for _, t := range leaves[:min(n, len(leaves))] {
		parts = append(parts, fmt.Sprintf("%s %s %.1fs", shortPackage(t.pkg), t.name, t.seconds))
	}
	return strings.Join(parts, ", ")
}

// shortPackage is a package's path without its module's ("e2e" for
// github.com/slotpoller/slotpoller/e2e), or the whole path outside it.
func shortPackage(pkg string) string {
	const module = "github.com/slotpoller/slotpoller"
	if rest, ok := strings.CutPrefix(pkg, module+"/"); ok {
		return rest
	}
	return pkg
}

// lines splits s after each newline.
func lines(s string) []string {
	ls := strings.SplitAfter(s, "\n")
	if ls[len(ls)-1] == "" {
		ls = ls[:len(ls)-1]
	}
	return ls
}

// testOutput is a test's output as go test prints it without -v: its
// "--- FAIL" line first, then what it logged, without the "=== RUN" lines
// that -json adds.
func testOutput(test, s string) string {
	var head, body strings.Builder
	for _, l := range lines(s) {
		switch {
		case strings.HasPrefix(l, "=== "):
		case head.Len() == 0 && strings.HasPrefix(l, "--- FAIL: "+test+" ("):
			head.WriteString(l)
		default:
			body.WriteString(l)
		}
	}
	out := head.String() + body.String()
	if out != "" && !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return out
}

// trimLogPrefix cuts the "file_test.go:12: " that t.Log and t.Skip put
// before a message.
func trimLogPrefix(l string) string {
	file, rest, ok := strings.Cut(l, ".go:")
	if !ok || strings.ContainsAny(file, " \t") {
		return l
	}
	digits := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
	if digits == 0 || !strings.HasPrefix(rest[digits:], ": ") {
		return l
	}
	return rest[digits+2:]
}

// skipText is a skipped test and the first line of its skip message:
// "TestX (SLOTPOLLER_TEST_POSTGRES_DSN unset)", or "TestX" without one.
func skipText(test, output string) string {
	for _, l := range lines(output) {
		if strings.HasPrefix(l, "=== ") || strings.HasPrefix(strings.TrimSpace(l), "--- SKIP") {
			continue
		}
		if reason := trimLogPrefix(strings.TrimSpace(l)); reason != "" {
			return test + " (" + reason + ")"
		}
	}
	return test
}
