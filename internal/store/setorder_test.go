package store_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// MySQL gives each assignment of a single-table UPDATE the columns as the
// assignments before it left them (SET a = 1, b = a sets b to 1), where
// the other databases read every column as it was. So no assignment may
// read a column an earlier one writes: the column is written last. Every
// store operation's statement is in the T-SQL golden file, in the order
// the shared statements write their SET lists.
func TestUpdatesReadNoColumnAnEarlierAssignmentWrote(t *testing.T) {
	golden, err := os.ReadFile("testdata/sqlserver.sql")
	if err != nil {
		t.Fatal(err)
	}
	updates := 0
	for _, stmt := range strings.Split(string(golden), ";\n") {
		m := updateSet.FindStringSubmatch(stmt)
		if m == nil {
			continue
		}
		updates++
		var written []string
		for _, a := range splitTopLevel(m[1]) {
			am := assignment.FindStringSubmatch(a)
			if am == nil {
				continue
			}
			reads := map[string]bool{}
			for _, r := range columnRef.FindAllStringSubmatch(stringLiteral.ReplaceAllString(am[2], "''"), -1) {
				reads[r[1]] = true
			}
			for _, w := range written {
				if reads[w] {
					t.Errorf("%s = ... reads %s, which an earlier assignment writes: write %s last\n%s", am[1], w, w, strings.TrimSpace(stmt))
				}
			}
			written = append(written, am[1])
		}
	}
	if updates < 20 {
		t.Fatalf("found %d UPDATE statements in the golden file: the test reads it wrong", updates)
	}
}

var (
	updateSet     = regexp.MustCompile(`(?s)\bUPDATE\s+\S+\s+SET\s+(.*?)\s(?:OUTPUT|FROM|WHERE)\s`)
	assignment    = regexp.MustCompile(`(?s)^\s*(?:\w+\.)?(\w+)\s*=(.*)$`)
	columnRef     = regexp.MustCompile(`(?:^|[^\w.@])(?:\w+\.)?([a-z_]+)\b`)
	stringLiteral = regexp.MustCompile(`N?'(?:[^']|'')*'`)
)

// splitTopLevel splits a SET list at its commas outside parentheses and
// string literals.
func splitTopLevel(s string) []string {
	var out []string
	depth, quoted, start := 0, false, 0
	for i, c := range s {
		switch {
		case c == '\'':
			quoted = !quoted
		case quoted:
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == ',' && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
