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
	"strings"
	"time"

	"github.com/slotpoller/slotpoller/bench/benchkit"
)

// compare runs the same scenarios against River (the separate module in
// bench/river, run with `go run`) and against slotpoller, one after the
// other on one PostgreSQL server, and prints one table per scenario with
// both columns and the ratio.
func compare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("dsn", "", "administrator DSN of a PostgreSQL server that loads pg_stat_statements (default: start a private server)")
	riverDir := fs.String("river-dir", filepath.Join("bench", "river"), "folder of the River module")
	logLevel := fs.String("log", "warn", "slotpoller node log level on stderr: debug, info, warn, error or off")
	var p benchkit.Params
	p.Flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(*riverDir, "go.mod")); err != nil {
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

	// The machine may be shared: say how busy it was.
	load := "unknown"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(b))[:3], " ")
	}

	// River first, in its own process and module.
	riverArgs := append([]string{"run", ".", "-dsn", admin}, p.Args()...)
	cmd := exec.CommandContext(ctx, "go", riverArgs...)
	cmd.Dir = *riverDir
	var riverOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &riverOut, stderr
	fmt.Fprintf(stderr, "bench: (cd %s && go %s)\n", *riverDir, strings.Join(riverArgs, " "))
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("River side: %w", err)
	}
	results, err := benchkit.ReadJSONLines(&riverOut, func(line string) { fmt.Fprintln(stderr, line) })
	if err != nil || len(results) == 0 {
		return errors.Join(errors.New("River side printed no results"), err)
	}
	riverName := results[0].Side

	side := slotSide{name: "slotpoller " + gitCommit(ctx), logger: logger}
	emit := benchkit.JSONLines(stderr)
	err = benchkit.Run(ctx, srv, side, p, func(r benchkit.Result) {
		results = append(results, r)
		emit(r)
	}, func(f string, a ...any) { fmt.Fprintf(stderr, "bench: "+f+"\n", a...) })
	if err != nil {
		return err
	}

	fmt.Fprintf(stdout, "## River side by side\n\n")
	fmt.Fprintf(stdout, "- command: `%s`\n", strings.Join(append([]string{"go run ./bench compare"}, args...), " "))
	fmt.Fprintf(stdout, "- date: %s\n", time.Now().Format(time.RFC3339))
	fmt.Fprintf(stdout, "- machine: %s, %d CPUs, %s/%s, %s; load average at the start %s\n",
		cpuModel(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), load)
	fmt.Fprintf(stdout, "- database: PostgreSQL %s (%s), one fresh database per farm, statements counted by pg_stat_statements\n",
		srv.Version, map[bool]string{true: "private cluster, fsync off", false: "given by -dsn"}[*dsn == ""])
	fmt.Fprintf(stdout, "- ratio: better-is-higher (slotpoller ÷ River where higher is better, River ÷ slotpoller where lower is better): above 1× slotpoller does better\n\n")
	benchkit.Tables(stdout, []string{riverName, side.name}, results)
	return nil
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
