package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/slotpoller/slotpoller/bench/benchkit"
)

// compare runs the same scenarios against River (the separate module in
// bench/river, run with `go run`) and against slotpoller, one after the
// other on one PostgreSQL server, and prints one table per scenario with
// both columns and the ratio. With -queues N it compares slotpoller with
// itself instead: jobs spread over N queues without settings (the plain
// claim) against the same N queues with limits (the managed claim). With
// -mariadb it compares slotpoller on PostgreSQL with slotpoller on
// MariaDB (driver mysql), each on a private server the bench starts.
func compare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("dsn", "", "administrator DSN of a PostgreSQL server that loads pg_stat_statements (default: start a private server)")
	riverDir := fs.String("river-dir", filepath.Join("bench", "river"), "folder of the River module")
	logLevel := fs.String("log", "warn", "slotpoller node log level on stderr: debug, info, warn, error or off")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the slotpoller side's run (nodes, endpoint and feeder, one process) to this file, and one of each River round's process to this file with .river<round> appended")
	memProfile := fs.String("memprofile", "", "write a profile of the slotpoller side's allocations over the whole run (every scenario, nodes, endpoint and feeder's inserts: a wider window than the heap rows') to this file at the end")
	rounds := fs.Int("rounds", 1, "run the two sides this many times, one after the other (River, or with -queues the queues without settings, first in odd rounds), and report each figure's median (a 2-core machine's figures move by 10% from one run to the next)")
	queues := fs.Int("queues", 0, "instead of River, compare slotpoller's jobs spread round robin over this many queues without settings with the same queues each limited (a farm-wide and a node limit of twice their share of the calls)")
	withMariaDB := fs.Bool("mariadb", false, "instead of River, compare slotpoller on PostgreSQL with slotpoller on a private MariaDB server (mariadbd and mariadb-install-db on this machine) with performance_schema on, which counts the statements")
	var p benchkit.Params
	p.Flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rounds < 1 || *queues < 0 {
		return fmt.Errorf("-rounds %d, -queues %d: must be at least 1 and 0", *rounds, *queues)
	}
	if *withMariaDB && *queues > 0 {
		return errors.New("-mariadb and -queues are two comparisons: pass one")
	}
	if _, err := os.Stat(filepath.Join(*riverDir, "go.mod")); err != nil && *queues == 0 && !*withMariaDB {
		return fmt.Errorf("no River module at %s (run from the repository root or pass -river-dir): %w", *riverDir, err)
	}
	logger, err := nodeLogger(*logLevel, stderr)
	if err != nil {
		return err
	}
	admin := *dsn
	if admin == "" {
		pg, err := startPrivatePostgres(ctx)
		if err != nil {
			return err
		}
		defer pg.stop()
		admin = pg.DSN()
		fmt.Fprintf(stderr, "bench: private PostgreSQL at %s\n", admin)
	}
	srv, err := benchkit.OpenServer(ctx, admin)
	if err != nil {
		return err
	}
	var maria *mariaServer
	if *withMariaDB {
		m, err := startPrivateMariaDB(ctx)
		if err != nil {
			return err
		}
		defer m.stop()
		fmt.Fprintf(stderr, "bench: private MariaDB at 127.0.0.1:%d (socket %s)\n", m.port, m.socket())
		if maria, err = openMariaServer(ctx, m); err != nil {
			return err
		}
		defer maria.close()
	}

	// The machine may be shared: say how busy it was.
	load := "unknown"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(b))[:3], " ")
	}

	side := slotSide{name: "slotpoller " + gitCommit(ctx), logger: logger}
	stopProfile, err := benchkit.CPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			return fmt.Errorf("-memprofile: %w", err)
		}
		defer f.Close()
		defer func() {
			runtime.GC() // the profile is as of the last collection
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				fmt.Fprintf(stderr, "bench: -memprofile: %v\n", err)
			}
		}()
	}
	var results []benchkit.Result
	inProcess := func(side slotSide, srv benchkit.DBServer) func(round int) error {
		return func(round int) error {
			emit := benchkit.JSONLines(stderr)
			return benchkit.Run(ctx, srv, side, p, func(r benchkit.Result) {
				r.Round = round
				results = append(results, r)
				emit(r)
			}, func(f string, a ...any) { fmt.Fprintf(stderr, "bench: "+f+"\n", a...) })
		}
	}
	// base is the first column, first in odd rounds; the sides take turns
	// to go first: what one leaves on the machine (sockets in TIME_WAIT, a
	// warm or cold cache) falls on each alike.
	var base, other func(round int) error
	baseName, otherName := "", side.name
	switch {
	case *withMariaDB:
		onPG, onMaria := side, side
		// "15.20 (Debian 15.20-0+deb12u1)": the number heads the column.
		pgVersion, _, _ := strings.Cut(srv.Version, " ")
		onPG.name = "PostgreSQL " + pgVersion
		onMaria.name = "MariaDB " + maria.Version
		base, other = inProcess(onPG, srv), inProcess(onMaria, maria)
		baseName, otherName = onPG.name, onMaria.name
	case *queues > 0:
		plain := side
		plain.queues = *queues
		plain.name = fmt.Sprintf("%s, %d queues", side.name, *queues)
		limited := plain
		limited.limited = true
		limited.name = fmt.Sprintf("%s, %d limited queues", side.name, *queues)
		base, other = inProcess(plain, srv), inProcess(limited, srv)
		baseName, otherName = plain.name, limited.name
	default:
		// River in its own process and module.
		base = func(round int) error {
			var extra []string
			if *cpuProfile != "" {
				abs, err := filepath.Abs(fmt.Sprintf("%s.river%d", *cpuProfile, round))
				if err != nil {
					return err
				}
				extra = []string{"-cpuprofile", abs}
			}
			riverResults, err := runRiver(ctx, *riverDir, admin, p, extra, stderr)
			if err != nil {
				return err
			}
			baseName = riverResults[0].Side
			for _, r := range riverResults {
				r.Round = round
				results = append(results, r)
			}
			return nil
		}
		other = inProcess(side, srv)
	}
	for round := 1; round <= *rounds; round++ {
		if *rounds > 1 {
			fmt.Fprintf(stderr, "bench: round %d of %d\n", round, *rounds)
		}
		first, second := base, other
		if round%2 == 0 {
			first, second = other, base
		}
		if err := first(round); err != nil {
			return err
		}
		if err := second(round); err != nil {
			return err
		}
	}
	var intervals map[[2]string]benchkit.Interval
	if *rounds >= 3 {
		intervals = benchkit.RatioIntervals(results, baseName, otherName, 0.9, 10000, 1)
	}
	results = benchkit.Medians(results)

	base1, other1, title := "River", "slotpoller", "River side by side"
	switch {
	case *withMariaDB:
		base1, other1, title = "PostgreSQL", "MariaDB", "MariaDB beside PostgreSQL ("+side.name+")"
	case *queues > 0:
		base1, other1, title = "the queues without settings", "the limited queues", fmt.Sprintf("%d limited queues against the same without settings", *queues)
	}
	fmt.Fprintf(stdout, "## %s\n\n", title)
	fmt.Fprintf(stdout, "- command: `%s`\n", strings.Join(append([]string{"go run ./bench compare"}, args...), " "))
	fmt.Fprintf(stdout, "- date: %s\n", time.Now().Format(time.RFC3339))
	fmt.Fprintf(stdout, "- machine: %s, %d CPUs, %s/%s, %s; load average at the start %s\n",
		cpuModel(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), load)
	fmt.Fprintf(stdout, "- database: PostgreSQL %s (%s), one fresh database per farm, statements counted by pg_stat_statements\n",
		srv.Version, map[bool]string{true: "private cluster, fsync off", false: "given by -dsn"}[*dsn == ""])
	if maria != nil {
		fmt.Fprintf(stdout, "- database: MariaDB %s (private server, log flushed once a second, no binary log, no doublewrite), one fresh database per farm, "+
			"statements counted by performance_schema (statement events of the farm's login: text statements and executions of prepared ones; "+
			"the prepares and closes of go-sql-driver/mysql's prepared statements in rows of their own)\n", maria.Version)
	}
	if *rounds > 1 {
		fmt.Fprintf(stdout, "- rounds: %d, the sides one after the other, %s first in odd rounds and %s in even ones; each figure is the median of its %d values (least–greatest)\n",
			*rounds, base1, other1, *rounds)
	}
	if intervals != nil {
		fmt.Fprintf(stdout, "- 90%% interval: where the ratio of the medians falls in 90%% of 10,000 resamplings of the rounds (each round's pair kept together); an interval above 1× means %s did better beyond the rounds' spread\n", other1)
	}
	fmt.Fprintf(stdout, "- ratio: better-is-higher (%[1]s ÷ %[2]s where higher is better, %[2]s ÷ %[1]s where lower is better): above 1× %[1]s did better\n\n", other1, base1)
	benchkit.Tables(stdout, []string{baseName, otherName}, results, intervals)
	return nil
}

// runRiver runs the River side once, in its own module and process, and
// returns its results.
func runRiver(ctx context.Context, dir, admin string, p benchkit.Params, extra []string, stderr io.Writer) ([]benchkit.Result, error) {
	args := append(append([]string{"run", ".", "-dsn", admin}, extra...), p.Args()...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, stderr
	fmt.Fprintf(stderr, "bench: (cd %s && go %s)\n", dir, strings.Join(args, " "))
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("River side: %w", err)
	}
	results, err := benchkit.ReadJSONLines(&out, func(line string) { fmt.Fprintln(stderr, line) })
	if err != nil || len(results) == 0 {
		return nil, errors.Join(errors.New("River side printed no results"), err)
	}
	return results, nil
}

func nodeLogger(level string, w io.Writer) (*slog.Logger, error) {
	if level == "off" {
		return slog.New(slog.DiscardHandler), nil
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log: %w", err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl})), nil
}

// gitCommit names the code measured, e.g. "f080c7a" or "f080c7a-dirty".
func gitCommit(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "(commit unknown)"
	}
	return strings.TrimSpace(string(out))
}
