package main

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// badInput is one thing a user may get wrong, run through run() as the
// user would, with what they must see: the exit code, a distinctive piece
// of the message (naming the key or flag, the value and why) and,
// optionally, a secret that must not be shown.
type badInput struct {
	name   string
	config string   // the config file's contents; "" for an empty file
	env    []string // "NAME=value" set for the run
	args   []string // the command line; "{config}" is the config file's path
	code   int
	want   string
	hide   string
}

// show is `config show` of a config file: the verb that loads and
// validates the configuration without a database.
var show = []string{"config", "show", "-config", "{config}"}

func fileCase(name, config, want string) badInput {
	return badInput{name: name, config: config, args: show, code: 1, want: want}
}

func envCase(name, kv, want string) badInput {
	return badInput{name: name, env: []string{kv}, args: show, code: 1, want: want}
}

func flagCase(name, want string, args ...string) badInput {
	return badInput{name: name, args: append(args, "-config", "{config}"), code: 2, want: want}
}

// dsnCase connects with a DSN whose password is pw to a closed port: the
// error names the database and shows no piece of the password.
func dsnCase(name, driver, dsn string) badInput {
	return badInput{name: name, config: "database:\n  driver: " + driver + "\n  dsn: '" + dsn + "'\n",
		args: []string{"status", "-config", "{config}"}, code: 1, want: "cannot reach the database", hide: "ub4dor"}
}

const schedule = "schedules:\n  - name: nightly\n    every: 1h\n    endpoint: /jobs/nightly\n"

func badInputs(t *testing.T) []badInput {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(big, []byte("# "+strings.Repeat("x", 2<<20)+"\n"), 0o600))
	long := strings.Repeat("n", 201)

	inputs := []badInput{
		// Durations: floors and ceilings.
		fileCase("heartbeat 1ns", "checkin:\n  heartbeat: 1ns\n", "config: checkin.heartbeat = 1ns: must be at least 100ms (every node writes its registry row once per heartbeat)"),
		fileCase("heartbeat 1ms", "checkin:\n  heartbeat: 1ms\n", "checkin.heartbeat = 1ms: must be at least 100ms"),
		fileCase("heartbeat 2h", "checkin:\n  heartbeat: 2h\n  ttl: 6h\n", "checkin.heartbeat = 2h: must be at most 1m"),
		fileCase("resync 1ns", "clock:\n  resync: 1ns\n", "config: clock.resync = 1ns: must be at least 1s (each resync is a burst of queries)"),
		fileCase("resync 48h", "clock:\n  resync: 48h\n", "clock.resync = 48h: must be at most 24h"),
		fileCase("slot 1ns", "rotation:\n  slot: 1ns\n", "config: rotation.slot = 1ns: must be at least 100ms (the farm polls the database once per slot)"),
		fileCase("slot 10ms", "rotation:\n  slot: 10ms\n", "rotation.slot = 10ms: must be at least 100ms"),
		fileCase("slot 5m", "rotation:\n  slot: 5m\n", "rotation.slot = 5m: must be at most 1m (due jobs wait up to a slot per node)"),
		fileCase("lease 2000000h", "jobs:\n  lease: 2000000h\n", "config: jobs.lease = 2000000h: must be at most 24h (a dead node's job waits this long)"),
		fileCase("lease 500ms", "jobs:\n  lease: 500ms\n", "jobs.lease = 500ms: must be at least 1s"),
		fileCase("timeout 2000000h", "jobs:\n  timeout: 2000000h\n", "jobs.timeout = 2000000h: must be at most 24h"),
		fileCase("timeout 0", "jobs:\n  timeout: 0s\n", "jobs.timeout = 0s: must be at least 1ms"),
		fileCase("timeout 1ns", "jobs:\n  timeout: 1ns\n", "jobs.timeout = 1ns: must be at least 1ms"),
		fileCase("backoff 2000000h", "jobs:\n  backoff: 2000000h\n  backoff_max: 2000000h\n", "jobs.backoff = 2000000h: must be at most 24h"),
		fileCase("backoff 1ns", "jobs:\n  backoff: 1ns\n", "jobs.backoff = 1ns: must be at least 100ms"),
		fileCase("backoff_max 2000000h", "jobs:\n  backoff_max: 2000000h\n", "jobs.backoff_max = 2000000h: must be at most 24h"),
		fileCase("backoff_max below backoff", "jobs:\n  backoff_max: 500ms\n", "jobs.backoff_max = 500ms: must be at least jobs.backoff (1s)"),
		fileCase("drain negative", "jobs:\n  drain_timeout: -1s\n", "jobs.drain_timeout = -1s: must not be negative"),
		fileCase("drain 2h", "jobs:\n  drain_timeout: 2h\n", "jobs.drain_timeout = 2h: must be at most 1h (a stop waits this long)"),
		fileCase("retention_done 1s", "jobs:\n  retention_done: 1s\n", "config: jobs.retention_done = 1s: must be at least 1m (a finished job stays readable at least that long), or 0 to keep them"),
		fileCase("retention_failed negative", "jobs:\n  retention_failed: -1h\n", "jobs.retention_failed = -1h: must be at least 1m"),
		fileCase("retention_dead 20 years", "jobs:\n  retention_dead: 175200h\n", "jobs.retention_dead = 175200h: must be at most 87600h"),
		fileCase("retention_cancelled no unit", "jobs:\n  retention_cancelled: 7\n", "jobs.retention_cancelled"),
		fileCase("retention_missed 7d", "jobs:\n  retention_missed: 7d\n", "jobs.retention_missed"),
		envCase("env retention_done 30s", "SLOTPOLLER_JOBS_RETENTION_DONE=30s", "jobs.retention_done = 30s: must be at least 1m"),
		envCase("env retention typo", "SLOTPOLLER_JOBS_RETENTION=24h", "SLOTPOLLER_JOBS_RETENTION: unknown setting"),
		fileCase("checkin retention 10m", "checkin:\n  retention: 10m\n", "config: checkin.retention = 10m: must be at least 1h (more than any checkin.ttl), or 0 to keep nodes"),
		envCase("env checkin retention 20 years", "SLOTPOLLER_CHECKIN_RETENTION=175200h", "checkin.retention = 175200h: must be at most 87600h"),
		fileCase("ttl 2h", "checkin:\n  ttl: 2h\n", "checkin.ttl = 2h: must be at most 1h (a dead node's work waits this long)"),
		fileCase("ttl = heartbeat", "checkin:\n  heartbeat: 1s\n  ttl: 1s\n", "checkin.ttl = 1s: must be greater than checkin.heartbeat (1s)"),
		fileCase("skew +1000h", "clock:\n  skew: 1000h\n", "clock.skew = 1000h: must be at most 168h"),
		fileCase("skew -1000h", "clock:\n  skew: -1000h\n", "clock.skew = -1000h: must be at least -168h"),
		fileCase("ntp offset 0", "clock:\n  ntp_max_offset: 0s\n", "clock.ntp_max_offset = 0s: must be at least 1ms"),
		fileCase("ntp offset 2h", "clock:\n  ntp_max_offset: 2h\n", "clock.ntp_max_offset = 2h: must be at most 1h"),
		fileCase("duration word", "checkin:\n  heartbeat: fast\n", `checkin.heartbeat = "fast": not a duration`),
		fileCase("duration no unit", "checkin:\n  heartbeat: 5\n", `checkin.heartbeat = "5": missing unit; write e.g. "5s" or "5ms"`),

		// Numbers, words, addresses, URLs.
		fileCase("max_attempts 0", "jobs:\n  max_attempts: 0\n", "jobs.max_attempts = 0: must be between 1 and 1000"),
		fileCase("max_attempts 1001", "jobs:\n  max_attempts: 1001\n", "jobs.max_attempts = 1001: must be between 1 and 1000"),
		fileCase("max_attempts huge", "jobs:\n  max_attempts: 99999999999999999999\n", `jobs.max_attempts = "99999999999999999999": number out of range`),
		fileCase("capacity 0", "node:\n  capacity: 0\n", "node.capacity = 0: must be between 1 and 10000"),
		fileCase("capacity word", "node:\n  capacity: many\n", `node.capacity = "many": not a whole number`),
		fileCase("migrate word", "database:\n  migrate: maybe\n", `database.migrate = "maybe": not a boolean`),
		fileCase("listen port 99999", "admin:\n  listen: localhost:99999\n", `admin.listen = "localhost:99999": port 99999 is out of range: a port is 0 to 65535`),
		fileCase("listen port -1", "admin:\n  listen: ':-1'\n", `admin.listen = ":-1": port -1 is out of range`),
		fileCase("listen port name", "admin:\n  listen: localhost:nosuchservice\n", `port "nosuchservice" is neither a number from 0 to 65535 nor a known service name`),
		fileCase("listen host", "admin:\n  listen: 'bad host:9090'\n", `host "bad host" is neither an IP address nor a host name`),
		fileCase("listen no port", "admin:\n  listen: '9090'\n", `admin.listen = "9090": must be host:port or :port`),
		{name: "base_url credentials", config: "jobs:\n  base_url: http://ops:s3cr3tpw@localhost\n", args: show, code: 1,
			want: `jobs.base_url = "http://ops:xxxxx@localhost": must not hold user info (user:password@)`, hide: "s3cr3tpw"},
		{name: "base_url credentials with /", config: "jobs:\n  base_url: http://ops:s3cr/3tpw@localhost\n", args: show, code: 1,
			want: "holds user info (user:password@), which base_url must not", hide: "3tpw"},
		fileCase("base_url ftp", "jobs:\n  base_url: ftp://localhost\n", `jobs.base_url = "ftp://localhost": must be an http or https URL`),
		fileCase("base_url query", "jobs:\n  base_url: http://localhost/?a=1\n", "must not have a query"),
		fileCase("base_url empty", "jobs:\n  base_url: ''\n", `jobs.base_url = "": must be set`),
		fileCase("driver oracle", "database:\n  driver: oracle\n", `database.driver = "oracle": must be one of sqlite, postgres, sqlserver, mysql`),
		fileCase("driver mssql", "database:\n  driver: mssql\n", `database.driver = "mssql": write sqlserver for SQL Server`),
		fileCase("postgres without dsn", "database:\n  driver: postgres\n", "the postgres driver has no default DSN"),
		fileCase("sqlite with postgres dsn", "database:\n  dsn: postgres://u:pw@h/db\n", "is a postgres DSN but database.driver is sqlite"),
		fileCase("schema name", "database:\n  schema: 'a;drop'\n", `database.schema = "a;drop": must be a letter or _`),
		fileCase("node name space", "node:\n  name: a b\n", `node.name = "a b": may only contain letters, digits, '.', '_' and '-'`),
		fileCase("node name newline", "node:\n  name: \"a\\nb\"\n", `node.name = "a\nb": may only contain`),
		fileCase("node name long", "node:\n  name: "+strings.Repeat("n", 65)+"\n", "must be at most 64 characters (it has 65)"),
		fileCase("signing key short", "jobs:\n  signing_key: short\n", "jobs.signing_key (value hidden): must be at least 16 characters"),
		fileCase("log level", "log:\n  level: loud\n", `log.level = "loud": must be one of debug, info, warn, error`),
		fileCase("log format", "log:\n  format: xml\n", `log.format = "xml": must be one of text, json`),
		fileCase("ntp url", "clock:\n  ntp_server: udp://pool.ntp.org\n", `clock.ntp_server = "udp://pool.ntp.org": must be a host name`),

		// Schedules in the file.
		fileCase("schedule name newline", "schedules:\n  - name: \"a\\nb\"\n    every: 1h\n    endpoint: /x\n", `schedules[0]: schedule name "a\nb" has a control character at byte 1`),
		fileCase("schedule name tab", "schedules:\n  - name: \"a\\tb\"\n    every: 1h\n    endpoint: /x\n", `schedule name "a\tb" has a control character`),
		fileCase("schedule name leading space", "schedules:\n  - name: ' x'\n    every: 1h\n    endpoint: /x\n", "has a leading or trailing space"),
		fileCase("schedule name non-ASCII", "schedules:\n  - name: café\n    every: 1h\n    endpoint: /x\n", `has the non-ASCII character 'é'`),
		fileCase("schedule name long", "schedules:\n  - name: "+long+"\n    every: 1h\n    endpoint: /x\n", "schedule name is 201 bytes long; at most 200 are allowed"),
		fileCase("schedule name duplicate", schedule+"  - name: nightly\n    every: 2h\n    endpoint: /y\n", `schedules[1].name = "nightly": the same name as schedules[0]`),
		fileCase("schedule endpoint ..;", schedule+"  - name: b\n    every: 1h\n    endpoint: /jobs/x/..;/y\n", `endpoint "/jobs/x/..;/y" has a "..;" path segment`),
		fileCase("schedule timeout 1ns", schedule+"    timeout: 1ns\n", "schedules[0].timeout = 1ns: must be at least 1ms"),
		fileCase("schedule timeout 48h", schedule+"    timeout: 48h\n", "schedules[0].timeout = 48h: must be at most 24h"),
		fileCase("schedule tolerance 30 days", schedule+"    tolerance: 720h\n", "schedules[0].tolerance = 720h: must be at most 168h"),
		fileCase("schedule every 9000h", "schedules:\n  - name: a\n    every: 9000h\n    endpoint: /x\n", "schedules[0].every = 9000h: must be at most 8784h"),
		fileCase("schedule every 1ms", "schedules:\n  - name: a\n    every: 1ms\n    endpoint: /x\n", "every 1ms: must be at least 1s"),
		fileCase("schedule max_attempts", schedule+"    max_attempts: 5000\n", "schedules[0].max_attempts = 5000: must be between 1 and 1000"),
		fileCase("schedule method", schedule+"    method: FETCH\n", `method "FETCH" is not one of GET, POST, PUT, PATCH, DELETE`),
		fileCase("schedule misfire", schedule+"    misfire: later\n", `misfire "later" is not one of once, skip, all`),
		fileCase("schedule cron", "schedules:\n  - name: a\n    cron: '61 * * * *'\n    endpoint: /x\n", "schedules[0]"),
		fileCase("schedule unknown key", schedule+"    evry: 1h\n", `unknown key "schedules[0].evry" (did you mean "schedules[0].every"?)`),

		// The file itself.
		fileCase("unknown section", "databse:\n  driver: sqlite\n", `unknown key "databse" (did you mean "database"?)`),
		fileCase("unknown key", "jobs:\n  bse_url: http://localhost\n", `unknown key "jobs.bse_url" (did you mean "jobs.base_url"?)`),
		fileCase("two documents", "log:\n  level: info\n---\nlog:\n  level: debug\n", "only one YAML document is allowed"),
		fileCase("list at root", "- a\n- b\n", "must be a mapping of sections"),
		fileCase("section a value", "jobs: fast\n", "jobs must be a mapping of keys"),
		fileCase("duplicate key", "jobs:\n  lease: 5s\n  lease: 6s\n", `duplicate key "jobs.lease"`),
		{name: "config is a directory", args: []string{"config", "show", "-config", dir}, code: 1, want: "is a directory; the config file must be a regular YAML file"},
		{name: "config over 1 MiB", args: []string{"config", "show", "-config", big}, code: 1, want: "big.yaml is 2097155 bytes; a config file may be at most 1 MiB"},
		{name: "config missing", args: []string{"config", "show", "-config", filepath.Join(dir, "missing.yaml")}, code: 1, want: "missing.yaml: no such file or directory"},

		// Environment variables.
		envCase("env misspelt section", "SLOTPOLLER_DATABSE_DRIVER=sqlite", `config: SLOTPOLLER_DATABSE_DRIVER: unknown setting (did you mean "SLOTPOLLER_DATABASE_DRIVER"?)`),
		envCase("env short section", "SLOTPOLLER_DB_DSN=x.db", `config: SLOTPOLLER_DB_DSN: unknown setting (did you mean "SLOTPOLLER_DATABASE_DSN"?)`),
		envCase("env missing underscore", "SLOTPOLLER_LOGLEVEL=debug", `config: SLOTPOLLER_LOGLEVEL: unknown setting (did you mean "SLOTPOLLER_LOG_LEVEL"?)`),
		envCase("env no section", "SLOTPOLLER_JOBS=x", "SLOTPOLLER_JOBS: unknown setting (settings are SLOTPOLLER_<SECTION>_<KEY>"),
		envCase("env unknown key", "SLOTPOLLER_NODE_COLOR=blue", "SLOTPOLLER_NODE_COLOR: unknown setting"),
		envCase("env test-like", "SLOTPOLLER_TESTS_DSN=x", "SLOTPOLLER_TESTS_DSN: unknown setting"),
		envCase("env list section", "SLOTPOLLER_SCHEDULES_NAME=x", "the schedules list is set in the config file only"),
		envCase("env heartbeat 1ns", "SLOTPOLLER_CHECKIN_HEARTBEAT=1ns", "checkin.heartbeat = 1ns: must be at least 100ms (every node writes its registry row once per heartbeat) (set by SLOTPOLLER_CHECKIN_HEARTBEAT)"),
		envCase("env resync 1ms", "SLOTPOLLER_CLOCK_RESYNC=1ms", "clock.resync = 1ms: must be at least 1s"),
		envCase("env lease huge", "SLOTPOLLER_JOBS_LEASE=2000000h", "jobs.lease = 2000000h: must be at most 24h"),
		envCase("env slot 1ns", "SLOTPOLLER_ROTATION_SLOT=1ns", "rotation.slot = 1ns: must be at least 100ms"),
		envCase("env empty number", "SLOTPOLLER_NODE_CAPACITY=", "SLOTPOLLER_NODE_CAPACITY is empty: set a value or unset the variable"),
		envCase("env listen", "SLOTPOLLER_ADMIN_LISTEN=localhost:99999", "port 99999 is out of range"),
		envCase("env bad duration", "SLOTPOLLER_JOBS_TIMEOUT=soon", `SLOTPOLLER_JOBS_TIMEOUT = "soon": not a duration`),
		envCase("env bad bool", "SLOTPOLLER_DATABASE_MIGRATE=perhaps", `SLOTPOLLER_DATABASE_MIGRATE = "perhaps": not a boolean`),
		{name: "env base_url credentials", env: []string{"SLOTPOLLER_JOBS_BASE_URL=http://u:s3cr3tpw@localhost"}, args: show, code: 1, want: "must not hold user info", hide: "s3cr3tpw"},
		{name: "env signing key short", env: []string{"SLOTPOLLER_JOBS_SIGNING_KEY=shortkey"}, args: show, code: 1, want: "jobs.signing_key (value hidden): must be at least 16 characters", hide: "shortkey"},
		{name: "env bad dsn value hidden", env: []string{"SLOTPOLLER_DATABASE_DRIVER=postgres", "SLOTPOLLER_DATABASE_DSN=mysql://u:s3cr3tpw@h/db"}, args: show, code: 1, want: "must be a postgres:// URL", hide: "s3cr3tpw"},

		// Flags that override the configuration.
		flagCase("-log-format xml", `log.format = "xml": must be one of text, json (set by flag -log-format)`, "config", "show", "-log-format", "xml"),
		flagCase("-log-level loud", `log.level = "loud"`, "config", "show", "-log-level", "loud"),
		flagCase("-node-name with space", `node.name = "a b": may only contain letters, digits, '.', '_' and '-' (set by flag -node-name)`, "config", "show", "-node-name", "a b"),
		flagCase("-node-name with newline", `node.name = "a\nb"`, "config", "show", "-node-name", "a\nb"),
		flagCase("-admin-listen port", "port 99999 is out of range", "config", "show", "-admin-listen", "localhost:99999"),
		flagCase("unknown flag", "flag provided but not defined: -colour", "config", "show", "-colour", "red"),

		// enqueue.
		flagCase("enqueue no endpoint", "-endpoint is required", "enqueue"),
		flagCase("enqueue -method", `-method "FETCH": must be one of GET, POST, PUT, PATCH, DELETE`, "enqueue", "-endpoint", "/x", "-method", "FETCH"),
		flagCase("enqueue -method lower", `-method "post": must be one of`, "enqueue", "-endpoint", "/x", "-method", "post"),
		flagCase("enqueue -timeout 1ns", "-timeout 1ns: timeout 1ns is below 1ms (timeouts are kept in milliseconds; 0 means the default)", "enqueue", "-endpoint", "/x", "-timeout", "1ns"),
		flagCase("enqueue -timeout 999us", "-timeout 999µs: timeout 999µs is below 1ms", "enqueue", "-endpoint", "/x", "-timeout", "999us"),
		flagCase("enqueue -timeout negative", "-timeout -1s: timeout -1s must not be negative", "enqueue", "-endpoint", "/x", "-timeout", "-1s"),
		flagCase("enqueue -timeout 25h", "-timeout 25h0m0s: timeout 25h0m0s is above 24h0m0s", "enqueue", "-endpoint", "/x", "-timeout", "25h"),
		flagCase("enqueue -max-attempts 1001", "-max-attempts 1001: must be between 1 and 1000", "enqueue", "-endpoint", "/x", "-max-attempts", "1001"),
		flagCase("enqueue -max-attempts -1", "-max-attempts -1: must be between 1 and 1000", "enqueue", "-endpoint", "/x", "-max-attempts", "-1"),
		flagCase("enqueue -max-attempts int4", "-max-attempts 2147483648: must be between 1 and 1000", "enqueue", "-endpoint", "/x", "-max-attempts", "2147483648"),
		flagCase("audit -cursor", `-cursor "x": not a cursor a page of the audit log gave`, "audit", "-cursor", "x"),
		flagCase("audit -limit", "-limit 0: must be between 1 and 1000", "audit", "-limit", "0"),
		flagCase("enqueue -traceparent", `-traceparent (or $TRACEPARENT): traceparent "00-zz" is not a W3C traceparent`, "enqueue", "-endpoint", "/x", "-traceparent", "00-zz"),
		flagCase("enqueue -max-attempts word", `invalid value "three" for flag -max-attempts`, "enqueue", "-endpoint", "/x", "-max-attempts", "three"),
		flagCase("enqueue -at year 9999", `-at "9999-12-31T00:00:00Z": a job may be due at most 366 days ahead`, "enqueue", "-endpoint", "/x", "-at", "9999-12-31T00:00:00Z"),
		flagCase("enqueue -at year 1", `-at "0001-01-01T00:00:00Z": a job's run time must not be before 1970-01-01`, "enqueue", "-endpoint", "/x", "-at", "0001-01-01T00:00:00Z"),
		flagCase("enqueue -in 2000000h", "-in 2000000h0m0s: a job may be due at most 366 days (8784h) ahead", "enqueue", "-endpoint", "/x", "-in", "2000000h"),
		flagCase("enqueue -in negative", "-in -1s: must not be negative", "enqueue", "-endpoint", "/x", "-in", "-1s"),
		flagCase("enqueue -in word", `invalid value "soon" for flag -in`, "enqueue", "-endpoint", "/x", "-in", "soon"),
		flagCase("enqueue -at word", `-at "tomorrow": not an RFC 3339 time`, "enqueue", "-endpoint", "/x", "-at", "tomorrow"),
		flagCase("enqueue -in and -at", "give -in or -at, not both", "enqueue", "-endpoint", "/x", "-in", "1s", "-at", "2030-01-01T00:00:00Z"),
		flagCase("enqueue extra argument", `unexpected argument "now"`, "enqueue", "-endpoint", "/x", "now"),

		flagCase("enqueue -payload and -payload-file", "give -payload or -payload-file, not both", "enqueue", "-endpoint", "/x", "-payload", "a", "-payload-file", "-"),
		flagCase("enqueue -payload-file missing", "-payload-file: open "+filepath.Join(dir, "missing.json"), "enqueue", "-endpoint", "/x", "-payload-file", filepath.Join(dir, "missing.json")),
		flagCase("enqueue -payload-file over 1 MiB", "is over 1048576 bytes (1 MiB), the most a job's payload may be", "enqueue", "-endpoint", "/x", "-payload-file", big),

		// job.
		{name: "job without verb", args: []string{"job"}, code: 2, want: "say `job list`, `job search TEXT`, `job show ID`, `job retry` or `job cancel ID`"},
		flagCase("job unknown verb", `unknown job verb "frob"`, "job", "frob"),
		flagCase("job show no id", "give the job's ID, e.g. `slotpoller job show 42`", "job", "show"),
		flagCase("job show bad id", `job ID "abc": not a job id (a positive whole number)`, "job", "show", "abc"),
		flagCase("job show id 0", `job ID "0": not a job id`, "job", "show", "0"),
		flagCase("job show two ids", `unexpected argument "2"`, "job", "show", "1", "2"),
		flagCase("job cancel no id", "give the job's ID, e.g. `slotpoller job cancel 42`", "job", "cancel"),
		flagCase("job cancel fraction id", `job ID "1.5": not a job id`, "job", "cancel", "1.5"),
		flagCase("job retry nothing", "say which jobs: `job retry ID` or `job retry -state dead [-since 24h]`", "job", "retry"),
		flagCase("job retry id and state", "give a job ID or -state, not both", "job", "retry", "7", "-state", "dead"),
		flagCase("job retry -state done", `-state "done": only dead, failed, cancelled or missed jobs can be retried`, "job", "retry", "-state", "done"),
		flagCase("job retry -limit 0", "-limit 0: must be between 1 and 1000", "job", "retry", "-state", "dead", "-limit", "0"),
		flagCase("job list -state", `-state: state "sleeping" is not one of`, "job", "list", "-state", "sleeping"),
		flagCase("job list -limit 0", "-limit 0: must be between 1 and 1000", "job", "list", "-limit", "0"),
		flagCase("job list -limit 5000", "-limit: limit 5000 must be between 1 and 1000", "job", "list", "-limit", "5000"),
		flagCase("job list -since negative", "-since: since -1h0m0s must not be negative", "job", "list", "-since", "-1h"),
		flagCase("job list -until past -since", "-until: until 2h0m0s must be less than since 1h0m0s", "job", "list", "-since", "1h", "-until", "2h"),
		flagCase("job retry id and -until", "give a job ID or -state, not both", "job", "retry", "7", "-until", "1h"),
		flagCase("job list -cursor", `-cursor: cursor "x" is not one a page gave`, "job", "list", "-cursor", "x"),

		// Endpoints.
		flagCase("endpoint ..;", `-endpoint "/jobs/x/..;/y": endpoint "/jobs/x/..;/y" has a "..;" path segment (after percent-decoding); dot segments are not allowed`, "enqueue", "-endpoint", "/jobs/x/..;/y"),
		flagCase("endpoint .;", `has a ".;" path segment`, "enqueue", "-endpoint", "/jobs/x/.;/y"),
		flagCase("endpoint ..;params", `has a "..;jsessionid=1" path segment`, "enqueue", "-endpoint", "/jobs/x/..;jsessionid=1/y"),
		flagCase("endpoint %2e%2e;", `has a "..;" path segment (after percent-decoding)`, "enqueue", "-endpoint", "/jobs/x/%2e%2e;/y"),
		flagCase("endpoint ..%3b", `has a "..;" path segment`, "enqueue", "-endpoint", "/jobs/x/..%3b/y"),
		flagCase("endpoint double-encoded", `has a ".." path segment`, "enqueue", "-endpoint", "/jobs/x/%252e%252e/y"),
		flagCase("endpoint ...", `has a "..." path segment`, "enqueue", "-endpoint", "/jobs/x/.../y"),
		flagCase("endpoint ..", `has a ".." path segment`, "enqueue", "-endpoint", "/a/../../etc/passwd"),
		flagCase("endpoint backslash", "contains a backslash, which some servers treat as /", "enqueue", "-endpoint", `/jobs\..\y`),
		flagCase("endpoint encoded backslash", "contains an encoded backslash", "enqueue", "-endpoint", "/jobs/%5c../y"),
		flagCase("endpoint absolute", "is an absolute URL; only a path on the node's own base URL is allowed", "enqueue", "-endpoint", "http://evil.example/x"),
		flagCase("endpoint scheme-relative", "is a scheme-relative URL (//host)", "enqueue", "-endpoint", "//evil.example/x"),
		flagCase("endpoint no slash", `endpoint "jobs/x" must start with /`, "enqueue", "-endpoint", "jobs/x"),
		flagCase("endpoint fragment", "contains a fragment (#)", "enqueue", "-endpoint", "/jobs/x#y"),
		flagCase("endpoint bad escape", "has invalid percent-encoding", "enqueue", "-endpoint", "/jobs/%zz"),
		flagCase("endpoint newline", "contains a control character at byte 7", "enqueue", "-endpoint", "/jobs/x\ny"),
		flagCase("endpoint encoded newline", "contains an encoded control character", "enqueue", "-endpoint", "/jobs/x%0ay"),

		// task add.
		flagCase("task name newline", `-name "a\nb": task name "a\nb" has a control character at byte 1`, "task", "add", "-name", "a\nb", "-endpoint", "/x", "-every", "1s"),
		flagCase("task name CR", "has a control character", "task", "add", "-name", "a\rb", "-endpoint", "/x", "-every", "1s"),
		flagCase("task name space", "has a leading or trailing space", "task", "add", "-name", " feed", "-endpoint", "/x", "-every", "1s"),
		flagCase("task name long", "task name is 201 bytes long", "task", "add", "-name", long, "-endpoint", "/x", "-every", "1s"),
		flagCase("task name non-ASCII", "non-ASCII character", "task", "add", "-name", "flux→feed", "-endpoint", "/x", "-every", "1s"),
		flagCase("task -method", `-method "FETCH"`, "task", "add", "-name", "a", "-endpoint", "/x", "-every", "1s", "-method", "FETCH"),
		flagCase("task -timeout 1ns", "-timeout 1ns: timeout 1ns is below 1ms", "task", "add", "-name", "a", "-endpoint", "/x", "-every", "1s", "-timeout", "1ns"),
		flagCase("task -every missing", "-every is required and must be positive", "task", "add", "-name", "a", "-endpoint", "/x"),
		flagCase("task endpoint ..;", `has a "..;" path segment`, "task", "add", "-name", "a", "-endpoint", "/x/..;/y", "-every", "1s"),
		flagCase("task no name", "-name is required", "task", "add", "-endpoint", "/x", "-every", "1s"),

		// schedule add.
		flagCase("schedule name CR", `-name "a\rb": schedule name "a\rb" has a control character`, "schedule", "add", "-name", "a\rb", "-every", "1h", "-endpoint", "/x"),
		flagCase("schedule name non-ASCII", `has the non-ASCII character 'é'`, "schedule", "add", "-name", "café", "-every", "1h", "-endpoint", "/x"),
		flagCase("schedule -max-attempts", "-max-attempts 5000: must be between 1 and 1000", "schedule", "add", "-name", "a", "-every", "1h", "-endpoint", "/x", "-max-attempts", "5000"),
		flagCase("schedule -timeout 1ns", "-timeout 1ns: timeout 1ns is below 1ms", "schedule", "add", "-name", "a", "-every", "1h", "-endpoint", "/x", "-timeout", "1ns"),
		flagCase("schedule -method", `-method "FETCH"`, "schedule", "add", "-name", "a", "-every", "1h", "-endpoint", "/x", "-method", "FETCH"),
		flagCase("schedule endpoint ..;", `has a "..;" path segment`, "schedule", "add", "-name", "a", "-every", "1h", "-endpoint", "/x/..;/y"),
		flagCase("schedule every and cron", "give -every or -cron, one of them", "schedule", "add", "-name", "a", "-every", "1h", "-cron", "* * * * *", "-endpoint", "/x"),

		// Verbs.
		{name: "no verb", code: 2, want: "Usage:"},
		{name: "unknown verb", args: []string{"frobnicate"}, code: 2, want: `unknown verb "frobnicate"`},
		{name: "config without show", args: []string{"config"}, code: 2, want: "say `config show`"},
		{name: "schema without verb", args: []string{"schema"}, code: 2, want: "say `schema migrate` or `schema status`"},
		{name: "task unknown verb", args: []string{"task", "frob"}, code: 2, want: `unknown task verb "frob"`},
		{name: "schedule unknown verb", args: []string{"schedule", "frob"}, code: 2, want: `unknown schedule verb "frob"`},

		// DSNs whose password would leak through the driver's error.
		dsnCase("dsn plain", "postgres", "postgres://farm:Tr0ub4dor@127.0.0.1:1/farm?connect_timeout=1"),
		dsnCase("dsn password with @", "postgres", "postgres://farm:Tr0@ub4dor@127.0.0.1:1/farm?connect_timeout=1"),
		dsnCase("dsn password with /", "postgres", "postgres://farm:Tr0/ub4dor@127.0.0.1:1/farm?connect_timeout=1"),
		dsnCase("dsn password with ?", "postgres", "postgres://farm:Tr0?ub4dor@127.0.0.1:1/farm?connect_timeout=1"),
		dsnCase("dsn password with #", "postgres", "postgres://farm:Tr0#ub4dor@127.0.0.1:1/farm?connect_timeout=1"),
		dsnCase("dsn numeric prefix and ?", "postgres", "postgres://farm:12?ub4dor@127.0.0.1:1/farm?connect_timeout=1"),
		dsnCase("dsn many delimiters", "postgres", "postgres://farm:Tr0@ub/4d?or#x@127.0.0.1:1/farm?connect_timeout=1"),
		dsnCase("dsn key=value", "postgres", "host=127.0.0.1 port=1 user=farm password=Tr0ub4dor connect_timeout=1"),
		dsnCase("dsn key=value with space", "postgres", "host=127.0.0.1 port=1 user=farm password=Tr0 ub4dor connect_timeout=1"),
		dsnCase("dsn query password", "postgres", "postgres://127.0.0.1:1/farm?user=farm&password=Tr0ub4dor&connect_timeout=1"),
		dsnCase("dsn sqlserver URL", "sqlserver", "sqlserver://sa:Tr0@ub4dor@127.0.0.1:1?database=farm&dial+timeout=1"),
		dsnCase("dsn sqlserver ADO", "sqlserver", "Server=127.0.0.1,1;User ID=sa;Password=Tr0;ub4dor;Database=farm;Dial Timeout=1"),
	}
	return append(inputs, platformBadInputs(t, dir)...)
}

// TestBadInput runs every bad input through the real entry point.
func TestBadInput(t *testing.T) {
	for _, in := range badInputs(t) {
		t.Run(in.name, func(t *testing.T) {
			for _, kv := range in.env {
				name, value, _ := strings.Cut(kv, "=")
				t.Setenv(name, value)
			}
			cfg := writeConfig(t, in.config)
			args := make([]string, len(in.args))
			for i, a := range in.args {
				args[i] = strings.ReplaceAll(a, "{config}", cfg)
			}
			code, out, errOut := cli(t, args...)
			require.Equal(t, in.code, code, "%q\nstdout: %s\nstderr: %s", args, out, errOut)
			require.Contains(t, errOut, in.want, "%q", args)
			if in.hide != "" {
				require.NotContains(t, out+errOut, in.hide, "%q shows a secret", args)
			}
		})
	}
}

// TestBadInputCountInDocs keeps the count of bad inputs that
// docs/configuration.md states true.
func TestBadInputCountInDocs(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("docs/configuration.md counts the Unix table, which has the FIFO and /dev/zero")
	}
	doc, err := os.ReadFile(filepath.Join("docs", "configuration.md"))
	require.NoError(t, err)
	m := regexp.MustCompile(`table of (\d+) bad inputs`).FindSubmatch(doc)
	require.NotNil(t, m, "docs/configuration.md says how many bad inputs badinput_test.go tries")
	n, _ := strconv.Atoi(string(m[1]))
	require.Equal(t, len(badInputs(t)), n, "update the count in docs/configuration.md")
}
