package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/schema"
	"github.com/stretchr/testify/require"
)

// The conformance suite: the same operations, the same expectations, on
// every database.

func TestDatabaseClock(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		a, err := s.Now(ctx)
		require.NoError(t, err)
		b, err := s.Now(ctx)
		require.NoError(t, err)
		require.False(t, b.Before(a), "database clock went back: %v then %v", a, b)
		require.Equal(t, time.UTC, a.Location())
		// Sanity: the database clock is some time after this code was written.
		require.True(t, a.After(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)), "database time %v", a)
	})
}

func TestNodeRegistry(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		a := store.NodeState{Name: "node-a", Incarnation: "inc-1", Capacity: 4, Free: 4, Offset: 1500 * time.Microsecond, OffsetError: 200 * time.Microsecond}
		require.NoError(t, s.NodeCheckIn(ctx, a, time.Hour))
		require.NoError(t, s.NodeCheckIn(ctx, store.NodeState{Name: "node-b", Incarnation: "inc-2", Capacity: 2, Free: 2}, time.Hour))

		nodes, now, err := s.Nodes(ctx, time.Hour)
		require.NoError(t, err)
		require.False(t, now.IsZero())
		require.Len(t, nodes, 2)
		require.Equal(t, "node-a", nodes[0].Name)
		require.True(t, nodes[0].Live)
		require.Equal(t, 1500*time.Microsecond, nodes[0].Offset)
		require.Equal(t, 4, nodes[0].Capacity)

		// A TTL of zero makes every heartbeat too old: liveness is judged by
		// the database clock, not by anything the node sends.
		nodes, _, err = s.Nodes(ctx, 0)
		require.NoError(t, err)
		require.False(t, nodes[0].Live)

		a.Free = 1
		ok, err := s.NodeHeartbeat(ctx, a)
		require.NoError(t, err)
		require.True(t, ok)

		// A new process under the same name may not take the row of a live
		// incarnation: it is told who holds it and since when.
		err = s.NodeCheckIn(ctx, store.NodeState{Name: "node-a", Incarnation: "inc-3", Capacity: 4, Free: 4}, time.Hour)
		var inUse *store.NodeNameInUse
		require.ErrorAs(t, err, &inUse)
		require.Equal(t, "inc-1", inUse.Incarnation)
		require.Less(t, inUse.Age, time.Minute)
		require.ErrorContains(t, err, `"node-a"`)
		require.NoError(t, s.NodeCheckIn(ctx, a, time.Hour), "checking in again under its own incarnation is no conflict")

		// Once its heartbeat is older than the TTL, the new process takes the
		// row over; the old incarnation's heartbeats are refused.
		require.NoError(t, s.NodeCheckIn(ctx, store.NodeState{Name: "node-a", Incarnation: "inc-3", Capacity: 4, Free: 4}, 0))
		ok, err = s.NodeHeartbeat(ctx, a)
		require.NoError(t, err)
		require.False(t, ok, "old incarnation's heartbeat must not count")

		require.NoError(t, s.NodeLeave(ctx, "node-b", "inc-2"))
		nodes, _, err = s.Nodes(ctx, time.Hour)
		require.NoError(t, err)
		require.Equal(t, "left", nodes[1].State)
		require.False(t, nodes[1].Live, "a node that left is not live")

		require.NoError(t, s.NodeSignalBacklog(ctx, "node-a", "inc-3", time.Hour))
		nodes, _, err = s.Nodes(ctx, time.Hour)
		require.NoError(t, err)
		require.True(t, nodes[0].Backlog)
	})
}

func TestConcurrentCheckIns(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- s.NodeCheckIn(ctx, store.NodeState{Name: "same", Incarnation: string(rune('a' + i)), Capacity: 1, Free: 1}, time.Hour)
			}()
		}
		wg.Wait()
		close(errs)
		won := 0
		for err := range errs {
			var inUse *store.NodeNameInUse
			if err != nil {
				require.ErrorAs(t, err, &inUse)
				continue
			}
			won++
		}
		require.Equal(t, 1, won, "one process gets the name, the others are told it is in use")
		nodes, _, err := s.Nodes(ctx, time.Hour)
		require.NoError(t, err)
		require.Len(t, nodes, 1)
	})
}

func enqueue(t *testing.T, s *store.Store, endpoint string, delay time.Duration) int64 {
	t.Helper()
	id, err := s.JobInsert(context.Background(), store.NewJob{Endpoint: endpoint, Method: "POST", Payload: []byte(`{"n":1}`),
		Delay: delay, MaxAttempts: 3, IdempotencyKey: "key-" + endpoint})
	require.NoError(t, err)
	return id
}

func TestClaimLifecycle(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		due := enqueue(t, s, "/due", 0)
		enqueue(t, s, "/later", time.Hour)

		load, err := s.JobsLoad(ctx, time.Hour, 0, 100)
		require.NoError(t, err)
		require.Equal(t, store.QueueLoad{Due: 1, Urgent: 1, Running: 0}, load)
		load, err = s.JobsLoad(ctx, 0, time.Hour, 100)
		require.NoError(t, err)
		require.Equal(t, store.QueueLoad{Due: 1, Urgent: 0, Running: 0}, load, "not due an hour ago: not urgent")

		claims, err := s.JobsClaim(ctx, "inc-a", "node-a", 10, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, claims, 1, "only the due job is claimed")
		c := claims[0]
		require.Equal(t, due, c.ID)
		require.Equal(t, int64(1), c.Token)
		require.Equal(t, 1, c.Attempt)
		require.Equal(t, "/due", c.Endpoint)
		require.Equal(t, []byte(`{"n":1}`), c.Payload)
		require.Equal(t, "key-/due", c.IdempotencyKey)

		again, err := s.JobsClaim(ctx, "inc-b", "node-b", 10, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Empty(t, again, "a running job cannot be claimed twice")

		ok, err := s.JobRenewLeaseIfRunning(ctx, c.ID, c.Token, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.JobRenewLeaseIfRunning(ctx, c.ID, c.Token+1, time.Minute)
		require.NoError(t, err)
		require.False(t, ok, "a wrong token renews nothing")

		// Retry: back to ready, due after the delay on the database clock.
		ok, err = s.JobFinishIfRunning(ctx, c.ID, c.Token, store.Outcome{State: store.StateReady, RetryAfter: time.Hour, Status: 503, Error: "unavailable"})
		require.NoError(t, err)
		require.True(t, ok)
		j, err := s.JobGet(ctx, c.ID)
		require.NoError(t, err)
		require.Equal(t, store.StateReady, j.State)
		require.Equal(t, 503, j.LastStatus)
		require.Equal(t, "unavailable", j.LastError)
		require.Nil(t, j.LeaseUntil)

		// A stale token cannot write after the job moved on.
		ok, err = s.JobFinishIfRunning(ctx, c.ID, c.Token, store.Outcome{State: store.StateDone})
		require.NoError(t, err)
		require.False(t, ok)
	})
}

// Due work an overlap-forbid occurrence cannot take (another occurrence of
// its schedule runs, or an earlier one waits) is not counted as due: it
// would keep the rotation widened for nothing.
func TestLoadCountsOnlyClaimableWork(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		now, err := s.Now(ctx)
		require.NoError(t, err)
		for _, name := range []string{"serial", "other"} {
			require.NoError(t, s.ScheduleInsert(ctx, store.Schedule{Name: name, Every: time.Second, Endpoint: "/" + name, Method: "POST",
				MaxAttempts: 3, Tolerance: time.Hour, Misfire: store.MisfireAll, Overlap: store.OverlapForbid, Enabled: true,
				Source: store.SourceCommand}, now))
		}
		occurrence := func(schedule string, ago time.Duration) {
			fire := now.Add(-ago).Truncate(time.Millisecond)
			by := now.Add(time.Hour)
			key := fmt.Sprintf("%s:%d", schedule, fire.UnixMilli())
			_, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/" + schedule, Method: "POST", RunAt: &fire, MaxAttempts: 3,
				UniqueKey: key, IdempotencyKey: key, Schedule: schedule, ScheduledFor: &fire, StartBy: &by, Exclusive: true})
			require.NoError(t, err)
		}
		occurrence("serial", 3*time.Second)
		occurrence("serial", 2*time.Second)
		occurrence("serial", time.Second)
		load, err := s.JobsLoad(ctx, time.Hour, 0, 100)
		require.NoError(t, err)
		require.Equal(t, store.QueueLoad{Due: 1, Urgent: 1}, load, "only the earliest waiting occurrence can be claimed")

		claims, err := s.JobsClaim(ctx, "inc-a", "node-a", 10, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, claims, 1)
		load, err = s.JobsLoad(ctx, time.Hour, 0, 100)
		require.NoError(t, err)
		require.Equal(t, store.QueueLoad{Due: 0, Urgent: 0, Running: 1}, load, "nothing claimable while an occurrence runs")

		occurrence("other", time.Second)
		enqueue(t, s, "/one-off", 0)
		load, err = s.JobsLoad(ctx, time.Hour, 0, 100)
		require.NoError(t, err)
		require.Equal(t, store.QueueLoad{Due: 2, Urgent: 2, Running: 1}, load, "other work still counts")

		// An occurrence whose schedule is gone is neither claimed nor
		// counted (removing a schedule cancels its waiting occurrences;
		// this one slipped past as a stray row would).
		occurrence("gone", time.Second)
		load, err = s.JobsLoad(ctx, time.Hour, 0, 100)
		require.NoError(t, err)
		require.Equal(t, store.QueueLoad{Due: 2, Urgent: 2, Running: 1}, load, "a stray occurrence is not due work")
	})
}

// A turn counts at most its limit of due jobs, so that its cost does not
// grow with the depth of the queue; what runs is counted whole.
func TestLoadCountsAtMostItsLimit(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		for i := range 7 {
			enqueue(t, s, fmt.Sprintf("/due-%d", i), 0)
		}
		enqueue(t, s, "/later", time.Hour)
		claims, err := s.JobsClaim(ctx, "inc-a", "node-a", 2, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, claims, 2)

		load, err := s.JobsLoad(ctx, time.Hour, 0, 3)
		require.NoError(t, err)
		require.Equal(t, store.QueueLoad{Due: 3, Urgent: 3, Running: 2}, load, "5 due, counted up to 3; urgency among those")
		load, err = s.JobsLoad(ctx, 0, time.Hour, 3)
		require.NoError(t, err)
		require.Equal(t, store.QueueLoad{Due: 3, Urgent: 0, Running: 2}, load)
		load, err = s.JobsLoad(ctx, time.Hour, 0, 5)
		require.NoError(t, err)
		require.Equal(t, store.QueueLoad{Due: 5, Urgent: 5, Running: 2}, load, "at the limit exactly")
		load, err = s.JobsLoad(ctx, time.Hour, 0, 1000)
		require.NoError(t, err)
		require.Equal(t, store.QueueLoad{Due: 5, Urgent: 5, Running: 2}, load, "below the limit: the exact count")

		_, err = s.JobsLoad(ctx, time.Hour, 0, 0)
		require.ErrorContains(t, err, "a limit of 0 counts nothing")
	})
}

func TestFinishFencedByToken(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		id := enqueue(t, s, "/x", 0)
		// A lease already over: the node froze past it.
		first, err := s.JobsClaim(ctx, "inc-a", "node-a", 1, store.Lease(-time.Second))
		require.NoError(t, err)
		require.Len(t, first, 1)

		n, err := s.JobsReclaimExpired(ctx, time.Time{})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)

		second, err := s.JobsClaim(ctx, "inc-b", "node-b", 1, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, second, 1)
		require.Greater(t, second[0].Token, first[0].Token, "every claim gets a new token")
		require.Equal(t, 2, second[0].Attempt)

		ok, err := s.JobFinishIfRunning(ctx, id, first[0].Token, store.Outcome{State: store.StateDone})
		require.NoError(t, err)
		require.False(t, ok, "the first owner's late result must be refused")
		ok, err = s.JobFinishIfRunning(ctx, id, second[0].Token, store.Outcome{State: store.StateDone, Status: 200})
		require.NoError(t, err)
		require.True(t, ok)
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.StateDone, j.State)
		require.Equal(t, "node-b", j.OwnerNode)
		require.NotNil(t, j.Finished)
	})
}

func TestReclaimExhaustedIsDead(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		id, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/once", Method: "POST", MaxAttempts: 1, IdempotencyKey: "k"})
		require.NoError(t, err)
		_, err = s.JobsClaim(ctx, "inc-a", "node-a", 1, store.Lease(-time.Second))
		require.NoError(t, err)
		_, err = s.JobsReclaimExpired(ctx, time.Time{})
		require.NoError(t, err)
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.StateDead, j.State)
		require.Contains(t, j.LastError, "lease expired")
	})
}

func TestReleaseDoesNotCountAttempt(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		id := enqueue(t, s, "/r", 0)
		c, err := s.JobsClaim(ctx, "inc-a", "node-a", 1, store.Lease(time.Minute))
		require.NoError(t, err)
		ok, err := s.JobReleaseIfRunning(ctx, id, c[0].Token, "node stopping")
		require.NoError(t, err)
		require.True(t, ok)
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.StateReady, j.State)
		require.Equal(t, 0, j.Attempt)
	})
}

func TestUniqueKeyAndAbsoluteRunAt(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		at := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
		id, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/u", Method: "GET", RunAt: &at, MaxAttempts: 1, UniqueKey: "u1", IdempotencyKey: "k"})
		require.NoError(t, err)
		dup, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/u", Method: "GET", MaxAttempts: 1, UniqueKey: "u1", IdempotencyKey: "k2"})
		require.ErrorIs(t, err, store.ErrDuplicate)
		require.Equal(t, id, dup)
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		require.True(t, at.Equal(j.RunAt), "run_at %v, want %v", j.RunAt, at)

		// A time in another zone is the same instant (SQL Server: not the
		// same wall time, which a datetimeoffset parameter would give).
		local := time.Date(2030, 5, 6, 9, 8, 9, 0, time.FixedZone("CEST", 2*3600))
		id2, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/u2", Method: "GET", RunAt: &local, MaxAttempts: 1, IdempotencyKey: "k3"})
		require.NoError(t, err)
		j, err = s.JobGet(ctx, id2)
		require.NoError(t, err)
		require.True(t, at.Equal(j.RunAt), "run_at %v, want %v", j.RunAt, at)

		_, err = s.JobGet(ctx, id2+100)
		require.ErrorIs(t, err, store.ErrNotFound)
		counts, err := s.JobCounts(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]int{"ready": 2}, counts)
	})
}

// Many pollers claim at once (as in backlog mode, or when two nodes both
// believe a slot is theirs): each job goes to exactly one of them.
func TestConcurrentClaimsGiveEachJobOnce(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, db := storetest.OpenDB(t, driver)
		ctx := context.Background()
		const jobs = 200
		for i := range jobs {
			_, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/c", Method: "POST", MaxAttempts: 1, IdempotencyKey: fmt.Sprint("k", i)})
			require.NoError(t, err)
		}
		var mu sync.Mutex
		seen := map[int64]string{}
		asNodes(t, db, 6, func(other *store.Store, p int) {
			owner := string(rune('A' + p))
			garbled := 0
			for {
				cs, err := other.JobsClaim(ctx, owner, owner, 7, store.Lease(time.Minute))
				if err != nil && driver == "sqlserver" && garbled < 3 && babelfishGarbledHint(err) {
					// See docs/sqlserver.md, "Where Babelfish differs": the statement
					// failed at parse time and changed nothing.
					garbled++
					t.Logf("%s: the T-SQL test server garbled the claim's index hint (%v); claiming again", owner, err)
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				if len(cs) == 0 {
					return
				}
				mu.Lock()
				for _, c := range cs {
					if prev, ok := seen[c.ID]; ok {
						t.Errorf("job %d claimed by %s and %s", c.ID, prev, owner)
					}
					seen[c.ID] = owner
				}
				mu.Unlock()
			}
		})
		require.Len(t, seen, jobs)
	})
}

// babelfishGarbledHint reports the T-SQL test server's failure to parse a
// claim whose index hint it rewrote into garbage (error 33557097, "internal
// error occurred"; its log has the garbled table name).
func babelfishGarbledHint(err error) bool {
	return strings.Contains(err.Error(), "internal error occurred (33557097)")
}

func TestMigrations(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		applied, err := schema.Migrate(ctx, s)
		require.NoError(t, err)
		require.Empty(t, applied, "migrating twice applies nothing")
		require.NoError(t, schema.Check(ctx, s))

		// A newer binary migrated this database: refuse, change nothing.
		_, err = s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `INSERT INTO {schema_version} (version, description, applied_at) VALUES (?, ?, {now})`), 999, "future")
		require.NoError(t, err)
		_, err = schema.Migrate(ctx, s)
		require.ErrorIs(t, err, schema.ErrSchemaNewer)
		require.ErrorContains(t, err, "999")
		require.ErrorIs(t, schema.Check(ctx, s), schema.ErrSchemaNewer)
		cur, _, err := schema.Status(ctx, s)
		require.NoError(t, err)
		require.Equal(t, 999, cur)
	})
}

func TestConcurrentMigrations(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		db := storetest.New(t, driver)
		ctx := context.Background()
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := db.Open(ctx)
				if err != nil {
					errs <- err
					return
				}
				defer s.Close()
				_, err = schema.Migrate(ctx, s)
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		s, err := db.Open(ctx)
		require.NoError(t, err)
		defer s.Close()
		require.NoError(t, schema.Check(ctx, s))
	})
}

func TestOpenErrorsHidePassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := open.Store(ctx, "postgres", "postgres://slot:s3cretpw@127.0.0.1:1/farm?connect_timeout=2")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cretpw")
	_, err = open.Store(ctx, "sqlserver", "sqlserver://slot:s3cretpw@127.0.0.1:1?database=farm&dial+timeout=2")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cretpw")
	_, err = open.Store(ctx, "sqlserver", "server=127.0.0.1;port=1;user id=slot;password=s3cretpw;database=farm;dial timeout=2")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cretpw")
	_, err = open.Store(ctx, "mysql", "slot:s3cretpw@tcp(127.0.0.1:1)/farm?parseTime=true&loc=UTC&timeout=2s")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cretpw")
	_, err = open.Store(ctx, "oracle", "x")
	require.ErrorContains(t, err, "oracle")
	require.False(t, errors.Is(err, store.ErrNotFound))
}

func TestSQLitePathsAreTakenLiterally(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a#b", "c%41d")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	ctx := context.Background()
	s, err := open.Store(ctx, "sqlite", filepath.Join(dir, "farm.db"))
	require.NoError(t, err)
	defer s.Close()
	_, err = schema.Migrate(ctx, s)
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, "farm.db"))
	require.NoError(t, err, "the database file is where the path says, not cut at '#'")
}

func TestOpenErrorsHidePasswordInAnyForm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, dsn := range []string{
		"postgres://slot:p%40ss-w0rd-x@127.0.0.1:1/farm?connect_timeout=1",
		"postgres://slot@127.0.0.1:1/farm?password=qu3ry-secret&connect_timeout=1&sslmode=bogus",
		"host=127.0.0.1 port=1 user=slot password=kv-s3cret connect_timeout=1",
		"slot:p@ss-w0rd-x@tcp(127.0.0.1:1)/farm?parseTime=true&timeout=1s",
		"slot:qu3ry-secret@tcp(127.0.0.1:1/farm?parseTime=true",
		"slot:kv-s3cret@tcp(127.0.0.1:1)/farm?parseTime=true&interpolateParams=true",
		"slot:kv-s3cret@tcp(127.0.0.1:1)/farm?parseTime=true&loc=Local",
	} {
		driver := "postgres"
		if strings.Contains(dsn, "@tcp(") {
			driver = "mysql"
		}
		_, err := open.Store(ctx, driver, dsn)
		require.Error(t, err)
		for _, secret := range []string{"p%40ss-w0rd-x", "p@ss-w0rd-x", "qu3ry-secret", "kv-s3cret"} {
			require.NotContains(t, err.Error(), secret)
		}
	}
}

func TestSchemaStatusTellsMissingFromBroken(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		ctx := context.Background()
		s, err := storetest.New(t, driver).Open(ctx)
		require.NoError(t, err)
		cur, latest, err := schema.Status(ctx, s)
		require.NoError(t, err, "a database never migrated is version 0, not an error")
		require.Equal(t, 0, cur)
		require.Positive(t, latest)
		require.ErrorIs(t, schema.Check(ctx, s), schema.ErrSchemaBehind)

		require.NoError(t, s.Close())
		_, _, err = schema.Status(ctx, s)
		require.Error(t, err, "a broken connection is not version 0")
		require.NotErrorIs(t, schema.Check(ctx, s), schema.ErrSchemaBehind, "so a node retries instead of giving up")
	})
}

// On a real PostgreSQL server, the pool keeps its 8 connections open
// between bursts instead of closing all but 2.
func TestPostgresPoolKeepsItsConnections(t *testing.T) {
	dsn := storetest.RequirePostgres(t)
	ctx := context.Background()
	s, err := open.Store(ctx, "postgres", dsn)
	require.NoError(t, err)
	defer s.Close()
	db := s.DB()
	var conns []*sql.Conn
	for range 8 {
		c, err := db.Conn(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	for _, c := range conns {
		require.NoError(t, c.Close())
	}
	st := db.Stats()
	require.Equal(t, 8, st.MaxOpenConnections)
	require.Equal(t, 8, st.Idle)
	require.Zero(t, st.MaxIdleClosed)
}

// Claimers racing over the occurrences of schedules that forbid overlap
// never hold two occurrences of one schedule at once, and run every
// occurrence once. On SQL Server each claim's overlap check holds an update
// lock on the schedule's row; the T-SQL test server (Babelfish) parses
// table hints and ignores them, so there the test shows correctness, not
// that claimers skip each other's rows instead of waiting: only real SQL
// Server shows that.
func TestConcurrentClaimsKeepOverlapForbid(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, db := storetest.OpenDB(t, driver)
		ctx := context.Background()
		base := time.Now().Add(-time.Hour).Truncate(time.Second)
		const schedules, each = 3, 12
		for k := range schedules {
			name := fmt.Sprint("sched-", k)
			sc := store.Schedule{Name: name, Every: time.Second, Endpoint: "/s", Method: "POST", MaxAttempts: 1,
				Tolerance: 24 * time.Hour, Misfire: store.MisfireAll, Overlap: store.OverlapForbid, Enabled: true, Source: store.SourceCommand}
			require.NoError(t, s.ScheduleInsert(ctx, sc, base))
			for i := range each {
				at := base.Add(time.Duration(i) * time.Second)
				_, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/s", Method: "POST", MaxAttempts: 1, RunAt: &at,
					UniqueKey: fmt.Sprint(name, "@", i), Schedule: name, ScheduledFor: &at, Exclusive: true})
				require.NoError(t, err)
			}
		}
		var mu sync.Mutex
		holder := map[string]string{}
		done := map[int64]bool{}
		asNodes(t, db, 4, func(other *store.Store, p int) {
			owner := fmt.Sprint("claimer-", p)
			for idle := 0; idle < 20; {
				cs, err := other.JobsClaim(ctx, owner, owner, 2, store.Lease(time.Minute))
				if err != nil {
					t.Error(err)
					return
				}
				if len(cs) == 0 {
					idle++
					time.Sleep(5 * time.Millisecond)
					continue
				}
				idle = 0
				for _, c := range cs {
					j, err := other.JobGet(ctx, c.ID)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if h, ok := holder[j.Schedule]; ok {
						t.Errorf("%s holds an occurrence of %s while %s claims job %d", h, j.Schedule, owner, c.ID)
					}
					holder[j.Schedule] = owner
					if done[c.ID] {
						t.Errorf("job %d claimed twice", c.ID)
					}
					done[c.ID] = true
					mu.Unlock()
					time.Sleep(2 * time.Millisecond)
					// Let go before the finish commits: a claim can only
					// follow the finish, so it never sees a stale holder.
					mu.Lock()
					delete(holder, j.Schedule)
					mu.Unlock()
					ok, err := other.JobFinishIfRunning(ctx, c.ID, c.Token, store.Outcome{State: store.StateDone, Status: 200})
					if err != nil || !ok {
						t.Errorf("finish job %d: %v %v", c.ID, ok, err)
					}
				}
			}
		})
		require.Len(t, done, schedules*each, "every occurrence ran once")
	})
}

// asNodes runs fn on n goroutines at once, each with a pool of its own, as
// separate nodes have, and waits for them.
func asNodes(t *testing.T, db storetest.DB, n int, fn func(s *store.Store, i int)) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := db.Open(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close()
			fn(s, i)
		}()
	}
	wg.Wait()
}

// Opening a SQLite file while another process migrates it (a node and a
// CLI verb, two nodes starting together) waits out the moment the file is
// locked instead of failing to connect.
func TestOpenSQLiteWhileAnotherMigrates(t *testing.T) {
	for round := range 5 {
		path := filepath.Join(t.TempDir(), fmt.Sprint("farm-", round, ".db"))
		ctx := context.Background()
		var wg sync.WaitGroup
		errs := make(chan error, 9)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := open.Store(ctx, "sqlite", path)
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			_, err = schema.Migrate(ctx, s)
			errs <- err
		}()
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := open.Store(ctx, "sqlite", path)
				if err == nil {
					s.Close()
				}
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	}
}

// A node's turns come once a rotation: its pool keeps an idle connection
// for two, and never closes one sooner than after a minute.
func TestIdleTimeForCoversTwoRotations(t *testing.T) {
	for _, c := range []struct{ between, want time.Duration }{
		{0, time.Minute},
		{time.Second, time.Minute},
		{30 * time.Second, time.Minute},
		{64 * time.Second, 128 * time.Second},
		{200 * 250 * time.Millisecond, 100 * time.Second},
	} {
		require.Equal(t, c.want, store.IdleTimeFor(c.between), "turns %v apart", c.between)
	}
}
