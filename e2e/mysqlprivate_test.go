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
	t      *testing.T
	dir    string
	port   int
	clock  *fakeClock // when set, the server's clock the test steps
	env    []string   // of the server process, besides the test's
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
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
		m.clock = newFakeClock(t, dir)
		m.env = m.clock.env()
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
// checks that UTC_TIMESTAMP(6) moved there.
func (m *privateMariaDB) SetClockOffset(offset time.Duration) {
	m.t.Helper()
	db := m.open("")
	defer db.Close()
	m.clock.step(m.t, offset, func(ctx context.Context) (now time.Time, err error) {
		err = db.QueryRowContext(ctx, "SELECT UTC_TIMESTAMP(6)").Scan(&now)
		return now, err
	})
}
