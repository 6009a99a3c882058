package conventions

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the module's root, two levels up from this package.
const root = "../.."

// goDirs returns the module's package directories, skipping testdata,
// hidden folders and other modules (bench/ has a go.mod of its own for its
// peers, but its own packages are checked).
func goDirs(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			if p != root {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !seen[filepath.Dir(p)] {
			seen[filepath.Dir(p)] = true
			dirs = append(dirs, filepath.Dir(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// parseDir parses a directory's non-test Go files, any build tags.
func parseDir(t *testing.T, fset *token.FileSet, dir string) []*ast.File {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// TestExportedNamesDocumented fails on an exported type, function, method,
// constant or variable with no doc comment, and on a package with no
// package comment. Names in a documented group (a const block with a
// comment) count as documented; main packages and test files are exempt
// from the package rule but not from the name rule.
func TestExportedNamesDocumented(t *testing.T) {
	fset := token.NewFileSet()
	for _, dir := range goDirs(t) {
		files := parseDir(t, fset, dir)
		if len(files) == 0 {
			continue
		}
		hasPkgDoc := false
		for _, f := range files {
			if f.Doc != nil || f.Name.Name == "main" {
				hasPkgDoc = true
			}
		}
		if !hasPkgDoc {
			t.Errorf("%s: package %s has no package comment", dir, files[0].Name.Name)
		}
		ifaces := interfaceMethods(files)
		for _, f := range files {
			if f.Name.Name == "main" {
				continue // a command's names are not an API
			}
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil && ifaces[fd.Name.Name] {
					continue // documented at the interface it satisfies
				}
				for _, miss := range undocumented(d) {
					t.Errorf("%s: exported %s has no doc comment", fset.Position(miss.Pos()), miss.Name)
				}
			}
		}
	}
}

// stdMethods are methods of the standard library's interfaces, documented
// there.
var stdMethods = []string{"Error", "Unwrap", "String", "Is", "As", "ServeHTTP", "MarshalJSON", "UnmarshalJSON", "MarshalText", "UnmarshalText", "Scan", "Value", "Read", "Write", "Close", "Len", "Less", "Swap", "Format"}

// interfaceMethods returns the names of the methods of the interfaces a
// package declares, and of the standard ones: a method of that name on a
// type of the package implements it and is documented at the interface.
func interfaceMethods(files []*ast.File) map[string]bool {
	names := map[string]bool{}
	for _, m := range stdMethods {
		names[m] = true
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			it, ok := n.(*ast.InterfaceType)
			if !ok {
				return true
			}
			for _, m := range it.Methods.List {
				for _, id := range m.Names {
					names[id.Name] = true
				}
			}
			return true
		})
	}
	return names
}

// undocumented returns the exported names a declaration leaves without a
// doc comment.
func undocumented(d ast.Decl) []*ast.Ident {
	var out []*ast.Ident
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() || d.Doc != nil {
			return nil
		}
		if d.Recv != nil && !exportedRecv(d.Recv) {
			return nil
		}
		return []*ast.Ident{d.Name}
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if s.Name.IsExported() && s.Doc == nil && d.Doc == nil {
					out = append(out, s.Name)
				}
			case *ast.ValueSpec:
				if s.Doc != nil || s.Comment != nil || d.Doc != nil {
					continue
				}
				for _, n := range s.Names {
					if n.IsExported() {
						out = append(out, n)
					}
				}
			}
		}
	}
	return out
}

// exportedRecv reports whether a method's receiver type is exported: the
// methods of an unexported type are documented where they matter, at the
// interface they satisfy.
func exportedRecv(fl *ast.FieldList) bool {
	if len(fl.List) == 0 {
		return false
	}
	e := fl.List[0].Type
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}

// longFileReason marks a file that is long on purpose.
const longFileReason = "// Long file:"

// TestFilesShort keeps the node's packages in rooms a reader can take in:
// a Go file over MaxFileLines lines in them must say why.
func TestFilesShort(t *testing.T) {
	for _, pkg := range []string{"service", "admin", "jobs", "config", "checkin", "client", "callproto", "rotation", "clocksync"} {
		dir := filepath.Join(root, pkg)
		entries, err := os.ReadDir(dir)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			n := e.Name()
			if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
				continue
			}
			lines, reason := countLines(t, filepath.Join(dir, n))
			if lines > MaxFileLines && !reason {
				t.Errorf("%s/%s has %d lines (more than %d): split it by concept, or say why in a %q comment", pkg, n, lines, MaxFileLines, longFileReason)
			}
		}
	}
}

func countLines(t *testing.T, path string) (n int, reason bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		n++
		if strings.HasPrefix(strings.TrimSpace(sc.Text()), longFileReason) {
			reason = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return n, reason
}

// TestReadmeIsAFrontPage keeps README.md short: the rest belongs in docs/.
func TestReadmeIsAFrontPage(t *testing.T) {
	lines, _ := countLines(t, filepath.Join(root, "README.md"))
	if lines > MaxReadmeLines {
		t.Errorf("README.md has %d lines (at most %d): move the detail to a page under docs/ and link it", lines, MaxReadmeLines)
	}
}

// buildWords are phrases about how the software was built, not about the
// software: a work session ("2026-11-27's third session", "this
// session", "session 12") or a tracker's issue ("issue 10"). A database
// or login session is the software's own word. docs/history/ keeps dated
// records and may use them.
var buildWords = regexp.MustCompile(`(?i)\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|this|previous|last|next|earlier|later|same|one) sessions?\b|\bsessions? #?[0-9]+\b|\bissues? #?[0-9]+`)

// TestDocsSpeakOfTheSoftware fails on README or docs/ text that speaks of
// how the software was built.
func TestDocsSpeakOfTheSoftware(t *testing.T) {
	paths := []string{filepath.Join(root, "README.md")}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, docs...)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := buildWords.FindString(line); m != "" {
				t.Errorf("%s:%d says %q: docs speak of the software (dated write-ups go to docs/history/)", p, i+1, m)
			}
		}
	}
}
