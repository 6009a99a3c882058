// Package depstest lists what a package compiles in, for tests that keep
// a package's dependencies to what its users expect (the client without
// database drivers, a driver package with its own driver only). It runs
// the go tool of the toolchain under test.
package depstest

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// NonStandard returns the import paths of the packages pkg depends on,
// itself included, that are not in the standard library: `go list -deps`
// without the tests' own imports.
func NonStandard(t testing.TB, pkg string) []string {
	t.Helper()
	out, err := exec.Command(goTool(t), "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

// Having returns the packages among deps whose import path is prefix or
// lies under it.
func Having(deps []string, prefix string) []string {
	var found []string
	for _, d := range deps {
		if d == prefix || strings.HasPrefix(d, prefix+"/") {
			found = append(found, d)
		}
	}
	return found
}

// goTool is the go command of GOROOT (as `go env GOROOT` reports it), not
// whichever one PATH finds first.
func goTool(t testing.TB) string {
	t.Helper()
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v (the dependency checks need the go tool)", err)
	}
	return filepath.Join(strings.TrimSpace(string(goroot)), "bin", "go")
}

// Drivers are the import paths of the database drivers slotpoller speaks
// through.
var Drivers = []string{"github.com/jackc/pgx", "github.com/microsoft/go-mssqldb", "modernc.org/sqlite", "github.com/go-sql-driver/mysql"}

// NodeOnly are the packages only a node needs: an application's packages
// must not compile them in.
var NodeOnly = []string{"github.com/netresearch/go-cron", "github.com/slotpoller/slotpoller/jobs"}

// RequireOnly fails t if pkg compiles in a driver other than own ("" for
// none), or a package only a node needs; and if own is set, unless pkg
// compiles in own.
func RequireOnly(t testing.TB, pkg, own string) {
	t.Helper()
	deps := NonStandard(t, pkg)
	if own != "" && len(Having(deps, own)) == 0 {
		t.Errorf("%s does not depend on %s, its own driver", pkg, own)
	}
	for _, unwanted := range append(append([]string{}, Drivers...), NodeOnly...) {
		if unwanted == own {
			continue
		}
		if found := Having(deps, unwanted); len(found) > 0 {
			t.Errorf("%s depends on %s: %v", pkg, unwanted, found)
		}
	}
}
