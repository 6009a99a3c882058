// Command slotpoller runs a node of a slotpoller farm and offers the
// operator's verbs: install the node as an OS service, enqueue jobs, show
// the farm's status, migrate the schema.
//
//	slotpoller run | install | uninstall | start | stop | restart
//	slotpoller config show
//	slotpoller enqueue
//	slotpoller job list | show | retry | cancel
//	slotpoller status
//	slotpoller task add | list | delete
//	slotpoller schedule add | list | remove | pause | resume | trigger
//	slotpoller schema migrate | status
//	slotpoller version
//
// Every verb answers -h with its flags and examples; the command table in
// cmd_help.go is the one list of them, and docs/cli.md is generated from
// their helps.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/install"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/schema"
)

var version = "dev"

func main() {
	os.Exit(runWith(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is main without os.Exit, so the verbs can be tested.
func run(args []string, stdout, stderr io.Writer) int {
	return runWith(args, os.Stdin, stdout, stderr)
}

// runWith is run with a standard input (enqueue -payload-file -).
func runWith(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	verb, rest := args[0], args[1:]
	if verb == "help" && len(rest) > 0 {
		// help VERB [SUB]: the verb's own -h.
		return runWith(append(rest, "-h"), stdin, stdout, stderr)
	}
	if isGroup(verb) && len(rest) > 0 && isHelp(rest[0]) {
		if len(rest) > 1 && rest[0] == "help" { // job help list
			return runWith(append([]string{verb}, append(rest[1:], "-h")...), stdin, stdout, stderr)
		}
		writeGroupHelp(stdout, verb)
		return 0
	}
	var err error
	switch verb {
	case "run":
		err = cmdRun(rest, stdout, stderr)
	case "install":
		err = cmdInstall(rest, stdout, stderr)
	case "uninstall":
		err = cmdUninstall(rest, stdout, stderr)
	case "start", "stop", "restart":
		err = cmdControl(verb, rest, stdout, stderr)
	case "config":
		err = cmdConfig(rest, stdout, stderr)
	case "enqueue":
		err = cmdEnqueue(rest, stdin, stdout, stderr)
	case "job":
		err = cmdJob(rest, stdout, stderr)
	case "status":
		err = cmdStatus(rest, stdout, stderr)
	case "schema":
		err = cmdSchema(rest, stdout, stderr)
	case "task":
		err = cmdTask(rest, stdout, stderr)
	case "schedule":
		err = cmdSchedule(rest, stdout, stderr)
	case "queue":
		err = cmdQueue(rest, stdout)
	case "audit":
		err = cmdAudit(rest, stdout)
	case "version":
		if err = newBareFlags("version", stdout).parse(rest); err == nil {
			fmt.Fprintln(stdout, "slotpoller", version)
		}
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage())
	default:
		fmt.Fprintf(stderr, "slotpoller: unknown verb %q\n\n%s", verb, usage())
		return 2
	}
	var ue usageError
	var fe *config.FlagError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue), errors.As(err, &fe):
		fmt.Fprintln(stderr, "slotpoller "+verb+":", err)
		fmt.Fprintf(stderr, "run \"slotpoller %s -h\" for its usage\n", helpName(verb, rest))
		return 2
	default:
		fmt.Fprintln(stderr, "slotpoller "+verb+":", err)
		return 1
	}
}

// helpName is the command whose help a usage error points to: the
// sub-verb when the command line named one, else the verb.
func helpName(verb string, rest []string) string {
	if len(rest) > 0 {
		if _, ok := findCommand(verb + " " + rest[0]); ok {
			return verb + " " + rest[0]
		}
	}
	return verb
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// parse parses a verb's flags, which take no other argument.
func (fs *flagSet) parse(args []string) error {
	if err := fs.parseFlags(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

func loadConfig(path string) (config.Config, error) {
	cfg, _, err := loadConfigWith(path, "", nil)
	return cfg, err
}

// loadConfigWith loads the configuration with command-line overrides and
// says where each value came from.
//
// envFile, when set, is an environment file (`run -env-file`, as the
// service runs on System V init): its variables are added to the
// environment, and win over the process's own.
func loadConfigWith(path, envFile string, flags []config.Flag) (config.Config, config.Sources, error) {
	explicit := path != ""
	if !explicit {
		path = "config.yaml"
	}
	environ := os.Environ()
	if envFile != "" {
		extra, err := install.ReadEnvFile(envFile)
		if err != nil {
			return config.Config{}, nil, err
		}
		environ = append(environ, extra...)
	}
	return config.LoadWithSources(path, explicit, environ, flags...)
}

// addEnvFileFlag defines -env-file on fs.
func addEnvFileFlag(fs *flagSet) *string {
	// Only the word "file" is backquoted: flag.PrintDefaults names the
	// flag's value after the backquoted word.
	return fs.String("env-file", "", "environment `file` to read SLOTPOLLER_* variables from (one NAME=value a line, the value literal); "+
		"\"slotpoller install\" writes one on System V init")
}

// overrideFlags are the flags that override a key of the configuration.
var overrideFlags = []struct{ name, key, usage string }{
	{"log-format", "log.format", "log format, text or json (overrides log.format)"},
	{"log-level", "log.level", "log level: debug, info, warn or error (overrides log.level)"},
	{"node-name", "node.name", "this node's name in the registry (overrides node.name)"},
	{"admin-listen", "admin.listen", `admin endpoint address, e.g. :9090 (loopback) or "" for off (overrides admin.listen)`},
}

// addOverrideFlags defines the override flags on fs; the function it
// returns lists those given on the command line.
func addOverrideFlags(fs *flagSet) func() []config.Flag {
	for _, o := range overrideFlags {
		fs.String(o.name, "", o.usage)
	}
	return func() []config.Flag {
		var given []config.Flag
		fs.Visit(func(f *flag.Flag) {
			for _, o := range overrideFlags {
				if o.name == f.Name {
					given = append(given, config.Flag{Key: o.key, Name: "-" + o.name, Value: f.Value.String()})
				}
			}
		})
		return given
	}
}

// dbUse is what a one-shot verb does with the database.
type dbUse int

const (
	// dbRead shows what is there (status, job list, ...): a missing
	// SQLite file is nothing to show, and is not created.
	dbRead dbUse = iota
	// dbWrite changes rows, which a missing SQLite file does not hold:
	// it is not created either.
	dbWrite
	// dbCreate sets the database up (schema migrate): a missing SQLite
	// file is created, as a node's start does.
	dbCreate
)

// openStore connects for a one-shot verb: it fails fast, unlike `run`.
// Only dbCreate makes a SQLite file that is not there: opening one
// creates it, and a verb that reads or changes rows would leave an empty
// database behind, beside the one that was meant.
func openStore(ctx context.Context, cfg config.Config, use dbUse) (*store.Store, error) {
	if cfg.Database.Driver == "sqlite" && use != dbCreate {
		if path := sqliteFile(cfg.Database.DSN); path != "" {
			if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
				what := "nothing to show"
				if use == dbWrite {
					what = "no jobs, schedules or tasks yet"
				}
				return nil, fmt.Errorf("no database at %s (%s): a node creates it at its first start, as does `slotpoller schema migrate`; "+
					"check database.dsn with `slotpoller config show`", path, what)
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := open.Store(ctx, cfg.Database.Driver, cfg.Database.DSN, store.WithSchema(cfg.Database.Schema))
	if err != nil {
		return nil, fmt.Errorf("cannot reach the database (%s %s): %w", cfg.Database.Driver, config.MaskDSN(cfg.Database.DSN), err)
	}
	return s, nil
}

// checkCallFlags checks the -method and -timeout of enqueue, task add and
// schedule add.
func checkCallFlags(method string, timeout time.Duration) error {
	switch method {
	case "GET", "POST", "PUT", "PATCH", "DELETE":
	default:
		return usageError{fmt.Sprintf("-method %q: must be one of GET, POST, PUT, PATCH, DELETE", method)}
	}
	if err := jobs.ValidateTimeout(timeout); err != nil {
		return usageError{fmt.Sprintf("-timeout %v: %v", timeout, err)}
	}
	return nil
}

// checkMaxAttempts checks -max-attempts; 0 means jobs.max_attempts.
func checkMaxAttempts(n int) error {
	if n != 0 && (n < 1 || n > jobs.MaxAttempts) {
		return usageError{fmt.Sprintf("-max-attempts %d: must be between 1 and %d", n, jobs.MaxAttempts)}
	}
	return nil
}

// checkName checks a -name flag that names a schedule or a task.
func checkName(kind, name string) error {
	if err := jobs.ValidateName(kind, name); err != nil {
		return usageError{fmt.Sprintf("-name %q: %v", name, err)}
	}
	return nil
}

// inDatabase says which database err is about: the driver and the DSN,
// its password masked.
func inDatabase(cfg config.Config, err error) error {
	return fmt.Errorf("%w (database: %s %s)", err, cfg.Database.Driver, config.MaskDSN(cfg.Database.DSN))
}

// sqliteFile is the file a SQLite DSN names: a plain path, or the path of
// a "file:" URI; "" for an in-memory database.
func sqliteFile(dsn string) string {
	if rest, ok := strings.CutPrefix(dsn, "file:"); ok {
		path, query, _ := strings.Cut(rest, "?")
		if strings.Contains(query, "mode=memory") || path == ":memory:" || path == "" {
			return ""
		}
		if p, err := url.PathUnescape(path); err == nil {
			path = p
		}
		if h, ok := strings.CutPrefix(path, "//"); ok { // file://host/path
			if i := strings.IndexByte(h, '/'); i >= 0 {
				path = h[i:]
			}
		}
		return path
	}
	if dsn == "" || dsn == ":memory:" {
		return ""
	}
	return dsn
}

// withStore loads the configuration and connects for a one-shot verb.
func withStore(cfgPath string, use dbUse, f func(context.Context, config.Config, *store.Store) error) error {
	return withStoreEnv(cfgPath, "", use, f)
}

// withStoreEnv is withStore with an environment file (-env-file).
func withStoreEnv(cfgPath, envFile string, use dbUse, f func(context.Context, config.Config, *store.Store) error) error {
	cfg, _, err := loadConfigWith(cfgPath, envFile, nil)
	if err != nil {
		return err
	}
	ctx := context.Background()
	s, err := openStore(ctx, cfg, use)
	if err != nil {
		return err
	}
	defer s.Close()
	return f(ctx, cfg, s)
}

// withSchema is withStore for verbs that need the schema in place.
func withSchema(cfgPath string, use dbUse, f func(context.Context, config.Config, *store.Store) error) error {
	return withStore(cfgPath, use, func(ctx context.Context, cfg config.Config, s *store.Store) error {
		if err := schema.Check(ctx, s); err != nil {
			return inDatabase(cfg, err)
		}
		return f(ctx, cfg, s)
	})
}
