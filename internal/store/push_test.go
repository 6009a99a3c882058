package store_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// notesIn collects the notes a lock's listener hears within d (NoteDue
// comes apart from the others; notes that come together are one).
func notesIn(l *store.NodeLock, d time.Duration) []string {
	var got []string
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case n := <-l.Notes():
			got = append(got, n)
		case <-l.Due():
			got = append(got, store.NoteDue)
		case <-t.C:
			return got
		}
	}
}

func TestAnEnqueueDueNowWakesTheFarmAtCommitOnce(t *testing.T) {
	s, _ := storetest.Open(t, "postgres")
	ctx := context.Background()
	require.True(t, s.PushesDue())
	lock, ok, err := s.NodeLockTake(ctx, rand.Int64N(1<<30)+1)
	require.NoError(t, err)
	require.True(t, ok)
	t.Cleanup(lock.Release)
	quiet := 300 * time.Millisecond
	due := []string{store.NoteDue}

	_, err = s.JobInsert(ctx, store.NewJob{Endpoint: "/a"})
	require.NoError(t, err)
	require.Equal(t, due, notesIn(lock, quiet), "the store's insert")

	_, err = s.JobInsertMany(ctx, []store.NewJob{{Endpoint: "/a"}, {Endpoint: "/b"}, {Endpoint: "/c", Delay: time.Hour}})
	require.NoError(t, err)
	require.Equal(t, due, notesIn(lock, quiet), "several jobs in one statement: one note")

	_, err = s.JobInsert(ctx, store.NewJob{Endpoint: "/later", Delay: time.Hour})
	require.NoError(t, err)
	require.Empty(t, notesIn(lock, quiet), "a job due later wakes nobody: the turns find it")

	// The entry point, as a foreign application calls it in a transaction
	// of its own, with a search_path whose first schema is not the
	// tables' (its current_schema() is public): the note still goes to
	// the channel of the tables' schema.
	var schema string
	require.NoError(t, s.DB().QueryRowContext(ctx, "SELECT current_schema()").Scan(&schema))
	enqueue := func(commit bool, n int) {
		tx, err := s.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback()
		_, err = tx.ExecContext(ctx, "SET LOCAL search_path TO public, "+schema)
		require.NoError(t, err)
		for range n {
			var id int64
			require.NoError(t, tx.QueryRowContext(ctx, "SELECT slotpoller_enqueue_v1('/entry')").Scan(&id))
		}
		// Not delivered before the commit.
		require.Empty(t, notesIn(lock, 100*time.Millisecond), "a note before the commit")
		if commit {
			require.NoError(t, tx.Commit())
		}
	}
	enqueue(true, 3)
	require.Equal(t, due, notesIn(lock, quiet), "three enqueues in one transaction: one note, at commit")
	enqueue(false, 1)
	require.Empty(t, notesIn(lock, quiet), "a rolled-back enqueue wakes nobody")

	// The Go client's door: the store in the caller's transaction.
	tx, err := s.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = s.WithTx(tx).JobInsert(ctx, store.NewJob{Endpoint: "/tx"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	require.Equal(t, due, notesIn(lock, quiet), "an insert in the caller's transaction")

	// Writes other than inserts that make jobs due at once: an operator's
	// retry of a failed job, and a paused queue resumed.
	cs, err := s.JobsClaim(ctx, "inc-a", "node-a", 100, store.Lease(time.Minute))
	require.NoError(t, err)
	require.NotEmpty(t, cs)
	ok, err = s.JobFinishIfRunning(ctx, cs[0].ID, cs[0].Token, store.Outcome{State: store.StateFailed, Status: 500, Error: "boom"})
	require.NoError(t, err)
	require.True(t, ok)
	require.Empty(t, notesIn(lock, quiet), "claims and finishes wake nobody")
	n, err := s.JobsRetry(ctx, store.JobFilter{ID: cs[0].ID, Limit: 1}, "operator")
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, due, notesIn(lock, quiet), "a retried job is due at once")
	n, err = s.JobsRetry(ctx, store.JobFilter{ID: cs[0].ID, Limit: 1}, "operator")
	require.NoError(t, err)
	require.Zero(t, n)
	require.Empty(t, notesIn(lock, quiet), "a retry that found nothing to retry wakes nobody")

	require.NoError(t, s.QueuePause(ctx, "reports", "operator", true))
	require.Empty(t, notesIn(lock, quiet), "a pause wakes nobody")
	require.NoError(t, s.QueuePause(ctx, "reports", "operator", false))
	require.Equal(t, due, notesIn(lock, quiet), "a resumed queue's due jobs may be claimed again")
}

func TestOnlyPostgresPushesDueJobs(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		require.Equal(t, driver == "postgres", s.PushesDue())
	})
}

// Enqueues by the dozen, unread, neither fill the listener's buffer nor
// crowd out the note that follows them: they are one wake-up.
func TestEnqueueNotesCrowdOutNoOtherNote(t *testing.T) {
	s, _ := storetest.Open(t, "postgres")
	ctx := context.Background()
	lock, ok, err := s.NodeLockTake(ctx, rand.Int64N(1<<30)+1)
	require.NoError(t, err)
	require.True(t, ok)
	t.Cleanup(lock.Release)
	for range 40 {
		_, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/a"})
		require.NoError(t, err)
	}
	require.NoError(t, s.NodeNotify(ctx, "backlog"))
	// The server delivers a connection's notes in order: once the backlog
	// note is read, every enqueue's came before it. Read first, the wake-
	// up could be taken while the enqueues' notes still arrived, and a
	// second one follow (on a loaded machine).
	select {
	case n := <-lock.Notes():
		require.Equal(t, "backlog", n, "not crowded out")
	case <-time.After(5 * time.Second):
		t.Fatal("the backlog note never came")
	}
	select {
	case <-lock.Due():
	default:
		t.Fatal("the enqueues woke nobody")
	}
	require.Empty(t, notesIn(lock, 300*time.Millisecond), "40 enqueues are one wake-up")
}
