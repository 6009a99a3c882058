// Command bench measures a slotpoller farm of in-process nodes against a
// real PostgreSQL (or, for scenarios A and B, SQL Server) database and
// prints the results as markdown tables.
//
//	go run ./bench compare
//
// runs the comparison with River (compare.go, bench/benchkit, the module in
// bench/river), and
//
//	go run ./bench compare -mariadb
//
// the same scenarios on a private PostgreSQL and a private MariaDB
// (mariadb.go);
//
//	go run ./bench soak [-nodes 4] [-rate 500] [-for 30m] [-kill-every 5m] [-calls 250] [-dsn …]
//
// runs a farm of `slotpoller run` processes under a steady load for a long
// time, killing one node with SIGKILL and starting it again at every
// -kill-every, and reports each node's memory (RSS) over its life, jobs
// lost, run twice at once and re-run after a kill, and statements per job
// window by window (soak.go; outside CI, the figures go in
// docs/benchmarks.md). Without a subcommand it runs scenarios A, B and C
// below (idle.go, burst.go, schedules.go).
//
//	go run ./bench -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//	go run ./bench -only A,B -dsn 'sqlserver://user:password@127.0.0.1:1433?database=test'
//
// Scenario A (idle farm): for each node count N, start N nodes, wait until
// all are live and one more slot has passed, then measure over the -idle
// window how often the farm polls the queue and how many statements it
// sends to the database. The design's promise is that the farm polls about
// once per slot whatever N is.
//
// Scenario B (burst): -burst-nodes nodes with free capacity (500 each) and
// an in-process endpoint that answers 204 at once; -jobs jobs all due at
// the same database instant (-burst-lead after the farm is live). Start
// delay (started_at - run_at, both database times), throughput and jobs
// per node are read back from the jobs table. The design's target is a p99
// start delay of at most one slot plus 100 ms while nodes have free
// capacity.
//
// Scenario C (schedules): -schedule-nodes nodes with the default capacity
// (-schedule-capacity) and the same endpoint as B; -schedules schedules all
// firing at the same second, -firings times 20 s apart (a cron with a
// seconds field, "S1,S2 * * * * *"). For each firing, lateness (started_at -
// scheduled_for, both database times), the nodes that ran the occurrences,
// and the polls and slots it took are read back from the jobs table. The
// issue's target: occurrences due at the same moment are spread over the
// live nodes by capacity and start within their tolerance.
//
// -only picks the scenarios to run (default A,B,C). Every scenario runs in a
// fresh schema (bench_<random>) of the database the DSN names, dropped at
// the end. A sqlserver:// DSN runs the nodes on SQL Server; statements are
// the nodes' own count there too. Scenario C reads its figures back in
// PostgreSQL's SQL and runs on PostgreSQL only.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, for schema set-up

	"github.com/slotpoller/slotpoller/config"
)

const dsnEnv = "SLOTPOLLER_TEST_POSTGRES_DSN"

type options struct {
	dsn        string
	idle       time.Duration
	nodes      []int
	jobs       int
	burstNodes int
	capacity   int
	burstLead  time.Duration
	slot       time.Duration
	warmup     time.Duration
	logLevel   string
	only       map[string]bool

	schedules        int
	scheduleNodes    int
	scheduleCapacity int
	firings          int
	tolerance        time.Duration
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "compare" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return compare(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "soak" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return soak(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var nodes string
	fs.StringVar(&o.dsn, "dsn", os.Getenv(dsnEnv), "PostgreSQL DSN, or SQL Server's (sqlserver://…; scenarios A and B) (default $"+dsnEnv+")")
	fs.DurationVar(&o.idle, "idle", 10*time.Second, "measurement window of the idle scenario")
	fs.StringVar(&nodes, "nodes", "1,4,16", "comma-separated node counts of the idle scenario")
	fs.IntVar(&o.jobs, "jobs", 1000, "jobs in the burst scenario")
	fs.IntVar(&o.burstNodes, "burst-nodes", 4, "nodes in the burst scenario")
	fs.IntVar(&o.capacity, "burst-capacity", 500, "node.capacity of each node in the burst scenario")
	fs.DurationVar(&o.burstLead, "burst-lead", 3*time.Second, "run_at of the burst = database now + this, once the farm is live (moves run_at against the nodes' heartbeats)")
	fs.DurationVar(&o.slot, "slot", time.Second, "rotation.slot of every node")
	fs.DurationVar(&o.warmup, "warmup", 0, "wait after the farm is live before A measures and B enqueues (default one slot; on a T-SQL server a new connection's first statements are slow)")
	fs.StringVar(&o.logLevel, "log", "warn", "node log level on stderr: debug, info, warn, error or off")
	var only string
	fs.StringVar(&only, "only", "A,B,C", "comma-separated scenarios to run: A (idle), B (burst), C (schedules)")
	fs.IntVar(&o.schedules, "schedules", 200, "schedules firing at the same second in the schedule scenario")
	fs.IntVar(&o.scheduleNodes, "schedule-nodes", 4, "nodes in the schedule scenario")
	fs.IntVar(&o.scheduleCapacity, "schedule-capacity", config.Default().Node.Capacity, "node.capacity of each node in the schedule scenario")
	fs.IntVar(&o.firings, "firings", 2, "firings of the schedules, 20s apart (1 to 3)")
	fs.DurationVar(&o.tolerance, "tolerance", 5*time.Minute, "tolerance of each schedule in the schedule scenario")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.only = map[string]bool{}
	for _, f := range strings.Split(only, ",") {
		f = strings.ToUpper(strings.TrimSpace(f))
		if f != "A" && f != "B" && f != "C" {
			return fmt.Errorf("-only: %q is not a scenario (A, B or C)", f)
		}
		o.only[f] = true
	}
	if o.schedules < 1 || o.scheduleNodes < 1 || o.scheduleCapacity < 1 || o.tolerance <= 0 {
		return errors.New("-schedules, -schedule-nodes, -schedule-capacity and -tolerance must be positive")
	}
	if o.firings < 1 || o.firings > 3 {
		return errors.New("-firings must be 1, 2 or 3")
	}
	if o.dsn == "" {
		return fmt.Errorf("no DSN: pass -dsn or set %s", dsnEnv)
	}
	if driverOf(o.dsn) == "sqlserver" && o.only["C"] {
		return errors.New("scenario C (schedules) runs on PostgreSQL only: pass -only A,B with a SQL Server DSN")
	}
	for _, f := range strings.Split(nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-nodes: %q is not a positive node count", f)
		}
		o.nodes = append(o.nodes, n)
	}
	if o.warmup <= 0 {
		o.warmup = o.slot
	}
	if o.jobs < 1 || o.burstNodes < 1 || o.capacity < 1 || o.idle <= 0 || o.slot <= 0 || o.burstLead <= 0 {
		return errors.New("-jobs, -burst-nodes, -burst-capacity, -burst-lead, -idle and -slot must be positive")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	logger, err := nodeLogger(o.logLevel, stderr)
	if err != nil {
		return err
	}

	database := databaseVersion(ctx, o.dsn)

	out := bufio.NewWriter(stdout)
	defer out.Flush()
	fmt.Fprintf(out, "# slotpoller benchmark\n\n")
	fmt.Fprintf(out, "- command: `%s`\n", commandLine(args, o.dsn))
	fmt.Fprintf(out, "- date: %s\n", time.Now().Format(time.RFC3339))
	fmt.Fprintf(out, "- go: %s, %s/%s, %d CPUs (%s)\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel())
	fmt.Fprintf(out, "- database: %s at %s\n", database, hostOf(o.dsn))
	fmt.Fprintf(out, "- nodes: in-process, config.Default() with database.driver=%s, rotation.slot=%v (heartbeat %v, ttl %v, clock resync %v); warm-up %v after all are live\n\n",
		driverOf(o.dsn), o.slot, time.Duration(config.Default().Checkin.Heartbeat), time.Duration(config.Default().Checkin.TTL),
		time.Duration(config.Default().Clock.Resync), o.warmup)
	out.Flush()

	if o.only["A"] {
		var idle []idleResult
		for _, n := range o.nodes {
			r, err := idleScenario(ctx, o, n, logger)
			if err != nil {
				return fmt.Errorf("idle scenario, %d nodes: %w", n, err)
			}
			idle = append(idle, r)
			fmt.Fprintf(stderr, "bench: idle %d nodes: %.2f polls/s, %.1f statements/s\n", n, r.pollsPerSec(), r.stmtsPerSec())
		}
		printIdle(out, o, idle)
		out.Flush()
	}

	if o.only["B"] {
		b, err := burstScenario(ctx, o, logger, stderr)
		if err != nil {
			return fmt.Errorf("burst scenario: %w", err)
		}
		printBurst(out, o, b)
		out.Flush()
	}

	if o.only["C"] {
		c, err := scheduleScenario(ctx, o, logger, stderr)
		if err != nil {
			return fmt.Errorf("schedule scenario: %w", err)
		}
		printSchedules(out, o, c)
	}
	return nil
}

// databaseVersion names the server the DSN reaches, with its version.
func databaseVersion(ctx context.Context, dsn string) string {
	if driverOf(dsn) == "sqlserver" {
		v := "unknown"
		if db, err := sql.Open("sqlserver", dsn); err == nil {
			_ = db.QueryRowContext(ctx, "SELECT @@VERSION").Scan(&v)
			db.Close()
		}
		// Babelfish says "Babelfish for PostgreSQL with SQL Server
		// Compatibility - …" on the first line; SQL Server its edition.
		first, _, _ := strings.Cut(v, "\n")
		return "SQL Server: " + strings.TrimSpace(first)
	}
	v := "unknown"
	if db, err := sql.Open("pgx", dsn); err == nil {
		_ = db.QueryRowContext(ctx, "SHOW server_version").Scan(&v)
		db.Close()
	}
	return "PostgreSQL " + v
}

// commandLine is the command as run, with the DSN's password masked.
func commandLine(args []string, dsn string) string {
	parts := []string{"go", "run", "./bench"}
	hasDSN := false
	for _, a := range args {
		if strings.HasPrefix(a, "-dsn") || strings.HasPrefix(a, "--dsn") {
			hasDSN = true
		}
		parts = append(parts, shellQuote(config.MaskDSN(a)))
	}
	cmd := strings.Join(parts, " ")
	if !hasDSN {
		cmd = dsnEnv + "=" + shellQuote(config.MaskDSN(dsn)) + " " + cmd
	}
	return cmd
}

func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`!*?&;|<>()[]{}#~") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func hostOf(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Host != "" {
		return u.Host + u.Path
	}
	return "(key=value DSN)"
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "model unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "model unknown"
}
