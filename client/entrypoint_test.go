package client_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	mssql "github.com/microsoft/go-mssqldb"
	"github.com/slotpoller/slotpoller/callproto"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// The database entry points (schema/migrations/*/0006_enqueue.sql), called
// as an application in another language calls them: plain SQL through
// database/sql, no slotpoller helper.

// arg is one named argument of the entry point.
type arg struct {
	name  string
	value any
}

// enqueueSQL calls the dialect's entry point with the given arguments (the
// others take their defaults) and returns the new job's id.
func enqueueSQL(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, driver, schema string, args ...arg) (int64, error) {
	var names, params []string
	var values []any
	for i, a := range args {
		names = append(names, a.name)
		values = append(values, a.value)
		switch driver {
		case "postgres":
			params = append(params, fmt.Sprintf("%s => $%d", a.name, i+1))
		case "sqlserver":
			params = append(params, fmt.Sprintf("@%s = @p%d", a.name, i+1))
		default:
			params = append(params, "?")
		}
	}
	var id int64
	switch driver {
	case "postgres":
		err := q.QueryRowContext(ctx, "SELECT slotpoller_enqueue_v1("+strings.Join(params, ", ")+")", values...).Scan(&id)
		return id, err
	case "mysql":
		// A procedure takes every argument, by position: NULL is the
		// default. v1 has no traceparent (a procedure takes no defaults,
		// so it could not gain one): v2 is v1's ten and a traceparent.
		byName := map[string]any{}
		for _, a := range args {
			byName[a.name] = a.value
		}
		call, names := "CALL slotpoller_enqueue_v1(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", mysqlEnqueueArgs
		if _, ok := byName["traceparent"]; ok {
			call, names = "CALL slotpoller_enqueue_v2(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", append(names[:len(names):len(names)], "traceparent")
		}
		var all []any
		for _, n := range names {
			all = append(all, byName[n])
		}
		err := q.QueryRowContext(ctx, call, all...).Scan(&id)
		return id, err
	case "sqlserver":
		err := q.QueryRowContext(ctx, "EXEC ["+schema+"].[enqueue_v1] "+strings.Join(params, ", "), values...).Scan(&id)
		return id, err
	}
	_, err := q.ExecContext(ctx, "INSERT INTO slotpoller_enqueue_v1 ("+strings.Join(names, ", ")+") VALUES ("+strings.Join(params, ", ")+")", values...)
	if err != nil {
		return 0, err
	}
	// In the same transaction: the writer's lock makes the last id given
	// out this INSERT's.
	err = q.QueryRowContext(ctx, "SELECT seq FROM sqlite_sequence WHERE name = 'slotpoller_jobs'").Scan(&id)
	return id, err
}

func countJobs(t *testing.T, f *farm, endpoint string) int {
	t.Helper()
	var n int
	q := store.Expand(f.s.Dialect(), `SELECT COUNT(*) FROM {jobs} WHERE endpoint = ?`)
	require.NoError(t, f.s.DB().QueryRowContext(context.Background(), q, endpoint).Scan(&n))
	return n
}

// Rollback: nothing, and nothing runs. Commit: one job, called once, with
// its payload and the headers of any job.
func TestEntryPointTx(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		f := newFarm(t, driver)
		ctx := context.Background()
		db := f.s.DB()
		payload := []byte(`{"order":42}`)

		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = enqueueSQL(ctx, tx, driver, f.schema, arg{"endpoint", "/rolled-back"}, arg{"payload", payload})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback())
		require.Zero(t, countJobs(t, f, "/rolled-back"))

		tx, err = db.BeginTx(ctx, nil)
		require.NoError(t, err)
		id, err := enqueueSQL(ctx, tx, driver, f.schema, arg{"endpoint", "/committed?x=1"}, arg{"payload", payload},
			arg{"method", "PUT"}, arg{"max_attempts", 3}, arg{"timeout_ms", 2500}, arg{"unique_key", "order-42"},
			arg{"idempotency_key", "order-42-v1"})
		require.NoError(t, err)
		id2, err := enqueueSQL(ctx, tx, driver, f.schema, arg{"endpoint", "/defaults"})
		require.NoError(t, err)
		require.Greater(t, id2, id)
		require.NoError(t, tx.Commit())

		require.Equal(t, 2, f.poll(t))
		require.Zero(t, f.poll(t))
		require.Zero(t, f.called("/rolled-back"))
		require.Equal(t, 1, f.called("/committed"))
		require.Equal(t, 1, f.called("/defaults"))
		f.mu.Lock()
		got, dflt := f.last["/committed"], f.last["/defaults"]
		f.mu.Unlock()
		require.Equal(t, "PUT", got.method)
		require.Equal(t, string(payload), got.body)
		require.Equal(t, strconv.FormatInt(id, 10), got.header.Get(callproto.HeaderJob))
		require.Equal(t, "order-42-v1", got.header.Get(callproto.HeaderIdempotencyKey))
		require.Equal(t, "1", got.header.Get(callproto.HeaderAttempt))
		require.Equal(t, "2500", got.header.Get(callproto.HeaderTimeoutMs))
		require.Equal(t, "application/json", got.header.Get("Content-Type"))

		// The defaults are the Go client's: POST, 33 attempts, a generated
		// idempotency key that the Go rules accept.
		require.Equal(t, "POST", dflt.method)
		require.Equal(t, strconv.FormatInt(id2, 10), dflt.header.Get(callproto.HeaderJob))
		require.Regexp(t, `^slotpoller-[0-9a-f]{32}$`, dflt.header.Get(callproto.HeaderIdempotencyKey))
		require.NoError(t, jobs.ValidateName("idempotency key", dflt.header.Get(callproto.HeaderIdempotencyKey)))
		j, err := f.c.Get(ctx, id2)
		require.NoError(t, err)
		require.Equal(t, jobs.DefaultMaxAttempts, j.MaxAttempts)
		j, err = f.c.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "done", string(j.State))
		require.Equal(t, 3, j.MaxAttempts)
		require.Equal(t, "order-42", j.UniqueKey)

		// A delay counts on the database clock: not due yet.
		_, err = enqueueSQL(ctx, db, driver, f.schema, arg{"endpoint", "/later"}, arg{"delay_ms", int64(3_600_000)})
		require.NoError(t, err)
		require.Zero(t, f.poll(t))

		// SQL Server also hands the id back in the OUTPUT parameter @id.
		if driver == "sqlserver" {
			var out int64
			_, err := db.ExecContext(ctx, "EXEC ["+f.schema+"].[enqueue_v1] @endpoint = @endpoint, @id = @id OUTPUT",
				sql.Named("endpoint", "/output"), sql.Named("id", sql.Out{Dest: &out}))
			require.NoError(t, err)
			j, err := f.c.Get(ctx, out)
			require.NoError(t, err)
			require.Equal(t, "/output", j.Endpoint)
		}
	})
}

// runAtArg is a run time as each database's entry point takes it.
// mysqlEnqueueArgs are the MySQL procedure's parameters in their order.
var mysqlEnqueueArgs = []string{"endpoint", "payload", "method", "delay_ms", "run_at", "max_attempts", "timeout_ms",
	"unique_key", "idempotency_key", "queue"}

func runAtArg(driver string, t time.Time) any {
	if driver == "sqlite" {
		return t.UnixMilli()
	}
	return t.UTC()
}

// Bad input through the entry point: each refused with its field and its
// reason, as the Go client refuses it, and nothing written.
func TestEntryPointRefuses(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		f := newFarm(t, driver)
		ctx := context.Background()
		db := f.s.DB()
		taken, err := enqueueSQL(ctx, db, driver, f.schema, arg{"endpoint", "/taken"}, arg{"unique_key", "order-7"})
		require.NoError(t, err)

		far := time.Now().Add(367 * 24 * time.Hour)
		cases := []struct {
			name string
			args []arg
			want string
			// goAccepts marks the one place where the entry point is
			// stricter than the Go client (docs/enqueue.md: the validation table).
			goAccepts bool
		}{
			{"empty endpoint", []arg{{"endpoint", ""}}, "endpoint: endpoint is empty", false},
			{"absolute URL", []arg{{"endpoint", "http://evil.example/x"}}, "is an absolute URL", false},
			{"scheme-relative", []arg{{"endpoint", "//evil.example/x"}}, "scheme-relative URL", false},
			{"relative path", []arg{{"endpoint", "jobs/x"}}, "must start with /", false},
			{"dot segment", []arg{{"endpoint", "/a/../admin"}}, "dot segments are not allowed", false},
			{"encoded dot segment", []arg{{"endpoint", "/a/%2e%2E/admin"}}, "dot segments are not allowed", false},
			{"dot segment with parameters", []arg{{"endpoint", "/a/..;x/admin"}}, "dot segments are not allowed", false},
			{"dot segment with trailing space", []arg{{"endpoint", "/a/.. /admin"}}, "dot segments are not allowed", false},
			{"trailing dot segment", []arg{{"endpoint", "/a/."}}, "dot segments are not allowed", false},
			{"backslash", []arg{{"endpoint", `/a\..\b`}}, "backslash", false},
			{"fragment", []arg{{"endpoint", "/a#b"}}, "fragment (#)", false},
			{"control character", []arg{{"endpoint", "/a\nb"}}, "control character", false},
			{"encoded control character", []arg{{"endpoint", "/a%0ab"}}, "encoded control character", false},
			{"invalid percent-encoding", []arg{{"endpoint", "/a%zz"}}, "invalid percent-encoding", false},
			{"percent at the end", []arg{{"endpoint", "/a%4"}}, "invalid percent-encoding", false},
			{"encoded slash", []arg{{"endpoint", "/a%2fb"}}, "encoded /, \\ or %", true},
			{"lower-case method", []arg{{"endpoint", "/x"}, {"method", "post"}}, "method: method", false},
			{"unknown method", []arg{{"endpoint", "/x"}, {"method", "TRACE"}}, "is not one of GET, POST, PUT, PATCH, DELETE", false},
			{"method with a trailing space", []arg{{"endpoint", "/x"}, {"method", "POST "}}, "is not one of GET, POST, PUT, PATCH, DELETE", false},
			{"no attempts", []arg{{"endpoint", "/x"}, {"max_attempts", 0}}, "max_attempts: max attempts", false},
			{"too many attempts", []arg{{"endpoint", "/x"}, {"max_attempts", 1001}}, "between 1 and 1000", false},
			{"negative timeout", []arg{{"endpoint", "/x"}, {"timeout_ms", int64(-1)}}, "timeout: timeout", false},
			{"timeout over a day", []arg{{"endpoint", "/x"}, {"timeout_ms", int64(86_400_001)}}, "is above 24h0m0s", false},
			{"negative delay", []arg{{"endpoint", "/x"}, {"delay_ms", int64(-1)}}, "must not be negative", false},
			{"delay too far", []arg{{"endpoint", "/x"}, {"delay_ms", int64(367 * 24 * 3600 * 1000)}}, "more than 366 days ahead", false},
			{"run time too far", []arg{{"endpoint", "/x"}, {"run_at", runAtArg(driver, far)}}, "run_at: run at", false},
			{"run time before 1970", []arg{{"endpoint", "/x"}, {"run_at", runAtArg(driver, time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC))}}, "is before 1970-01-01", false},
			{"run time in year 1", []arg{{"endpoint", "/x"}, {"run_at", runAtArg(driver, time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC))}}, "is before 1970-01-01", false},
			{"run time and delay", []arg{{"endpoint", "/x"}, {"run_at", runAtArg(driver, time.Now())}, {"delay_ms", int64(5)}}, "give a run time or a delay, not both", false},
			{"payload over 1 MiB", []arg{{"endpoint", "/x"}, {"payload", make([]byte, jobs.MaxPayload+1)}}, "payload: payload", false},
			{"unique key too long", []arg{{"endpoint", "/x"}, {"unique_key", strings.Repeat("k", 451)}}, "at most 450 characters", false},
			{"idempotency key not ASCII", []arg{{"endpoint", "/x"}, {"idempotency_key", "clé"}}, "printable ASCII", false},
			{"idempotency key with a space", []arg{{"endpoint", "/x"}, {"idempotency_key", "k "}}, "printable ASCII", false},
			{"idempotency key too long", []arg{{"endpoint", "/x"}, {"idempotency_key", strings.Repeat("k", 201)}}, "printable ASCII", false},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				_, err := enqueueSQL(ctx, db, driver, f.schema, c.args...)
				require.Error(t, err)
				require.Contains(t, err.Error(), c.want)
				// A bad-input error, told apart from a broken connection.
				switch driver {
				case "postgres":
					var pe *pgconn.PgError
					require.ErrorAs(t, err, &pe)
					require.Equal(t, "22023", pe.Code)
				case "sqlserver":
					var me mssql.Error
					require.ErrorAs(t, err, &me)
					require.EqualValues(t, 51000, me.Number)
				case "mysql":
					var me *mysqldriver.MySQLError
					require.ErrorAs(t, err, &me)
					require.Equal(t, [5]byte{'2', '2', '0', '2', '3'}, me.SQLState)
				}

				// The Go client's verdict on the same job.
				j := store.NewJob{MaxAttempts: jobs.DefaultMaxAttempts}
				for _, a := range c.args {
					switch v := a.value.(type) {
					case string:
						*map[string]*string{"endpoint": &j.Endpoint, "method": &j.Method, "unique_key": &j.UniqueKey, "idempotency_key": &j.IdempotencyKey}[a.name] = v
					case int:
						j.MaxAttempts = v
					case int64:
						if a.name == "timeout_ms" {
							j.Timeout = time.Duration(v) * time.Millisecond
						} else if a.name == "delay_ms" {
							j.Delay = time.Duration(v) * time.Millisecond
						} else {
							tm := time.UnixMilli(v)
							j.RunAt = &tm
						}
					case time.Time:
						j.RunAt = &v
					case []byte:
						j.Payload = v
					}
				}
				if c.goAccepts {
					require.NoError(t, jobs.CheckNewJob(&j))
				} else {
					require.Error(t, jobs.CheckNewJob(&j))
				}
			})
		}

		// A taken unique key: the error carries the holder's id (SQLite's
		// RAISE takes a literal message only: it says where to read it).
		_, err = enqueueSQL(ctx, db, driver, f.schema, arg{"endpoint", "/again"}, arg{"unique_key", "order-7"})
		require.Error(t, err)
		require.Contains(t, err.Error(), "unique_key: a job with")
		switch driver {
		case "postgres":
			var pe *pgconn.PgError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "23505", pe.Code)
			require.Equal(t, fmt.Sprintf("existing_id=%d", taken), pe.Detail)
			require.Contains(t, err.Error(), fmt.Sprintf("(id %d)", taken))
		case "sqlserver":
			var me mssql.Error
			require.ErrorAs(t, err, &me)
			require.EqualValues(t, 51001, me.Number)
			require.Contains(t, err.Error(), fmt.Sprintf("(id %d)", taken))
		case "mysql":
			var me *mysqldriver.MySQLError
			require.ErrorAs(t, err, &me)
			require.EqualValues(t, 1062, me.Number, "a duplicate key, as the driver's UniqueViolation tells it")
			require.Contains(t, err.Error(), fmt.Sprintf("(id %d)", taken))
		default:
			require.Contains(t, err.Error(), "SELECT id FROM slotpoller_jobs WHERE unique_key = ?")
		}

		if driver == "postgres" {
			// Times the Go client cannot even express.
			for _, inf := range []string{"-infinity", "infinity"} {
				_, err := db.ExecContext(ctx, "SELECT slotpoller_enqueue_v1(endpoint => '/x', run_at => '"+inf+"')")
				require.ErrorContains(t, err, "run_at: run at", inf)
			}
		}

		var n int
		require.NoError(t, db.QueryRowContext(ctx, store.Expand(f.s.Dialect(), `SELECT COUNT(*) FROM {jobs}`)).Scan(&n))
		require.Equal(t, 1, n, "nothing but the first job was written")

		// What the Go rules accept, the entry point accepts.
		for _, ep := range []string{"/a/b?x=../y", "/a/.b", "/a/b;c", "/a/%41", "/a/...x", "/a%2eb", "/a/. b", "/é"} {
			require.NoError(t, jobs.ValidateEndpoint(ep), ep)
			_, err := enqueueSQL(ctx, db, driver, f.schema, arg{"endpoint", ep})
			require.NoError(t, err, ep)
		}
	})
}

// A trace parent through the entry point (schema version 17; MySQL's v2):
// a W3C traceparent of any case is stored lowercased in the job's
// trace_parent, none (omitted, NULL or empty) is NULL, and anything else is
// refused with its field, as other bad input is, and nothing written.
func TestEntryPointTraceparent(t *testing.T) {
	storetest.Each(t, func(t *testing.T, driver string) {
		f := newFarm(t, driver)
		ctx := context.Background()
		db := f.s.DB()
		traceOf := func(id int64) sql.NullString {
			t.Helper()
			var tp sql.NullString
			require.NoError(t, db.QueryRowContext(ctx, store.Expand(f.s.Dialect(), `SELECT trace_parent FROM {jobs} WHERE id = ?`), id).Scan(&tp))
			return tp
		}
		const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

		for _, c := range []struct {
			name string
			args []arg
			want sql.NullString
		}{
			{"lowercase", []arg{{"traceparent", valid}}, sql.NullString{String: valid, Valid: true}},
			{"uppercase", []arg{{"traceparent", strings.ToUpper(valid)}}, sql.NullString{String: valid, Valid: true}},
			{"mixed case, a later version, flags not 01", []arg{{"traceparent", "Cc-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-0A"}},
				sql.NullString{String: "cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0a", Valid: true}},
			{"with the other arguments", []arg{{"method", "PUT"}, {"queue", "traced"}, {"traceparent", valid}}, sql.NullString{String: valid, Valid: true}},
			{"omitted", nil, sql.NullString{}},
			{"NULL", []arg{{"traceparent", sql.NullString{}}}, sql.NullString{}},
			{"empty", []arg{{"traceparent", ""}}, sql.NullString{}},
		} {
			t.Run(c.name, func(t *testing.T) {
				id, err := enqueueSQL(ctx, db, driver, f.schema, append([]arg{{"endpoint", "/traced"}}, c.args...)...)
				require.NoError(t, err)
				require.Equal(t, c.want, traceOf(id))
			})
		}

		var before int
		require.NoError(t, db.QueryRowContext(ctx, store.Expand(f.s.Dialect(), `SELECT COUNT(*) FROM {jobs}`)).Scan(&before))
		for _, c := range []struct{ name, tp string }{
			{"one character short", valid[:54]},
			{"one character long", valid + "0"},
			{"a trailing space", valid[:54] + " "},
			{"a trailing newline", valid[:54] + "\n"},
			{"a space", " "},
			{"spaces", strings.Repeat(" ", 55)},
			{"not hex (g)", "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01"},
			{"not hex (G)", "00-4BF92F3577B34DA6A3CE929D0E0E473G-00F067AA0BA902B7-01"},
			{"not hex in the flags", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x"},
			{"not ASCII", "00-4bf92f3577b34da6a3ce929d0e0e473é-00f067aa0ba902b7-01"},
			{"dash misplaced", "00-4bf92f3577b34da6a3ce929d0e0e47-36-00f067aa0ba902b701"},
			{"dash where a digit goes", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-701"},
			{"no dashes", "004bf92f3577b34da6a3ce929d0e0e4736000f067aa0ba902b7001"},
			{"version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			{"version FF", "FF-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			{"trace id all zeros", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
			{"parent id all zeros", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"},
		} {
			t.Run(c.name, func(t *testing.T) {
				_, err := enqueueSQL(ctx, db, driver, f.schema, arg{"endpoint", "/traced"}, arg{"traceparent", c.tp})
				require.Error(t, err)
				require.Contains(t, err.Error(), "traceparent: ")
				require.Contains(t, err.Error(), "not a W3C traceparent")
				switch driver {
				case "postgres":
					var pe *pgconn.PgError
					require.ErrorAs(t, err, &pe)
					require.Equal(t, "22023", pe.Code)
				case "sqlserver":
					var me mssql.Error
					require.ErrorAs(t, err, &me)
					require.EqualValues(t, 51000, me.Number)
				case "mysql":
					var me *mysqldriver.MySQLError
					require.ErrorAs(t, err, &me)
					require.Equal(t, [5]byte{'2', '2', '0', '2', '3'}, me.SQLState)
				}
			})
		}
		var after int
		require.NoError(t, db.QueryRowContext(ctx, store.Expand(f.s.Dialect(), `SELECT COUNT(*) FROM {jobs}`)).Scan(&after))
		require.Equal(t, before, after, "nothing written")

		// MySQL's v1, which takes no traceparent, still enqueues: no
		// trace parent.
		if driver == "mysql" {
			var id int64
			require.NoError(t, db.QueryRowContext(ctx, "CALL slotpoller_enqueue_v1('/v1', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)").Scan(&id))
			require.Equal(t, sql.NullString{}, traceOf(id))
		}
	})
}
