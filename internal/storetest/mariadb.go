package storetest

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

// PrivateMariaDB starts a MariaDB server of the test's own, with
// serverArgs added to its command line (a server setting the test needs,
// such as --max-allowed-packet=2M, which a test must not set on the
// machine's server that other packages' tests share), and returns a new
// empty database on it. Like every MySQL test it runs only when
// SLOTPOLLER_TEST_MYSQL_DSN is set; it skips, saying why, when the MariaDB
// server's binaries are missing. The server is killed and its folder
// removed when the test ends.
func PrivateMariaDB(t testing.TB, serverArgs ...string) DB {
	t.Helper()
	RequireMySQL(t)
	server, install := mariadbBinary("mariadbd", "/usr/sbin/mariadbd"), mariadbBinary("mariadb-install-db", "/usr/bin/mariadb-install-db")
	if server == "" || install == "" {
		t.Skip("no MariaDB server binaries (mariadbd, mariadb-install-db): skipping the test that needs a MariaDB server of its own")
	}
	// Not t.TempDir: the socket's path must stay under the 108 bytes a
	// Unix socket's name may have, whatever the test's name.
	dir, err := os.MkdirTemp("", "slotpoller-mariadb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	var asRoot []string
	if os.Geteuid() == 0 {
		asRoot = []string{"--user=root"} // mariadbd refuses root unless told
	}
	out, err := exec.Command(install, append([]string{"--no-defaults", "--datadir=" + data,
		"--auth-root-authentication-method=normal", "--skip-test-db"}, asRoot...)...).CombinedOutput()
	if err != nil {
		// The binaries are here: a data folder that cannot be made is a
		// failure, not a reason to drop the test silently.
		t.Fatalf("mariadb-install-db failed (%v): %s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	args := append([]string{"--no-defaults", "--datadir=" + data, "--socket=" + filepath.Join(dir, "sock"),
		"--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--skip-name-resolve", "--skip-log-bin",
		"--innodb-flush-log-at-trx-commit=0", "--innodb-buffer-pool-size=64M", "--log-error=" + filepath.Join(dir, "log")}, asRoot...)
	cmd := exec.Command(server, append(args, serverArgs...)...)
	cmd.SysProcAttr = dieWithTheTest()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start a private MariaDB: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // its data is thrown away: no clean shutdown needed
		<-exited
	})
	root := fmt.Sprintf("root@tcp(127.0.0.1:%d)/", port)
	db, err := sql.Open("mysql", root+"?parseTime=true&loc=UTC")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for deadline := time.Now().Add(60 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "log"))
			t.Fatalf("the private MariaDB exited at its start: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the private MariaDB did not answer within 60 s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := db.Exec("CREATE DATABASE slotpoller CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		t.Fatalf("create the private MariaDB's database: %v", err)
	}
	return DB{Driver: "mysql", DSN: root + "slotpoller?parseTime=true&loc=UTC"}
}

// mariadbBinary is the path of a MariaDB program: on the PATH, else where
// Debian's mariadb-server package puts it (sbin is often off a user's
// PATH); "" when neither has it.
func mariadbBinary(name, fallback string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if _, err := os.Stat(fallback); err == nil {
		return fallback
	}
	return ""
}
