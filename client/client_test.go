package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/driver/mysql"
	"github.com/slotpoller/slotpoller/driver/postgres"
	"github.com/slotpoller/slotpoller/driver/sqlite"
	"github.com/slotpoller/slotpoller/driver/sqlserver"
	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// farm is a migrated test database, a client of it, and a real runner
// calling a test endpoint that counts its calls by path.
type farm struct {
	c      *client.Client
	s      *store.Store
	runner *jobs.Runner
	schema string // SQL Server's schema
	mu     sync.Mutex
	calls  map[string]int
	last   map[string]seen // the last call to each path
}

// seen is what an endpoint received.
type seen struct {
	method string
	header http.Header
	body   string
}

func newFarm(t *testing.T, driver string) *farm {
	s, db := storetest.OpenDB(t, driver)
	c, err := client.New(s.DB(), driverOf(t, driver), client.WithSchema(db.Schema))
	require.NoError(t, err)
	f := &farm{c: c, s: s, schema: db.Schema, calls: map[string]int{}, last: map[string]seen{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.calls[r.URL.Path]++
		f.last[r.URL.Path] = seen{method: r.Method, header: r.Header.Clone(), body: string(body)}
		f.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/fail") {
			w.WriteHeader(500)
		}
	}))
	t.Cleanup(srv.Close)
	base, _ := url.Parse(srv.URL)
	// A statement of the runner may take a third of the lease: on the
	// T-SQL test server, shared with the other packages' tests in CI, a
	// count took more than the 1.7 s a 5 s lease allowed.
	f.runner = jobs.NewRunner(s, &jobs.Invoker{Base: base}, jobs.Options{Node: "node-a", Incarnation: "inc-a", Capacity: 64,
		Lease: 15 * time.Second, Timeout: 5 * time.Second, Clock: clock.NewFake(time.Now()), Rand: func() float64 { return 0 }})
	return f
}

// driverOf is the Driver an application gives client.New for a
// database.driver name.
func driverOf(t *testing.T, name string) client.Driver {
	switch name {
	case "postgres":
		return postgres.Driver()
	case "sqlserver":
		return sqlserver.Driver()
	case "sqlite":
		return sqlite.Driver()
	case "mysql":
		return mysql.Driver()
	}
	t.Fatalf("no driver package for %q", name)
	return nil
}

// poll runs one turn of the node and waits for its calls.
func (f *farm) poll(t *testing.T) int {
	res, err := f.runner.Poll(context.Background(), jobs.Turn{FarmCapacity: 64, NextPoll: time.Second, StartWindow: time.Second})
	require.NoError(t, err)
	f.runner.Wait()
	return res.Claimed
}

func (f *farm) called(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[path]
}

// A job enqueued in a transaction that rolls back never runs; one in a
// transaction that commits is there once and runs once.
func TestEnqueueTx(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		f := newFarm(t, driver)
		ctx := context.Background()
		db := f.s.DB()

		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = f.c.EnqueueTx(ctx, tx, client.Job{Endpoint: "/rolled-back"})
		require.NoError(t, err)
		_, err = f.c.EnqueueManyTx(ctx, tx, []client.Job{{Endpoint: "/rolled-back"}, {Endpoint: "/rolled-back"}})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback())

		tx, err = db.BeginTx(ctx, nil)
		require.NoError(t, err)
		id, err := f.c.EnqueueTx(ctx, tx, client.Job{Endpoint: "/committed", UniqueKey: "order-42"})
		require.NoError(t, err)
		ids, err := f.c.EnqueueManyTx(ctx, tx, []client.Job{{Endpoint: "/batch/0"}, {Endpoint: "/batch/1"}})
		require.NoError(t, err)
		require.NoError(t, tx.Commit())

		page, err := f.c.List(ctx, client.Filter{})
		require.NoError(t, err)
		require.Len(t, page.Jobs, 3, "only the committed jobs are in the table")
		require.Equal(t, 3, f.poll(t))
		require.Zero(t, f.poll(t))
		require.Zero(t, f.called("/rolled-back"))
		require.Equal(t, 1, f.called("/committed"))
		require.Equal(t, 1, f.called("/batch/0"))
		require.Equal(t, 1, f.called("/batch/1"))
		for _, id := range append(ids, id) {
			j, err := f.c.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, client.StateDone, j.State)
			require.Len(t, j.History, 1)
			require.Equal(t, "node-a", j.History[0].Node)
			require.Equal(t, client.StateDone, j.History[0].Outcome)
		}

		// The unique key is taken: the error names its holder, in a
		// transaction and out of one.
		tx, err = db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = f.c.EnqueueTx(ctx, tx, client.Job{Endpoint: "/again", UniqueKey: "order-42"})
		var dup *client.DuplicateError
		require.ErrorAs(t, err, &dup)
		require.Equal(t, id, dup.ID)
		require.NoError(t, tx.Rollback())
		_, err = f.c.Enqueue(ctx, client.Job{Endpoint: "/again", UniqueKey: "order-42"})
		require.ErrorAs(t, err, &dup)
		require.Equal(t, id, dup.ID)
		_, err = f.c.EnqueueMany(ctx, []client.Job{{Endpoint: "/x"}, {Endpoint: "/again", UniqueKey: "order-42"}})
		require.ErrorAs(t, err, &dup)
		require.Equal(t, id, dup.ID)
	})
}

// A batch of 1,000 is one transaction of ten INSERTs; its ids come back
// in the order of the jobs.
func TestEnqueueManyThousand(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		f := newFarm(t, driver)
		ctx := context.Background()
		batch := make([]client.Job, 1000)
		for i := range batch {
			batch[i] = client.Job{Endpoint: fmt.Sprintf("/many/%d", i), Delay: time.Hour}
		}
		ids, err := f.c.EnqueueMany(ctx, batch)
		require.NoError(t, err)
		require.Len(t, ids, 1000)
		for _, i := range []int{0, 99, 100, 501, 999} {
			j, err := f.c.Get(ctx, ids[i])
			require.NoError(t, err)
			require.Equal(t, batch[i].Endpoint, j.Endpoint)
		}
		// One bad job refuses the whole batch, naming it.
		batch[700].Method = "TRACE"
		_, err = f.c.EnqueueMany(ctx, batch)
		var fe *client.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, 700, fe.Index)
		require.Equal(t, "method", fe.Field)
		page, err := f.c.List(ctx, client.Filter{Limit: 1000})
		require.NoError(t, err)
		require.Len(t, page.Jobs, 1000, "nothing of the refused batch was written")
	})
}

func TestCancelAndRetry(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		f := newFarm(t, driver)
		ctx := context.Background()
		waiting, err := f.c.Enqueue(ctx, client.Job{Endpoint: "/later", Delay: time.Hour})
		require.NoError(t, err)
		failing, err := f.c.Enqueue(ctx, client.Job{Endpoint: "/fail", MaxAttempts: 1, IdempotencyKey: "run-7"})
		require.NoError(t, err)

		require.NoError(t, f.c.Cancel(ctx, waiting))
		var se *client.StateError
		require.ErrorAs(t, f.c.Cancel(ctx, waiting), &se, "a cancelled job is not cancelled again")
		require.Equal(t, client.StateCancelled, se.State)
		require.ErrorIs(t, f.c.Cancel(ctx, 999999), client.ErrNotFound)
		require.ErrorIs(t, f.c.Retry(ctx, 999999), client.ErrNotFound)
		_, err = f.c.Get(ctx, 999999)
		require.ErrorIs(t, err, client.ErrNotFound)

		require.Equal(t, 1, f.poll(t))
		j, err := f.c.Get(ctx, failing)
		require.NoError(t, err)
		require.Equal(t, client.StateDead, j.State)
		require.Equal(t, 500, j.LastStatus)
		require.ErrorAs(t, f.c.Cancel(ctx, failing), &se)

		// Retry: ready now, a fresh budget, the same idempotency key.
		require.NoError(t, f.c.Retry(ctx, failing))
		require.ErrorAs(t, f.c.Retry(ctx, failing), &se, "a ready job is not retried")
		require.Equal(t, client.StateReady, se.State)
		j, err = f.c.Get(ctx, failing)
		require.NoError(t, err)
		require.Equal(t, client.StateReady, j.State)
		require.Zero(t, j.Attempt)
		require.Equal(t, "run-7", j.IdempotencyKey)
		require.Equal(t, 1, f.poll(t))
		require.Equal(t, 2, f.called("/fail"))

		// RetryMatching: none created over an hour ago; the dead ones
		// since an hour, not the cancelled one.
		n, err := f.c.RetryMatching(ctx, client.Filter{State: client.StateDead, Until: time.Hour})
		require.NoError(t, err)
		require.Zero(t, n, "every job was created just now")
		n, err = f.c.RetryMatching(ctx, client.Filter{State: client.StateDead, Since: time.Hour})
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		j, err = f.c.Get(ctx, waiting)
		require.NoError(t, err)
		require.Equal(t, client.StateCancelled, j.State)
		_, err = f.c.RetryMatching(ctx, client.Filter{State: client.StateDone})
		var fe *client.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "state", fe.Field)
	})
}

// A running job's cancel is a request: the job stays running, under its
// owner, until the owner's next renewal; the request names who asked.
func TestCancelRunningIsRequested(t *testing.T) {
	f := newFarm(t, "sqlite")
	ctx := context.Background()
	id, err := f.c.Enqueue(ctx, client.Job{Endpoint: "/x"})
	require.NoError(t, err)
	_, err = f.s.JobsClaim(ctx, "inc-b", "node-b", 1, store.Lease(time.Minute))
	require.NoError(t, err)
	r, err := f.c.CancelJob(ctx, id)
	require.NoError(t, err)
	require.Equal(t, client.CancelRequested, r)
	require.NoError(t, f.c.Cancel(ctx, id), "asked again: still requested")
	j, err := f.c.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, client.StateRunning, j.State)
	require.NotEmpty(t, j.CancelRequestedBy)
	require.NotNil(t, j.CancelRequestedAt)
	held, err := f.s.JobsRenewLeases(ctx, "inc-b", store.Lease(time.Minute))
	require.NoError(t, err)
	require.Len(t, held, 1)
	require.Equal(t, j.CancelRequestedBy, held[0].CancelBy)
}

func TestListPagesAndFilters(t *testing.T) {
	f := newFarm(t, "sqlite")
	ctx := context.Background()
	var ids []int64
	for i := 0; i < 5; i++ {
		id, err := f.c.Enqueue(ctx, client.Job{Endpoint: fmt.Sprintf("/p/%d", i%2), Delay: time.Hour})
		require.NoError(t, err)
		ids = append(ids, id)
	}
	var got []int64
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		p, err := f.c.List(ctx, client.Filter{Limit: 2, Cursor: cursor})
		require.NoError(t, err)
		for _, j := range p.Jobs {
			got = append(got, j.ID)
		}
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	require.Equal(t, []int64{ids[4], ids[3], ids[2], ids[1], ids[0]}, got)
	p, err := f.c.List(ctx, client.Filter{EndpointPrefix: "/p/1"})
	require.NoError(t, err)
	require.Len(t, p.Jobs, 2)
	p, err = f.c.List(ctx, client.Filter{State: client.StateRetrying})
	require.NoError(t, err)
	require.Empty(t, p.Jobs)

	for _, bad := range []struct {
		f     client.Filter
		field string
	}{
		{client.Filter{State: "sleeping"}, "state"},
		{client.Filter{Limit: 1001}, "limit"},
		{client.Filter{Limit: -1}, "limit"},
		{client.Filter{Since: -time.Second}, "since"},
		{client.Filter{Until: -time.Second}, "until"},
		{client.Filter{Since: time.Hour, Until: time.Hour}, "until"},
		{client.Filter{Since: time.Hour, Until: 2 * time.Hour}, "until"},
		{client.Filter{Cursor: "abc"}, "cursor"},
		{client.Filter{Cursor: "-3"}, "cursor"},
	} {
		_, err := f.c.List(ctx, bad.f)
		var fe *client.FieldError
		require.ErrorAs(t, err, &fe, "%+v", bad.f)
		require.Equal(t, bad.field, fe.Field)
	}
}

// Validation is the CLI's: each bad job names its field.
func TestEnqueueValidation(t *testing.T) {
	f := newFarm(t, "sqlite")
	ctx := context.Background()
	for _, tc := range []struct {
		job   client.Job
		field string
	}{
		{client.Job{}, "endpoint"},
		{client.Job{Endpoint: "http://evil.example/x"}, "endpoint"},
		{client.Job{Endpoint: "/x/../admin"}, "endpoint"},
		{client.Job{Endpoint: "/x", Method: "TRACE"}, "method"},
		{client.Job{Endpoint: "/x", MaxAttempts: 1001}, "max_attempts"},
		{client.Job{Endpoint: "/x", MaxAttempts: -1}, "max_attempts"},
		{client.Job{Endpoint: "/x", Timeout: time.Nanosecond}, "timeout"},
		{client.Job{Endpoint: "/x", Timeout: 25 * time.Hour}, "timeout"},
		{client.Job{Endpoint: "/x", Delay: -time.Second}, "delay"},
		{client.Job{Endpoint: "/x", Delay: 367 * 24 * time.Hour}, "delay"},
		{client.Job{Endpoint: "/x", RunAt: time.Now().Add(400 * 24 * time.Hour)}, "run_at"},
		{client.Job{Endpoint: "/x", RunAt: time.Now(), Delay: time.Second}, "run_at"},
		{client.Job{Endpoint: "/x", Payload: make([]byte, client.MaxPayload+1)}, "payload"},
		{client.Job{Endpoint: "/x", UniqueKey: strings.Repeat("k", 451)}, "unique_key"},
		{client.Job{Endpoint: "/x", IdempotencyKey: "a\nb"}, "idempotency_key"},
	} {
		_, err := f.c.Enqueue(ctx, tc.job)
		var fe *client.FieldError
		require.ErrorAs(t, err, &fe, "%+v", tc.job.Endpoint)
		require.Equal(t, tc.field, fe.Field, "%v", err)
	}
	_, err := f.c.Enqueue(ctx, client.Job{Endpoint: "/x", Payload: make([]byte, client.MaxPayload)})
	require.NoError(t, err, "a payload of exactly 1 MiB is allowed")

	_, err = client.New(f.s.DB(), nil)
	require.Error(t, err)
	_, err = client.New(f.s.DB(), sqlserver.Driver(), client.WithSchema("bad name"))
	require.Error(t, err)
	_, err = client.New(f.s.DB(), sqlite.Driver(), client.WithDefaultMaxAttempts(0))
	require.Error(t, err)
	require.False(t, errors.Is(err, client.ErrNotFound))
}
