package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// helpFlag is a flag's line in flag.PrintDefaults: "  -name value".
var helpFlag = regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`)

// helpOf runs `slotpoller NAME -h` and returns its help and flags.
func helpOf(t *testing.T, name string) (string, []string) {
	t.Helper()
	code, out, errOut := cli(t, append(strings.Fields(name), "-h")...)
	require.Equal(t, 0, code, "%s -h: %s", name, errOut)
	require.Empty(t, errOut, "%s -h writes its help to standard output", name)
	var flags []string
	for _, m := range helpFlag.FindAllStringSubmatch(out, -1) {
		flags = append(flags, m[1])
	}
	return out, flags
}

// Every command of the table answers -h, `help VERB` and `VERB help`
// (`job help list` too) alike: its synopsis, its flags, one to three examples; exit 0. Its
// synopsis, which the top usage shows, names every flag but -config,
// which every verb that reads the configuration has.
func TestEveryVerbAnswersHelp(t *testing.T) {
	top := usage()
	for _, c := range commands() {
		help, flags := helpOf(t, c.name)
		require.True(t, strings.HasPrefix(help, "Usage: slotpoller "+c.name), "%s -h:\n%s", c.name, help)
		require.GreaterOrEqual(t, len(c.examples), 1, c.name)
		require.LessOrEqual(t, len(c.examples), 3, c.name)
		for _, e := range c.examples {
			require.Contains(t, e, "slotpoller "+c.name, "an example of %s runs it", c.name)
			require.Contains(t, help, "\n  "+e+"\n", c.name)
		}
		for _, f := range flags {
			if f != "config" {
				require.Regexp(t, `(^|[\s\[(])-`+regexp.QuoteMeta(f)+`\b`, c.synopsis, "the synopsis of %s leaves out -%s", c.name, f)
			}
		}
		require.Regexp(t, `(?m)^  slotpoller `+regexp.QuoteMeta(c.name)+`( |$)`, top, "the usage leaves out %s", c.name)

		code, out, errOut := cli(t, append([]string{"help"}, strings.Fields(c.name)...)...)
		require.Equal(t, 0, code, errOut)
		require.Equal(t, help, out, "help %s", c.name)
		code, out, errOut = cli(t, append(strings.Fields(c.name), "help")...)
		require.Equal(t, 0, code, errOut)
		require.Equal(t, help, out, "%s help", c.name)
		if group, sub, ok := strings.Cut(c.name, " "); ok {
			code, out, errOut = cli(t, group, "help", sub)
			require.Equal(t, 0, code, errOut)
			require.Equal(t, help, out, "%s help %s", group, sub)
		}
	}
}

// A group verb's -h lists its sub-verbs, and exits 0.
func TestGroupVerbsAnswerHelp(t *testing.T) {
	for _, group := range []string{"config", "job", "task", "schedule", "schema"} {
		for _, args := range [][]string{{group, "-h"}, {group, "help"}, {group, "--help"}, {"help", group}} {
			code, out, errOut := cli(t, args...)
			require.Equal(t, 0, code, "%v: %s", args, errOut)
			require.Empty(t, errOut)
			subs := subVerbs(group)
			require.NotEmpty(t, subs, group)
			for _, sub := range subs {
				require.Contains(t, out, "  slotpoller "+group+" "+sub, "%v", args)
			}
		}
	}
	code, out, _ := cli(t, "schedule", "-h")
	require.Equal(t, 0, code)
	require.Contains(t, out, "slotpoller schedule trigger -name NAME")

	code, out, _ = cli(t, "help")
	require.Equal(t, 0, code)
	require.Equal(t, usage(), out)
}

// A usage error says what is wrong once, and which -h helps.
func TestUsageErrorPointsToHelp(t *testing.T) {
	code, out, errOut := cli(t, "job", "list", "-bogus")
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.Equal(t, "slotpoller job: flag provided but not defined: -bogus\nrun \"slotpoller job list -h\" for its usage\n", errOut)

	code, _, errOut = cli(t, "schedule", "frob")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown schedule verb "frob": say add, list, remove, pause, resume or trigger`)
	require.Contains(t, errOut, `run "slotpoller schedule -h"`)
}

// cliReference is docs/cli.md: the top usage and every command's help.
func cliReference(t *testing.T) string {
	var b strings.Builder
	b.WriteString("# Command-line reference\n\n")
	b.WriteString("<!-- Generated from the verbs' -h by `go test -run TestCLIReference -update-golden .`: edit cmd_help.go and the flags, not this file. -->\n\n")
	b.WriteString("Each section is what `slotpoller VERB -h` prints. `slotpoller help VERB` prints the same;\n")
	b.WriteString("`slotpoller job -h` (and the other groups) lists a group's verbs. A usage error exits 2, a\n")
	b.WriteString("failure 1, success and help 0.\n\n")
	b.WriteString("## Usage\n\n```text\n" + usage() + "```\n")
	for _, c := range commands() {
		help, _ := helpOf(t, c.name)
		b.WriteString("\n## slotpoller " + c.name + "\n\n```text\n" + help + "```\n")
	}
	return b.String()
}

// docs/cli.md is the verbs' helps, so it names every flag of every verb
// under that verb, and every verb.
func TestCLIReference(t *testing.T) {
	path := filepath.Join(pkgDir, "docs", "cli.md")
	want := cliReference(t)
	if *updateGolden {
		require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -run TestCLIReference -update-golden . to write it")
	doc := string(got)
	for _, c := range commands() {
		_, flags := helpOf(t, c.name)
		head := "\n## slotpoller " + c.name + "\n"
		i := strings.Index(doc, head)
		require.GreaterOrEqual(t, i, 0, "docs/cli.md has no section for %s", c.name)
		section := doc[i+len(head):]
		if j := strings.Index(section, "\n## "); j >= 0 {
			section = section[:j]
		}
		for _, f := range flags {
			require.Regexp(t, `(?m)^  -`+regexp.QuoteMeta(f)+`\b`, section, "docs/cli.md leaves out -%s of %s", f, c.name)
		}
	}
	require.Equal(t, want, doc, "docs/cli.md is out of step with the verbs' -h: run go test -run TestCLIReference -update-golden .")
}
