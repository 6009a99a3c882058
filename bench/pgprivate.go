package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// privatePostgres is a throwaway PostgreSQL cluster that loads
// pg_stat_statements, so that statements can be counted without touching
// the machine's server.
type privatePostgres struct {
	bin, dir string
	port     int
	asRoot   bool
}

// startPrivatePostgres initialises and starts the cluster in a temporary
// folder, on a free port, with fsync off.
func startPrivatePostgres(ctx context.Context) (*privatePostgres, error) {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(matches) == 0 {
		return nil, errors.New("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin: pass -dsn of a server that loads pg_stat_statements")
	}
	p := &privatePostgres{bin: filepath.Dir(matches[len(matches)-1]), asRoot: os.Geteuid() == 0}
	dir, err := os.MkdirTemp("", "slotpoller-bench-pg-")
	if err != nil {
		return nil, err
	}
	p.dir = dir
	if p.asRoot {
		// PostgreSQL refuses to run as root.
		if out, err := exec.CommandContext(ctx, "chown", "-R", "postgres:postgres", dir).CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("hand %s to the postgres user: %v: %s", dir, err, out)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	data := filepath.Join(dir, "data")
	if out, err := p.run(ctx, "initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	// 64 River clients hold up to 4 connections each, 64 slotpoller nodes a
	// few each.
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "+
		"-c full_page_writes=off -c max_connections=600 -c shared_preload_libraries=pg_stat_statements", p.port, dir)
	if out, err := p.run(ctx, "pg_ctl", "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "start"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start PostgreSQL: %v: %s", err, out)
	}
	return p, nil
}

func (p *privatePostgres) run(ctx context.Context, tool string, args ...string) ([]byte, error) {
	path := filepath.Join(p.bin, tool)
	if p.asRoot {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", path}, args...)...).CombinedOutput()
	}
	return exec.CommandContext(ctx, path, args...).CombinedOutput()
}

// DSN is the administrator's connection string.
func (p *privatePostgres) DSN() string {
	return "postgres://postgres@127.0.0.1:" + strconv.Itoa(p.port) + "/postgres?sslmode=disable"
}

// stop shuts the cluster down and removes its folder.
func (p *privatePostgres) stop() {
	_, _ = p.run(context.Background(), "pg_ctl", "-D", filepath.Join(p.dir, "data"), "-m", "immediate", "-w", "stop")
	os.RemoveAll(p.dir)
}
