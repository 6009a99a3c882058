package callproto_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// callproto is what an endpoint's program imports to check calls: it must
// compile in nothing beyond the standard library (no database driver, no
// other part of slotpoller).
func TestDependsOnTheStandardLibraryOnly(t *testing.T) {
	goTool := goCommand(t)
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	var outside []string
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/slotpoller/slotpoller/callproto" {
			outside = append(outside, p)
		}
	}
	if len(outside) > 0 {
		t.Fatalf("callproto depends on packages outside the standard library: %s", strings.Join(outside, ", "))
	}
}

// goCommand is the go tool of the toolchain running the test (GOROOT/bin),
// not whichever one PATH finds first.
func goCommand(t *testing.T) string {
	t.Helper()
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Skipf("no go tool to list the dependencies: %v", err)
	}
	tool := filepath.Join(strings.TrimSpace(string(goroot)), "bin", "go")
	if _, err := exec.LookPath(tool); err != nil {
		t.Skipf("no go tool at %s: %v", tool, err)
	}
	return tool
}
