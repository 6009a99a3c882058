// Command slotpoller runs a node of a slotpoller farm and offers the
// operator's verbs: install the node as an OS service, enqueue jobs, show
// the farm's status, migrate the schema.
//
//	slotpoller run [-config PATH] [-log-format json|text] [-log-level LEVEL] [-node-name NAME] [-admin-listen ADDR]
//	slotpoller install [-config PATH] | uninstall | start | stop | restart
//	slotpoller config show [-config PATH] [-json]
//	slotpoller enqueue -endpoint PATH [-in DURATION | -at RFC3339] [-payload TEXT] [-max-attempts N] ...
//	slotpoller status [-json] [-config PATH]
//	slotpoller task add|list|delete ...
//	slotpoller schedule add|list|remove|pause|resume ...
//	slotpoller schema migrate|status [-config PATH]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	kservice "github.com/kardianos/service"
	"github.com/slotpoller/slotpoller/install"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/service"
)

const usage = `slotpoller runs a farm's background jobs from one shared SQL database.

Usage:
  slotpoller run [-config PATH] [flags]         run this node (in the foreground, or under the service manager)
                 [-log-format json|text] [-log-level debug|info|warn|error] [-node-name NAME] [-admin-listen ADDR]
  slotpoller install [-config PATH]             register the OS service "slotpoller" (root/Administrator)
  slotpoller uninstall                          stop and remove the OS service (root/Administrator)
  slotpoller start | stop | restart             control the OS service
  slotpoller config show [-config PATH] [-json] the effective configuration, secrets masked, and where each value came from
  slotpoller enqueue -endpoint PATH [flags]     add a one-off job; prints its id
  slotpoller status [-json] [-config PATH]      the local service; nodes, their clock offsets, jobs by state
  slotpoller task add -name NAME -endpoint PATH -every DURATION
                                                add an endless task, called once per interval by one node
  slotpoller task list [-json]                  tasks with owner, since, calls, last result
  slotpoller task delete -name NAME [-wait D]   stop a task; its owner stops calling within an interval and a heartbeat
  slotpoller schedule add -name NAME (-every D | -cron EXPR [-tz ZONE]) -endpoint PATH
                       [-tolerance D] [-misfire once|skip|all] [-overlap forbid|allow]
                                                add a recurring schedule: each occurrence runs once
  slotpoller schedule list [-json]              next fire time, last result, missed count
  slotpoller schedule remove|pause|resume -name NAME
  slotpoller schema migrate [-config PATH]      create or upgrade the database schema
  slotpoller schema status [-config PATH]       show the schema version
  slotpoller version

Every verb reads config.yaml (or -config PATH) and SLOTPOLLER_<SECTION>_<KEY>
environment variables: defaults < config.yaml < environment < flags.
Run "slotpoller VERB -h" for a verb's flags.
`

var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without os.Exit, so the verbs can be tested.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	verb, rest := args[0], args[1:]
	var err error
	switch verb {
	case "run":
		err = cmdRun(rest, stderr)
	case "install":
		err = cmdInstall(rest, stdout, stderr)
	case "uninstall":
		err = cmdUninstall(rest, stdout, stderr)
	case "start", "stop", "restart":
		err = cmdControl(verb, rest, stdout, stderr)
	case "config":
		err = cmdConfig(rest, stdout, stderr)
	case "enqueue":
		err = cmdEnqueue(rest, stdout, stderr)
	case "status":
		err = cmdStatus(rest, stdout, stderr)
	case "schema":
		err = cmdSchema(rest, stdout, stderr)
	case "task":
		err = cmdTask(rest, stdout, stderr)
	case "schedule":
		err = cmdSchedule(rest, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "slotpoller", version)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "slotpoller: unknown verb %q\n\n%s", verb, usage)
		return 2
	}
	var ue usageError
	var fe *service.FlagError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue), errors.As(err, &fe):
		fmt.Fprintln(stderr, "slotpoller "+verb+":", err)
		return 2
	default:
		fmt.Fprintln(stderr, "slotpoller "+verb+":", err)
		return 1
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func newFlags(verb string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("slotpoller "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := fs.String("config", "", "config file (default config.yaml in the working directory, if it exists)")
	return fs, cfg
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

func loadConfig(path string) (service.Config, error) {
	cfg, _, err := loadConfigWith(path, nil)
	return cfg, err
}

// loadConfigWith loads the configuration with command-line overrides and
// says where each value came from.
func loadConfigWith(path string, flags []service.Flag) (service.Config, service.Sources, error) {
	explicit := path != ""
	if !explicit {
		path = "config.yaml"
	}
	return service.LoadWithSources(path, explicit, os.Environ(), flags...)
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
func addOverrideFlags(fs *flag.FlagSet) func() []service.Flag {
	for _, o := range overrideFlags {
		fs.String(o.name, "", o.usage)
	}
	return func() []service.Flag {
		var given []service.Flag
		fs.Visit(func(f *flag.Flag) {
			for _, o := range overrideFlags {
				if o.name == f.Name {
					given = append(given, service.Flag{Key: o.key, Name: "-" + o.name, Value: f.Value.String()})
				}
			}
		})
		return given
	}
}

// openStore connects for a one-shot verb: it fails fast, unlike `run`.
func openStore(ctx context.Context, cfg service.Config) (*store.Store, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := store.Open(ctx, cfg.Database.Driver, cfg.Database.DSN, store.WithSchema(cfg.Database.Schema))
	if err != nil {
		return nil, fmt.Errorf("cannot reach the database (%s %s): %w", cfg.Database.Driver, service.MaskDSN(cfg.Database.DSN), err)
	}
	return s, nil
}

func cmdRun(args []string, stderr io.Writer) error {
	fs, cfgPath := newFlags("run", stderr)
	overrides := addOverrideFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, _, err := loadConfigWith(*cfgPath, overrides())
	if err != nil {
		if !kservice.Interactive() {
			reportToServiceLog("slotpoller run: " + err.Error())
		}
		return err
	}
	if !kservice.Interactive() {
		return runService(cfg, stderr)
	}
	log := service.NewLogger(stderr, cfg.Log)
	node := service.NewNode(cfg, log, nil)
	ctx, stop := stopOnSignals(log, time.Duration(cfg.Jobs.DrainTimeout), node.StopNow)
	defer stop()
	return node.Run(ctx)
}

// stopOnSignals returns a context that ends at the first Ctrl-C, SIGTERM
// or SIGHUP (the terminal of a foreground node closed): the node then
// stops gracefully. A second Ctrl-C or SIGTERM during that stop calls now,
// which cuts the drain short; a third is left to the system, which ends
// the process as it is. stop releases the signals.
func stopOnSignals(log *slog.Logger, drain time.Duration, now func()) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	quit := make(chan struct{})
	go func() {
		select {
		case s := <-sig:
			log.Info("stopping gracefully: leaving the registry, handing tasks back, letting calls in flight finish; "+
				"a second Ctrl-C or SIGTERM stops at once, giving unfinished jobs back unrun",
				"signal", s.String(), "drain_timeout", service.Duration(drain))
			cancel()
		case <-quit:
			return
		}
		for {
			select {
			case s := <-sig:
				if s == syscall.SIGHUP {
					continue // the terminal is gone; only an operator's second signal hurries
				}
				signal.Stop(sig)
				log.Warn("second signal: stopping at once; the calls in flight are cancelled and their jobs given back unrun "+
					"(a third signal ends the process as it is)", "signal", s.String())
				now()
				return
			case <-quit:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(sig)
		close(quit)
		cancel()
	}
}

// runService runs the node under the OS service manager: the service's
// Start launches it, its Stop drains it within service.StopTimeout. Logs
// go to the Windows Event Log, or to standard error (journald) elsewhere.
// A node that gives up on its own makes the process exit with its error,
// so that the service manager restarts it.
func runService(cfg service.Config, stderr io.Writer) error {
	prg := &service.Program{StopTimeout: service.StopTimeout(cfg)}
	svc, err := install.NewService(prg, serviceOptions(prg))
	if err != nil {
		return err
	}
	log, err := serviceLogger(svc, cfg.Log, stderr)
	if err != nil {
		return err
	}
	prg.Logger = log
	prg.Run = service.NewNode(cfg, log, nil).Run
	if err := runManaged(svc, prg); err != nil {
		return err
	}
	return prg.Err()
}

func cmdInstall(args []string, stdout, stderr io.Writer) error {
	fs, cfgPath := newFlags("install", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := install.CheckRights("install"); err != nil {
		return err
	}
	path := *cfgPath
	if path == "" {
		path = "config.yaml"
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if _, err := os.Stat(abs); err != nil {
		return fmt.Errorf("the service runs `slotpoller run -config %s`, and there is no config file there (%v): write one (config.yaml in the release is a commented example) or pass -config PATH", abs, err)
	}
	environ := os.Environ()
	cfg, src, err := service.LoadWithSources(abs, true, environ)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find this program's path: %w", err)
	}
	if exe, err = filepath.Abs(exe); err != nil {
		return err
	}
	if strings.Contains(exe, "go-build") {
		return fmt.Errorf("%s is a temporary build (go run): build slotpoller, put the binary where it stays, and install from it", exe)
	}
	spec := install.ServiceSpec{Executable: exe, ConfigPath: abs, Env: carriedEnv(cfg, src, environ),
		StopBound: service.StopTimeout(cfg)}
	if err := install.InstallService(spec); err != nil {
		return err
	}
	writeInstalled(stdout, spec, cfg)
	return nil
}

// writeInstalled tells what install registered. Secret values (the DSN,
// the signing key) are never printed.
func writeInstalled(w io.Writer, spec install.ServiceSpec, cfg service.Config) {
	words := append([]string{spec.Executable}, spec.Arguments()...)
	for i, word := range words {
		words[i] = quoteWord(word)
	}
	fmt.Fprintf(w, "installed service %q: %s\n", install.ServiceName, strings.Join(words, " "))
	for _, e := range spec.Env {
		value := e.Value
		if e.Secret {
			value = "(hidden)"
		}
		fmt.Fprintf(w, "  environment %s=%s\n", e.Name, value)
	}
	stop, drain, ttl := spec.ManagerStopTimeout(), time.Duration(cfg.Jobs.DrainTimeout), time.Duration(cfg.Checkin.TTL)
	fmt.Fprintf(w, "  stop timeout %v (jobs.drain_timeout %v + checkin.ttl %v + %v)\n",
		stop, service.Duration(drain), service.Duration(ttl), service.Duration(stop-drain-ttl))
	fmt.Fprintln(w, "start it with: slotpoller start")
}

// quoteWord quotes a path that holds a space, as the service manager's
// entry does, so that the line can be read (and pasted) as the command.
func quoteWord(s string) string {
	switch {
	case strings.ContainsRune(s, '"'):
		return strconv.Quote(s)
	case s == "" || strings.ContainsAny(s, " \t"):
		return `"` + s + `"`
	}
	return s
}

// carriedEnv lists the environment variables that set a key of the
// configuration: the node's environment overrides, which the service
// must run with too.
func carriedEnv(cfg service.Config, src service.Sources, environ []string) []install.EnvVar {
	values := map[string]string{}
	for _, kv := range environ {
		if name, value, ok := strings.Cut(kv, "="); ok {
			values[name] = value
		}
	}
	var env []install.EnvVar
	for _, s := range cfg.Settings(src) {
		if s.Source.Kind == service.FromEnv {
			env = append(env, install.EnvVar{Name: s.Source.Where, Value: values[s.Source.Where], Secret: service.IsSecret(s.Key)})
		}
	}
	return env
}

func cmdUninstall(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("slotpoller uninstall", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := install.UninstallService(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "uninstalled service %q\n", install.ServiceName)
	return nil
}

func cmdControl(verb string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("slotpoller "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := install.ControlService(verb); err != nil {
		return err
	}
	done := map[string]string{"start": "started", "stop": "stopped", "restart": "restarted"}[verb]
	fmt.Fprintf(stdout, "service %q %s\n", install.ServiceName, done)
	return nil
}

func cmdConfig(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "show" {
		return usageError{"say `config show`"}
	}
	fs, cfgPath := newFlags("config show", stderr)
	asJSON := fs.Bool("json", false, "print JSON: the config file and a settings array of key, value and source")
	overrides := addOverrideFlags(fs)
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	cfg, src, err := loadConfigWith(*cfgPath, overrides())
	if err != nil {
		return err
	}
	file := *cfgPath
	if file == "" {
		file = "config.yaml"
		if _, err := os.Stat(file); err != nil {
			file = ""
		}
	}
	settings := cfg.Settings(src)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			ConfigFile string            `json:"config_file"`
			Settings   []service.Setting `json:"settings"`
		}{file, settings})
	}
	if file == "" {
		fmt.Fprintln(stdout, "config file: none (no config.yaml in the working directory): defaults and environment")
	} else {
		fmt.Fprintln(stdout, "config file:", file)
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE")
	for _, s := range settings {
		value := fmt.Sprint(s.Value)
		if str, ok := s.Value.(string); ok && (str == "" || strings.ContainsAny(str, " \t\"#")) {
			value = strconv.Quote(str)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Key, value, s.Source)
	}
	return tw.Flush()
}

func cmdEnqueue(args []string, stdout, stderr io.Writer) error {
	fs, cfgPath := newFlags("enqueue", stderr)
	endpoint := fs.String("endpoint", "", "path of the job's endpoint on the node's base URL, e.g. /jobs/report (required)")
	in := fs.Duration("in", 0, "run after this delay on the database clock, e.g. 30s")
	at := fs.String("at", "", "run at this time, RFC 3339, e.g. 2026-12-01T02:00:00Z")
	payload := fs.String("payload", "", "request body")
	method := fs.String("method", "POST", "HTTP method: GET, POST, PUT, PATCH or DELETE")
	maxAttempts := fs.Int("max-attempts", 0, "attempts before the job is dead (default jobs.max_attempts)")
	timeout := fs.Duration("timeout", 0, "deadline of one call (default jobs.timeout)")
	unique := fs.String("unique-key", "", "refuse the job if one with this key exists")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *endpoint == "" {
		return usageError{"-endpoint is required"}
	}
	if *in < 0 {
		return usageError{fmt.Sprintf("-in %v: must not be negative", *in)}
	}
	if *in > jobs.MaxLeadTime {
		return usageError{fmt.Sprintf("-in %v: a job may be due at most 366 days (8784h) ahead", *in)}
	}
	var runAt *time.Time
	if *at != "" {
		if *in != 0 {
			return usageError{"give -in or -at, not both"}
		}
		t, err := time.Parse(time.RFC3339, *at)
		if err != nil {
			return usageError{fmt.Sprintf("-at %q: not an RFC 3339 time such as 2026-12-01T02:00:00Z", *at)}
		}
		if t.After(time.Now().Add(jobs.MaxLeadTime)) {
			return usageError{fmt.Sprintf("-at %q: a job may be due at most 366 days ahead", *at)}
		}
		runAt = &t
	}
	if err := checkCallFlags(*method, *timeout); err != nil {
		return err
	}
	if err := checkMaxAttempts(*maxAttempts); err != nil {
		return err
	}
	if err := jobs.ValidateEndpoint(*endpoint); err != nil {
		return usageError{fmt.Sprintf("-endpoint %q: %v", *endpoint, err)}
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	if *maxAttempts == 0 {
		*maxAttempts = cfg.Jobs.MaxAttempts
	}
	ctx := context.Background()
	s, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := install.Check(ctx, s); err != nil {
		return err
	}
	id, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: *endpoint, Method: *method, Payload: []byte(*payload),
		RunAt: runAt, Delay: *in, MaxAttempts: *maxAttempts, Timeout: *timeout, UniqueKey: *unique})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, id)
	return nil
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

// statusJSON is `status -json`: the local service, then the farm.
type statusJSON struct {
	Service install.ServiceState `json:"service"`
	*service.StatusReport
}

func cmdStatus(args []string, stdout, stderr io.Writer) error {
	fs, cfgPath := newFlags("status", stderr)
	asJSON := fs.Bool("json", false, "print JSON: an object with the local service, a nodes array and job counts")
	if err := parse(fs, args); err != nil {
		return err
	}
	encode := func(v any) error {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	// The local service first: it is known without the database.
	svc := install.QueryService()
	if !*asJSON {
		fmt.Fprintln(stdout, "service:", svc)
	}
	err := withStore(*cfgPath, func(ctx context.Context, cfg service.Config, s *store.Store) error {
		rep, err := service.Status(ctx, s, time.Duration(cfg.Checkin.TTL))
		if err != nil {
			return err
		}
		if *asJSON {
			return encode(statusJSON{Service: svc, StatusReport: &rep})
		}
		return rep.WriteText(stdout)
	})
	if err != nil && *asJSON {
		_ = encode(statusJSON{Service: svc})
	}
	return err
}

func cmdSchema(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "migrate" && args[0] != "status") {
		return usageError{"say `schema migrate` or `schema status`"}
	}
	sub := args[0]
	fs, cfgPath := newFlags("schema "+sub, stderr)
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	return withStore(*cfgPath, func(ctx context.Context, _ service.Config, s *store.Store) error {
		if sub == "status" {
			cur, latest, err := install.Status(ctx, s)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "schema version %d; this binary's latest is %d\n", cur, latest)
			return install.Check(ctx, s)
		}
		applied, err := install.Migrate(ctx, s)
		if err != nil {
			return err
		}
		if len(applied) == 0 {
			fmt.Fprintln(stdout, "schema is up to date")
			return nil
		}
		fmt.Fprintf(stdout, "applied schema versions %v\n", applied)
		return nil
	})
}

// withStore loads the configuration and connects for a one-shot verb.
func withStore(cfgPath string, f func(context.Context, service.Config, *store.Store) error) error {
	cfg, err := loadConfig(cfgPath)
	if err != nil {
		return err
	}
	ctx := context.Background()
	s, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	return f(ctx, cfg, s)
}

func cmdTask(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"say `task add`, `task list` or `task delete`"}
	}
	sub, args := args[0], args[1:]
	fs, cfgPath := newFlags("task "+sub, stderr)
	switch sub {
	case "add":
		name := fs.String("name", "", "unique name of the task (required)")
		endpoint := fs.String("endpoint", "", "path of the task's endpoint on the node's base URL (required)")
		every := fs.Duration("every", 0, "interval between calls, e.g. 10s (required)")
		method := fs.String("method", "POST", "HTTP method: GET, POST, PUT, PATCH or DELETE")
		payload := fs.String("payload", "", "request body of every call")
		timeout := fs.Duration("timeout", 0, "deadline of one call (default jobs.timeout)")
		if err := parse(fs, args); err != nil {
			return err
		}
		switch {
		case *name == "":
			return usageError{"-name is required"}
		case *endpoint == "":
			return usageError{"-endpoint is required"}
		case *every <= 0:
			return usageError{"-every is required and must be positive, e.g. -every 10s"}
		}
		if err := checkName("task", *name); err != nil {
			return err
		}
		if err := checkCallFlags(*method, *timeout); err != nil {
			return err
		}
		if err := jobs.ValidateEndpoint(*endpoint); err != nil {
			return usageError{fmt.Sprintf("-endpoint %q: %v", *endpoint, err)}
		}
		return withSchema(*cfgPath, func(ctx context.Context, _ service.Config, s *store.Store) error {
			err := jobs.AddTask(ctx, s, store.NewTask{Name: *name, Endpoint: *endpoint, Method: *method,
				Payload: []byte(*payload), Every: *every, Timeout: *timeout})
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "task %q added; a node takes it within a slot or two\n", *name)
			return nil
		})
	case "list":
		asJSON := fs.Bool("json", false, "print JSON")
		all := fs.Bool("all", false, "include deleted tasks")
		if err := parse(fs, args); err != nil {
			return err
		}
		return withSchema(*cfgPath, func(ctx context.Context, _ service.Config, s *store.Store) error {
			tasks, err := s.Tasks(ctx, *all)
			if err != nil {
				return err
			}
			rep := service.TaskReport(tasks)
			if *asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return service.WriteTasks(stdout, rep)
		})
	case "delete":
		name := fs.String("name", "", "name of the task (required)")
		wait := fs.Duration("wait", 0, "wait up to this long for the owner to confirm it stopped")
		if err := parse(fs, args); err != nil {
			return err
		}
		if *name == "" {
			return usageError{"-name is required"}
		}
		return withSchema(*cfgPath, func(ctx context.Context, _ service.Config, s *store.Store) error {
			state, err := s.TaskRequestDelete(ctx, *name)
			if err != nil {
				return err
			}
			deadline := time.Now().Add(*wait)
			for state == store.TaskDeleting && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
				t, err := s.TaskGet(ctx, *name)
				if err != nil {
					return err
				}
				state = t.State
			}
			switch state {
			case store.TaskDeleted:
				fmt.Fprintf(stdout, "task %q deleted\n", *name)
			case store.TaskDeleting:
				fmt.Fprintf(stdout, "task %q is deleting: its owner stops within one interval and one heartbeat\n", *name)
			default:
				return fmt.Errorf("task %q is %s", *name, state)
			}
			return nil
		})
	}
	return usageError{fmt.Sprintf("unknown task verb %q: say add, list or delete", sub)}
}

// withSchema is withStore for verbs that need the schema in place.
func withSchema(cfgPath string, f func(context.Context, service.Config, *store.Store) error) error {
	return withStore(cfgPath, func(ctx context.Context, cfg service.Config, s *store.Store) error {
		if err := install.Check(ctx, s); err != nil {
			return err
		}
		return f(ctx, cfg, s)
	})
}

func cmdSchedule(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"say `schedule add`, `list`, `remove`, `pause` or `resume`"}
	}
	sub, args := args[0], args[1:]
	fs, cfgPath := newFlags("schedule "+sub, stderr)
	switch sub {
	case "add":
		name := fs.String("name", "", "unique name of the schedule (required)")
		every := fs.Duration("every", 0, "fire every interval, on the grid of its multiples (e.g. 10m fires at :00, :10, ...)")
		cronExpr := fs.String("cron", "", "fire on a cron expression: 5 fields, or 6 with seconds first")
		tz := fs.String("tz", "", "IANA time zone of -cron (default UTC)")
		endpoint := fs.String("endpoint", "", "path of the endpoint on the node's base URL (required)")
		method := fs.String("method", "POST", "HTTP method")
		payload := fs.String("payload", "", "request body of every occurrence")
		tolerance := fs.Duration("tolerance", 5*time.Minute, "how late an occurrence may still start")
		misfire := fs.String("misfire", store.MisfireOnce, "after an outage: once (the latest missed runs once), skip (record missed), all (run each)")
		overlap := fs.String("overlap", store.OverlapForbid, "forbid: an occurrence waits while the previous one runs; allow")
		maxAttempts := fs.Int("max-attempts", 0, "attempts per occurrence (default jobs.max_attempts)")
		timeout := fs.Duration("timeout", 0, "deadline of one call (default jobs.timeout)")
		if err := parse(fs, args); err != nil {
			return err
		}
		switch {
		case *name == "":
			return usageError{"-name is required"}
		case *endpoint == "":
			return usageError{"-endpoint is required"}
		case (*every == 0) == (*cronExpr == ""):
			return usageError{"give -every or -cron, one of them"}
		}
		if err := checkName("schedule", *name); err != nil {
			return err
		}
		if err := checkCallFlags(*method, *timeout); err != nil {
			return err
		}
		if err := checkMaxAttempts(*maxAttempts); err != nil {
			return err
		}
		if err := jobs.ValidateEndpoint(*endpoint); err != nil {
			return usageError{fmt.Sprintf("-endpoint %q: %v", *endpoint, err)}
		}
		return withSchema(*cfgPath, func(ctx context.Context, cfg service.Config, s *store.Store) error {
			attempts := *maxAttempts
			if attempts == 0 {
				attempts = cfg.Jobs.MaxAttempts
			}
			sc := store.Schedule{Name: *name, Every: *every, Cron: *cronExpr, TimeZone: *tz, Endpoint: *endpoint,
				Method: *method, Payload: []byte(*payload), Timeout: *timeout, MaxAttempts: attempts, Tolerance: *tolerance,
				Misfire: *misfire, Overlap: *overlap, Enabled: true, Source: store.SourceCommand}
			if err := jobs.AddSchedule(ctx, s, sc); err != nil {
				return err
			}
			added, err := s.ScheduleGet(ctx, *name)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "schedule %q added; first occurrence %s\n", *name, added.NextFireAt.Format(time.RFC3339))
			return nil
		})
	case "list":
		asJSON := fs.Bool("json", false, "print JSON")
		if err := parse(fs, args); err != nil {
			return err
		}
		return withSchema(*cfgPath, func(ctx context.Context, _ service.Config, s *store.Store) error {
			rep, err := service.ScheduleReport(ctx, s)
			if err != nil {
				return err
			}
			if *asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return service.WriteSchedules(stdout, rep)
		})
	case "remove", "pause", "resume":
		name := fs.String("name", "", "name of the schedule (required)")
		if err := parse(fs, args); err != nil {
			return err
		}
		if *name == "" {
			return usageError{"-name is required"}
		}
		return withSchema(*cfgPath, func(ctx context.Context, _ service.Config, s *store.Store) error {
			var ok bool
			var err error
			switch sub {
			case "remove":
				ok, err = s.ScheduleDelete(ctx, *name)
			case "pause":
				ok, err = s.ScheduleSetEnabled(ctx, *name, false, nil)
			default:
				err = jobs.ResumeSchedule(ctx, s, *name)
				ok = err == nil
			}
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("schedule %q: %w", *name, store.ErrNotFound)
			}
			done := map[string]string{"remove": "removed", "pause": "paused", "resume": "resumed"}[sub]
			fmt.Fprintf(stdout, "schedule %q %s\n", *name, done)
			return nil
		})
	}
	return usageError{fmt.Sprintf("unknown schedule verb %q: say add, list, remove, pause or resume", sub)}
}
