package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// oddRow is a kind of row that no door of slotpoller writes, as an
// application writing the table directly (or corruption) could leave it:
// the SET list that makes it, per driver ("*" for every driver; a driver
// without an entry cannot hold such a value), and what must become of it.
type oddRow struct {
	name   string
	set    map[string]string
	state  string // the state it must end in
	err    string // a substring of its last_error ("" for none to check)
	called bool   // whether its endpoint is called (once)
}

// Text with control characters, in each driver's SQL.
var (
	crlf = map[string]string{"postgres": `'a' || chr(13) || chr(10) || 'b'`, "sqlite": `'a' || char(13) || char(10) || 'b'`,
		"sqlserver": `N'a' + NCHAR(13) + NCHAR(10) + N'b'`, "mysql": `CONCAT('a', CHAR(13), CHAR(10), 'b')`}
	ctrl1 = map[string]string{"postgres": `'a' || chr(1)`, "sqlite": `'a' || char(1)`, "sqlserver": `N'a' + NCHAR(1)`, "mysql": `CONCAT('a', CHAR(1))`}
)

func each(set string) map[string]string { return map[string]string{"*": set} }

func oddRows() []oddRow {
	const cannot = store.CannotRun
	return []oddRow{
		// Times.
		{name: "run_at -infinity", set: map[string]string{"postgres": `run_at = '-infinity'`, "sqlite": `run_at = -9223372036854775808`},
			state: store.StateDead, err: cannot + "run_at "},
		{name: "run_at before year 1", set: map[string]string{"postgres": `run_at = '4713-01-01 00:00:00+00 BC'`, "sqlite": `run_at = -99999999999999`},
			state: store.StateDead, err: cannot + "run_at "},
		{name: "run_at year 1", set: map[string]string{"postgres": `run_at = '0001-01-01 00:00:00+00'`, "sqlite": `run_at = -62135596800000`,
			"sqlserver": `run_at = '0001-01-01'`, "mysql": `run_at = '0001-01-01'`}, state: store.StateDone, called: true},
		{name: "run_at as a real", set: map[string]string{"sqlite": `run_at = 1000.5`}, state: store.StateDone, called: true},
		{name: "scheduled_for infinity", set: map[string]string{"postgres": `scheduled_for = 'infinity'`, "sqlite": `scheduled_for = 9223372036854775807`},
			state: store.StateDead, err: cannot + "scheduled_for "},
		{name: "scheduled_for -infinity", set: map[string]string{"postgres": `scheduled_for = '-infinity'`, "sqlite": `scheduled_for = -9223372036854775808`},
			state: store.StateDead, err: cannot + "scheduled_for "},
		{name: "scheduled_for as text", set: map[string]string{"sqlite": `scheduled_for = 'tomorrow'`}, state: store.StateDead, err: cannot + `scheduled_for "tomorrow" is not a time`},
		{name: "scheduled_for year 9999", set: map[string]string{"sqlserver": `scheduled_for = '9999-12-31 23:59:59.9999999'`, "mysql": `scheduled_for = '9999-12-31 23:59:59.999999'`, "postgres": `scheduled_for = '9999-12-31 23:59:59.999+00'`},
			state: store.StateDone, called: true},
		{name: "created_at infinity", set: map[string]string{"postgres": `created_at = 'infinity'`, "sqlite": `created_at = 9223372036854775807`},
			state: store.StateDone, called: true},
		{name: "start_by -infinity", set: map[string]string{"postgres": `start_by = '-infinity'`, "sqlite": `start_by = -9223372036854775808`, "sqlserver": `start_by = '0001-01-01'`, "mysql": `start_by = '0001-01-01'`},
			state: store.StateMissed, err: "missed"},
		{name: "start_by infinity", set: map[string]string{"postgres": `start_by = 'infinity'`, "sqlite": `start_by = 9223372036854775807`, "sqlserver": `start_by = '9999-12-31'`, "mysql": `start_by = '9999-12-31'`},
			state: store.StateDone, called: true},
		{name: "running with lease_until NULL", set: each(`state = 'running', owner = 'inc-gone', owner_node = 'node-gone', lease_until = NULL, started_at = {now}, attempt = 1, token = 1`),
			state: store.StateDone, called: true},
		{name: "running with lease_until infinity", set: map[string]string{
			"postgres":  `state = 'running', owner = 'inc-gone', owner_node = 'node-gone', lease_until = 'infinity', started_at = {now}, attempt = 1, token = 1`,
			"sqlite":    `state = 'running', owner = 'inc-gone', owner_node = 'node-gone', lease_until = 9223372036854775807, started_at = {now}, attempt = 1, token = 1`,
			"sqlserver": `state = 'running', owner = 'inc-gone', owner_node = 'node-gone', lease_until = '9999-12-31', started_at = {now}, attempt = 1, token = 1`,
			"mysql":     `state = 'running', owner = 'inc-gone', owner_node = 'node-gone', lease_until = '9999-12-31', started_at = {now}, attempt = 1, token = 1`},
			state: store.StateDone, called: true},
		{name: "running with a lease a year ahead", set: map[string]string{
			"postgres":  `state = 'running', owner = 'inc-gone', owner_node = 'node-gone', lease_until = clock_timestamp() + interval '365 days', started_at = {now}, attempt = 1, token = 1`,
			"sqlite":    `state = 'running', owner = 'inc-gone', owner_node = 'node-gone', lease_until = {now} + 31536000000, started_at = {now}, attempt = 1, token = 1`,
			"sqlserver": `state = 'running', owner = 'inc-gone', owner_node = 'node-gone', lease_until = DATEADD(day, 365, SYSUTCDATETIME()), started_at = {now}, attempt = 1, token = 1`,
			"mysql":     `state = 'running', owner = 'inc-gone', owner_node = 'node-gone', lease_until = DATE_ADD(UTC_TIMESTAMP(6), INTERVAL 365 DAY), started_at = {now}, attempt = 1, token = 1`},
			state: store.StateDone, called: true},
		// States.
		{name: "unknown state", set: each(`state = 'zombie'`), state: "zombie"},
		// Counters.
		{name: "token at bigint max", set: each(`token = 9223372036854775807`), state: store.StateDead, err: cannot + "token is at its maximum"},
		{name: "token one below bigint max", set: each(`token = 9223372036854775806`), state: store.StateDead, err: cannot + "token is at its maximum"},
		{name: "token as text", set: map[string]string{"sqlite": `token = 'abc'`}, state: store.StateDead, err: cannot + "token "},
		{name: "token negative", set: each(`token = -5`), state: store.StateDead, err: cannot + "token -4 is not positive"},
		{name: "attempt at int max", set: each(`attempt = 2147483647`), state: store.StateDead, err: cannot + "attempt is at its maximum"},
		{name: "attempt negative", set: each(`attempt = -3`), state: store.StateDead, err: cannot + "attempt -3 is negative"},
		{name: "attempt beyond max_attempts", set: each(`attempt = 10`), state: store.StateDead, err: cannot + "attempt 11 is beyond max_attempts 3"},
		{name: "attempt as a real", set: map[string]string{"sqlite": `attempt = 0.5`}, state: store.StateDead, err: cannot + "attempt "},
		{name: "max_attempts zero", set: each(`max_attempts = 0`), state: store.StateDead, err: cannot + "max_attempts 0 is below 1"},
		{name: "max_attempts negative", set: each(`max_attempts = -7`), state: store.StateDead, err: cannot + "max_attempts -7 is below 1"},
		{name: "max_attempts at int max", set: each(`max_attempts = 2147483647`), state: store.StateDone, called: true},
		{name: "timeout negative", set: each(`timeout_ms = -1`), state: store.StateDead, err: cannot + "timeout_ms -1 is negative"},
		{name: "timeout at bigint max", set: each(`timeout_ms = 9223372036854775807`), state: store.StateDead, err: cannot + "timeout_ms 9223372036854775807 is above 24 hours"},
		// Keys.
		{name: "idempotency key with CR/LF", set: map[string]string{"postgres": "idem_key = " + crlf["postgres"], "sqlite": "idem_key = " + crlf["sqlite"],
			"sqlserver": "idem_key = " + crlf["sqlserver"], "mysql": "idem_key = " + crlf["mysql"]}, state: store.StateFailed, err: "Idempotency-Key"},
		{name: "idempotency key with a control character", set: map[string]string{"postgres": "idem_key = " + ctrl1["postgres"], "sqlite": "idem_key = " + ctrl1["sqlite"],
			"sqlserver": "idem_key = " + ctrl1["sqlserver"], "mysql": "idem_key = " + ctrl1["mysql"]}, state: store.StateFailed, err: "control character"},
		{name: "idempotency key empty", set: each(`idem_key = ''`), state: store.StateDone, called: true},
		{name: "idempotency key as a number", set: map[string]string{"sqlite": `idem_key = 42`}, state: store.StateDone, called: true},
		// Endpoints and methods.
		{name: "endpoint absolute", set: each(`endpoint = 'http://elsewhere.example/x'`), state: store.StateFailed, err: "absolute"},
		{name: "endpoint with CR/LF", set: map[string]string{"postgres": "endpoint = " + crlf["postgres"], "sqlite": "endpoint = " + crlf["sqlite"],
			"sqlserver": "endpoint = " + crlf["sqlserver"], "mysql": "endpoint = " + crlf["mysql"]}, state: store.StateFailed, err: "control character"},
		{name: "endpoint empty", set: each(`endpoint = ''`), state: store.StateFailed, err: "empty"},
		{name: "endpoint scheme-relative", set: each(`endpoint = '//elsewhere.example/x'`), state: store.StateFailed, err: "elsewhere.example"},
		{name: "endpoint with a dot segment", set: each(`endpoint = '/a/../b'`), state: store.StateFailed, err: ".."},
		{name: "method unknown", set: each(`method = 'BREW'`), state: store.StateFailed, err: "BREW"},
		{name: "method in lower case", set: each(`method = 'get'`), state: store.StateDone, called: true},
		// Payloads.
		{name: "payload NULL", set: each(`payload = NULL`), state: store.StateDone, called: true},
		{name: "payload as text", set: map[string]string{"sqlite": `payload = 'plain text'`}, state: store.StateDone, called: true},
		{name: "payload as a number", set: map[string]string{"sqlite": `payload = 12`}, state: store.StateDead, err: cannot + `payload "12" is not bytes`},
	}
}

// TestOddRowsAreSetAsideAndNeverBlockGoodJobs writes rows no door writes
// among good jobs, and runs the node's turns: every good job is called
// once, every row the node cannot run ends dead or failed with a
// last_error that says why, none is claimed over and over, and every row
// can still be read and shown.
func TestOddRowsAreSetAsideAndNeverBlockGoodJobs(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		var mu sync.Mutex
		calls := map[string]int{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			calls[r.URL.Path]++
			mu.Unlock()
		}))
		t.Cleanup(srv.Close)
		base, _ := url.Parse(srv.URL)
		const capacity = 128
		r := newRunner(t, s, base, clock.NewFake(t0), capacity)

		var good []int64
		for i := range 25 {
			good = append(good, enqueue(t, s, fmt.Sprintf("/good/%d", i), 3))
		}
		type written struct {
			oddRow
			id, token int64
			path      string
		}
		var odd []written
		for i, k := range oddRows() {
			set, ok := k.set[driver]
			if !ok {
				set, ok = k.set["*"]
			}
			if !ok {
				continue
			}
			path := fmt.Sprintf("/odd/%d", i)
			id := enqueue(t, s, path, 3)
			_, err := s.DB().ExecContext(ctx, store.Expand(s.Dialect(), `UPDATE {jobs} SET `+set+` WHERE id = ?`), id)
			require.NoError(t, err, "%s: %s", k.name, set)
			odd = append(odd, written{oddRow: k, id: id, token: 0, path: path})
			if strings.Contains(set, "token = 1") {
				odd[len(odd)-1].token = 1
			}
		}
		require.GreaterOrEqual(t, len(odd), 25, "odd kinds on %s", driver)

		for round := range 6 {
			if _, err := r.Poll(ctx, alone(capacity)); err != nil {
				t.Logf("round %d: poll: %v", round, err)
			}
			r.Wait()
		}

		mu.Lock()
		defer mu.Unlock()
		blocked := 0
		for i, id := range good {
			j := get(t, s, id)
			if n := calls[fmt.Sprintf("/good/%d", i)]; j.State != store.StateDone || n != 1 {
				blocked++
				t.Errorf("good job %d: %s after %d calls, want done after 1 (last_error %q)", i, j.State, n, j.LastError)
			}
		}
		failed := 0
		for _, o := range odd {
			j, err := s.JobGet(ctx, o.id)
			if !assertOdd(t, o.name, err == nil, "read: %v", err) {
				failed++
				continue
			}
			_, err = json.Marshal(j)
			ok := assertOdd(t, o.name, err == nil, "show as JSON: %v", err)
			ok = assertOdd(t, o.name, j.State == o.state, "state %s, want %s (last_error %q)", j.State, o.state, j.LastError) && ok
			ok = assertOdd(t, o.name, strings.Contains(j.LastError, o.err), "last_error %q, want it to contain %q", j.LastError, o.err) && ok
			want := 0
			if o.called {
				want = 1
			}
			ok = assertOdd(t, o.name, calls[o.path] == want, "called %d times, want %d", calls[o.path], want) && ok
			if j.Token < 9223372036854775806 {
				ok = assertOdd(t, o.name, j.Token <= o.token+2, "token climbed to %d: claimed again and again", j.Token) && ok
			}
			if !ok {
				failed++
			}
		}
		list, err := s.JobsList(ctx, store.JobFilter{Limit: 1000})
		require.NoError(t, err, "the job list reads every row")
		_, err = json.Marshal(list)
		require.NoError(t, err, "the job list shows as JSON")
		_, err = s.JobThroughput(ctx, time.Hour, 1000)
		require.NoError(t, err, "the dashboard's throughput counts the rows set aside")
		require.Zero(t, blocked, "%d of %d good jobs were not run once", blocked, len(good))
		require.Zero(t, failed, "%d of %d odd kinds were not set aside as they should be", failed, len(odd))
	})
}

// assertOdd reports a kind's failed expectation, naming the kind, and
// returns ok.
func assertOdd(t *testing.T, kind string, ok bool, format string, args ...any) bool {
	t.Helper()
	if !ok {
		t.Errorf("%s: %s", kind, fmt.Sprintf(format, args...))
	}
	return ok
}
