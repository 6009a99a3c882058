package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/slotpoller/slotpoller/internal/tracing"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
)

// Validation: every key within its bounds, each problem named with its key,
// its value (a secret masked) and why.

// bounds is a duration key's floor and ceiling, and what a value beyond
// each would do (appended to the error).
type bounds struct {
	min, max        time.Duration
	lowWhy, highWhy string
}

// durationBounds holds every duration key's floor and ceiling (a schedule's
// keys under "schedules."); docs/configuration.md's table and config.yaml's comments
// repeat them. Floors keep a node from flooding the shared database (a 1ns
// heartbeat sent thousands of statements a second); ceilings keep a typo
// (2000000h) from parking work forever. The test farms run with 250ms slots
// and heartbeats, and unit tests with 100ms, so the floors stay at 100ms.
var durationBounds = map[string]bounds{
	"jobs.timeout":       {min: jobs.MinCallTimeout, max: jobs.MaxCallTimeout},
	"jobs.lease":         {min: time.Second, max: 24 * time.Hour, highWhy: " (a dead node's job waits this long)"},
	"jobs.backoff":       {min: 100 * time.Millisecond, max: 24 * time.Hour},
	"jobs.backoff_max":   {min: 100 * time.Millisecond, max: 24 * time.Hour},
	"jobs.drain_timeout": {min: 0, max: time.Hour, highWhy: " (a stop waits this long)"},
	// A retention of 0 keeps rows and skips these bounds.
	"jobs.retention_done":      {min: time.Minute, max: maxRetention, lowWhy: keepWhy},
	"jobs.retention_failed":    {min: time.Minute, max: maxRetention, lowWhy: keepWhy},
	"jobs.retention_dead":      {min: time.Minute, max: maxRetention, lowWhy: keepWhy},
	"jobs.retention_cancelled": {min: time.Minute, max: maxRetention, lowWhy: keepWhy},
	"jobs.retention_missed":    {min: time.Minute, max: maxRetention, lowWhy: keepWhy},
	"jobs.retention_audit":     {min: time.Minute, max: maxRetention, lowWhy: keepWhy},
	"checkin.retention":        {min: time.Hour, max: maxRetention, lowWhy: " (more than any checkin.ttl), or 0 to keep nodes"},
	"rotation.slot":            {min: 100 * time.Millisecond, max: time.Minute, lowWhy: " (the farm polls the database once per slot)", highWhy: " (due jobs wait up to a slot per node)"},
	"checkin.heartbeat":        {min: 100 * time.Millisecond, max: time.Minute, lowWhy: " (every node writes its registry row once per heartbeat)"},
	"checkin.ttl":              {min: 0, max: time.Hour, highWhy: " (a dead node's work waits this long)"},
	"clock.skew":               {min: -7 * 24 * time.Hour, max: 7 * 24 * time.Hour},
	"clock.resync":             {min: time.Second, max: 24 * time.Hour, lowWhy: " (each resync is a burst of queries)"},
	"clock.ntp_max_offset":     {min: time.Millisecond, max: time.Hour},
	// A schedule's timeout is checked when set; jobs.CompileSchedule checks
	// the floors of every and tolerance.
	"schedules.timeout":   {min: jobs.MinCallTimeout, max: jobs.MaxCallTimeout},
	"schedules.every":     {min: math.MinInt64, max: 366 * 24 * time.Hour},
	"schedules.tolerance": {min: math.MinInt64, max: 7 * 24 * time.Hour},
}

// maxRetention is ten years: longer is a typo, and 0 keeps rows for good.
const maxRetention = 87600 * time.Hour

const keepWhy = " (a finished job stays readable at least that long), or 0 to keep them"

// boundsOf returns the bounds of key; a schedule's key
// ("schedules[2].timeout") has the bounds of "schedules.timeout".
func boundsOf(key string) bounds {
	if rest, ok := strings.CutPrefix(key, "schedules["); ok {
		if _, field, ok := strings.Cut(rest, "]"); ok {
			key = "schedules" + field
		}
	}
	return durationBounds[key]
}

// Validate checks every key. Each problem names the key, the value (a DSN
// only masked) and why; all problems are joined into one error.
func (c Config) Validate() error {
	problems := c.problems()
	errs := make([]error, 0, len(problems))
	for _, p := range problems {
		errs = append(errs, errors.New(p.text))
	}
	return errors.Join(errs...)
}

// problem is one validation failure of one key.
type problem struct {
	key  string // e.g. "jobs.base_url"
	text string // the full message
}

func (c Config) problems() []problem {
	var ps []problem
	bad := func(key string, value any, why string, args ...any) {
		ps = append(ps, problem{key: key, text: fmt.Sprintf("config: %s = %s: %s", key, showValue(value), fmt.Sprintf(why, args...))})
	}
	within := func(key string, d Duration) {
		b := boundsOf(key)
		switch {
		case d < 0 && b.min == 0:
			bad(key, d, "must not be negative")
		case d < Duration(b.min):
			bad(key, d, "must be at least %s%s", Duration(b.min), b.lowWhy)
		case d > Duration(b.max):
			bad(key, d, "must be at most %s%s", Duration(b.max), b.highWhy)
		}
	}

	// signing key and admin endpoint (the key's value is never shown)
	if k := c.Jobs.SigningKey; k != "" && len(k) < 16 {
		ps = append(ps, problem{key: "jobs.signing_key", text: "config: jobs.signing_key (value hidden): must be at least 16 characters"})
	}
	if l := c.Admin.Listen; l != "" {
		if why := checkListen(l); why != "" {
			bad("admin.listen", l, "%s", why)
		} else if c.Admin.Token == "" && !c.Admin.Loopback() {
			// Open beyond loopback, anyone on the network could enqueue,
			// cancel and retry jobs: refuse to start rather than serve that.
			bad("admin.listen", l, "binds beyond loopback, so the admin endpoint needs admin.token "+
				"(set SLOTPOLLER_ADMIN_TOKEN to 16 or more random characters), or bind to loopback (e.g. :9090)")
		}
	}
	if why := checkToken(c.Admin.Token); why != "" {
		ps = append(ps, problem{key: "admin.token", text: "config: admin.token (value hidden): " + why})
	}

	if e := c.Tracing.OTLPEndpoint; e != "" {
		if err := tracing.CheckEndpoint(e); err != nil {
			bad("tracing.otlp_endpoint", e, "%v", err)
		}
	}

	// schedules: each must compile and names must be unique
	names := map[string]int{}
	for i, sc := range c.Schedules {
		key := fmt.Sprintf("schedules[%d]", i)
		if prev, dup := names[sc.Name]; dup {
			bad(key+".name", sc.Name, "the same name as schedules[%d]", prev)
		}
		names[sc.Name] = i
		if _, err := jobs.CompileSchedule(sc.Schedule(max(1, c.Jobs.MaxAttempts))); err != nil {
			ps = append(ps, problem{key: key, text: fmt.Sprintf("config: %s: %v", key, err)})
		}
		if sc.Timeout != 0 {
			within(key+".timeout", sc.Timeout)
		}
		within(key+".tolerance", sc.Tolerance)
		within(key+".every", sc.Every)
		if sc.MaxAttempts != 0 && (sc.MaxAttempts < 1 || sc.MaxAttempts > MaxAttemptsCap) {
			bad(key+".max_attempts", sc.MaxAttempts, "must be between 1 and %d (or 0 for jobs.max_attempts)", MaxAttemptsCap)
		}
	}

	ps = append(ps, c.queueProblems()...)

	// database
	switch c.Database.Driver {
	case "sqlite", "postgres", "sqlserver", "mysql":
	case "mssql":
		bad("database.driver", c.Database.Driver, "write sqlserver for SQL Server")
	case "mariadb":
		bad("database.driver", c.Database.Driver, "write mysql for MariaDB")
	case "":
		bad("database.driver", c.Database.Driver, "must be set to sqlite, postgres, sqlserver or mysql")
	default:
		bad("database.driver", c.Database.Driver, "must be one of sqlite, postgres, sqlserver, mysql")
	}
	dsn := c.Database.DSN
	masked := MaskDSN(dsn)
	switch c.Database.Driver {
	case "sqlite":
		switch scheme := store.DSNScheme(dsn); {
		case dsn == "":
			bad(dsnKey, masked, "the sqlite driver needs a database file path")
		case scheme == "postgres" || scheme == "postgresql":
			bad(dsnKey, masked, "is a postgres DSN but database.driver is sqlite; set database.driver to postgres")
		case scheme == "sqlserver":
			bad(dsnKey, masked, "is a sqlserver DSN but database.driver is sqlite; set database.driver to sqlserver")
		case looksMySQL(dsn):
			bad(dsnKey, masked, "is a mysql DSN but database.driver is sqlite; set database.driver to mysql")
		case scheme != "":
			bad(dsnKey, masked, "must be a file path or a file: URI for the sqlite driver")
		}
	case "postgres":
		switch scheme := store.DSNScheme(dsn); {
		case strings.TrimSpace(dsn) == "":
			bad(dsnKey, masked, "the postgres driver has no default DSN; set database.dsn or %s explicitly (e.g. postgres://user:password@host:5432/slotpoller)", envName("database", "dsn"))
		case looksMySQL(dsn):
			bad(dsnKey, masked, "is a mysql DSN but database.driver is postgres; set database.driver to mysql")
		case scheme != "" && scheme != "postgres" && scheme != "postgresql":
			bad(dsnKey, masked, "must be a postgres:// URL or key=value pairs for the postgres driver")
		}
	case "sqlserver":
		switch scheme := store.DSNScheme(dsn); {
		case strings.TrimSpace(dsn) == "":
			bad(dsnKey, masked, "the sqlserver driver has no default DSN; set database.dsn or %s explicitly (e.g. sqlserver://user:password@host:1433?database=farm)", envName("database", "dsn"))
		case looksMySQL(dsn):
			bad(dsnKey, masked, "is a mysql DSN but database.driver is sqlserver; set database.driver to mysql")
		case scheme != "" && scheme != "sqlserver":
			bad(dsnKey, masked, "must be a sqlserver:// URL or ADO key=value pairs (server=...;user id=...) for the sqlserver driver")
		case strings.Contains(strings.ToLower(dsn), "timezone="):
			// go-mssqldb would read every datetime2 as wall time in that
			// zone, shifting the database clock and every time column.
			bad(dsnKey, masked, "must not set timezone: slotpoller stores UTC and reads it as UTC")
		}
	case "mysql":
		switch scheme := store.DSNScheme(dsn); {
		case strings.TrimSpace(dsn) == "":
			bad(dsnKey, masked, "the mysql driver has no default DSN; set database.dsn or %s explicitly (e.g. user:password@tcp(host:3306)/farm?parseTime=true&loc=UTC)", envName("database", "dsn"))
		case scheme != "":
			bad(dsnKey, masked, "must be a go-sql-driver DSN (user:password@tcp(host:3306)/farm?parseTime=true&loc=UTC), not a URL, for the mysql driver")
		}
	}
	if !store.ValidSchemaName(c.Database.Schema) {
		bad("database.schema", c.Database.Schema, "must be a letter or _ followed by up to 127 letters, digits or _ (the SQL Server schema that holds slotpoller's tables)")
	}

	// node
	switch name := c.Node.Name; {
	case name == "":
		bad("node.name", name, "must not be empty")
	case len(name) > 64:
		bad("node.name", name, "must be at most 64 characters (it has %d)", len(name))
	case !validNodeName(name):
		bad("node.name", name, "may only contain letters, digits, '.', '_' and '-'")
	}
	if c.Node.Capacity < 1 || c.Node.Capacity > 10000 {
		bad("node.capacity", c.Node.Capacity, "must be between 1 and 10000")
	}

	// jobs
	if why := checkBaseURL(c.Jobs.BaseURL); why != "" {
		bad("jobs.base_url", MaskDSN(c.Jobs.BaseURL), "%s", why)
	}
	within("jobs.timeout", c.Jobs.Timeout)
	within("jobs.lease", c.Jobs.Lease)
	if c.Jobs.MaxAttempts < 1 || c.Jobs.MaxAttempts > MaxAttemptsCap {
		bad("jobs.max_attempts", c.Jobs.MaxAttempts, "must be between 1 and %d", MaxAttemptsCap)
	}
	within("jobs.backoff", c.Jobs.Backoff)
	if c.Jobs.BackoffMax < c.Jobs.Backoff {
		bad("jobs.backoff_max", c.Jobs.BackoffMax, "must be at least jobs.backoff (%s)", c.Jobs.Backoff)
	} else {
		within("jobs.backoff_max", c.Jobs.BackoffMax)
	}
	within("jobs.drain_timeout", c.Jobs.DrainTimeout)
	for _, st := range store.FinishedStates {
		if d := c.Jobs.Retention()[st]; d != 0 {
			within("jobs.retention_"+st, Duration(d))
		}
	}

	// rotation
	within("rotation.slot", c.Rotation.Slot)

	// checkin
	within("checkin.heartbeat", c.Checkin.Heartbeat)
	if c.Checkin.TTL <= c.Checkin.Heartbeat {
		bad("checkin.ttl", c.Checkin.TTL, "must be greater than checkin.heartbeat (%s)", c.Checkin.Heartbeat)
	} else {
		within("checkin.ttl", c.Checkin.TTL)
	}
	if c.Checkin.Retention != 0 {
		within("checkin.retention", c.Checkin.Retention)
	}

	// clock
	within("clock.skew", c.Clock.Skew)
	within("clock.resync", c.Clock.Resync)
	if s := c.Clock.NTPServer; s != "" && (strings.Contains(s, "://") || strings.ContainsAny(s, " \t\r\n/")) {
		bad("clock.ntp_server", s, `must be a host name or "host:port" (or empty to turn the check off)`)
	}
	within("clock.ntp_max_offset", c.Clock.NTPMaxOffset)

	// log
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", c.Log.Level, "must be one of debug, info, warn, error")
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("log.format", c.Log.Format, "must be one of text, json")
	}
	return ps
}

// showValue formats a value for an error message.
func showValue(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case fmt.Stringer:
		return v.String()
	default:
		return fmt.Sprint(v)
	}
}

func validNodeName(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// checkListen returns why l is not an address the admin endpoint can
// listen on, or "".
func checkListen(l string) string {
	host, port, err := net.SplitHostPort(l)
	if err != nil || port == "" {
		return "must be host:port or :port (e.g. :9090, which binds to 127.0.0.1)"
	}
	if n, err := strconv.Atoi(port); err == nil {
		if n < 0 || n > 65535 {
			return fmt.Sprintf("port %d is out of range: a port is 0 to 65535", n)
		}
	} else if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Sprintf("port %q is neither a number from 0 to 65535 nor a known service name", port)
	}
	if host != "" && net.ParseIP(host) == nil && !validHostName(host) {
		return fmt.Sprintf("host %q is neither an IP address nor a host name", host)
	}
	return ""
}

// checkToken returns why t is not a usable admin.token, or "". It never
// quotes t.
func checkToken(t string) string {
	if t == "" {
		return ""
	}
	if len(t) < 16 || len(t) > 256 {
		return "must be 16 to 256 characters"
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] > '~' {
			// It travels in an Authorization header.
			return "must be printable ASCII without spaces"
		}
	}
	return ""
}

// validHostName reports whether h is a syntactically valid DNS host name:
// dot-separated labels of letters, digits, '-' and '_' (up to 63 each).
func validHostName(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// checkBaseURL returns why s is not a usable base URL, or "".
func checkBaseURL(s string) string {
	if s == "" {
		return "must be set (e.g. http://localhost)"
	}
	u, err := url.Parse(s)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		if MaskDSN(s) != s {
			// The parser's reason may quote a piece of the password.
			return "not a valid URL, and it holds user info (user:password@), which base_url must not"
		}
		return fmt.Sprintf("not a valid URL: %v", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "must be an http or https URL"
	case u.User != nil:
		// Credentials here would be logged at start, shown by config show
		// and sent as Basic auth on every call; calls are authenticated
		// with jobs.signing_key instead.
		return "must not hold user info (user:password@): it would be shown in logs and by config show; authenticate calls with jobs.signing_key"
	case u.Host == "" || u.Hostname() == "":
		return "must be an absolute URL with a host (e.g. http://localhost)"
	case u.RawQuery != "" || u.ForceQuery:
		return "must not have a query (?...)"
	case u.Fragment != "" || strings.Contains(s, "#"):
		return "must not have a fragment (#...)"
	}
	return ""
}

// looksMySQL says whether dsn is written as go-sql-driver/mysql's DSNs
// are (user:password@tcp(host:port)/db), which the sqlite driver would
// otherwise take for a file name.
func looksMySQL(dsn string) bool {
	return strings.Contains(dsn, "@tcp(") || strings.Contains(dsn, "@unix(")
}
