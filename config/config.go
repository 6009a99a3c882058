// Package config is a slotpoller node's configuration: the Config struct
// and its defaults (Default), loading it from config.yaml, the
// environment (SLOTPOLLER_<SECTION>_<KEY>) and command-line flags with the
// source of every value (LoadWithSources), and its validation.
//
// Invariants:
//   - Layers override in one order: defaults < file < environment < flags;
//     Sources says which layer each key's value came from.
//   - A Config that Load returns has passed Validate: every key is within
//     its bounds, and each problem names the key, the value and why, all
//     problems reported together.
//   - An unknown key in the file or an unknown SLOTPOLLER_ variable of a
//     known section is an error, with the nearest known key suggested.
//   - A secret (the DSN's password, the signing key, the admin token)
//     appears masked in every error, log and `config show` (Redacted,
//     MaskDSN, IsSecret).
//   - The environment comes in as a slice (os.Environ's form): the package
//     reads no variable itself and keeps no state between calls.
package config

import (
	"net"
	"strings"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
)

// Config is the configuration of one slotpoller node: config.yaml, overridden
// key by key by SLOTPOLLER_<SECTION>_<KEY> environment variables.
type Config struct {
	Database DatabaseConfig `yaml:"database"`
	Node     NodeConfig     `yaml:"node"`
	Jobs     JobsConfig     `yaml:"jobs"`
	Rotation RotationConfig `yaml:"rotation"`
	Checkin  CheckinConfig  `yaml:"checkin"`
	Clock    ClockConfig    `yaml:"clock"`
	Log      LogConfig      `yaml:"log"`
	Admin    AdminConfig    `yaml:"admin"`
	Tracing  TracingConfig  `yaml:"tracing"`
	// Schedules are created or updated at start (config as code). They are
	// a list, so environment variables do not reach into them.
	Schedules []ScheduleConfig `yaml:"schedules"`
	// Queues route jobs enqueued without a queue to one by their
	// endpoint's prefix (config/queues.go). A list, like schedules.
	Queues []QueueConfig `yaml:"queues"`
}

// ScheduleConfig declares a recurring schedule.
type ScheduleConfig struct {
	Name     string   `yaml:"name"`
	Every    Duration `yaml:"every"`     // either every...
	Cron     string   `yaml:"cron"`      // ...or a cron expression (5 fields, or 6 with seconds)
	TimeZone string   `yaml:"time_zone"` // IANA zone of the cron expression; default UTC
	Endpoint string   `yaml:"endpoint"`
	Method   string   `yaml:"method"` // default POST
	Payload  string   `yaml:"payload"`
	Timeout  Duration `yaml:"timeout"` // 0: jobs.timeout
	// MaxAttempts of each occurrence; 0: jobs.max_attempts.
	MaxAttempts int `yaml:"max_attempts"`
	// Tolerance is how late an occurrence may still start; default 5m.
	Tolerance Duration `yaml:"tolerance"`
	// Misfire after an outage: once (default), skip or all.
	Misfire string `yaml:"misfire"`
	// Overlap: forbid (default) or allow an occurrence to start while the
	// previous one still runs.
	Overlap string `yaml:"overlap"`
	Enabled bool   `yaml:"enabled"` // default true
}

// defaultSchedule is what a schedule entry starts from before its keys.
func defaultSchedule() ScheduleConfig {
	return ScheduleConfig{Method: "POST", Tolerance: Duration(5 * time.Minute), Misfire: store.MisfireOnce,
		Overlap: store.OverlapForbid, Enabled: true}
}

// Schedule turns the entry into the store's form.
func (c ScheduleConfig) Schedule(defaultMaxAttempts int) store.Schedule {
	attempts := c.MaxAttempts
	if attempts == 0 {
		attempts = defaultMaxAttempts
	}
	var payload []byte
	if c.Payload != "" {
		payload = []byte(c.Payload)
	}
	return store.Schedule{Name: c.Name, Every: time.Duration(c.Every), Cron: c.Cron, TimeZone: c.TimeZone,
		Endpoint: c.Endpoint, Method: c.Method, Payload: payload, Timeout: time.Duration(c.Timeout),
		MaxAttempts: attempts, Tolerance: time.Duration(c.Tolerance), Misfire: c.Misfire, Overlap: c.Overlap,
		Enabled: c.Enabled, Source: store.SourceConfig}
}

// DatabaseConfig says which database the farm shares.
type DatabaseConfig struct {
	// Driver is sqlite (the default), postgres or sqlserver.
	Driver string `yaml:"driver"`
	// DSN is the connection string. For sqlite it defaults to the file
	// slotpoller.db beside the config file (or in the working directory when
	// there is no config file), as an absolute path; a relative sqlite path is
	// taken relative to the same folder. postgres and sqlserver have no
	// default. It may hold a password: show it only through MaskDSN or
	// Config.Redacted.
	DSN string `yaml:"dsn"`
	// Schema is the SQL Server schema that holds slotpoller's tables; default
	// slotpoller. Only sqlserver uses it. A letter or _, then up to 127
	// letters, digits or _ (it is written into statements, so nothing that
	// would need quoting is accepted).
	Schema string `yaml:"schema"`
	// Migrate applies schema migrations at start; default true.
	Migrate bool `yaml:"migrate"`
}

// NodeConfig describes this node.
type NodeConfig struct {
	// Name identifies the node in the registry; default the host name.
	// 1-64 characters of [A-Za-z0-9._-].
	Name string `yaml:"name"`
	// Capacity is the number of concurrent job calls; default 16; 1..10000.
	Capacity int `yaml:"capacity"`
}

// JobsConfig holds the defaults for running jobs.
type JobsConfig struct {
	// BaseURL is what job endpoints resolve against; default http://localhost.
	// An absolute http or https URL with a host and no query, fragment or
	// user info.
	BaseURL string `yaml:"base_url"`
	// Timeout is the default deadline of one endpoint call; default 30s;
	// 1ms..24h. A claim holds a job for the longer of Lease and its call's
	// timeout plus Lease/12, so that no other node runs it while the
	// endpoint may still be working: a dead node's job waits that long.
	Timeout Duration `yaml:"timeout"`
	// Lease is how long a claim holds without renewal; default 15s; 1s..24h.
	Lease Duration `yaml:"lease"`
	// MaxAttempts is the default attempt limit for enqueue; default 33;
	// 1..1000. With the default backoff, 33 attempts wait at least 61m45s
	// in all (at most 2h3m31s): a job outlives an hour of its endpoint
	// being down, a deploy or a restart of the web application.
	MaxAttempts int `yaml:"max_attempts"`
	// Backoff is the first retry delay; default 1s; 100ms..24h.
	Backoff Duration `yaml:"backoff"`
	// BackoffMax caps the retry delay; default 5m; >= Backoff; at most 24h.
	BackoffMax Duration `yaml:"backoff_max"`
	// RetentionDone and the others are how long a finished job is kept,
	// per final state, from when it finished on the database clock; the
	// slot owner deletes it after that, in small batches. 0 keeps them.
	// Defaults: done 24h, the others 168h; otherwise 1m..87600h.
	RetentionDone      Duration `yaml:"retention_done"`
	RetentionFailed    Duration `yaml:"retention_failed"`
	RetentionDead      Duration `yaml:"retention_dead"`
	RetentionCancelled Duration `yaml:"retention_cancelled"`
	RetentionMissed    Duration `yaml:"retention_missed"`
	// RetentionAudit is how long an entry of the operators' audit log is
	// kept, from when it was recorded on the database clock; default
	// 2160h (90 days); 0 keeps them; otherwise 1m..87600h.
	RetentionAudit Duration `yaml:"retention_audit"`
	// DrainTimeout is how long a stop waits for in-flight calls before
	// releasing them; default 20s; 0 releases at once; at most 1h.
	DrainTimeout Duration `yaml:"drain_timeout"`
	// SigningKey, when set, makes every endpoint call carry a timestamp and
	// an HMAC-SHA-256 signature, so job pages exposed through the load
	// balancer can refuse calls that did not come from slotpoller. A secret:
	// set it through SLOTPOLLER_JOBS_SIGNING_KEY; it is never logged or
	// shown. At least 16 characters.
	SigningKey string `yaml:"signing_key"`
}

// Retention is the retention of each finished state, keyed by state.
func (c JobsConfig) Retention() map[string]time.Duration {
	return map[string]time.Duration{
		store.StateDone: time.Duration(c.RetentionDone), store.StateFailed: time.Duration(c.RetentionFailed),
		store.StateDead: time.Duration(c.RetentionDead), store.StateCancelled: time.Duration(c.RetentionCancelled),
		store.StateMissed: time.Duration(c.RetentionMissed),
	}
}

// AdminConfig is the node's admin HTTP endpoint (/healthz, /readyz,
// /metrics, /status and the HTTP API under /api/v1/).
type AdminConfig struct {
	// Listen is the address to serve on; empty (the default) turns the
	// endpoint off. A port alone (":9090") binds to loopback, 127.0.0.1. The
	// port is 0..65535 or a service name.
	Listen string `yaml:"listen"`
	// Token, when set, is required as "Authorization: Bearer <token>" by
	// everything the admin endpoint serves but /healthz and /readyz. It
	// must be set when Listen binds beyond loopback. A secret: set it
	// through SLOTPOLLER_ADMIN_TOKEN; it is never logged or shown. 16 to
	// 256 printable ASCII characters, no spaces.
	Token string `yaml:"token"`
}

// TracingConfig is where the node records its spans (OpenTelemetry).
// Every call carries its job's traceparent whether or not spans are
// recorded.
type TracingConfig struct {
	// OTLPEndpoint, when set, is an OTLP/HTTP endpoint (a collector's,
	// e.g. http://127.0.0.1:4318; spans go to /v1/traces unless the URL
	// has a path) that receives a span for every claim and call. Empty
	// (the default) records none.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
}

// AdminAddr is the address the admin endpoint binds: loopback unless a
// host is given.
func (a AdminConfig) AdminAddr() string {
	if strings.HasPrefix(a.Listen, ":") {
		return "127.0.0.1" + a.Listen
	}
	return a.Listen
}

// Loopback reports whether the admin endpoint binds to loopback only
// (127.0.0.0/8, ::1 or localhost), where only the host's own users and
// processes reach it.
func (a AdminConfig) Loopback() bool {
	host, _, err := net.SplitHostPort(a.AdminAddr())
	if err != nil {
		return false
	}
	return IsLoopbackHost(host)
}

// isLoopbackHost reports whether host (no port) names this host's loopback
// interface.
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// RotationConfig shapes the polling rotation.
type RotationConfig struct {
	// Slot is the length of one rotation slot in DB time; default 1s; 100ms..1m.
	Slot Duration `yaml:"slot"`
}

// CheckinConfig shapes the node registry.
type CheckinConfig struct {
	// Heartbeat is how often the node refreshes its registry row; default 1s;
	// 100ms..1m.
	Heartbeat Duration `yaml:"heartbeat"`
	// TTL is how long a node stays live without a heartbeat; default three
	// heartbeats (computed by Load from the final heartbeat when neither the
	// file nor the environment sets it); must be greater than Heartbeat and at most 1h.
	TTL Duration `yaml:"ttl"`
	// Retention is how long the registry keeps a node that left or went
	// silent (by its last heartbeat); default 24h; 0 keeps them; otherwise
	// 1h..87600h, more than any TTL.
	Retention Duration `yaml:"retention"`
}

// ClockConfig shapes clock synchronisation with the database.
type ClockConfig struct {
	// Skew makes the node read its local clock as off by this much, to
	// demonstrate that only the database clock matters; default 0; -168h..168h.
	Skew Duration `yaml:"skew"`
	// Resync is the longest the offset to the database clock goes without
	// a new measurement (a burst of queries); default 5m; 1s..24h. A node's
	// turns read the database clock too and renew the measurement whenever
	// theirs is as good, so on a working farm the bursts rarely come.
	Resync Duration `yaml:"resync"`
	// NTPServer is the NTP server for the local clock health check
	// ("host" or "host:port"); default "" (off).
	NTPServer string `yaml:"ntp_server"`
	// NTPMaxOffset is the local clock offset from NTP beyond which the health
	// check fails; default 1s; 1ms..1h.
	NTPMaxOffset Duration `yaml:"ntp_max_offset"`
}

// LogConfig shapes the node's log.
type LogConfig struct {
	// Level is debug, info (the default), warn or error.
	Level string `yaml:"level"`
	// Format is text (the default) or json.
	Format string `yaml:"format"`
}

const (
	// envPrefix starts every environment override.
	envPrefix = "SLOTPOLLER_"
	// defaultSQLiteFile is the sqlite database file name used when no DSN is set.
	defaultSQLiteFile = "slotpoller.db"
	// dsnKey is the key whose value must never appear in an error or a log.
	dsnKey = "database.dsn"
	// ttlHeartbeats is the default TTL in heartbeats.
	ttlHeartbeats = 3
)

// MaxAttemptsCap is the most attempts a job may have (jobs.max_attempts,
// a schedule's max_attempts, enqueue -max-attempts).
const MaxAttemptsCap = jobs.MaxAttempts

// Default returns the defaults. Three defaults depend on where and how
// the node runs and are resolved by Load: database.dsn (empty here),
// node.name (empty here) and checkin.ttl (three default heartbeats here,
// recomputed from the final heartbeat when nothing sets it).
func Default() Config {
	return Config{
		Database: DatabaseConfig{Driver: "sqlite", Schema: store.DefaultSQLServerSchema, Migrate: true},
		Node:     NodeConfig{Capacity: 16},
		Jobs: JobsConfig{
			BaseURL:            "http://localhost",
			Timeout:            Duration(30 * time.Second),
			Lease:              Duration(15 * time.Second),
			MaxAttempts:        jobs.DefaultMaxAttempts,
			Backoff:            Duration(time.Second),
			BackoffMax:         Duration(5 * time.Minute),
			DrainTimeout:       Duration(20 * time.Second),
			RetentionDone:      Duration(24 * time.Hour),
			RetentionFailed:    Duration(7 * 24 * time.Hour),
			RetentionDead:      Duration(7 * 24 * time.Hour),
			RetentionCancelled: Duration(7 * 24 * time.Hour),
			RetentionMissed:    Duration(7 * 24 * time.Hour),
			RetentionAudit:     Duration(90 * 24 * time.Hour),
		},
		Rotation: RotationConfig{Slot: Duration(time.Second)},
		Checkin: CheckinConfig{
			Heartbeat: Duration(time.Second),
			TTL:       Duration(ttlHeartbeats * time.Second),
			Retention: Duration(24 * time.Hour),
		},
		Clock: ClockConfig{
			Resync:       Duration(5 * time.Minute),
			NTPMaxOffset: Duration(time.Second),
		},
		Log: LogConfig{Level: "info", Format: "text"},
	}
}
