// Command river runs the comparison's scenarios (bench/benchkit) against a
// farm of River clients in one process, each client with its own pgx pool as
// if on its own node. It is a module of its own so that slotpoller never
// depends on River. Results go to stdout as JSON lines, then as markdown
// tables to stderr.
//
//	cd bench/river && go run . -dsn 'postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable'
//
// The server must load pg_stat_statements; `go run ./bench compare` at the
// repository root starts such a server and runs this command and the
// slotpoller side against it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/slotpoller/slotpoller/bench/benchkit"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench/river:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("river", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("dsn", "", "administrator DSN of a PostgreSQL server that loads pg_stat_statements")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this side's run (clients, endpoint and feeder, one process) to this file")
	var p benchkit.Params
	p.Flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dsn == "" {
		return errors.New("-dsn is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopProfile, err := benchkit.CPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	srv, err := benchkit.OpenServer(ctx, *dsn)
	if err != nil {
		return err
	}
	side := riverSide{name: "River " + riverVersion(), log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	var results []benchkit.Result
	emit := benchkit.JSONLines(stdout)
	err = benchkit.Run(ctx, srv, side, p, func(r benchkit.Result) {
		results = append(results, r)
		emit(r)
	}, func(f string, a ...any) { fmt.Fprintf(stderr, "bench/river: "+f+"\n", a...) })
	benchkit.Tables(stderr, []string{side.name}, results, nil)
	return err
}

func riverVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/riverqueue/river" {
				return d.Version
			}
		}
	}
	return "(version unknown)"
}

type riverSide struct {
	name string
	log  *slog.Logger
}

func (s riverSide) Name() string  { return s.name }
func (s riverSide) Slotted() bool { return false }

func (s riverSide) Migrate(ctx context.Context, db *benchkit.Database) error {
	pool, err := pgxpool.New(ctx, db.FeederDSN)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: s.log})
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// callArgs is the one kind of job: call the endpoint for Key.
type callArgs struct {
	Key string `json:"key"`
}

func (callArgs) Kind() string { return "call" }

type callWorker struct {
	river.WorkerDefaults[callArgs]
	node   string
	base   string
	client *http.Client
}

func (w *callWorker) Work(ctx context.Context, job *river.Job[callArgs]) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.base+"/job/"+job.Args.Key, nil)
	if err != nil {
		return err
	}
	req.Header.Set(benchkit.HeaderNode, w.node)
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("endpoint answered %s", resp.Status)
	}
	return nil
}

type riverFarm struct {
	pools   []*pgxpool.Pool
	clients []*river.Client[pgx.Tx]
	feeder  *pgxpool.Pool
	insert  *river.Client[pgx.Tx] // insert-only, as the feeder
}

func (s riverSide) Start(ctx context.Context, db *benchkit.Database, spec benchkit.Spec) (benchkit.Farm, error) {
	f := &riverFarm{}
	var err error
	if f.feeder, err = pgxpool.New(ctx, db.FeederDSN); err != nil {
		return nil, err
	}
	if f.insert, err = river.NewClient(riverpgxv5.New(f.feeder), &river.Config{Logger: s.log}); err != nil {
		f.feeder.Close()
		return nil, err
	}
	for i := range spec.Nodes {
		node := "river-" + strconv.Itoa(i)
		pool, err := pgxpool.New(ctx, db.FarmDSN)
		if err != nil {
			_ = f.Stop(ctx)
			return nil, err
		}
		f.pools = append(f.pools, pool)
		workers := river.NewWorkers()
		river.AddWorker(workers, &callWorker{node: node, base: spec.Endpoint, client: &http.Client{
			Transport: &http.Transport{MaxIdleConnsPerHost: spec.Concurrency, MaxConnsPerHost: spec.Concurrency},
		}})
		c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
			ID:      node,
			Logger:  s.log,
			Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: spec.Concurrency}},
			Workers: workers,
		})
		if err != nil {
			_ = f.Stop(ctx)
			return nil, err
		}
		if err := c.Start(ctx); err != nil {
			_ = f.Stop(ctx)
			return nil, err
		}
		f.clients = append(f.clients, c)
	}
	return f, nil
}

func params(keys []string) []river.InsertManyParams {
	out := make([]river.InsertManyParams, len(keys))
	for i, k := range keys {
		out[i] = river.InsertManyParams{Args: callArgs{Key: k}, InsertOpts: &river.InsertOpts{MaxAttempts: 1}}
	}
	return out
}

// PrepareBurst inserts nothing yet: one InsertMany statement makes all the
// jobs visible at its commit.
func (f *riverFarm) PrepareBurst(_ context.Context, keys []string) (func(context.Context) error, error) {
	return func(ctx context.Context) error { return f.Enqueue(ctx, keys) }, nil
}

func (f *riverFarm) Enqueue(ctx context.Context, keys []string) error {
	if len(keys) == 1 {
		_, err := f.insert.Insert(ctx, callArgs{Key: keys[0]}, &river.InsertOpts{MaxAttempts: 1})
		return err
	}
	_, err := f.insert.InsertMany(ctx, params(keys))
	return err
}

func (f *riverFarm) Finished(ctx context.Context) (int, error) {
	var n int
	err := f.feeder.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&n)
	return n, err
}

func (f *riverFarm) Stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// All at once: 64 clients stopped one by one take long.
	errs := make([]error, len(f.clients))
	var wg sync.WaitGroup
	for i, c := range f.clients {
		wg.Go(func() { errs[i] = c.Stop(ctx) })
	}
	wg.Wait()
	for _, p := range f.pools {
		p.Close()
	}
	if f.feeder != nil {
		f.feeder.Close()
	}
	return errors.Join(errs...)
}
