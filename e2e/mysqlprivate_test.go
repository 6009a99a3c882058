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
	"syscall"
	"testing"
	"time"
)

// privateMariaDB is a MariaDB server of the test's own, so that the chaos
// suite can restart it, or step its clock, without disturbing the tests
// of other packages that share the machine's server.
type privateMariaDB struct {
	t    *testing.T
	dir  string
	port int
	// clockFile, when set, holds the offset of the server's clock, read
	// afresh by libfaketime on every clock reading (FAKETIME_NO_CACHE):
	// writing it steps UTC_TIMESTAMP(6) on every connection at once.
	clockFile string
	env       []string // of the server process, besides the test's
	cmd       *exec.Cmd
	exited    chan struct{} // closed when cmd has been waited for
}

// mariadbServer and mariadbInstall are where Debian's mariadb-server
// package puts the server and its data folder initialiser.
const (
	mariadbServer  = "/usr/sbin/mariadbd"
	mariadbInstall = "/usr/bin/mariadb-install-db"
)

// startPrivateMariaDB initialises and starts a throwaway server, or skips
// the test saying why it cannot.
func startPrivateMariaDB(t *testing.T) *privateMariaDB {
	return startPrivateMariaDBWith(t, false)
}

// startPrivateMariaDBWithFakeClock starts a throwaway server whose clock
// the test steps (SetClockOffset), or skips the test saying why it cannot.
// CI installs libfaketime (.ci/run), so the test runs there.
func startPrivateMariaDBWithFakeClock(t *testing.T) *privateMariaDB {
	if _, err := os.Stat(libfaketime); err != nil {
		t.Skipf("no libfaketime (%s: %v): skipping the test that steps the database clock; apt-get install faketime libfaketime", libfaketime, err)
	}
	return startPrivateMariaDBWith(t, true)
}

func startPrivateMariaDBWith(t *testing.T, fakeClock bool) *privateMariaDB {
	t.Helper()
	for _, bin := range []string{mariadbServer, mariadbInstall} {
		if _, err := os.Stat(bin); err != nil {
			t.Skipf("no MariaDB server binaries (%v): skipping the test that needs a MariaDB server of its own", err)
		}
	}
	dir, err := os.MkdirTemp("", "slotpoller-mariadb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	m := &privateMariaDB{t: t, dir: dir}
	if fakeClock {
		m.clockFile = filepath.Join(dir, "clock-offset")
		if err := os.WriteFile(m.clockFile, []byte("+0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		// Only wall-clock readings are offset: the server's timeouts and
		// sleeps run on its monotonic clock, as a real clock step leaves it.
		m.env = []string{"LD_PRELOAD=" + libfaketime, "FAKETIME_TIMESTAMP_FILE=" + m.clockFile,
			"FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1"}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	install := exec.Command(mariadbInstall, append([]string{"--no-defaults", "--datadir=" + m.data(),
		"--auth-root-authentication-method=normal", "--skip-test-db"}, m.asUser()...)...)
	if out, err := install.CombinedOutput(); err != nil {
		// The server binaries are here: a data folder that cannot be made
		// is a failure, not a reason to drop the test silently.
		t.Fatalf("mariadb-install-db failed (%v): %s", err, out)
	}
	m.start()
	t.Cleanup(m.kill)
	db := m.open("")
	defer db.Close()
	if _, err := db.Exec("CREATE DATABASE slotpoller CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		t.Fatalf("create the private MariaDB's database: %v", err)
	}
	return m
}

func (m *privateMariaDB) data() string { return filepath.Join(m.dir, "data") }

// asUser is the server's --user when the test runs as root: mariadbd
// refuses root unless told.
func (m *privateMariaDB) asUser() []string {
	if os.Geteuid() == 0 {
		return []string{"--user=root"}
	}
	return nil
}

// start runs the server and waits until it answers.
func (m *privateMariaDB) start() {
	m.t.Helper()
	args := append([]string{"--no-defaults", "--datadir=" + m.data(), "--socket=" + filepath.Join(m.dir, "sock"),
		"--port=" + strconv.Itoa(m.port), "--bind-address=127.0.0.1", "--skip-log-bin", "--innodb-flush-log-at-trx-commit=0",
		"--innodb-buffer-pool-size=64M", "--max-connections=500", "--log-error=" + filepath.Join(m.dir, "log")}, m.asUser()...)
	m.cmd = exec.Command(mariadbServer, args...)
	m.cmd.Env = append(os.Environ(), m.env...)
	m.cmd.SysProcAttr = dieWithTheTest()
	if err := m.cmd.Start(); err != nil {
		m.t.Fatalf("start private MariaDB: %v", err)
	}
	exited := make(chan struct{})
	m.exited = exited
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(exited) }(m.cmd)
	db := m.open("")
	defer db.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(m.dir, "log"))
			m.t.Fatalf("private MariaDB exited at its start: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("private MariaDB did not answer within 60s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (m *privateMariaDB) open(database string) *sql.DB {
	m.t.Helper()
	db, err := sql.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s?parseTime=true&loc=UTC", m.port, database))
	if err != nil {
		m.t.Fatal(err)
	}
	return db
}

// stop ends the server (SIGTERM: connections are cut, InnoDB shuts down)
// and waits for it.
func (m *privateMariaDB) stop() {
	m.t.Helper()
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(60 * time.Second):
		m.t.Fatal("private MariaDB did not stop within 60s of SIGTERM")
	}
}

func (m *privateMariaDB) kill() {
	if m.cmd != nil && m.cmd.Process != nil {
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
}

// DSN is the connection string of the private server's database.
func (m *privateMariaDB) DSN() string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/slotpoller?parseTime=true&loc=UTC", m.port)
}

// Restart stops the server and starts it again.
func (m *privateMariaDB) Restart() {
	m.t.Helper()
	m.stop()
	m.start()
}

// Name names the server in a fault's description.
func (m *privateMariaDB) Name() string { return "MariaDB" }

// SetClockOffset steps the server's clock to real time + offset, and
// checks that UTC_TIMESTAMP(6) moved there: a step that did not happen
// must not pass for one the farm rode out.
func (m *privateMariaDB) SetClockOffset(offset time.Duration) {
	m.t.Helper()
	if m.clockFile == "" {
		m.t.Fatal("SetClockOffset: the private MariaDB was not started with a fake clock")
	}
	if err := os.WriteFile(m.clockFile, []byte(fmt.Sprintf("%+d\n", int64(offset/time.Second))), 0o644); err != nil {
		m.t.Fatal(err)
	}
	db := m.open("")
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var now time.Time
	t0 := time.Now()
	if err := db.QueryRowContext(ctx, "SELECT UTC_TIMESTAMP(6)").Scan(&now); err != nil {
		m.t.Fatalf("read the stepped clock: %v", err)
	}
	if got := now.Sub(t0); got < offset-5*time.Second || got > offset+5*time.Second {
		m.t.Fatalf("the database clock did not step: it reads real time %+v, want %+v", got.Round(time.Millisecond), offset)
	}
}
