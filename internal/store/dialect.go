// Package store is slotpoller's SQL seam: every statement the farm sends to
// its database, named after the operation it performs (River's driver style:
// JobClaim, JobFinishIfRunning, NodeHeartbeat...).
//
// Statements are written once, with ? placeholders and a few markers for what
// databases spell differently; a Dialect supplies only those differences:
// placeholders, the database's clock, table names, the batch claim. Every
// value travels as a parameter.
//
// The package imports no database driver. What needs one (binding values
// in the driver's own types, telling its errors apart, opening its
// connections) is a Driver, each in a package of its own under driver/, so
// that a program compiles in only the databases it uses; the node opens
// any of them through internal/store/open.
//
// Every time the farm compares (due, lease, liveness) is computed from the
// database's own clock inside the statement; the node's clock never reaches
// a time column except for a user-given absolute run time.
package store

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Dialect is what one database does differently.
type Dialect interface {
	// Name is the config value of database.driver: sqlite, postgres,
	// sqlserver.
	Name() string
	// Placeholder returns the n-th (1-based) bind parameter.
	Placeholder(n int) string
	// Now is an SQL expression for the database's current UTC time.
	Now() string
	// NowMillis is an SQL expression for the database's current time in
	// whole milliseconds since 1970 UTC (a BIGINT): the rate windows'.
	NowMillis() string
	// ClockResolution is the tick of the database clock as Now reads it.
	ClockResolution() time.Duration
	// NowPlusMillis is an SQL expression for the database's current time
	// plus a bind parameter (written as ?) in milliseconds; a dialect with
	// numbered placeholders may use the parameter again as {again}.
	NowPlusMillis() string
	// NowPlusMillisOf is the database's current time plus an SQL
	// expression in milliseconds (a hold: at most a few days), which may
	// hold ? parameters: it is written once.
	NowPlusMillisOf(expr string) string
	// Table returns the qualified name of one of slotpoller's tables
	// ("nodes", "jobs", "schema_version", "tasks", "schedules", "queues",
	// "queue_routes", "audit").
	Table(name string) string
	// TimeArg converts a time to the value a time column takes.
	TimeArg(t time.Time) any
	// Arg converts a parameter to the value of its column's type; every
	// parameter the store sends passes through it, then through the
	// driver's Bind. The store writes a NULL as a typed null (nullString,
	// nullInt, nullTime), never as a bare nil, and Arg gives it the type of
	// its column.
	Arg(v any) any
	// ClaimJobs returns the batch claim statement, with its markers
	// ({jobs}, {now}...) for the store to expand once: it sets up to n due
	// ready jobs running under a new token and returns them. Parameters,
	// numbered (the statement uses them out of order): 1 owner,
	// 2 owner_node, 3 limit, 4-7 the hold (holdMillis, Hold.args).
	ClaimJobs() string
	// Returning is the clause that hands back the columns of the rows an
	// INSERT or UPDATE wrote, placed at the end of the statement ("" where
	// the dialect uses Output instead).
	Returning(cols string) string
	// Output is the same for dialects that place it before VALUES / WHERE.
	Output(cols string) string
	// TimeText is an SQL expression for a time column or expression as
	// text that parseTimeText reads: the history keeps database times.
	TimeText(expr string) string
	// MillisBetween is an SQL expression for the whole milliseconds from
	// the time from to the time to (negative when to is earlier).
	MillisBetween(from, to string) string
	// TextParam is a bind parameter (written as ?) that a function taking
	// any type, such as CONCAT, receives as text.
	TextParam() string
	// Tail is an SQL expression for the last n characters of a text.
	Tail(expr string, n int) string
	// RowLimit returns the clauses that limit a SELECT to a bind parameter
	// (written as ?) of rows: top goes right after SELECT, limit at the end
	// of the statement; one of them is "". rowLimit places its argument.
	RowLimit() (top, limit string)
	// IdemKey is the column an exact lookup by idempotency key compares,
	// one an index holds (the key, or where it cannot be an index key a
	// computed column of it): search.go.
	IdemKey() string
	// NthRow is the clause after an ORDER BY that skips a bind parameter
	// (written as ?) of rows and returns the next one.
	NthRow() string
	// BytesContain is a condition that the binary column col holds the
	// bytes of text (case-sensitive, byte for byte), and its arguments.
	BytesContain(col, text string) (string, []any)
	// TextContains is a condition that the text column col holds text as
	// it is (case-sensitive, no wildcard), and its arguments.
	TextContains(col, text string) (string, []any)
	// MigrationLock returns a statement that takes a transaction-scoped lock
	// serializing migrations across nodes, or "" when beginning the
	// transaction already does (SQLite's BEGIN IMMEDIATE).
	MigrationLock() string
}

// expand replaces the markers of a statement written once for every database:
//
//	{now}        the database clock
//	{now_ms}     the database clock in milliseconds since 1970 UTC
//	{now+?}      the database clock plus ? milliseconds
//	{now+hold}   the database clock plus a row's hold (four ?, Hold.args)
//	{seeknow+?}  the database clock plus ? milliseconds, read once for the
//	             statement: a bound an index can seek on (seekClock)
//	{now_once}, {now_once+?}  the database clock (plus ? milliseconds),
//	             read once for the statement: a bound of which rows are
//	             due or old that an index seeks on (onceClock)
//	{endpoint_key} the endpoint as its index orders it (endpointKey)
//	{nodes} etc. table names
//	{returning c} / {output c}  the clauses that hand back written rows
//	?            bind parameters, numbered in order
//	{again}      the last ? once more (only a dialect whose placeholders
//	             are numbered may write it: SQL Server's {now+?} uses its
//	             parameter twice)
func expand(d Dialect, q string) string {
	output := ""
	q = clauseMarker.ReplaceAllStringFunc(q, func(m string) string {
		sub := clauseMarker.FindStringSubmatch(m)
		if sub[1] == "returning" {
			return d.Returning(sub[2])
		}
		output = sub[2]
		return d.Output(sub[2])
	})
	if b, ok := d.(outputBatch); ok && output != "" {
		q = b.wrapOutput(output, q)
	}
	seekNow, nowOnce, nowOncePlus, endpoint := d.NowPlusMillis(), d.Now(), d.NowPlusMillis(), "endpoint"
	if c, ok := d.(seekClock); ok {
		seekNow = c.SeekNowPlusMillis()
	}
	if c, ok := d.(onceClock); ok {
		nowOnce, nowOncePlus = c.NowOnce(), c.NowOncePlusMillis()
	}
	if k, ok := d.(endpointKey); ok {
		endpoint = k.EndpointKey()
	}
	r := strings.NewReplacer(append([]string{holdMarker, d.NowPlusMillisOf(holdMillis("timeout_ms", "?", "?", "?", "?")),
		"{now+?}", d.NowPlusMillis(), "{now_ms}", d.NowMillis(), "{now}", d.Now(),
		"{seeknow+?}", seekNow, "{now_once}", nowOnce, "{now_once+?}", nowOncePlus, "{endpoint_key}", endpoint}, tableMarkers(d)...)...)
	q = r.Replace(q)
	if w, ok := d.(sqlRewriter); ok {
		q = w.Rewrite(q)
	}
	return rebind(d, q)
}

// sqlRewriter is a dialect that spells a few things the statements write
// once differently (MySQL: CAST AS SIGNED, DIV, CONCAT_WS): Rewrite
// adapts a statement after its markers are replaced.
type sqlRewriter interface {
	Rewrite(q string) string
}

// tableMarkers pairs each table marker with the dialect's name for it.
func tableMarkers(d Dialect) []string {
	var pairs []string
	for _, t := range []string{"nodes", "jobs", "schema_version", "tasks", "schedules", "queues", "queue_routes", "audit"} {
		pairs = append(pairs, "{"+t+"}", d.Table(t))
	}
	return pairs
}

// seekClock is a dialect whose {now+?} is read anew for every row (on
// PostgreSQL clock_timestamp() is volatile), which no index can seek on.
// Its SeekNowPlusMillis is the database's time at the start of the
// statement plus ? milliseconds: the admin reads' time bounds (created
// within the last 10 s), where a statement's own microseconds do not
// matter and a seek does. Elsewhere {seeknow+?} is {now+?}.
type seekClock interface {
	SeekNowPlusMillis() string
}

// onceClock is a dialect whose {now} is read anew for every row
// (PostgreSQL's clock_timestamp()), so that a bound on it is a filter and
// not where an index's walk stops: a count of due jobs read every job due
// later. Its NowOnce is the database's time read once for the statement,
// on which an index seeks: for a test of which rows are due, never for a
// time written to a row (a lease is measured from the write). Elsewhere
// {now_once} is {now} and {now_once+?} is {now+?}: the other databases
// read their clock once per statement.
type onceClock interface {
	NowOnce() string
	// NowOncePlusMillis is NowOnce plus ? milliseconds.
	NowOncePlusMillis() string
}

// endpointKey is a dialect whose index on the endpoint orders an
// expression of it, not the column in the database's collation: a prefix
// is sought as a range in binary order (prefixRange). Elsewhere
// {endpoint_key} is endpoint.
type endpointKey interface {
	EndpointKey() string
}

// boundByValue is a dialect whose planner estimates a range from its
// statistics (SQLite's STAT4) only when the bound is a bare parameter, not
// an expression of its clock: its {seeknow+?} is a bare ?, and the store
// sends the database's time, read just before, plus the offset
// (seekArgs). Without it SQLite takes any time range for a quarter of the
// table and walks it newest first, through every row when the range
// keeps none.
type boundByValue interface {
	boundByValue()
}

// timeWindow is a dialect whose planner does not weigh a walk of the table
// newest first that stops at the page against a seek and a sort, with or
// without statistics (SQLite): given created_at >= X it walks a state's
// every row, or sorts the whole window, and given created_at < Y with no
// row that old it walks the table. There a read with a time window first
// counts the window's rows in the index on created_at, up to
// timeWindowRows (one range of the index, read alone). A window that
// holds fewer is read by that index and sorted by id: at most
// timeWindowRows rows. A larger one is a filter on a walk of the ids
// newest first that stops at the page: it reads the rows newer than the
// window's upper end and the window's own up to the page. Neither assumes
// that ids and created_at grow together (the database clock can step
// back): both read exactly the rows the filter selects.
type timeWindow interface {
	// WindowCount is a statement returning how many rows the created_at
	// conditions conds (their arguments first) select, counted through the
	// index on created_at up to a cap (the last argument).
	WindowCount(conds string) string
	// WindowByIndex is the table clause that reads the jobs by the index on
	// created_at; WindowByWalk the one that walks them by id.
	WindowByIndex() string
	WindowByWalk() string
}

// timeWindowRows is the most rows a time window may hold to be read by
// the index on created_at and sorted (timeWindow).
const timeWindowRows = 10_000

// byState is a dialect whose planner may walk every job newest first for
// a list of one state that a filter narrows further (MySQL, for the jobs
// backing off under a prefix no job has: a million rows), where the
// state's own rows, newest first through the index on (state, id), are
// at most that state's and stop at the page.
type byState interface {
	// ByState is the table clause that keeps the planner off that walk.
	ByState() string
}

// prefixWalk is a dialect whose planner reads an endpoint prefix that many
// jobs have by the range of its index and a sort of every row in it (SQLite:
// 50,000 rows at a million jobs for a prefix 5% of them have), where a walk
// of the newest jobs finds the page in a few thousand. There a list by
// prefix walks the newest prefixWalkRows jobs first, and only when they do
// not fill the page reads the older ones by the range (or, for the jobs
// backing off, by their partial index): at most prefixWalkRows rows and the
// prefix's own.
type prefixWalk interface {
	// PrefixWalkBound is a statement returning how many rows the range
	// (arguments 1 and 2) holds, counted up to the page (3), and the newest
	// id below the cursor (4).
	PrefixWalkBound() string
	// NewestByPrefix is the SELECT of cols of the rows where selects,
	// newest first: walked above a bound, up to a limit (0: no walk), and
	// read below it by the index (the retrying partial index when
	// retrying) when the walk did not fill the page. Its arguments are
	// where's, the bound and the walk's limit; where's and the bound;
	// where's, the bound, the walk's limit and the page twice; the page.
	NewestByPrefix(cols, where string, retrying bool) string
}

// prefixWalkRows is how many of the newest jobs a list by prefix walks
// before it reads the prefix's range (prefixWalk): a prefix held by 1% of
// recent jobs fills a page of 100 there.
const prefixWalkRows = 10_000

// seekOffset is the argument of a {seeknow+?}: milliseconds from the
// database's now.
type seekOffset int64

// seekArgs resolves the seekOffsets among args: to the database's time
// plus the offset where the dialect bounds by value (boundByValue), read
// once for all of them, else to the offset itself.
func (s *Store) seekArgs(ctx context.Context, args []any) ([]any, error) {
	_, byValue := s.d.(boundByValue)
	var now time.Time
	out := make([]any, len(args))
	for i, a := range args {
		o, ok := a.(seekOffset)
		switch {
		case !ok:
			out[i] = a
		case !byValue:
			out[i] = int64(o)
		default:
			if now.IsZero() {
				var err error
				if now, err = s.Now(ctx); err != nil {
					return nil, err
				}
			}
			out[i] = s.d.TimeArg(now.Add(time.Duration(o) * time.Millisecond))
		}
	}
	return out, nil
}

// perCallPlan is a dialect (or a driver) whose database reuses a statement's plan across
// calls: PostgreSQL gives a prepared statement, after five calls, a generic
// plan made for any arguments; SQL Server caches the plan made for the
// first call's. An admin read's best plan depends on its arguments (a
// filter that keeps no row must seek, one that keeps most may walk the
// table newest first), and a reused plan that walks reads the whole table
// for a filter that keeps no row: these reads are planned on every call
// (planPerCall).
type perCallPlan interface {
	// PlanPerCall returns the expanded statement q and its arguments, as
	// the driver receives them, changed so that the database plans q for
	// these arguments.
	PlanPerCall(q string, args []any) (string, []any)
}

// planPerCall is q and args made to be planned on every call, where the
// driver (PostgreSQL's, which says so to pgx) or else the dialect (SQL
// Server's, in the statement) needs it (perCallPlan).
func (s *Store) planPerCall(q string, args []any) (string, []any) {
	if p, ok := s.drv.(perCallPlan); ok {
		return p.PlanPerCall(q, args)
	}
	if p, ok := s.d.(perCallPlan); ok {
		return p.PlanPerCall(q, args)
	}
	return q, args
}

// outputBatch is a dialect whose Output clause writes the rows into a
// table variable: the statement becomes a batch that declares it first and
// reads it last.
type outputBatch interface {
	wrapOutput(cols, stmt string) string
}

var clauseMarker = regexp.MustCompile(`\{(returning|output) ([^}]+)\}`)

// rebind numbers the ? placeholders for the dialect. slotpoller's statements
// carry no ? inside string literals, which keeps this a plain scan.
func rebind(d Dialect, q string) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); {
		switch {
		case q[i] == '?':
			n++
			b.WriteString(d.Placeholder(n))
			i++
		case strings.HasPrefix(q[i:], againMarker):
			b.WriteString(d.Placeholder(n))
			i += len(againMarker)
		default:
			b.WriteByte(q[i])
			i++
		}
	}
	return b.String()
}

const againMarker = "{again}"

// statement is q expanded for the store's dialect (expand), from a cache:
// expanding builds a replacer and runs a regular expression, which cost an
// enqueue more than the rest of its work in the process.
func (s *Store) statement(q string) string {
	return s.statements.get(s.d, q)
}

// expandedStatements caches expand's results by statement text. Most
// statements are constants; those built from a request (a filter, an IN
// list of n keys, a chunk of n enqueued rows) have a bounded number of
// shapes, and maxExpanded bounds the cache should any ever vary without
// end: past it, a new text is expanded on every call. (A batch of
// results, which finishSQL keeps by its size, does not come here.)
type expandedStatements struct {
	byText sync.Map // string → string
	count  atomic.Int64
}

const maxExpanded = 1000

func (c *expandedStatements) get(d Dialect, q string) string {
	if e, ok := c.byText.Load(q); ok {
		return e.(string)
	}
	e := expand(d, q)
	// A place is reserved before the text is stored, so that callers
	// racing with a first text each cannot pass the bound together.
	for {
		n := c.count.Load()
		if n >= maxExpanded {
			return e
		}
		if c.count.CompareAndSwap(n, n+1) {
			break
		}
	}
	if _, loaded := c.byText.LoadOrStore(q, e); loaded {
		c.count.Add(-1)
	}
	return e
}

// Expand exposes the statement expansion for the migrator and for tests of
// generated SQL.
func Expand(d Dialect, q string) string { return expand(d, q) }

// ExpandScript replaces the table markers ({jobs}, {nodes}, ...) of a
// migration script, and {schema} with the bare name of the dialect's schema
// where it has one (SQL Server). A script has no parameters, so its text is
// otherwise left as it is.
func ExpandScript(d Dialect, script string) string {
	pairs := tableMarkers(d)
	if s, ok := d.(interface{ Schema() string }); ok {
		pairs = append(pairs, "{schema}", s.Schema())
	}
	return strings.NewReplacer(pairs...).Replace(script)
}

// dbTime scans a time column whichever way the driver returns it: time.Time
// (PostgreSQL, SQL Server) or integer Unix milliseconds (SQLite). A time
// beyond the years 1 to 9999 (PostgreSQL's infinity, a SQLite integer out
// of range), which a row only holds if it was written directly, reads as
// the nearest of those bounds, so that such a row can still be listed and
// shown; the claim reads its columns itself and sets such a row aside.
type dbTime struct {
	T     time.Time
	Valid bool
}

func (t *dbTime) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		t.T, t.Valid = time.Time{}, false
	case time.Time:
		t.T, t.Valid = clampRowTime(x.UTC()), true
	case int64:
		t.T, t.Valid = clampRowTime(time.UnixMilli(max(min(x, maxRowTime.UnixMilli()), minRowTime.UnixMilli())).UTC()), true
	case float64:
		x = max(min(x, float64(maxRowTime.UnixMilli())), float64(minRowTime.UnixMilli()))
		t.T, t.Valid = time.UnixMicro(int64(x*1000)).UTC(), true
	case []byte:
		return t.Scan(string(x))
	case string:
		switch x {
		case "infinity":
			t.T, t.Valid = maxRowTime, true
			return nil
		case "-infinity":
			t.T, t.Valid = minRowTime, true
			return nil
		}
		if ms, err := strconv.ParseInt(x, 10, 64); err == nil {
			return t.Scan(ms)
		}
		p, err := time.Parse(time.RFC3339Nano, x)
		if err != nil {
			return fmt.Errorf("read time column: %q is not a time", x)
		}
		t.T, t.Valid = clampRowTime(p.UTC()), true
	default:
		return fmt.Errorf("read time column: unexpected %T", v)
	}
	return nil
}

func (t dbTime) ptr() *time.Time {
	if !t.Valid {
		return nil
	}
	v := t.T
	return &v
}

// Typed NULLs: a NULL parameter carries the type of its column. go-mssqldb
// sends a bare nil as TDS type 0x1F, which Babelfish refuses (error 8009)
// and which gives SQL Server a plan of its own for each mix of NULLs; pgx and
// SQLite take these types as they are, and Arg adapts them where the
// dialect's time column is not a time (SQLite) or is a datetime2 (SQL
// Server).

// nullString is s, or NULL when s is "".
func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// nullInt is n, or NULL when n is 0.
func nullInt(n int) sql.NullInt64 { return sql.NullInt64{Int64: int64(n), Valid: n != 0} }

// nullTime is *t, or NULL when t is nil.
func nullTime(t *time.Time) sql.NullTime {
	if t == nil {
		return sql.NullTime{}
	}
	return sql.NullTime{Time: *t, Valid: true}
}
