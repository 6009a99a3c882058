//go:build unix

package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// privatePostgres is a PostgreSQL server of the test's own, so that the
// chaos suite can restart it without disturbing the tests of other packages
// that share the machine's server.
type privatePostgres struct {
	t      *testing.T
	bin    string
	dir    string
	port   int
	asRoot bool
	clock  *fakeClock // when set, the server's clock the test steps
	env    []string   // of every server tool, before its arguments (through env)
}

// startPrivatePostgres initialises and starts a throwaway cluster, or skips
// the test saying why it cannot.
func startPrivatePostgres(t *testing.T) *privatePostgres {
	return startPrivatePostgresWith(t, false)
}

// startPrivatePostgresWithFakeClock starts a throwaway cluster whose clock
// the test steps (SetClockOffset), or skips the test saying why it cannot.
// CI installs libfaketime (.ci/run), so the test runs there.
func startPrivatePostgresWithFakeClock(t *testing.T) *privatePostgres {
	return startPrivatePostgresWith(t, true)
}

func startPrivatePostgresWith(t *testing.T, fakeClock bool) *privatePostgres {
	t.Helper()
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(matches) == 0 {
		t.Skip("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin): skipping the test that needs a PostgreSQL server of its own")
	}
	p := &privatePostgres{t: t, bin: filepath.Dir(matches[len(matches)-1]), asRoot: os.Geteuid() == 0}
	dir, err := os.MkdirTemp("", "slotpoller-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p.dir = dir
	t.Cleanup(func() { os.RemoveAll(dir) })
	if fakeClock {
		p.clock = newFakeClock(t, dir)
		p.env = p.clock.env()
	}
	if p.asRoot {
		// PostgreSQL refuses to run as root.
		if out, err := exec.Command("chown", "-R", "postgres:postgres", dir).CombinedOutput(); err != nil {
			t.Fatalf("cannot hand a data folder to the postgres user (%v: %s)", err, out)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	data := filepath.Join(dir, "data")
	if out, err := p.run("initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"); err != nil {
		// The server binaries are here: a cluster that cannot be made is a
		// failure, not a reason to drop the database-restart fault silently.
		t.Fatalf("initdb failed (%v): %s", err, out)
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200", p.port, dir)
	if out, err := p.run("pg_ctl", "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "start"); err != nil {
		t.Fatalf("start private PostgreSQL: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = p.run("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop") })
	return p
}

func (p *privatePostgres) run(tool string, args ...string) ([]byte, error) {
	argv := append([]string{filepath.Join(p.bin, tool)}, args...)
	if len(p.env) > 0 {
		// Through env, so that runuser's reset of the environment cannot
		// drop it; the postmaster passes it on to every backend it forks.
		argv = append(append([]string{"env"}, p.env...), argv...)
	}
	if p.asRoot {
		argv = append([]string{"runuser", "-u", "postgres", "--"}, argv...)
	}
	return exec.Command(argv[0], argv[1:]...).CombinedOutput()
}

// DSN is the connection string of the private server.
func (p *privatePostgres) DSN() string {
	return "postgres://postgres@127.0.0.1:" + strconv.Itoa(p.port) + "/postgres?sslmode=disable"
}

// Restart stops the server (fast: connections are cut) and starts it again.
func (p *privatePostgres) Restart() {
	// -l again: without a log file the server would hold this command's
	// output open.
	if out, err := p.run("pg_ctl", "-D", filepath.Join(p.dir, "data"), "-l", filepath.Join(p.dir, "log"), "-m", "fast", "-w", "restart"); err != nil {
		p.t.Fatalf("restart private PostgreSQL: %v: %s", err, out)
	}
}

// Name names the server in a fault's description.
func (p *privatePostgres) Name() string { return "PostgreSQL" }

// SetClockOffset steps the server's clock to real time + offset, and
// checks that the server's clock_timestamp() moved there.
func (p *privatePostgres) SetClockOffset(offset time.Duration) {
	p.t.Helper()
	db, err := sql.Open("pgx", p.DSN())
	if err != nil {
		p.t.Fatal(err)
	}
	defer db.Close()
	p.clock.step(p.t, offset, func(ctx context.Context) (now time.Time, err error) {
		err = db.QueryRowContext(ctx, "SELECT clock_timestamp()").Scan(&now)
		return now, err
	})
}
