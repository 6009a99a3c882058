package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/slotpoller/slotpoller/bench/benchkit"
	"github.com/slotpoller/slotpoller/driver/mysql"
)

// privateMariaDB is a throwaway MariaDB server with performance_schema on,
// so that the farm's statements can be counted without touching the
// machine's server, and without anyone else's statements in the count.
type privateMariaDB struct {
	dir    string
	port   int
	cmd    *exec.Cmd
	exited chan struct{} // closed when mariadbd has exited
}

// startPrivateMariaDB initialises a data folder in a temporary folder and
// starts mariadbd on it, on a free port and a socket of its own, with
// root's login over the socket without a password. Durability is off, as
// on the private PostgreSQL (fsync off): the log is written and flushed
// about once a second, not at each commit.
func startPrivateMariaDB(ctx context.Context) (*privateMariaDB, error) {
	mariadbd, err := exec.LookPath("mariadbd")
	if err != nil {
		if mariadbd, err = exec.LookPath("/usr/sbin/mariadbd"); err != nil {
			return nil, errors.New("no mariadbd on this machine (PATH, /usr/sbin): the MariaDB side needs a MariaDB server's binaries")
		}
	}
	dir, err := os.MkdirTemp("", "slotpoller-bench-mariadb-")
	if err != nil {
		return nil, err
	}
	m := &privateMariaDB{dir: dir, exited: make(chan struct{})}
	data := filepath.Join(dir, "data")
	install := []string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal", "--skip-test-db"}
	run := []string{"--no-defaults", "--datadir=" + data}
	if os.Geteuid() == 0 {
		// mariadbd refuses to run as root unless told to.
		install = append(install, "--user=root")
		run = append(run, "--user=root")
	}
	if out, err := exec.CommandContext(ctx, "mariadb-install-db", install...).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("mariadb-install-db: %v: %s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	m.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	run = append(run,
		"--port="+strconv.Itoa(m.port), "--bind-address=127.0.0.1", "--socket="+m.socket(),
		"--pid-file="+filepath.Join(dir, "mariadbd.pid"), "--log-error="+filepath.Join(dir, "error.log"),
		// Host names are never looked up (each connection would wait on
		// the resolver): logins are user@'%'.
		"--skip-name-resolve",
		"--performance-schema=ON",
		"--skip-log-bin", "--innodb-flush-log-at-trx-commit=0", "--innodb-doublewrite=0",
		// 4 nodes × 1,000 calls, 64 idle nodes: a few connections each.
		"--max-connections=2000")
	// Not tied to ctx: stop shuts it down cleanly however the run ends.
	m.cmd = exec.Command(mariadbd, run...)
	if err := m.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start mariadbd: %w", err)
	}
	go func() {
		_ = m.cmd.Wait()
		close(m.exited)
	}()
	db, err := m.open("root", "")
	if err != nil {
		m.stop()
		return nil, err
	}
	defer db.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		perr := db.PingContext(ctx)
		if perr == nil {
			return m, nil
		}
		select {
		case <-m.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			m.stop()
			return nil, fmt.Errorf("mariadbd exited at start: %s", lastLines(string(log), 10))
		default:
		}
		if time.Now().After(deadline) {
			m.stop()
			return nil, fmt.Errorf("mariadbd not ready after 60s: %w", perr)
		}
		if err := benchkit.Sleep(ctx, 100*time.Millisecond); err != nil {
			m.stop()
			return nil, err
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (m *privateMariaDB) socket() string { return filepath.Join(m.dir, "mariadbd.sock") }

// open connects through slotpoller's own MySQL driver (the settings every
// node's connection has), as user, to database db ("" for none): root
// over the socket, any other login over TCP.
func (m *privateMariaDB) open(user, db string) (*sql.DB, error) {
	return mysql.Driver().Open(m.dsn(user, db))
}

func (m *privateMariaDB) dsn(user, db string) string {
	addr := "tcp(127.0.0.1:" + strconv.Itoa(m.port) + ")"
	if user == "root" {
		addr = "unix(" + m.socket() + ")"
	}
	return user + "@" + addr + "/" + db + "?parseTime=true&loc=UTC"
}

// stop shuts the server down (SIGTERM, then SIGKILL after 30 s) and
// removes its folder.
func (m *privateMariaDB) stop() {
	if m.cmd != nil && m.cmd.Process != nil {
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.exited:
		case <-time.After(30 * time.Second):
			_ = m.cmd.Process.Kill()
			<-m.exited
		}
	}
	os.RemoveAll(m.dir)
}

// mariaServer is the private MariaDB as the scenarios' database server
// (benchkit.DBServer): a fresh database per farm, the farm's statements
// counted by performance_schema under the farm's login.
type mariaServer struct {
	m       *privateMariaDB
	admin   *sql.DB
	Version string
	base    commandCounts // the farm login's counts at the last reset
}

func openMariaServer(ctx context.Context, m *privateMariaDB) (*mariaServer, error) {
	admin, err := m.open("root", "")
	if err != nil {
		return nil, err
	}
	admin.SetMaxOpenConns(2)
	s := &mariaServer{m: m, admin: admin}
	if err := admin.QueryRowContext(ctx, "SELECT VERSION()").Scan(&s.Version); err != nil {
		admin.Close()
		return nil, fmt.Errorf("connect to MariaDB as root: %w", err)
	}
	s.Version, _, _ = strings.Cut(s.Version, "-")
	var ps string
	if err := admin.QueryRowContext(ctx, "SELECT @@performance_schema").Scan(&ps); err != nil || ps != "1" {
		admin.Close()
		return nil, fmt.Errorf("MariaDB's performance_schema is off (%q, %v): statements cannot be counted", ps, err)
	}
	for _, role := range []string{benchkit.FarmRole, benchkit.FeederRole} {
		for _, q := range []string{
			"CREATE USER IF NOT EXISTS '" + role + "'@'%'",
			"GRANT ALL PRIVILEGES ON *.* TO '" + role + "'@'%'",
		} {
			if _, err := admin.ExecContext(ctx, q); err != nil {
				admin.Close()
				return nil, fmt.Errorf("prepare the server (%s): %w", q, err)
			}
		}
	}
	return s, nil
}

func (s *mariaServer) close() { s.admin.Close() }

func (s *mariaServer) FreshDatabase(ctx context.Context) (*benchkit.Database, error) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "bench_" + hex.EncodeToString(b)
	if _, err := s.admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	return &benchkit.Database{Server: s, Driver: "mysql", Name: name,
		FarmDSN: s.m.dsn(benchkit.FarmRole, name), FeederDSN: s.m.dsn(benchkit.FeederRole, name)}, nil
}

// DropDatabase ends the connections still on the database first: a node's
// lock connection waits in DO SLEEP until it is killed or its client goes.
func (s *mariaServer) DropDatabase(ctx context.Context, name string) error {
	rows, err := s.admin.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()", name)
	if err != nil {
		return err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		// It may have ended in between.
		_, _ = s.admin.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id, 10))
	}
	_, err = s.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name)
	return err
}

// ResetStatements notes the farm login's counts; the figures are read as
// differences from them (a TRUNCATE of the summary would do too, but
// reading twice keeps the reset out of the server's own bookkeeping).
func (s *mariaServer) ResetStatements(ctx context.Context) error {
	c, err := s.farmCounts(ctx)
	if err != nil {
		return err
	}
	s.base = c
	return nil
}

func (s *mariaServer) FarmStatements(ctx context.Context, _ *benchkit.Database) (int64, error) {
	c, err := s.farmCounts(ctx)
	if err != nil {
		return 0, err
	}
	return c.statements - s.base.statements, nil
}

func (s *mariaServer) FarmOtherCommands(ctx context.Context, _ *benchkit.Database) (map[string]int64, error) {
	c, err := s.farmCounts(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{
		"prepares":                      c.prepares - s.base.prepares,
		"closes of prepared statements": c.closes - s.base.closes,
	}
	// Rare (a ping, a connection's quit): a row only when there are some.
	if n := c.other - s.base.other; n > 0 {
		out["other protocol commands"] = n
	}
	return out, nil
}

func (s *mariaServer) CPU() (benchkit.CPU, error) {
	return benchkit.ReadProcessCPU(s.m.cmd.Process.Pid)
}

// farmCounts reads the farm login's statement events, summed over its
// connections, ended and alive, whatever the database: one farm runs at a
// time on the private server. The bench's own statements run as root or
// as the feeder and are not among them.
func (s *mariaServer) farmCounts(ctx context.Context) (commandCounts, error) {
	rows, err := s.admin.QueryContext(ctx, `SELECT EVENT_NAME, COUNT_STAR
		FROM performance_schema.events_statements_summary_by_user_by_event_name
		WHERE USER = ? AND COUNT_STAR > 0`, benchkit.FarmRole)
	if err != nil {
		return commandCounts{}, fmt.Errorf("read performance_schema: %w", err)
	}
	defer rows.Close()
	events := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return commandCounts{}, err
		}
		events[name] += n
	}
	if err := rows.Err(); err != nil {
		return commandCounts{}, err
	}
	return classifyStatementEvents(events), nil
}

// commandCounts are a login's round trips to MariaDB, sorted as the
// comparison with PostgreSQL needs them.
type commandCounts struct {
	// statements executed: what pg_stat_statements counts on PostgreSQL
	// (pgx prepares each statement once per connection and caches it, so
	// there too an execution is one count).
	statements int64
	// prepares and closes of server-side prepared statements:
	// go-sql-driver/mysql, with interpolateParams off (as slotpoller
	// requires), prepares a statement with arguments, executes it and
	// closes it each time, three round trips (the close needs no answer).
	prepares, closes int64
	// other commands: quit, ping, change of database, reset.
	other int64
}

// classifyStatementEvents sorts performance_schema's statement event
// counts (EVENT_NAME, COUNT_STAR):
//   - statement/sql/…: a statement sent as text (COM_QUERY, classified by
//     the server once parsed): one statement;
//   - statement/com/Execute: one execution of a prepared statement
//     (COM_STMT_EXECUTE; MariaDB counts it under this name only, not again
//     as statement/sql/…): one statement;
//   - statement/com/Query: a text statement the server did not classify
//     (one that did not parse): one statement;
//   - statement/com/Prepare and statement/com/Close stmt: the prepared
//     statement's own round trips, counted apart;
//   - statement/sp/…: the statements inside a stored routine, already
//     counted as the CALL: left out, as pg_stat_statements leaves nested
//     statements out by default;
//   - any other statement/com/…: other protocol commands.
func classifyStatementEvents(events map[string]int64) commandCounts {
	var c commandCounts
	for name, n := range events {
		switch {
		case strings.HasPrefix(name, "statement/sql/"),
			name == "statement/com/Execute", name == "statement/com/Query":
			c.statements += n
		case name == "statement/com/Prepare":
			c.prepares += n
		case name == "statement/com/Close stmt":
			c.closes += n
		case strings.HasPrefix(name, "statement/com/"):
			c.other += n
		}
	}
	return c
}
