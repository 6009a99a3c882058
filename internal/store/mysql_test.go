package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// On MySQL the claims, renewals, results, reclaims and retention of six
// nodes at once take no lock InnoDB must break: the claim locks its rows
// with SKIP LOCKED and writes them by primary key, a batch of results locks
// its rows in id order, and every transaction runs at READ COMMITTED (no
// gap locks). The server's deadlock counter does not move, where a
// transient conflict would be retried out of sight; and every job is
// claimed once.
func TestMySQLConcurrentWorkTakesNoDeadlock(t *testing.T) {
	storetest.RequireMySQL(t)
	s, db := storetest.OpenDB(t, "mysql")
	ctx := context.Background()
	const total = 1200
	batch := make([]store.NewJob, total)
	for i := range batch {
		batch[i] = store.NewJob{Endpoint: "/m", Method: "POST", MaxAttempts: 3, IdempotencyKey: fmt.Sprint("k", i)}
	}
	_, err := s.JobInsertMany(ctx, batch)
	require.NoError(t, err)
	before := innodbDeadlocks(t, s.DB())

	var mu sync.Mutex
	seen := map[int64]string{}
	done := make(chan struct{})
	var side sync.WaitGroup
	side.Add(1)
	go func() { // retention and reclaims, as the nodes' turns run them
		defer side.Done()
		for {
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
		}
	}()
	asNodes(t, db, 6, func(other *store.Store, p int) {
		owner := fmt.Sprint("node-", p)
		for {
			cs, err := other.JobsClaim(ctx, owner, owner, 9, store.Lease(time.Minute))
			if err != nil {
				t.Error(err)
				return
			}
			if len(cs) == 0 {
				return
			}
			if _, err := other.JobsRenewLeases(ctx, owner, store.Lease(time.Minute)); err != nil {
				t.Error(err)
				return
			}
			fs := make([]store.Finish, len(cs))
			mu.Lock()
			for i, c := range cs {
				if prev, ok := seen[c.ID]; ok {
					t.Errorf("job %d claimed by %s and %s", c.ID, prev, owner)
				}
				seen[c.ID] = owner
				fs[i] = store.Finish{ID: c.ID, Token: c.Token, Outcome: store.Outcome{State: store.StateDone, Status: 200}}
			}
			mu.Unlock()
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
	require.Len(t, seen, total)
	require.Equal(t, before, innodbDeadlocks(t, s.DB()), "deadlocks InnoDB broke during the run")
}

// innodbDeadlocks is the server's count of deadlocks since it started:
// MariaDB's status variable, or MySQL's InnoDB metric.
func innodbDeadlocks(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var name string
	var n int64
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'").Scan(&name, &n); err == nil {
		return n
	}
	require.NoError(t, db.QueryRow("SELECT count FROM information_schema.INNODB_METRICS WHERE name = 'lock_deadlocks'").Scan(&n))
	return n
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
