package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// On MySQL the work of six nodes at once takes no lock InnoDB must break:
// their claims, job and task lease renewals (each node renews beside its
// calls, as a node does), results, task assignments, calls and handoffs,
// stops that give back what is still held while results are recorded,
// and, beside them, reclaims, retention and an operator cancelling queues.
// The claim locks its rows with SKIP LOCKED and writes them by primary
// key, every other write of several rows reaches them by primary key in
// key order, and every transaction runs at READ COMMITTED (no gap locks).
// InnoDB reports no deadlock of the test's database, where a transient
// conflict would be retried out of sight; and no claim is made twice
// under one token.
func TestMySQLConcurrentWorkTakesNoDeadlock(t *testing.T) {
	storetest.RequireMySQL(t)
	s, db := storetest.OpenDB(t, "mysql")
	ctx := context.Background()
	const total, doomed, tasks, nodes = 1200, 4, 24, 6
	batch := make([]store.NewJob, total)
	for i := range batch {
		batch[i] = store.NewJob{Endpoint: "/m", Method: "POST", MaxAttempts: 3, IdempotencyKey: fmt.Sprint("k", i)}
		if i%4 == 3 { // a quarter in the queues the operator cancels, their ids among the others'
			batch[i].Queue = fmt.Sprint("doomed-", i%(4*doomed)/4)
		}
	}
	_, err := s.JobInsertMany(ctx, batch)
	require.NoError(t, err)
	for i := range tasks {
		require.NoError(t, s.TaskInsert(ctx, store.NewTask{Name: fmt.Sprint("t-", i), Endpoint: "/t", Method: "POST", Every: time.Second}))
	}
	for p := range nodes {
		checkIn(t, s, fmt.Sprint("node-", p), fmt.Sprint("inc-", p))
	}
	lease := store.Lease(time.Minute)
	deadlocks := watchDeadlocks(t, s.DB())

	var mu sync.Mutex
	seen := map[[2]int64]string{} // claims by id and token
	var requested, cancelled int64
	done := make(chan struct{})
	var side sync.WaitGroup
	side.Add(1)
	go func() { // retention and reclaims, as the nodes' turns run them, and an operator's cancels
		defer side.Done()
		for round := 0; ; round++ {
			select {
			case <-done:
				return
			default:
			}
			if _, err := s.JobsPrune(ctx, store.StateDone, 0, 50); err != nil {
				t.Error(err)
				return
			}
			if _, err := s.JobsReclaimExpired(ctx, time.Time{}); err != nil {
				t.Error(err)
				return
			}
			if _, err := s.TasksFinishOrphanedDeletes(ctx); err != nil {
				t.Error(err)
				return
			}
			r, c, err := s.QueueCancel(ctx, fmt.Sprint("doomed-", round%doomed), "operator", round%3 == 2)
			if err != nil {
				t.Error(err)
				return
			}
			requested, cancelled = requested+r, cancelled+c
		}
	}()
	asNodes(t, db, nodes, func(other *store.Store, p int) {
		owner, node := fmt.Sprint("inc-", p), fmt.Sprint("node-", p)
		stop := make(chan struct{})
		var renewer sync.WaitGroup
		renewer.Add(1)
		go func() { // the node's lease renewals, beside its calls
			defer renewer.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := other.JobsRenewLeases(ctx, owner, lease); err != nil {
					t.Error(err)
					return
				}
				if _, err := other.TasksRenew(ctx, owner, lease); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		defer func() {
			close(stop)
			renewer.Wait()
		}()
		for round := 0; ; round++ {
			cs, err := other.JobsClaim(ctx, owner, node, 9, lease)
			if err != nil {
				t.Error(err)
				return
			}
			if len(cs) == 0 {
				return
			}
			fs := make([]store.Finish, len(cs))
			mu.Lock()
			for i, c := range cs {
				if prev, ok := seen[[2]int64{c.ID, c.Token}]; ok {
					t.Errorf("job %d claimed under token %d by %s and %s", c.ID, c.Token, prev, owner)
				}
				seen[[2]int64{c.ID, c.Token}] = owner
				fs[i] = store.Finish{ID: c.ID, Token: c.Token, Outcome: store.Outcome{State: store.StateDone, Status: 200}}
			}
			mu.Unlock()
			if !tasksTurn(t, other, owner, node, fmt.Sprint("t-", (p*4+round)%tasks), lease) {
				return
			}
			if round%5 == 4 { // a stop: what is still held is given back while results are recorded
				if !stopNode(t, other, owner, fs[:len(fs)/2]) {
					return
				}
				continue
			}
			written, err := other.JobsFinish(ctx, fs)
			if err != nil {
				t.Error(err)
				return
			}
			for i, w := range written {
				if !w {
					t.Errorf("the result of job %d, held under its token, was not written", fs[i].ID)
				}
			}
		}
	})
	close(done)
	side.Wait()
	counts, err := s.JobCounts(ctx)
	require.NoError(t, err)
	require.Zero(t, counts[store.StateReady]+counts[store.StateRunning], "jobs left unfinished: %v", counts)
	t.Logf("%d claims; the operator asked %d running jobs to stop and cancelled %d waiting", len(seen), requested, cancelled)
	deadlocks.check(t)
}

// tasksTurn is what a node's task runner does between its calls: it takes
// a task if it is free, records a call of each task it holds, and hands
// one back when it holds more than two.
func tasksTurn(t *testing.T, s *store.Store, owner, node, name string, lease store.Hold) bool {
	ctx := context.Background()
	if _, err := s.TaskAssignIfUnowned(ctx, name, owner, node, lease, time.Hour); err != nil {
		t.Error(err)
		return false
	}
	held, err := s.TasksRenew(ctx, owner, lease)
	if err != nil {
		t.Error(err)
		return false
	}
	for _, h := range held {
		if _, err := s.TaskRecordCall(ctx, h.Name, h.Token, true, 200, ""); err != nil {
			t.Error(err)
			return false
		}
	}
	if len(held) > 2 {
		if _, err := s.TaskReleaseIfHeld(ctx, held[0].Name, held[0].Token); err != nil {
			t.Error(err)
			return false
		}
	}
	return true
}

// stopNode gives back every job and task the owner holds while the
// results fs are recorded beside it.
func stopNode(t *testing.T, s *store.Store, owner string, fs []store.Finish) bool {
	ctx := context.Background()
	var results sync.WaitGroup
	results.Add(1)
	go func() {
		defer results.Done()
		if _, err := s.JobsFinish(ctx, fs); err != nil {
			t.Error(err)
		}
	}()
	defer results.Wait()
	if _, err := s.JobsReleaseOwned(ctx, owner, "the node stops"); err != nil {
		t.Error(err)
		return false
	}
	if _, err := s.TasksReleaseAll(ctx, owner); err != nil {
		t.Error(err)
		return false
	}
	return true
}

// deadlockWatch counts the deadlocks InnoDB breaks in one database while a
// test runs. The server counts every database's (Innodb_deadlocks), other
// packages' tests included, which run at once on the same server in CI,
// and it keeps the report of the latest deadlock alone. So the watch reads
// the counter every few milliseconds and, when it moved, the latest
// report, which names each table it locked as `database`.`table`: a report
// that names the test's database is a deadlock of the test's. Deadlocks
// that come together (within a read of the counter) leave one report: a
// test that deadlocks at all shows at least one of its own.
type deadlockWatch struct {
	database string
	stop     chan struct{}
	ended    chan struct{}
	counted  int64    // the server's deadlocks during the watch
	ours     []string // the reports that name the database
	others   int      // the reports that do not
}

func watchDeadlocks(t *testing.T, db *sql.DB) *deadlockWatch {
	t.Helper()
	w := &deadlockWatch{stop: make(chan struct{}), ended: make(chan struct{})}
	require.NoError(t, db.QueryRow("SELECT DATABASE()").Scan(&w.database))
	last := innodbDeadlocks(t, db)
	report, err := latestDeadlock(db)
	require.NoError(t, err, "read InnoDB's latest deadlock (the login needs PROCESS)")
	go func() {
		defer close(w.ended)
		for stopping := false; !stopping; {
			select {
			case <-w.stop:
				stopping = true // a last read, after the work ended
			case <-time.After(5 * time.Millisecond):
			}
			n, err := deadlockCount(db)
			if err != nil {
				t.Error(err)
				return
			}
			if n == last {
				continue
			}
			w.counted, last = w.counted+n-last, n
			r, err := latestDeadlock(db)
			if err != nil {
				t.Error(err)
				return
			}
			if r != report {
				report = r
				if strings.Contains(r, "`"+w.database+"`.") {
					w.ours = append(w.ours, r)
				} else {
					w.others++
				}
			}
		}
	}()
	return w
}

// check ends the watch and fails the test on a deadlock of its database.
func (w *deadlockWatch) check(t *testing.T) {
	t.Helper()
	close(w.stop)
	<-w.ended
	t.Logf("InnoDB broke %d deadlocks on the server during the run; reports read: %d of this test's database (%s), %d of others'",
		w.counted, len(w.ours), w.database, w.others)
	for _, r := range w.ours {
		t.Errorf("InnoDB broke a deadlock of the test's tables:\n%s", r)
	}
}

// latestDeadlock is the LATEST DETECTED DEADLOCK section of InnoDB's
// status, "" while the server has seen none.
func latestDeadlock(db *sql.DB) (string, error) {
	var typ, name, status string
	if err := db.QueryRow("SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status); err != nil {
		return "", err
	}
	_, r, ok := strings.Cut(status, "LATEST DETECTED DEADLOCK\n")
	if !ok {
		return "", nil
	}
	r, _, _ = strings.Cut(r, "\nTRANSACTIONS\n")
	return r, nil
}

// innodbDeadlocks is the server's count of deadlocks since it started.
func innodbDeadlocks(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	n, err := deadlockCount(db)
	require.NoError(t, err)
	return n
}

// deadlockCount is MariaDB's status variable, or MySQL's InnoDB metric.
func deadlockCount(db *sql.DB) (int64, error) {
	var name string
	var n int64
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'").Scan(&name, &n); err == nil {
		return n, nil
	}
	err := db.QueryRow("SELECT count FROM information_schema.INNODB_METRICS WHERE name = 'lock_deadlocks'").Scan(&n)
	return n, err
}

// Deadlock victims (1213), lock wait timeouts (1205) and a NOWAIT lock
// not granted (3572, MySQL) are sent again with backoff; other errors are
// not. No server: the errors are the driver's, as a server sends them.
func TestMySQLRetriesDeadlockVictims(t *testing.T) {
	failures := []error{&mysql.MySQLError{Number: 1213}, &mysql.MySQLError{Number: 1205}, &mysql.MySQLError{Number: 3572}}
	s, tr := storetest.NewTrace(t, store.MySQL{}, failFirst(&failures))
	ok, err := s.JobRenewLeaseIfRunning(context.Background(), 1, 1, time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, tr.Calls(), 4)

	for _, number := range []uint16{1062, 1146} { // a taken unique key, a missing table: not transient
		failures = []error{&mysql.MySQLError{Number: number}}
		_, err = s.JobRenewLeaseIfRunning(context.Background(), 1, 1, time.Second)
		require.Error(t, err, "error %d", number)
		require.Len(t, tr.Calls(), 1, "error %d is not sent again", number)
	}
}

// A node's lock on MySQL is lost when its connection ends on the server's
// side (a restart, a KILL): the node hears of it (Lost), and its row is no
// longer live.
func TestMySQLNodeLockLostWithItsConnection(t *testing.T) {
	storetest.RequireMySQL(t)
	s, _ := storetest.Open(t, "mysql")
	ctx := context.Background()
	lock, ok, err := s.NodeLockTake(ctx, 77)
	require.NoError(t, err)
	require.True(t, ok)
	defer lock.Release()
	a := store.NodeState{Name: "node-a", Incarnation: "inc-a", Capacity: 4, LiveFor: time.Hour, LockKey: lock.Key}
	require.NoError(t, s.NodeCheckIn(ctx, a, time.Second))
	nodes, _, err := s.Nodes(ctx, time.Second)
	require.NoError(t, err)
	require.True(t, nodes[0].Live)

	var id int64
	require.Eventually(t, func() bool {
		return s.DB().QueryRowContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND INFO LIKE 'DO SLEEP%'").Scan(&id) == nil
	}, 5*time.Second, 10*time.Millisecond, "the lock's connection waits in SLEEP")
	_, err = s.DB().ExecContext(ctx, fmt.Sprint("KILL ", id))
	require.NoError(t, err)
	select {
	case <-lock.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the node did not hear that its lock's connection ended")
	}
	// The client hears the connection end before the server's thread has
	// finished with it and let the lock go (a KILL is asynchronous; under
	// load that was seen to take more than the next statement's time).
	require.Eventually(t, func() bool {
		nodes, _, err = s.Nodes(ctx, time.Second)
		require.NoError(t, err)
		return !nodes[0].Live
	}, 5*time.Second, 10*time.Millisecond, "a node whose lock is gone is not live, whatever it promised")
}

// A claim on MySQL is one transaction of the statements it needs: the
// pool's connections are at READ COMMITTED from the start, so no
// transaction sets its level again (a sixth statement per claim).
func TestMySQLClaimSetsNoIsolationLevel(t *testing.T) {
	storetest.RequireMySQL(t)
	s, _ := storetest.Open(t, "mysql")
	ctx := context.Background()
	_, err := s.JobInsertMany(ctx, []store.NewJob{{Endpoint: "/a", Method: "POST", MaxAttempts: 1}, {Endpoint: "/b", Method: "POST", MaxAttempts: 1}})
	require.NoError(t, err)
	s.DB().SetMaxOpenConns(1) // one session, whose counters the test reads
	sets := func() int64 {
		var name string
		var n int64
		require.NoError(t, s.DB().QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Com_set_option'").Scan(&name, &n))
		return n
	}
	before := sets()
	cs, err := s.JobsClaim(ctx, "inc-a", "node-a", 2, store.Lease(time.Minute))
	require.NoError(t, err)
	require.Len(t, cs, 2)
	require.Equal(t, before, sets(), "SET statements sent by a claim")
	var level string
	if s.DB().QueryRowContext(ctx, "SELECT @@session.transaction_isolation").Scan(&level) != nil {
		require.NoError(t, s.DB().QueryRowContext(ctx, "SELECT @@session.tx_isolation").Scan(&level))
	}
	require.Equal(t, "READ-COMMITTED", level)
}

// The database clock on MySQL is UTC_TIMESTAMP(6): a connection in another
// time zone (an application's, whose enqueue runs in its own transaction)
// reads the same now and writes the same due time as the node's.
func TestMySQLTimeIgnoresTheSessionTimeZone(t *testing.T) {
	storetest.RequireMySQL(t)
	s, _ := storetest.Open(t, "mysql")
	ctx := context.Background()
	c, err := s.DB().Conn(ctx)
	require.NoError(t, err)
	defer func() {
		_, _ = c.ExecContext(ctx, "SET time_zone = '+00:00'") // back to the pool as it came
		c.Close()
	}()
	for _, zone := range []string{"+09:00", "-07:00"} {
		_, err = c.ExecContext(ctx, "SET time_zone = '"+zone+"'")
		require.NoError(t, err)
		tx, err := c.BeginTx(ctx, nil)
		require.NoError(t, err)
		app := s.WithTx(tx)
		appNow, err := app.Now(ctx)
		require.NoError(t, err)
		nodeNow, err := s.Now(ctx)
		require.NoError(t, err)
		require.WithinDuration(t, nodeNow, appNow, 2*time.Second, "now in %s", zone)
		now, err := app.JobInsert(ctx, store.NewJob{Endpoint: "/now", Method: "POST", MaxAttempts: 1})
		require.NoError(t, err)
		later, err := app.JobInsert(ctx, store.NewJob{Endpoint: "/later", Method: "POST", MaxAttempts: 1, Delay: time.Hour})
		require.NoError(t, err)
		require.NoError(t, tx.Commit())

		cs, err := s.JobsClaim(ctx, "inc-a", "node-a", 10, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, cs, 1, "in %s: the job due now is due, the one due in an hour is not", zone)
		require.Equal(t, now, cs[0].ID)
		j, err := s.JobGet(ctx, later)
		require.NoError(t, err)
		require.WithinDuration(t, nodeNow.Add(time.Hour), j.RunAt, 5*time.Second, "run time written in %s", zone)
		_, err = s.DB().ExecContext(ctx, "DELETE FROM slotpoller_jobs")
		require.NoError(t, err)
	}
}
