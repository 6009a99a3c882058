package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// The command table: every verb and sub-verb the binary answers, with
// what its help says. The top usage, a group's help (`slotpoller job -h`)
// and a verb's help (`slotpoller job list -h`) are all written from it,
// and docs/cli.md is generated from those helps (TestCLIReference), so
// the three cannot drift apart: a flag added to a verb shows in its -h at
// once, and the test fails until its synopsis and docs/cli.md say it too.

// A command is one verb or sub-verb as the operator types it.
type command struct {
	name     string   // after "slotpoller": "job list"
	synopsis string   // its arguments and flags: "[-state S] [-json]"
	summary  string   // what it does, one line
	examples []string // one to three command lines
}

// commands lists every command in the order the usage shows them.
func commands() []command {
	return []command{
		{"run", "[-config PATH] [-env-file PATH] [-service] [-log-format json|text] [-log-level debug|info|warn|error] [-node-name NAME] [-admin-listen ADDR]",
			"run this node in the foreground until Ctrl-C or SIGTERM (-service: under the OS service manager, as install registers it)",
			[]string{"slotpoller run", "slotpoller run -config /etc/slotpoller/config.yaml -log-level debug", "slotpoller run -node-name web-02 -admin-listen :9091"}},
		{"install", "[-config PATH]", `register the OS service "slotpoller" to run this binary with this config file (root/Administrator)`,
			[]string{"sudo slotpoller install -config /etc/slotpoller/config.yaml"}},
		{"uninstall", "", "stop and remove the OS service (root/Administrator)", []string{"sudo slotpoller uninstall"}},
		{"start", "", "start the OS service", []string{"sudo slotpoller start"}},
		{"stop", "", "stop the OS service: the node drains its calls in flight first", []string{"sudo slotpoller stop"}},
		{"restart", "", "stop the OS service, then start it again", []string{"sudo slotpoller restart"}},
		{"config show", "[-config PATH] [-env-file PATH] [-json] [-log-format F] [-log-level L] [-node-name NAME] [-admin-listen ADDR]",
			"the effective configuration, secrets masked, and where each value came from",
			[]string{"slotpoller config show", "slotpoller config show -env-file /etc/default/slotpoller", "slotpoller config show -json"}},
		{"enqueue", "-endpoint PATH [-in D | -at TIME] [-payload TEXT | -payload-file FILE|-] [-method M] [-max-attempts N] [-timeout D] [-unique-key K] [-queue Q] [-traceparent TP]",
			"add a one-off job and print its id",
			[]string{"slotpoller enqueue -endpoint /jobs/report -payload '{\"day\":\"2026-11-30\"}'",
				"slotpoller enqueue -endpoint /jobs/cleanup -in 30m -unique-key cleanup-2026-11-30 -queue maintenance",
				"generate-body | slotpoller enqueue -endpoint /jobs/import -payload-file -"}},
		{"job list", "[-state S] [-endpoint PREFIX] [-since D] [-until D] [-limit N] [-cursor C] [-json]",
			"jobs, newest first; -state retrying: backing off after a failure",
			[]string{"slotpoller job list -state dead -since 24h", "slotpoller job list -endpoint /jobs/report -since 48h -until 24h", "slotpoller job list -limit 50 -cursor CURSOR"}},
		{"job search", "TEXT [-limit N] [-scan N] [-json]",
			"find jobs by id, unique key or idempotency key, or by TEXT in a payload or last error among the newest -scan jobs",
			[]string{"slotpoller job search invoice-42", "slotpoller job search 'connection refused' -scan 100000"}},
		{"job show", "ID [-json]", "a job: its payload, attempts, nodes, last status and error, in database time",
			[]string{"slotpoller job show 42", "slotpoller job show 42 -json"}},
		{"job retry", "ID | -state dead|failed|cancelled|missed [-since D] [-until D] [-limit N]",
			"run finished jobs again with a fresh attempt budget",
			[]string{"slotpoller job retry 42", "slotpoller job retry -state dead -since 24h"}},
		{"job cancel", "ID", "cancel a waiting job, or stop a running one's call (within a third of jobs.lease)", []string{"slotpoller job cancel 42"}},
		{"status", "[-json] [-config PATH] [-env-file PATH]", "the local service; nodes, their clock offsets, jobs by state",
			[]string{"slotpoller status", "slotpoller status -env-file /etc/default/slotpoller", "slotpoller status -json"}},
		{"task add", "-name NAME -endpoint PATH -every D [-method M] [-payload TEXT] [-timeout D]",
			"add an endless task, called once per interval by one node",
			[]string{"slotpoller task add -name feed -endpoint /tasks/feed -every 10s"}},
		{"task list", "[-all] [-json]", "tasks with owner, since, calls, last result",
			[]string{"slotpoller task list", "slotpoller task list -all -json"}},
		{"task delete", "-name NAME [-wait D]", "stop a task; its owner stops calling within an interval and a heartbeat",
			[]string{"slotpoller task delete -name feed", "slotpoller task delete -name feed -wait 30s"}},
		{"schedule add", "-name NAME (-every D | -cron EXPR [-tz ZONE]) -endpoint PATH [-method M] [-payload TEXT] [-tolerance D] [-misfire once|skip|all] [-overlap forbid|allow] [-max-attempts N] [-timeout D]",
			"add a recurring schedule: each occurrence runs once",
			[]string{"slotpoller schedule add -name tick -every 10m -endpoint /jobs/tick",
				"slotpoller schedule add -name nightly -cron '0 2 * * 1-5' -tz Europe/Berlin -endpoint /jobs/report",
				"slotpoller schedule add -name hourly -cron '0 * * * *' -endpoint /jobs/sync -misfire skip -overlap allow"}},
		{"schedule list", "[-json]", "schedules: next fire time, last result, missed count",
			[]string{"slotpoller schedule list", "slotpoller schedule list -json"}},
		{"schedule remove", "-name NAME", "remove a schedule and cancel its waiting occurrences", []string{"slotpoller schedule remove -name nightly"}},
		{"schedule pause", "-name NAME", "stop firing a schedule until it is resumed", []string{"slotpoller schedule pause -name nightly"}},
		{"schedule resume", "-name NAME", "fire a paused schedule again from its next occurrence: what the pause skipped is not missed", []string{"slotpoller schedule resume -name nightly"}},
		{"schedule trigger", "-name NAME", "run an occurrence of a schedule now, besides its regular ones", []string{"slotpoller schedule trigger -name nightly"}},
		{"queue list", "[-json]", "queues: paused (by whom, since when), jobs waiting and running, priority, limits, rate and its use, start delays",
			[]string{"slotpoller queue list", "slotpoller queue list -json"}},
		{"queue pause", "-name NAME", "stop starting a queue's jobs until it is resumed; calls running go on",
			[]string{"slotpoller queue pause -name reports"}},
		{"queue resume", "-name NAME", "start a paused queue's jobs again from the next poll", []string{"slotpoller queue resume -name reports"}},
		{"queue cancel", "-name NAME [-waiting]", "stop a queue's running calls (each ends cancelled); -waiting: cancel its waiting jobs too",
			[]string{"slotpoller queue cancel -name reports", "slotpoller queue pause -name reports && slotpoller queue cancel -name reports -waiting"}},
		{"audit", "[-since D] [-actor A] [-action A] [-limit N] [-cursor C] [-json] [-config PATH]",
			"the operator actions taken through the CLI, the HTTP API and the dashboard: who, from where, when (database clock), what; newest first",
			[]string{"slotpoller audit -since 24h", "slotpoller audit -action queue -json"}},
		{"schema migrate", "[-config PATH]", "create or upgrade the database schema", []string{"slotpoller schema migrate", "slotpoller schema migrate -config /etc/slotpoller/config.yaml"}},
		{"schema status", "[-config PATH]", "show the schema version, and whether this binary can use it", []string{"slotpoller schema status"}},
		{"version", "", "print this binary's version", []string{"slotpoller version"}},
	}
}

// findCommand is the command named name, or false.
func findCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// isGroup reports whether verb only names a group of sub-verbs: `job`
// alone does nothing, `job list` does.
func isGroup(verb string) bool { return len(subVerbs(verb)) > 0 }

// subVerbs are the sub-verbs of a group verb: "list", "show", ...
func subVerbs(group string) []string {
	var subs []string
	for _, c := range commands() {
		if sub, ok := strings.CutPrefix(c.name, group+" "); ok {
			subs = append(subs, sub)
		}
	}
	return subs
}

// orList joins words as "a, b or c".
func orList(words []string) string {
	if len(words) <= 1 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

const usageHead = `slotpoller runs a farm's background jobs from one shared SQL database.

Usage:
`

const usageTail = `
Every verb reads config.yaml (or -config PATH) and SLOTPOLLER_<SECTION>_<KEY>
environment variables: defaults < config.yaml < environment < flags.
Run "slotpoller VERB -h" (or "slotpoller help VERB") for a verb's flags and
examples; docs/cli.md has them all.
`

// usage is the top usage: every command, its synopsis and summary.
func usage() string {
	var b strings.Builder
	b.WriteString(usageHead)
	writeCommandList(&b, commands())
	b.WriteString(usageTail)
	return b.String()
}

// writeGroupHelp is a group verb's help: its sub-verbs.
func writeGroupHelp(w io.Writer, group string) {
	var cs []command
	for _, c := range commands() {
		if strings.HasPrefix(c.name, group+" ") {
			cs = append(cs, c)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: slotpoller %s %s ...\n\n", group, strings.Join(subVerbs(group), "|"))
	writeCommandList(&b, cs)
	fmt.Fprintf(&b, "\nRun \"slotpoller %s VERB -h\" for a verb's flags and examples.\n", group)
	io.WriteString(w, b.String())
}

// usageWidth is where the usage wraps a synopsis.
const usageWidth = 100

// writeCommandList writes each command's synopsis, wrapped under its
// name, and its summary below, indented.
func writeCommandList(b *strings.Builder, cs []command) {
	for _, c := range cs {
		head := "  slotpoller " + c.name
		line := head
		for _, word := range synopsisWords(c.synopsis) {
			if len(line)+1+len(word) > usageWidth && line != strings.Repeat(" ", len(head)) {
				b.WriteString(line + "\n")
				line = strings.Repeat(" ", len(head))
			}
			line += " " + word
		}
		b.WriteString(line + "\n")
		b.WriteString("        " + c.summary + "\n")
	}
}

// synopsisWords splits a synopsis at the spaces outside brackets, so that
// wrapping keeps "[-in D | -at TIME]" on one line.
func synopsisWords(s string) []string {
	var words []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '[', '(':
			depth++
		case ']', ')':
			depth--
		case ' ':
			if depth == 0 {
				if i > start {
					words = append(words, s[start:i])
				}
				start = i + 1
			}
		}
	}
	if start < len(s) {
		words = append(words, s[start:])
	}
	return words
}

// flagSet is a verb's flags, with the help its -h writes to standard
// output. Its flag.FlagSet writes nothing itself: a bad flag comes back
// as a usage error, which main prints once, on standard error.
type flagSet struct {
	*flag.FlagSet
	stdout io.Writer
}

// newBareFlags is the flag set of the verb name ("job list"), without
// -config.
func newBareFlags(name string, stdout io.Writer) *flagSet {
	fs := flag.NewFlagSet("slotpoller "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, stdout: stdout}
}

// newFlags is the flag set of the verb name with -config.
func newFlags(name string, stdout io.Writer) (*flagSet, *string) {
	fs := newBareFlags(name, stdout)
	cfg := fs.String("config", "", "config `file` (default config.yaml in the working directory, if it exists)")
	return fs, cfg
}

// verb is the command's name: "job list".
func (fs *flagSet) verb() string { return strings.TrimPrefix(fs.Name(), "slotpoller ") }

// writeHelp writes the verb's help: synopsis, summary, flags, examples.
func (fs *flagSet) writeHelp(w io.Writer) {
	c, ok := findCommand(fs.verb())
	if !ok {
		c = command{name: fs.verb()}
	}
	fmt.Fprintf(w, "Usage: slotpoller %s\n", strings.TrimSpace(c.name+" "+c.synopsis))
	if c.summary != "" {
		fmt.Fprintf(w, "\n%s.\n", strings.ToUpper(c.summary[:1])+c.summary[1:])
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprint(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	if len(c.examples) > 0 {
		fmt.Fprint(w, "\nExamples:\n")
		for _, e := range c.examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

// parseFlags parses args; -h, or "help" alone, writes the help to
// standard output and comes back as flag.ErrHelp (exit 0), a bad flag as
// a usage error.
func (fs *flagSet) parseFlags(args []string) error {
	if len(args) == 1 && args[0] == "help" {
		fs.writeHelp(fs.stdout)
		return flag.ErrHelp
	}
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.writeHelp(fs.stdout)
		return err
	}
	if err != nil {
		return usageError{err.Error()}
	}
	return nil
}
