package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// auditAdd records an entry and returns its id.
func auditAdd(t *testing.T, s *store.Store, actor, action, target string) int64 {
	t.Helper()
	id, err := s.AuditAdd(context.Background(), store.AuditEntry{Actor: actor, Origin: "host-1", Action: action, Target: target, Detail: "ok"})
	require.NoError(t, err)
	return id
}

// auditAge sets the entries' time to ago before the database's now.
func auditAge(t *testing.T, s *store.Store, ago time.Duration, ids ...int64) {
	t.Helper()
	q := store.Expand(s.Dialect(), `UPDATE {audit} SET at = {now+?} WHERE id = ?`)
	for _, id := range ids {
		_, err := s.DB().ExecContext(context.Background(), q, -ago.Milliseconds(), id)
		require.NoError(t, err)
	}
}

// auditIDs lists the ids f selects.
func auditIDs(t *testing.T, s *store.Store, f store.AuditFilter) []int64 {
	t.Helper()
	es, err := s.AuditList(context.Background(), f)
	require.NoError(t, err)
	ids := []int64{}
	for _, e := range es {
		ids = append(ids, e.ID)
	}
	return ids
}

// An entry is recorded as given, on the database clock, and listed newest
// first; the filters select by actor, by action (itself or one under it)
// and page by id.
func TestAuditAddAndList(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		before, err := s.Now(ctx)
		require.NoError(t, err)
		first, err := s.AuditAdd(ctx, store.AuditEntry{Actor: "alice", Origin: "10.0.0.7", Action: "queue.pause", Target: "reports",
			Detail: "paused; 12 waiting", At: time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)})
		require.NoError(t, err)
		after, err := s.Now(ctx)
		require.NoError(t, err)

		es, err := s.AuditList(ctx, store.AuditFilter{Limit: 10})
		require.NoError(t, err)
		require.Len(t, es, 1)
		e := es[0]
		require.Equal(t, store.AuditEntry{ID: first, At: e.At, Actor: "alice", Origin: "10.0.0.7", Action: "queue.pause", Target: "reports",
			Detail: "paused; 12 waiting"}, e)
		require.False(t, e.At.Before(before) || e.At.After(after), "at %v is the database clock, not the one given: within %v..%v", e.At, before, after)
		require.Equal(t, time.UTC, e.At.Location())

		// Without a detail: the column's default, empty.
		queues := auditAdd(t, s, "bob", "queues.x", "all")
		queuex := auditAdd(t, s, "alice", "queuex", "x")
		queue := auditAdd(t, s, "alice", "queue", "reports")
		retry := auditAdd(t, s, "bob", "job.retry", "42")
		resume := auditAdd(t, s, "alice", "queue.resume", "reports")
		id, err := s.AuditAdd(ctx, store.AuditEntry{Actor: "carol", Action: "schedule.trigger"})
		require.NoError(t, err)
		es, err = s.AuditList(ctx, store.AuditFilter{Limit: 1})
		require.NoError(t, err)
		require.Equal(t, []store.AuditEntry{{ID: id, At: es[0].At, Actor: "carol", Action: "schedule.trigger"}}, es)

		all := []int64{id, resume, retry, queue, queuex, queues, first}
		require.Equal(t, all, auditIDs(t, s, store.AuditFilter{Limit: 100}), "newest first")

		// Pages of three, each before the last id of the one before.
		var paged []int64
		cursor := int64(0)
		for {
			page := auditIDs(t, s, store.AuditFilter{Before: cursor, Limit: 3})
			paged = append(paged, page...)
			if len(page) < 3 {
				break
			}
			cursor = page[len(page)-1]
		}
		require.Equal(t, all, paged)
		require.Equal(t, []int64{queues, first}, auditIDs(t, s, store.AuditFilter{Before: queuex, Limit: 100}))

		require.Equal(t, []int64{resume, queue, queuex, first}, auditIDs(t, s, store.AuditFilter{Actor: "alice", Limit: 100}))
		require.Empty(t, auditIDs(t, s, store.AuditFilter{Actor: "Alice", Limit: 100}), "an actor is compared exactly")
		require.Empty(t, auditIDs(t, s, store.AuditFilter{Actor: "ali", Limit: 100}), "an actor is no prefix")

		require.Equal(t, []int64{resume, queue, first}, auditIDs(t, s, store.AuditFilter{Action: "queue", Limit: 100}),
			"queue and the actions under it, not queues.x nor queuex")
		require.Equal(t, []int64{resume}, auditIDs(t, s, store.AuditFilter{Action: "queue.resume", Limit: 100}))
		require.Empty(t, auditIDs(t, s, store.AuditFilter{Action: "queue.", Limit: 100}))
		require.Empty(t, auditIDs(t, s, store.AuditFilter{Action: "Queue", Limit: 100}), "an action is compared exactly")
		require.Empty(t, auditIDs(t, s, store.AuditFilter{Action: "que", Limit: 100}))
		require.Equal(t, []int64{retry}, auditIDs(t, s, store.AuditFilter{Action: "job", Limit: 100}))
		require.Equal(t, []int64{queue, first}, auditIDs(t, s, store.AuditFilter{Actor: "alice", Action: "queue", Before: resume, Limit: 100}),
			"the filters together")
		require.Equal(t, []int64{resume, queue}, auditIDs(t, s, store.AuditFilter{Actor: "alice", Action: "queue", Limit: 2}))

		for _, bad := range []store.AuditFilter{{}, {Limit: store.AuditListMax + 1}, {Limit: 1, Since: -time.Second}, {Limit: 1, Before: -1}} {
			_, err := s.AuditList(ctx, bad)
			require.ErrorContains(t, err, "list audit entries", "%+v", bad)
		}
	})
}

// Since keeps the entries recorded within that long before the database's
// now.
func TestAuditListSince(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		old := auditAdd(t, s, "alice", "job.retry", "1")
		older := auditAdd(t, s, "alice", "job.retry", "2")
		fresh := auditAdd(t, s, "alice", "job.retry", "3")
		auditAge(t, s, 2*time.Hour, old)
		auditAge(t, s, 48*time.Hour, older)

		require.Equal(t, []int64{fresh}, auditIDs(t, s, store.AuditFilter{Since: time.Hour, Limit: 10}))
		require.Equal(t, []int64{fresh, old}, auditIDs(t, s, store.AuditFilter{Since: 3 * time.Hour, Limit: 10}))
		require.Equal(t, []int64{fresh, older, old}, auditIDs(t, s, store.AuditFilter{Since: 72 * time.Hour, Limit: 10}))
		require.Equal(t, []int64{old}, auditIDs(t, s, store.AuditFilter{Since: 3 * time.Hour, Before: fresh, Limit: 10}))
	})
}

// Each text is cut to its column's width in characters, never inside
// one; what no database can hold as text becomes U+FFFD. An entry without
// an actor or an action is refused.
func TestAuditAddCutsAndRefuses(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		long := store.AuditEntry{
			Actor:  strings.Repeat("é", 250),                                  // two bytes each: 200 kept
			Origin: strings.Repeat("o", 199) + "日本",                           // three bytes each: one fits
			Action: strings.Repeat("a", 99) + "😀",                             // outside the BMP, counts two: cut whole
			Target: strings.Repeat("t", 500),                                  // 400
			Detail: "bad \xff byte, a \x00 NUL, " + strings.Repeat("d", 2000), // 1000
		}
		id, err := s.AuditAdd(ctx, long)
		require.NoError(t, err)
		es, err := s.AuditList(ctx, store.AuditFilter{Limit: 1})
		require.NoError(t, err)
		require.Len(t, es, 1)
		e := es[0]
		require.Equal(t, id, e.ID)
		require.Equal(t, strings.Repeat("é", 200), e.Actor)
		require.Equal(t, strings.Repeat("o", 199)+"日", e.Origin)
		require.Equal(t, strings.Repeat("a", 99), e.Action)
		require.Equal(t, strings.Repeat("t", 400), e.Target)
		wantDetail := "bad \uFFFD byte, a \uFFFD NUL, "
		require.Equal(t, wantDetail+strings.Repeat("d", 1000-len([]rune(wantDetail))), e.Detail)

		for _, bad := range []store.AuditEntry{
			{Action: "job.retry", Target: "1"},
			{Actor: "  ", Action: "job.retry", Target: "1"},
			{Actor: "alice", Target: "1"},
		} {
			_, err := s.AuditAdd(ctx, bad)
			require.ErrorContains(t, err, "record audit entry", "%+v", bad)
			require.ErrorContains(t, err, "is empty", "%+v", bad)
		}
		es, err = s.AuditList(ctx, store.AuditFilter{Limit: 10})
		require.NoError(t, err)
		require.Len(t, es, 1, "nothing recorded of the refused")
	})
}

// A prune deletes the entries older than its age, oldest first, at most
// its limit, and nothing younger.
func TestAuditPrune(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		var old []int64
		for i := range 5 {
			id := auditAdd(t, s, "alice", "job.retry", "old")
			// The oldest first: the first written is the oldest.
			auditAge(t, s, time.Duration(40-i)*24*time.Hour, id)
			old = append(old, id)
		}
		young := auditAdd(t, s, "alice", "job.retry", "young")
		auditAge(t, s, 20*24*time.Hour, young)
		fresh := auditAdd(t, s, "alice", "job.retry", "fresh")

		n, err := s.AuditPrune(ctx, 30*24*time.Hour, 2)
		require.NoError(t, err)
		require.EqualValues(t, 2, n, "the limit")
		require.Equal(t, []int64{fresh, young, old[4], old[3], old[2]}, auditIDs(t, s, store.AuditFilter{Limit: 10}), "the oldest went first")

		n, err = s.AuditPrune(ctx, 30*24*time.Hour, 100)
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
		n, err = s.AuditPrune(ctx, 30*24*time.Hour, 100)
		require.NoError(t, err)
		require.Zero(t, n, "nothing older is left")
		require.Equal(t, []int64{fresh, young}, auditIDs(t, s, store.AuditFilter{Limit: 10}))

		n, err = s.AuditPrune(ctx, time.Hour, 100)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		require.Equal(t, []int64{fresh}, auditIDs(t, s, store.AuditFilter{Limit: 10}))

		_, err = s.AuditPrune(ctx, 0, 100)
		require.ErrorContains(t, err, "delete audit entries older than 0s")
		_, err = s.AuditPrune(ctx, time.Hour, 0)
		require.ErrorContains(t, err, "delete audit entries older than 1h0m0s")
		require.Equal(t, []int64{fresh}, auditIDs(t, s, store.AuditFilter{Limit: 10}))
	})
}

// In a store on the caller's transaction an entry commits or rolls back
// with the action it records.
func TestAuditAddInTransaction(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()

		tx, err := s.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		rolledBack, err := s.WithTx(tx).AuditAdd(ctx, store.AuditEntry{Actor: "alice", Action: "queue.pause", Target: "reports"})
		require.NoError(t, err)
		require.NotZero(t, rolledBack)
		require.NoError(t, tx.Rollback())
		require.Empty(t, auditIDs(t, s, store.AuditFilter{Limit: 10}), "rolled back with the transaction")

		tx, err = s.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		committed, err := s.WithTx(tx).AuditAdd(ctx, store.AuditEntry{Actor: "alice", Action: "queue.resume", Target: "reports"})
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		require.Equal(t, []int64{committed}, auditIDs(t, s, store.AuditFilter{Limit: 10}))
	})
}
