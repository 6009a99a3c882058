package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slotpoller/slotpoller/bench/benchkit"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/internal/storetest"
	dbschema "github.com/slotpoller/slotpoller/schema"
	"github.com/slotpoller/slotpoller/service"
)

// Schema and farm plumbing

// schema is a fresh schema with slotpoller's tables, on PostgreSQL or SQL
// Server.
type schema struct {
	driver string
	name   string
	dsn    string // PostgreSQL: the base DSN with search_path set to the schema
	admin  *sql.DB
	store  *store.Store // the bench's own store: not counted in any node's statements
}

func newSchema(ctx context.Context, base string) (*schema, error) {
	driver := driverOf(base)
	sqlDriver := map[string]string{"postgres": "pgx", "sqlserver": "sqlserver"}[driver]
	admin, err := sql.Open(sqlDriver, base)
	if err != nil {
		return nil, err
	}
	sc := &schema{driver: driver, name: "bench_" + randomHex(6), admin: admin, dsn: base}
	var opts []store.Option
	if driver == "sqlserver" {
		// The first migration creates the schema.
		opts = append(opts, store.WithSchema(sc.name))
	} else {
		if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+sc.name); err != nil {
			admin.Close()
			return nil, fmt.Errorf("create schema: %w", err)
		}
		sc.dsn = store.PostgresWithSchema(base, sc.name)
	}
	sc.store, err = open.Store(ctx, driver, sc.dsn, opts...)
	if err != nil {
		sc.drop()
		return nil, err
	}
	if _, err := dbschema.Migrate(ctx, sc.store); err != nil {
		sc.drop()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return sc, nil
}

// drop removes the schema; it runs even when the bench was interrupted.
func (sc *schema) drop() {
	if sc.store != nil {
		sc.store.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	if sc.driver == "sqlserver" {
		err = storetest.DropSQLServerSchema(ctx, sc.admin, sc.name)
	} else {
		_, err = sc.admin.ExecContext(ctx, "DROP SCHEMA "+sc.name+" CASCADE")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: could not drop schema %s: %v\n", sc.name, err)
	}
	sc.admin.Close()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// farm is a set of running in-process nodes.
type farm struct {
	names  []string // sorted: the rotation order
	nodes  []*service.Node
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

func nodeConfig(o options, dsn, name string) config.Config {
	cfg := config.Default()
	cfg.Database.Driver = "postgres"
	cfg.Database.DSN = dsn
	cfg.Node.Name = name
	cfg.Rotation.Slot = config.Duration(o.slot)
	return cfg
}

// nodeConfig is a node of the farm on the schema.
func (sc *schema) nodeConfig(o options, name string) config.Config {
	cfg := nodeConfig(o, sc.dsn, name)
	cfg.Database.Driver = sc.driver
	if sc.driver == "sqlserver" {
		cfg.Database.Schema = sc.name
	}
	return cfg
}

// driverOf tells a SQL Server DSN (sqlserver://…) from a PostgreSQL one.
func driverOf(dsn string) string {
	if strings.HasPrefix(strings.ToLower(dsn), "sqlserver://") {
		return "sqlserver"
	}
	return "postgres"
}

func startFarm(cfgs []config.Config, logger *slog.Logger) (*farm, error) {
	for _, c := range cfgs {
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("config of %s: %w", c.Node.Name, err)
		}
	}
	rctx, cancel := context.WithCancel(context.Background())
	f := &farm{cancel: cancel}
	for _, c := range cfgs {
		n := service.NewNode(c, logger, nil)
		f.names = append(f.names, c.Node.Name)
		f.nodes = append(f.nodes, n)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			if err := n.Run(rctx); err != nil {
				f.mu.Lock()
				f.errs = append(f.errs, fmt.Errorf("node %s: %w", c.Node.Name, err))
				f.mu.Unlock()
			}
		}()
	}
	if !slices.IsSorted(f.names) {
		f.stop()
		return nil, errors.New("node names must be given in rotation order")
	}
	return f, nil
}

// stop cancels every node and waits for Run to return.
func (f *farm) stop() error {
	f.cancel()
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

func (f *farm) failed() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

// waitLive waits until every node of the farm is live in the registry, as
// the database judges it.
func (f *farm) waitLive(ctx context.Context, s *store.Store, ttl time.Duration) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		nodes, _, err := s.Nodes(ctx, ttl)
		if err != nil {
			return err
		}
		live := 0
		for _, n := range nodes {
			if n.Live && slices.Contains(f.names, n.Name) {
				live++
			}
		}
		if live == len(f.names) {
			return nil
		}
		if err := f.failed(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d nodes live after 60s", live, len(f.names))
		}
		if err := benchkit.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

func (f *farm) stats() []service.Stats {
	out := make([]service.Stats, len(f.nodes))
	for i, n := range f.nodes {
		out[i] = n.Stats()
	}
	return out
}

func nodeNames(n int) []string {
	width := len(strconv.Itoa(n - 1))
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%0*d", width, i)
	}
	return out
}
