package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slotpoller/slotpoller/bench/benchkit"
	"github.com/slotpoller/slotpoller/callproto"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/rotation"
	"github.com/slotpoller/slotpoller/service"
)

// Scenario C: schedules firing at the same second

// firingGap is the time between two firings of scenario C: long enough for
// a firing's backlog signal (held 3 heartbeats or slots) to have ended
// before the next one.
const firingGap = 20 * time.Second

// scheduleLead is how far ahead of the database clock the first firing is
// put: the schedules must all exist before the slot owner writes the
// occurrences, two slots before they are due.
const scheduleLead = 8 * time.Second

type occurrenceRow struct {
	jobRow   // run = scheduled_for
	schedule string
	state    string
	created  time.Time
}

type firingResult struct {
	fire   time.Time
	rows   []occurrenceRow
	total  int            // occurrences of this fire time in the jobs table
	states map[string]int // their states when the last one started
	calls  int            // endpoint calls that carried this fire time, counted at the end
	dupes  int            // schedules whose occurrence was called more than once
	// Counters 2.5 s before the fire time (before the occurrences are
	// written), just before it, and when the last occurrence started (or
	// was missed).
	s0, s1, s2 []service.Stats
}

type scheduleResult struct {
	names       []string
	capacity    int
	cron        string
	maxAttempts int
	create      time.Duration // wall time to add the schedules
	lead        time.Duration // database time left before the first firing when adding ended
	firings     []firingResult
	missed      int64 // schedules' missed counters at the end
	other       int   // endpoint calls without the fire-time header
}

// dbClock converts database times to local ones for the bench's sleeps.
type dbClock struct{ offset time.Duration } // database minus local

func measureDB(ctx context.Context, s *store.Store) (dbClock, error) {
	best := time.Duration(-1)
	var c dbClock
	for range 5 {
		t0 := time.Now()
		db, err := s.Now(ctx)
		t1 := time.Now()
		if err != nil {
			return c, err
		}
		if rtt := t1.Sub(t0); best < 0 || rtt < best {
			best = rtt
			c.offset = db.Sub(t0.Add(rtt / 2))
		}
	}
	return c, nil
}

func (c dbClock) sleepUntil(ctx context.Context, db time.Time) error {
	return benchkit.Sleep(ctx, time.Until(db.Add(-c.offset)))
}

func scheduleScenario(ctx context.Context, o options, logger *slog.Logger, stderr io.Writer) (res scheduleResult, err error) {
	sc, err := newSchema(ctx, o.dsn)
	if err != nil {
		return res, err
	}
	defer sc.drop()
	var callsMu sync.Mutex
	calls := map[string]map[string]int{} // fire time -> endpoint -> calls
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		callsMu.Lock()
		f := r.Header.Get(callproto.HeaderScheduledFor)
		if calls[f] == nil {
			calls[f] = map[string]int{}
		}
		calls[f][r.URL.Path]++
		callsMu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	var cfgs []config.Config
	for _, name := range nodeNames(o.scheduleNodes) {
		c := sc.nodeConfig(o, name)
		c.Node.Capacity = o.scheduleCapacity
		c.Jobs.BaseURL = srv.URL
		cfgs = append(cfgs, c)
	}
	f, err := startFarm(cfgs, logger)
	if err != nil {
		return res, err
	}
	defer func() {
		if serr := f.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	res.names, res.capacity, res.maxAttempts = f.names, o.scheduleCapacity, cfgs[0].Jobs.MaxAttempts
	if err := f.waitLive(ctx, sc.store, time.Duration(cfgs[0].Checkin.TTL)); err != nil {
		return res, err
	}
	if err := benchkit.Sleep(ctx, o.slot); err != nil {
		return res, err
	}
	clk, err := measureDB(ctx, sc.store)
	if err != nil {
		return res, err
	}

	// Every schedule fires at the same seconds: a cron with a seconds field
	// listing the firings, 20 s apart, the first scheduleLead ahead.
	now, err := sc.store.Now(ctx)
	if err != nil {
		return res, err
	}
	first := now.Add(scheduleLead).Truncate(time.Second).Add(time.Second)
	var fires []time.Time
	var secs []string
	for i := range o.firings {
		t := first.Add(time.Duration(i) * firingGap)
		fires = append(fires, t)
		secs = append(secs, strconv.Itoa(t.Second()))
	}
	res.cron = strings.Join(secs, ",") + " * * * * *"
	t0 := time.Now()
	err = parallel(o.schedules, func(i int) error {
		return jobs.AddSchedule(ctx, sc.store, store.Schedule{
			Name: fmt.Sprintf("bench-%04d", i), Cron: res.cron, Endpoint: fmt.Sprintf("/schedule/%04d", i), Method: "POST",
			MaxAttempts: res.maxAttempts, Tolerance: o.tolerance, Misfire: store.MisfireOnce, Overlap: store.OverlapForbid,
			Enabled: true, Source: store.SourceCommand,
		})
	})
	if err != nil {
		return res, err
	}
	res.create = time.Since(t0)
	after, err := sc.store.Now(ctx)
	if err != nil {
		return res, err
	}
	res.lead = first.Sub(after)
	all, _, err := sc.store.Schedules(ctx)
	if err != nil {
		return res, err
	}
	for _, s := range all {
		if s.NextFireAt == nil || !s.NextFireAt.Equal(first) {
			return res, fmt.Errorf("schedule %s: next fire time %v, want %v", s.Name, s.NextFireAt, first)
		}
	}
	if res.lead < 2*o.slot+500*time.Millisecond {
		fmt.Fprintf(stderr, "bench: warning: adding the schedules took %v; only %v left before the first firing\n", res.create, res.lead)
	}

	for _, fire := range fires {
		fr, err := measureFiring(ctx, o, clk, sc, f, fire)
		if err != nil {
			return res, err
		}
		res.firings = append(res.firings, fr)
		fmt.Fprintf(stderr, "bench: schedules: firing at %s: %d occurrences started, %d polls\n",
			fire.Format(time.TimeOnly), len(fr.rows), sumPolls(fr.s1, fr.s2))
	}

	// Wait for the last calls to be recorded, then count what the endpoint saw.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var busy int
		if err := sc.store.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM slotpoller_jobs WHERE schedule IS NOT NULL AND state IN ('ready', 'running') AND scheduled_for <= $1`,
			fires[len(fires)-1]).Scan(&busy); err != nil {
			return res, err
		}
		if busy == 0 {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("%d occurrences still ready or running 30s after the last one started", busy)
		}
		if err := benchkit.Sleep(ctx, 20*time.Millisecond); err != nil {
			return res, err
		}
	}
	if err := sc.store.DB().QueryRowContext(ctx, `SELECT COALESCE(SUM(missed), 0) FROM slotpoller_schedules`).Scan(&res.missed); err != nil {
		return res, err
	}
	callsMu.Lock()
	defer callsMu.Unlock()
	for i := range res.firings {
		fr := &res.firings[i]
		for _, n := range calls[fr.fire.UTC().Format(time.RFC3339Nano)] {
			fr.calls += n
			if n > 1 {
				fr.dupes++
			}
		}
	}
	for _, n := range calls[""] {
		res.other += n
	}
	return res, f.failed()
}

// measureFiring waits for one firing and reads back its occurrences once
// every one has started or been missed.
func measureFiring(ctx context.Context, o options, clk dbClock, sc *schema, f *farm, fire time.Time) (fr firingResult, err error) {
	fr.fire = fire
	if err := clk.sleepUntil(ctx, fire.Add(-2*o.slot-500*time.Millisecond)); err != nil {
		return fr, err
	}
	fr.s0 = f.stats()
	if err := clk.sleepUntil(ctx, fire.Add(-100*time.Millisecond)); err != nil {
		return fr, err
	}
	fr.s1 = f.stats()
	deadline := time.Now().Add(time.Until(fire.Add(-clk.offset)) + 2*time.Minute)
	for {
		var total, started, missed int
		err := sc.store.DB().QueryRowContext(ctx, `SELECT COUNT(*), COUNT(started_at), COUNT(*) FILTER (WHERE state = 'missed')
FROM slotpoller_jobs WHERE schedule IS NOT NULL AND scheduled_for = $1`, fire).Scan(&total, &started, &missed)
		if err != nil {
			return fr, err
		}
		if started+missed >= o.schedules { // a short -tolerance can make some miss
			fr.total = total
			break
		}
		if err := f.failed(); err != nil {
			return fr, err
		}
		if time.Now().After(deadline) {
			return fr, fmt.Errorf("firing at %v: %d of %d occurrences written, %d started after 2 minutes", fire, total, o.schedules, started)
		}
		if err := benchkit.Sleep(ctx, 20*time.Millisecond); err != nil {
			return fr, err
		}
	}
	fr.s2 = f.stats()
	rows, err := sc.store.DB().QueryContext(ctx, `SELECT schedule, scheduled_for, created_at, started_at, COALESCE(owner_node, ''), state
FROM slotpoller_jobs WHERE schedule IS NOT NULL AND scheduled_for = $1`, fire)
	if err != nil {
		return fr, err
	}
	defer rows.Close()
	fr.states = map[string]int{}
	for rows.Next() {
		var r occurrenceRow
		var started sql.NullTime
		if err := rows.Scan(&r.schedule, &r.run, &r.created, &started, &r.node, &r.state); err != nil {
			return fr, err
		}
		r.run, r.created, r.started = r.run.UTC(), r.created.UTC(), started.Time.UTC()
		fr.states[r.state]++
		if started.Valid {
			fr.rows = append(fr.rows, r)
		}
	}
	return fr, rows.Err()
}

func sumPolls(a, b []service.Stats) int64 {
	var n int64
	for i := range b {
		n += b[i].Jobs.Polls - a[i].Jobs.Polls
	}
	return n
}

func printSchedules(w io.Writer, o options, r scheduleResult) {
	fmt.Fprintf(w, "## C. Schedules (%d schedules firing at the same second, %d nodes × capacity %d, slot %v, endpoint answers 204 at once)\n\n",
		o.schedules, len(r.names), r.capacity, o.slot)
	fmt.Fprintf(w, "Target (issue 5): occurrences due at the same moment are spread over the live nodes by capacity (here %.0f each) and start within their tolerance (%v).\n\n",
		float64(o.schedules)/float64(len(r.names)), o.tolerance)
	fmt.Fprintf(w, "Every schedule: cron `%s` (UTC), tolerance %v, misfire once, overlap forbid, max attempts %d. "+
		"Added in %s (through jobs.AddSchedule, 8 connections); %s of database time to spare before the first firing. "+
		"Occurrences the misfire policy skipped (the schedules' missed counters) at the end: %d. Endpoint calls without a fire time: %d.\n\n",
		r.cron, o.tolerance, r.maxAttempts, ms(r.create), ms(r.lead), r.missed, r.other)

	fmt.Fprintln(w, "| fire time (UTC) | occurrences started | missed | lateness p50 | p99 | max | min | nodes used | occurrences per node | polls that claimed | farm polls | slots | calls (repeated) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
	for _, fr := range r.firings {
		var late []time.Duration
		perNode := map[string]int{}
		var last time.Time
		for _, row := range fr.rows {
			late = append(late, row.started.Sub(row.run))
			perNode[row.node]++
			if row.started.After(last) {
				last = row.started
			}
		}
		slices.Sort(late)
		var counts []string
		for _, name := range r.names {
			counts = append(counts, strconv.Itoa(perNode[name]))
		}
		var jr []jobRow
		for _, row := range fr.rows {
			jr = append(jr, row.jobRow)
		}
		slots := rotation.Slot(last, o.slot) - rotation.Slot(fr.fire, o.slot) + 1
		fmt.Fprintf(w, "| %s | %d of %d | %d | %s | %s | %s | %s | %d of %d | %s | %d | %d | %d | %d (%d) |\n",
			fr.fire.Format(time.TimeOnly), len(fr.rows), fr.total, fr.states[store.StateMissed], ms(benchkit.Percentile(late, 0.50)), ms(benchkit.Percentile(late, 0.99)),
			ms(benchkit.Percentile(late, 1)), ms(benchkit.Percentile(late, 0)), len(perNode), len(r.names), strings.Join(counts, " / "),
			len(claimBatches(jr, o.slot)), sumPolls(fr.s1, fr.s2), slots, fr.calls, fr.dupes)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Occurrences per node are in rotation order (%s). \"Farm polls\" are all polls from 100 ms before the fire time until the last occurrence started; "+
		"\"slots\" counts the slots from the one the fire time opens to the one the last start fell in.\n\n", strings.Join(r.names, ", "))

	for i, fr := range r.firings {
		var first, last time.Time
		for j, row := range fr.rows {
			if j == 0 || row.created.Before(first) {
				first = row.created
			}
			if row.created.After(last) {
				last = row.created
			}
		}
		fmt.Fprintf(w, "### Firing %d at %s\n\n", i+1, fr.fire.Format(time.TimeOnly))
		if len(fr.rows) > 0 {
			ws := rotation.Slot(first, o.slot)
			fmt.Fprintf(w, "Occurrences written (created_at) from %s to %s before the fire time, in slot %d (owner %s). States when the last one started: %v.\n\n",
				ms(fr.fire.Sub(first)), ms(fr.fire.Sub(last)), ws-rotation.Slot(fr.fire, o.slot), rotation.Owner(ws, r.names), fr.states)
		}
		perNode := map[string]int{}
		for _, row := range fr.rows {
			perNode[row.node]++
		}
		fmt.Fprintln(w, "| node | occurrences run | share by capacity | polls from fire time to last start | claimed | statements while writing (−2.5 s … −0.1 s) | statements from fire time to last start |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
		for j, name := range r.names {
			fmt.Fprintf(w, "| %s | %d | %.0f | %d | %d | %d | %d |\n", name, perNode[name], float64(o.schedules)/float64(len(r.names)),
				fr.s2[j].Jobs.Polls-fr.s1[j].Jobs.Polls, fr.s2[j].Jobs.Claimed-fr.s1[j].Jobs.Claimed,
				fr.s1[j].Statements-fr.s0[j].Statements, fr.s2[j].Statements-fr.s1[j].Statements)
		}
		fmt.Fprintln(w)
		var jr []jobRow
		for _, row := range fr.rows {
			jr = append(jr, row.jobRow)
		}
		fmt.Fprintf(w, "Claims by slot (slot 0 is the slot the fire time opens; start delay = lateness):\n\n")
		printClaims(w, jr, fr.fire, o.slot, r.names)
	}
}
