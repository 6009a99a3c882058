package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The history records each attempt's node, start, end, outcome, status
// and error on the database clock, written by the statements that end an
// attempt: finish, reclaim, release; and the operator's cancel and retry.
func TestJobHistory(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		before, err := s.Now(ctx)
		require.NoError(t, err)
		id, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/h", Method: "POST", MaxAttempts: 3, IdempotencyKey: "k"})
		require.NoError(t, err)

		claim := func(node string, lease time.Duration) store.Claim {
			t.Helper()
			cs, err := s.JobsClaim(ctx, "inc-"+node, node, 1, store.Lease(lease))
			require.NoError(t, err)
			require.Len(t, cs, 1)
			return cs[0]
		}
		c := claim("node-a", time.Minute)
		ok, err := s.JobFinishIfRunning(ctx, id, c.Token, store.Outcome{State: store.StateReady, Status: 503,
			Error: "unavailable\twith a tab\nand a newline"})
		require.NoError(t, err)
		require.True(t, ok)

		c = claim("node-b", -time.Second) // a lease already run out: the next reclaim takes it back
		n, err := s.JobsReclaimExpired(ctx, time.Time{})
		require.NoError(t, err)
		require.EqualValues(t, 1, n)

		c = claim("node-c", time.Minute)
		ok, err = s.JobFinishIfRunning(ctx, id, c.Token, store.Outcome{State: store.StateDead, Status: 500, Error: "boom"})
		require.NoError(t, err)
		require.True(t, ok)

		n, err = s.JobsRetry(ctx, store.JobFilter{ID: id, Limit: 1}, "operator")
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		ok, err = s.JobCancelIfWaiting(ctx, id, "operator")
		require.NoError(t, err)
		require.True(t, ok)
		after, err := s.Now(ctx)
		require.NoError(t, err)

		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.StateCancelled, j.State)
		require.Equal(t, "k", j.IdempotencyKey, "a retry is the same logical run")
		h := j.History
		require.Len(t, h, 5, "%+v", h)
		want := []struct {
			attempt int
			node    string
			outcome string
			status  int
			err     string
		}{
			{1, "node-a", store.OutcomeRetry, 503, "unavailable with a tab and a newline"},
			{2, "node-b", store.OutcomeReclaimed, 0, "lease expired"},
			{3, "node-c", store.StateDead, 500, "boom"},
			{3, "operator", store.OutcomeRetried, 0, ""},
			{0, "operator", store.StateCancelled, 0, ""},
		}
		for i, w := range want {
			e := h[i]
			require.Equal(t, w.attempt, e.Attempt, "event %d", i)
			require.Equal(t, w.node, e.Node, "event %d", i)
			require.Equal(t, w.outcome, e.Outcome, "event %d", i)
			require.Equal(t, w.status, e.Status, "event %d", i)
			require.True(t, strings.HasPrefix(e.Error, w.err), "event %d: %q", i, e.Error)
			// Database times, in order.
			tol := time.Millisecond
			require.False(t, e.Ended.Before(before.Add(-tol)) || e.Ended.After(after.Add(tol)), "event %d ended %v, not within %v..%v", i, e.Ended, before, after)
			if i < 3 {
				require.NotNil(t, e.Started, "event %d", i)
				require.False(t, e.Started.After(e.Ended), "event %d", i)
			} else {
				require.Nil(t, e.Started, "an operator's action has no start")
			}
			if i > 0 {
				require.False(t, e.Ended.Before(h[i-1].Ended), "event %d ends before the one before it", i)
			}
		}
	})
}

// The history keeps its last HistoryMax characters: the oldest lines go,
// a cut line is dropped, the newest stay.
func TestJobHistoryIsCapped(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		id, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/h", Method: "POST", MaxAttempts: 1000, IdempotencyKey: "k"})
		require.NoError(t, err)
		long := strings.Repeat("x", 400)
		for i := 1; i <= 40; i++ {
			cs, err := s.JobsClaim(ctx, "inc", "node", 1, store.Lease(time.Minute))
			require.NoError(t, err)
			require.Len(t, cs, 1)
			_, err = s.JobFinishIfRunning(ctx, id, cs[0].Token, store.Outcome{State: store.StateReady, Status: 500, Error: fmt.Sprint(i, long)})
			require.NoError(t, err)
		}
		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(j.History), 15)
		require.Less(t, len(j.History), 40)
		last := j.History[len(j.History)-1]
		require.Equal(t, 40, last.Attempt)
		for i, e := range j.History {
			require.Equal(t, 40-len(j.History)+1+i, e.Attempt, "whole lines, in order")
		}
	})
}

func TestJobsListFilters(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		var ids []int64
		for i, ep := range []string{"/a/1", "/a/2", "/b/1", "/a_/x", "/a%/y"} {
			id, err := s.JobInsert(ctx, store.NewJob{Endpoint: ep, Method: "POST", MaxAttempts: 2, IdempotencyKey: fmt.Sprint(i)})
			require.NoError(t, err)
			ids = append(ids, id)
		}
		list := func(f store.JobFilter) []int64 {
			t.Helper()
			if f.Limit == 0 {
				f.Limit = 100
			}
			js, err := s.JobsList(ctx, f)
			require.NoError(t, err)
			var out []int64
			for _, j := range js {
				out = append(out, j.ID)
			}
			return out
		}
		require.Equal(t, []int64{ids[4], ids[3], ids[2], ids[1], ids[0]}, list(store.JobFilter{}))
		require.Equal(t, []int64{ids[4], ids[3]}, list(store.JobFilter{Limit: 2}))
		require.Equal(t, []int64{ids[2], ids[1]}, list(store.JobFilter{Limit: 2, Before: ids[3]}), "keyset paging")
		require.Equal(t, []int64{ids[1], ids[0]}, list(store.JobFilter{EndpointPrefix: "/a/"}))
		require.Equal(t, []int64{ids[3]}, list(store.JobFilter{EndpointPrefix: "/a_"}), "no wildcard in a prefix")
		require.Equal(t, []int64{ids[4]}, list(store.JobFilter{EndpointPrefix: "/a%"}), "no wildcard in a prefix")
		require.Len(t, list(store.JobFilter{Since: time.Hour}), 5)
		require.Empty(t, list(store.JobFilter{Until: time.Minute}), "all created just now")
		// Three hours and two hours back: a range takes the one between.
		age := store.Expand(s.Dialect(), `UPDATE {jobs} SET created_at = {now+?} WHERE id = ?`)
		for i, ago := range []time.Duration{3 * time.Hour, 2 * time.Hour} {
			_, err := s.DB().ExecContext(ctx, age, -ago.Milliseconds(), ids[i])
			require.NoError(t, err)
		}
		require.Equal(t, []int64{ids[1]}, list(store.JobFilter{Since: 150 * time.Minute, Until: 90 * time.Minute}), "created between 150 and 90 minutes ago")
		require.Equal(t, []int64{ids[1], ids[0]}, list(store.JobFilter{Until: time.Hour}))
		require.Equal(t, []int64{ids[4], ids[3], ids[2]}, list(store.JobFilter{Since: time.Hour}))
		require.Empty(t, list(store.JobFilter{States: []string{store.StateDead}}))

		// One job fails once: it is ready and retrying.
		cs, err := s.JobsClaim(ctx, "inc", "node", 1, store.Lease(time.Minute))
		require.NoError(t, err)
		_, err = s.JobFinishIfRunning(ctx, cs[0].ID, cs[0].Token, store.Outcome{State: store.StateReady, RetryAfter: time.Hour, Status: 503})
		require.NoError(t, err)
		require.Equal(t, []int64{cs[0].ID}, list(store.JobFilter{States: []string{store.StateReady}, Retrying: true}))
		require.Len(t, list(store.JobFilter{States: []string{store.StateReady}}), 5)

		_, err = s.JobsList(ctx, store.JobFilter{})
		require.Error(t, err, "a list needs a limit")
	})
}

func TestJobCancelAndRetryAreFenced(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		id, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/c", Method: "POST", MaxAttempts: 1, IdempotencyKey: "k"})
		require.NoError(t, err)
		cs, err := s.JobsClaim(ctx, "inc", "node", 1, store.Lease(time.Minute))
		require.NoError(t, err)
		ok, err := s.JobCancelIfWaiting(ctx, id, "op")
		require.NoError(t, err)
		require.False(t, ok, "a running job is not cancelled")
		n, err := s.JobsRetry(ctx, store.JobFilter{ID: id, Limit: 1}, "op")
		require.NoError(t, err)
		require.Zero(t, n, "a running job is not retried")
		_, err = s.JobFinishIfRunning(ctx, id, cs[0].Token, store.Outcome{State: store.StateDone, Status: 200})
		require.NoError(t, err)
		n, err = s.JobsRetry(ctx, store.JobFilter{ID: id, Limit: 1}, "op")
		require.NoError(t, err)
		require.Zero(t, n, "a done job is not retried")
		ok, err = s.JobCancelIfWaiting(ctx, id, "op")
		require.NoError(t, err)
		require.False(t, ok, "a done job is not cancelled")
	})
}

// A batch writes every job in the caller's transaction, with ids in the
// order of the jobs; a rollback leaves nothing.
func TestJobInsertManyInTx(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		batch := make([]store.NewJob, 250)
		for i := range batch {
			batch[i] = store.NewJob{Endpoint: fmt.Sprint("/m/", i), Method: "POST", MaxAttempts: 1, IdempotencyKey: fmt.Sprint("k", i%7)}
		}
		tx, err := s.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = s.WithTx(tx).JobInsertMany(ctx, batch)
		require.NoError(t, err)
		require.NoError(t, tx.Rollback())
		js, err := s.JobsList(ctx, store.JobFilter{Limit: 1000})
		require.NoError(t, err)
		require.Empty(t, js)

		ids, err := s.JobInsertMany(ctx, batch)
		require.NoError(t, err)
		require.Len(t, ids, len(batch))
		for i, id := range ids {
			j, err := s.JobGet(ctx, id)
			require.NoError(t, err)
			require.Equal(t, batch[i].Endpoint, j.Endpoint, "id %d", i)
		}
	})
}

// Each batch's ids name its own jobs while other batches and single
// enqueues write at the same time: on MySQL, where the ids of a batch are
// read back after the insert, a concurrent writer's committed rows must
// never be taken for the batch's.
func TestJobInsertManyIDsUnderConcurrentEnqueues(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		const writers, batches, size = 3, 5, 30
		got := make([]map[int64]string, writers+1)
		var wg sync.WaitGroup
		for w := range writers + 1 {
			got[w] = map[int64]string{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for b := range batches {
					if w == writers { // single enqueues, between the batches
						for i := range size / 3 {
							endpoint := fmt.Sprintf("/single/%d/%d", b, i)
							id, err := s.JobInsert(ctx, store.NewJob{Endpoint: endpoint, Method: "POST", MaxAttempts: 1})
							if !assert.NoError(t, err) {
								return
							}
							got[w][id] = endpoint
						}
						continue
					}
					batch := make([]store.NewJob, size)
					for i := range batch {
						batch[i] = store.NewJob{Endpoint: fmt.Sprintf("/w%d/b%d/%d", w, b, i), Method: "POST", MaxAttempts: 1,
							IdempotencyKey: fmt.Sprint("k", i%4)} // keys shared within and across batches
					}
					ids, err := s.JobInsertMany(ctx, batch)
					if !assert.NoError(t, err) || !assert.Len(t, ids, size) {
						return
					}
					for i, id := range ids {
						got[w][id] = batch[i].Endpoint
					}
				}
			}()
		}
		wg.Wait()
		all, err := s.JobsList(ctx, store.JobFilter{Limit: 10000})
		require.NoError(t, err)
		endpoints := map[int64]string{}
		for _, j := range all {
			endpoints[j.ID] = j.Endpoint
		}
		n := 0
		for _, m := range got {
			for id, endpoint := range m {
				require.Equal(t, endpoint, endpoints[id], "job %d", id)
				n++
			}
		}
		require.Equal(t, writers*batches*size+batches*(size/3), n, "every enqueue's id is its own")
		require.Len(t, all, n)
	})
}

// One batch may mix jobs due after a delay with jobs due at a time: every
// row has the same values (a run time or NULL, and a delay), and each job
// is due when it asked, on the database clock.
func TestJobInsertManyMixesRunTimesAndDelays(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		now, err := s.Now(ctx)
		require.NoError(t, err)
		at := now.Add(3 * time.Hour).Truncate(time.Millisecond)
		batch := []store.NewJob{
			{Endpoint: "/at", Method: "POST", MaxAttempts: 1, IdempotencyKey: "a", RunAt: &at},
			{Endpoint: "/delay", Method: "POST", MaxAttempts: 1, IdempotencyKey: "d", Delay: time.Hour},
			{Endpoint: "/now", Method: "POST", MaxAttempts: 1, IdempotencyKey: "n"},
		}
		ids, err := s.JobInsertMany(ctx, batch)
		require.NoError(t, err)
		after, err := s.Now(ctx)
		require.NoError(t, err)
		runAt := func(i int) time.Time {
			j, err := s.JobGet(ctx, ids[i])
			require.NoError(t, err)
			return j.RunAt
		}
		require.WithinDuration(t, at, runAt(0), time.Millisecond, "at its time")
		require.WithinRange(t, runAt(1), now.Add(time.Hour-time.Second), after.Add(time.Hour+time.Second), "an hour after the insert")
		require.WithinRange(t, runAt(2), now.Add(-time.Second), after.Add(time.Second), "now")
	})
}

// A list by prefix on SQLite walks the newest jobs first and reads the
// older ones by the prefix's range only when the walk does not fill the
// page: the two parts meet without a gap or a repeat, with a cursor, with
// the jobs backing off, and for a retry. (SQLite alone: the other
// databases read a prefix with one plain statement, which
// TestJobsListFilters checks.)
func TestJobsListByPrefixPastTheNewest(t *testing.T) {
	s, _ := storetest.Open(t, "sqlite")
	ctx := context.Background()
	// 50 jobs of /p/a, then more than the walk reads of /q, then 20 of /p/b.
	type row struct {
		id       int64
		endpoint string
	}
	var rows []row
	for _, batch := range []struct {
		endpoint string
		n        int
	}{{"/p/a", 50}, {"/q", 10_050}, {"/p/b", 20}} {
		jobs := make([]store.NewJob, batch.n)
		for i := range jobs {
			jobs[i] = store.NewJob{Endpoint: batch.endpoint, Method: "POST", MaxAttempts: 2, IdempotencyKey: fmt.Sprint(len(rows) + i)}
		}
		ids, err := s.JobInsertMany(ctx, jobs)
		require.NoError(t, err)
		for _, id := range ids {
			rows = append(rows, row{id, batch.endpoint})
		}
	}
	// Every third /p/a job has failed once: it is backing off.
	backingOff := map[int64]bool{}
	for _, r := range rows[:50:50] {
		if r.id%3 == 0 {
			backingOff[r.id] = true
			_, err := s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {jobs} SET attempt = 1 WHERE id = ?`), r.id)
			require.NoError(t, err)
		}
	}
	want := func(f store.JobFilter) []int64 {
		var out []int64
		for i := len(rows) - 1; i >= 0 && len(out) < f.Limit; i-- {
			r := rows[i]
			if strings.HasPrefix(r.endpoint, f.EndpointPrefix) && (f.Before == 0 || r.id < f.Before) && (!f.Retrying || backingOff[r.id]) {
				out = append(out, r.id)
			}
		}
		return out
	}
	pb := rows[len(rows)-20:]
	for _, f := range []store.JobFilter{
		{EndpointPrefix: "/p/", Limit: 30},                            // 20 walked, 10 from the range
		{EndpointPrefix: "/p/", Limit: 10},                            // all walked
		{EndpointPrefix: "/p/", Limit: 30, Before: pb[5].id},          // 5 walked, 25 from the range
		{EndpointPrefix: "/p/", Limit: 30, Before: rows[60].id},       // below the walk: the range alone
		{EndpointPrefix: "/p/a", Limit: 100},                          // fewer than the page: the range alone
		{EndpointPrefix: "/q", Limit: 1000},                           // all walked
		{EndpointPrefix: "/q", Limit: 1000, Before: pb[0].id - 9_500}, // 9,500 walked, the rest from the range
		{EndpointPrefix: "/p/", Limit: 5, States: []string{store.StateReady}, Retrying: true},
		{EndpointPrefix: "/nomatch", Limit: 100},
	} {
		js, err := s.JobsList(ctx, f)
		require.NoError(t, err)
		var got []int64
		for _, j := range js {
			got = append(got, j.ID)
		}
		require.Equal(t, want(f), got, "%+v", f)
	}

	// A retry by prefix picks the same jobs: the newest 30 of /p/, which
	// are ready (none to retry) until they are cancelled.
	for _, id := range want(store.JobFilter{EndpointPrefix: "/p/", Limit: 40}) {
		ok, err := s.JobCancelIfWaiting(ctx, id, "operator")
		require.NoError(t, err)
		require.True(t, ok)
	}
	n, err := s.JobsRetry(ctx, store.JobFilter{EndpointPrefix: "/p/", Limit: 30}, "operator")
	require.NoError(t, err)
	require.EqualValues(t, 30, n)
	js, err := s.JobsList(ctx, store.JobFilter{EndpointPrefix: "/p/", States: []string{store.StateCancelled}, Limit: 100})
	require.NoError(t, err)
	require.Len(t, js, 10)
	require.Equal(t, want(store.JobFilter{EndpointPrefix: "/p/", Limit: 40})[30:], []int64{js[0].ID, js[1].ID, js[2].ID, js[3].ID, js[4].ID, js[5].ID, js[6].ID, js[7].ID, js[8].ID, js[9].ID})
}

// A time window stays exact across a step back of the database clock:
// the jobs written before the step, stamped later than some written after
// it, are listed with them.
func TestJobsListSinceAcrossAClockStepBack(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		// Five jobs 10 s apart up to 20 s ago, then the clock goes back
		// 25 s: a job every 4 s from 45 s ago to 1 s ago.
		var ago []time.Duration
		for _, sec := range []int{60, 50, 40, 30, 20} {
			ago = append(ago, time.Duration(sec)*time.Second)
		}
		for sec := 45; sec > 0; sec -= 4 {
			ago = append(ago, time.Duration(sec)*time.Second)
		}
		stamp := store.Expand(s.Dialect(), `UPDATE {jobs} SET created_at = {now+?} WHERE id = ?`)
		ids := make([]int64, len(ago))
		for i, a := range ago {
			id, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/a", Method: "POST", MaxAttempts: 1, IdempotencyKey: fmt.Sprint(i)})
			require.NoError(t, err)
			_, err = s.DB().ExecContext(ctx, stamp, -a.Milliseconds(), id)
			require.NoError(t, err)
			ids[i] = id
		}
		list := func(f store.JobFilter) []int64 {
			t.Helper()
			f.Limit = 100
			js, err := s.JobsList(ctx, f)
			require.NoError(t, err)
			var out []int64
			for _, j := range js {
				out = append(out, j.ID)
			}
			return out
		}
		// The stamps are read back: a job's age at a listing is the
		// database clock then less its created_at.
		created := make([]time.Time, len(ids))
		for i, id := range ids {
			j, err := s.JobGet(ctx, id)
			require.NoError(t, err)
			created[i] = j.Created
		}
		want := func(keep func(time.Duration) bool, now time.Time) []int64 {
			var out []int64
			for i := len(ids) - 1; i >= 0; i-- {
				if keep(now.Sub(created[i])) {
					out = append(out, ids[i])
				}
			}
			return out
		}
		// check lists f: the jobs 4 s apart are 2 s from the bound, so at
		// most one crosses it during the listing, and what comes back is
		// the selection at its start or at its end.
		check := func(f store.JobFilter, keep func(time.Duration) bool) {
			t.Helper()
			now, err := s.Now(ctx)
			require.NoError(t, err)
			before := want(keep, now)
			got := list(f)
			now, err = s.Now(ctx)
			require.NoError(t, err)
			if !slices.Equal(got, want(keep, now)) {
				require.Equal(t, before, got, "%+v", f)
			}
		}
		// Created within 35 s: two jobs from before the step, stamped
		// later than the first ones after it.
		check(store.JobFilter{Since: 35 * time.Second}, func(a time.Duration) bool { return a <= 35*time.Second })
		// Created more than 35 s ago: three from before the step, and
		// three after it.
		check(store.JobFilter{Until: 35 * time.Second}, func(a time.Duration) bool { return a > 35*time.Second })
	})
}

// A time window lists exactly the jobs created in it, newest id first,
// whatever the order of created_at among ids (a step back of the database
// clock, rows written with an older or later time): new ids stamped an
// hour or a day back, old ids stamped seconds ago. Each window is read
// alone and with a state, a prefix and a cursor, by both of SQLite's ways
// (a small window by the index on created_at, a large one by a walk of
// the ids), and a retry by a window changes the same jobs.
func TestJobsListTimeWindowOutOfIDOrder(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		// 60 jobs, 10 s apart from 605 s ago to 15 s ago in id order, but
		// for a few: no job is stamped within 5 s of a window's bound.
		const n = 60
		ago := make([]time.Duration, n)
		for i := range ago {
			ago[i] = time.Duration(n-i)*10*time.Second + 5*time.Second
			switch {
			case i < 12 && i%3 == 0:
				ago[i] = time.Duration(i+15) * time.Second // old ids, recent
			case i >= 30 && i%11 == 0:
				ago[i] = 24*time.Hour + time.Duration(i)*time.Second // new ids, a day back
			case i >= 40 && i%4 == 0:
				ago[i] = time.Hour + time.Duration(i)*time.Second // new ids, an hour back
			}
		}
		stamp := store.Expand(s.Dialect(), `UPDATE {jobs} SET created_at = {now+?} WHERE id = ?`)
		for i, a := range ago {
			endpoint := "/a/" + fmt.Sprint(i)
			if i%2 == 1 {
				endpoint = "/b/" + fmt.Sprint(i)
			}
			id, err := s.JobInsert(ctx, store.NewJob{Endpoint: endpoint, Method: "POST", MaxAttempts: 1, IdempotencyKey: fmt.Sprint(i)})
			require.NoError(t, err)
			_, err = s.DB().ExecContext(ctx, stamp, -a.Milliseconds(), id)
			require.NoError(t, err)
			if i%3 == 1 {
				ok, err := s.JobCancelIfWaiting(ctx, id, "operator")
				require.NoError(t, err)
				require.True(t, ok)
			}
		}
		all, err := s.JobsList(ctx, store.JobFilter{Limit: 1000})
		require.NoError(t, err)
		require.Len(t, all, n)
		// clock reads the database clock: the test runs for seconds, and a
		// job 5 s from a window's bound can cross it while the test reads.
		clock := func() time.Time {
			t.Helper()
			now, err := s.Now(ctx)
			require.NoError(t, err)
			return now
		}
		// want is the ids f selects at now, newest first, from the full read.
		want := func(f store.JobFilter, now time.Time) []int64 {
			var out []int64
			for _, j := range all {
				age := now.Sub(j.Created)
				if f.Since > 0 && age > f.Since || f.Until > 0 && age <= f.Until ||
					len(f.States) > 0 && !slices.Contains(f.States, j.State) ||
					!strings.HasPrefix(j.Endpoint, f.EndpointPrefix) {
					continue
				}
				out = append(out, j.ID)
			}
			return out
		}
		// list reads every page of f, page ids at a time.
		list := func(f store.JobFilter, page int) []int64 {
			t.Helper()
			var out []int64
			f.Limit = page
			for {
				js, err := s.JobsList(ctx, f)
				require.NoError(t, err)
				for _, j := range js {
					out = append(out, j.ID)
				}
				if len(js) < page {
					return out
				}
				f.Before = js[len(js)-1].ID
			}
		}
		windows := []store.JobFilter{
			{Since: 5 * time.Minute},
			{Since: 2 * time.Hour},
			{Until: 5 * time.Minute},
			{Until: 2 * time.Hour},
			{Since: 2 * time.Hour, Until: 5 * time.Minute},
			{Since: 25 * time.Hour, Until: 30 * time.Minute},
		}
		for _, rows := range []int{0, 1, 8} { // the default bound, every window walked, some of each
			s.SetWindowRows(rows)
			for _, w := range windows {
				for _, f := range []store.JobFilter{
					w,
					{Since: w.Since, Until: w.Until, States: []string{store.StateCancelled}},
					{Since: w.Since, Until: w.Until, EndpointPrefix: "/a/"},
					{Since: w.Since, Until: w.Until, States: []string{store.StateReady}, EndpointPrefix: "/b/"},
				} {
					for _, page := range []int{100, 3} {
						// Ages are 10 s apart, so at most one job crosses a
						// bound during one listing: what comes back is the
						// selection at its start or at its end.
						before := want(f, clock())
						got := list(f, page)
						after := want(f, clock())
						if !slices.Equal(got, after) {
							require.Equal(t, before, got, "%+v by pages of %d, window rows %d", f, page, rows)
						}
					}
				}
			}
		}
		s.SetWindowRows(0)
		// A retry by a window makes ready exactly the cancelled jobs in it.
		f := store.JobFilter{Since: 2 * time.Hour, Until: 5 * time.Minute, States: []string{store.StateCancelled}}
		cancelled := len(want(store.JobFilter{States: []string{store.StateCancelled}}, clock()))
		expect := want(f, clock())
		require.NotEmpty(t, expect)
		retried, err := s.JobsRetry(ctx, store.JobFilter{Since: f.Since, Until: f.Until, States: f.States, Limit: 1000}, "operator")
		require.NoError(t, err)
		// A job can only age into this window (its newer bound), never out.
		require.GreaterOrEqual(t, int(retried), len(expect))
		require.LessOrEqual(t, int(retried), len(want(f, clock())))
		for _, id := range expect {
			j, err := s.JobGet(ctx, id)
			require.NoError(t, err)
			require.Equal(t, store.StateReady, j.State, "job %d", id)
		}
		js, err := s.JobsList(ctx, store.JobFilter{States: []string{store.StateCancelled}, Limit: 1000})
		require.NoError(t, err)
		require.Len(t, js, cancelled-int(retried))
	})
}
