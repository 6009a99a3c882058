package service

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
	"gopkg.in/yaml.v3"
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
	// Schedules are created or updated at start (config as code). They are
	// a list, so environment variables do not reach into them.
	Schedules []ScheduleConfig `yaml:"schedules"`
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
	// An absolute http or https URL with a host and no query or fragment.
	BaseURL string `yaml:"base_url"`
	// Timeout is the default deadline of one endpoint call; default 30s.
	Timeout Duration `yaml:"timeout"`
	// Lease is how long a claim holds without renewal; default 15s; >= 1s.
	Lease Duration `yaml:"lease"`
	// MaxAttempts is the default attempt limit for enqueue; default 5; 1..1000.
	MaxAttempts int `yaml:"max_attempts"`
	// Backoff is the first retry delay; default 1s.
	Backoff Duration `yaml:"backoff"`
	// BackoffMax caps the retry delay; default 5m; >= Backoff.
	BackoffMax Duration `yaml:"backoff_max"`
	// DrainTimeout is how long a stop waits for in-flight calls before
	// releasing them; default 20s; 0 releases at once.
	DrainTimeout Duration `yaml:"drain_timeout"`
	// SigningKey, when set, makes every endpoint call carry a timestamp and
	// an HMAC-SHA-256 signature, so job pages exposed through the load
	// balancer can refuse calls that did not come from slotpoller. A secret:
	// set it through SLOTPOLLER_JOBS_SIGNING_KEY; it is never logged or
	// shown. At least 16 characters.
	SigningKey string `yaml:"signing_key"`
}

// AdminConfig is the node's admin HTTP endpoint (/healthz, /readyz,
// /metrics, /status).
type AdminConfig struct {
	// Listen is the address to serve on; empty (the default) turns the
	// endpoint off. A port alone (":9090") binds to loopback, 127.0.0.1.
	Listen string `yaml:"listen"`
}

// AdminAddr is the address the admin endpoint binds: loopback unless a
// host is given.
func (a AdminConfig) AdminAddr() string {
	if strings.HasPrefix(a.Listen, ":") {
		return "127.0.0.1" + a.Listen
	}
	return a.Listen
}

// RotationConfig shapes the polling rotation.
type RotationConfig struct {
	// Slot is the length of one rotation slot in DB time; default 1s; >= 10ms.
	Slot Duration `yaml:"slot"`
}

// CheckinConfig shapes the node registry.
type CheckinConfig struct {
	// Heartbeat is how often the node refreshes its registry row; default 1s.
	Heartbeat Duration `yaml:"heartbeat"`
	// TTL is how long a node stays live without a heartbeat; default three
	// heartbeats (computed by Load from the final heartbeat when neither the
	// file nor the environment sets it); must be greater than Heartbeat.
	TTL Duration `yaml:"ttl"`
}

// ClockConfig shapes clock synchronisation with the database.
type ClockConfig struct {
	// Skew makes the node read its local clock as off by this much, to
	// demonstrate that only the database clock matters; default 0; any sign.
	Skew Duration `yaml:"skew"`
	// Resync is how often the offset to the database clock is measured
	// again; default 30s.
	Resync Duration `yaml:"resync"`
	// NTPServer is the NTP server for the local clock health check
	// ("host" or "host:port"); default "" (off).
	NTPServer string `yaml:"ntp_server"`
	// NTPMaxOffset is the local clock offset from NTP beyond which the health
	// check fails; default 1s.
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
	// passwordMask replaces passwords in MaskDSN.
	passwordMask = "xxxxx"
	// ttlHeartbeats is the default TTL in heartbeats.
	ttlHeartbeats = 3
)

// DefaultConfig returns the defaults. Three defaults depend on where and how
// the node runs and are resolved by Load: database.dsn (empty here),
// node.name (empty here) and checkin.ttl (three default heartbeats here,
// recomputed from the final heartbeat when nothing sets it).
func DefaultConfig() Config {
	return Config{
		Database: DatabaseConfig{Driver: "sqlite", Schema: store.DefaultSQLServerSchema, Migrate: true},
		Node:     NodeConfig{Capacity: 16},
		Jobs: JobsConfig{
			BaseURL:      "http://localhost",
			Timeout:      Duration(30 * time.Second),
			Lease:        Duration(15 * time.Second),
			MaxAttempts:  5,
			Backoff:      Duration(time.Second),
			BackoffMax:   Duration(5 * time.Minute),
			DrainTimeout: Duration(20 * time.Second),
		},
		Rotation: RotationConfig{Slot: Duration(time.Second)},
		Checkin: CheckinConfig{
			Heartbeat: Duration(time.Second),
			TTL:       Duration(ttlHeartbeats * time.Second),
		},
		Clock: ClockConfig{
			Resync:       Duration(30 * time.Second),
			NTPMaxOffset: Duration(time.Second),
		},
		Log: LogConfig{Level: "info", Format: "text"},
	}
}

// Load builds the node's configuration: defaults, then the YAML file at path,
// then environment overrides from environ (os.Environ format, "K=V"), then
// derived defaults, then Validate.
//
// When explicit is false a missing file (or an empty path) means defaults;
// when explicit is true a missing file is an error. Unknown keys in the file
// and unknown SLOTPOLLER_<SECTION>_<KEY> variables of a known section are
// errors; variables whose section is not a config section (such as
// SLOTPOLLER_TEST_POSTGRES_DSN) are ignored. Derived defaults: an empty
// sqlite DSN becomes slotpoller.db beside the config file (the working
// directory without a path) and a relative sqlite path is taken from there;
// checkin.ttl becomes three heartbeats unless the file or the environment
// sets it; an empty node.name becomes the host name. All problems found are
// reported together (errors.Join).
func Load(path string, explicit bool, environ []string) (Config, error) {
	cfg, _, err := LoadWithSources(path, explicit, environ)
	return cfg, err
}

// LoadWithSources is Load with command-line flags as the last layer
// (defaults < file < environment < flags), and it reports where each key's
// value came from: every key set by the file, the environment or a flag,
// and the defaults Load computes (database.dsn, checkin.ttl, node.name).
// Keys missing from the Sources kept their plain default; Sources.Of says
// so.
func LoadWithSources(path string, explicit bool, environ []string, flags ...Flag) (Config, Sources, error) {
	cfg := DefaultConfig()
	src := Sources{} // key path -> where its value came from

	if path == "" && explicit {
		return Config{}, nil, errors.New("config: no config file path given")
	}

	var errs []error
	if path != "" {
		data, err := os.ReadFile(path)
		switch {
		case err == nil:
			errs = append(errs, decodeYAML(&cfg, path, data, src)...)
		case errors.Is(err, fs.ErrNotExist) && !explicit:
			// No file: defaults and environment only.
		default:
			return Config{}, nil, fmt.Errorf("config: %w", err)
		}
	}
	errs = append(errs, applyEnv(&cfg, environ, src)...)
	errs = append(errs, applyFlags(&cfg, flags, src)...)
	if len(errs) > 0 {
		return Config{}, nil, errors.Join(errs...)
	}

	if err := resolveDerived(&cfg, path, src); err != nil {
		return Config{}, nil, err
	}

	problems := cfg.problems()
	if len(problems) > 0 {
		errs := make([]error, 0, len(problems))
		for _, p := range problems {
			msg := p.text
			if from, ok := src[p.key]; ok {
				msg += " (" + from.phrase() + ")"
			}
			errs = append(errs, errors.New(msg))
		}
		return Config{}, nil, errors.Join(errs...)
	}
	return cfg, src, nil
}

// resolveDerived fills the defaults that depend on the file's location, on
// other keys and on the host.
func resolveDerived(cfg *Config, path string, src Sources) error {
	if cfg.Database.Driver == "sqlite" && !isInMemorySQLite(cfg.Database.DSN) {
		baseDir, err := configDir(path)
		if err != nil {
			return err
		}
		switch {
		case cfg.Database.DSN == "":
			cfg.Database.DSN = filepath.Join(baseDir, defaultSQLiteFile)
			src[dsnKey] = Source{Kind: FromDefault, Note: "default beside the config file"}
		case isRelativeSQLitePath(cfg.Database.DSN):
			file, query, hasQuery := strings.Cut(cfg.Database.DSN, "?")
			cfg.Database.DSN = filepath.Join(baseDir, file)
			if hasQuery {
				cfg.Database.DSN += "?" + query
			}
		}
	}

	if _, set := src["checkin.ttl"]; !set {
		cfg.Checkin.TTL = ttlHeartbeats * cfg.Checkin.Heartbeat
		src["checkin.ttl"] = Source{Kind: FromDefault, Note: "derived as 3 × checkin.heartbeat; set checkin.ttl to choose it"}
	}

	if cfg.Node.Name == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("config: node.name is not set and the host name cannot be read (%v); set node.name or %s", err, envName("node", "name"))
		}
		cfg.Node.Name = host
		src["node.name"] = Source{Kind: FromDefault, Note: "taken from the host name; set node.name or " + envName("node", "name")}
	}
	return nil
}

// configDir is the folder that holds the config file, or the working
// directory when there is no config file path, as an absolute path.
func configDir(path string) (string, error) {
	if path == "" {
		dir, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("config: cannot place the default sqlite database: %w", err)
		}
		return dir, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("config: cannot place the default sqlite database: %w", err)
	}
	return filepath.Dir(abs), nil
}

func isInMemorySQLite(dsn string) bool {
	return dsn == ":memory:" || strings.HasPrefix(dsn, "file::memory:")
}

// isRelativeSQLitePath reports whether dsn is a plain relative file path
// (not a file: URI, not a URL).
func isRelativeSQLitePath(dsn string) bool {
	file, _, _ := strings.Cut(dsn, "?")
	return file != "" && !strings.HasPrefix(dsn, "file:") && !strings.Contains(dsn, "://") &&
		!filepath.IsAbs(file) && filepath.VolumeName(file) == ""
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
	positive := func(key string, d Duration) {
		if d <= 0 {
			bad(key, d, "must be greater than 0")
		}
	}

	// signing key and admin endpoint (the key's value is never shown)
	if k := c.Jobs.SigningKey; k != "" && len(k) < 16 {
		ps = append(ps, problem{key: "jobs.signing_key", text: "config: jobs.signing_key (value hidden): must be at least 16 characters"})
	}
	if l := c.Admin.Listen; l != "" {
		if _, port, err := net.SplitHostPort(l); err != nil || port == "" {
			bad("admin.listen", l, "must be host:port or :port (e.g. :9090, which binds to 127.0.0.1)")
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
	}

	// database
	switch c.Database.Driver {
	case "sqlite", "postgres", "sqlserver":
	case "mssql":
		bad("database.driver", c.Database.Driver, "write sqlserver for SQL Server")
	case "":
		bad("database.driver", c.Database.Driver, "must be set to sqlite, postgres or sqlserver")
	default:
		bad("database.driver", c.Database.Driver, "must be one of sqlite, postgres, sqlserver")
	}
	dsn := c.Database.DSN
	masked := MaskDSN(dsn)
	switch c.Database.Driver {
	case "sqlite":
		switch scheme := dsnScheme(dsn); {
		case dsn == "":
			bad(dsnKey, masked, "the sqlite driver needs a database file path")
		case scheme == "postgres" || scheme == "postgresql":
			bad(dsnKey, masked, "is a postgres DSN but database.driver is sqlite; set database.driver to postgres")
		case scheme == "sqlserver":
			bad(dsnKey, masked, "is a sqlserver DSN but database.driver is sqlite; set database.driver to sqlserver")
		case scheme != "":
			bad(dsnKey, masked, "must be a file path or a file: URI for the sqlite driver")
		}
	case "postgres":
		switch scheme := dsnScheme(dsn); {
		case strings.TrimSpace(dsn) == "":
			bad(dsnKey, masked, "the postgres driver has no default DSN; set database.dsn or %s explicitly (e.g. postgres://user:password@host:5432/slotpoller)", envName("database", "dsn"))
		case scheme != "" && scheme != "postgres" && scheme != "postgresql":
			bad(dsnKey, masked, "must be a postgres:// URL or key=value pairs for the postgres driver")
		}
	case "sqlserver":
		switch scheme := dsnScheme(dsn); {
		case strings.TrimSpace(dsn) == "":
			bad(dsnKey, masked, "the sqlserver driver has no default DSN; set database.dsn or %s explicitly (e.g. sqlserver://user:password@host:1433?database=farm)", envName("database", "dsn"))
		case scheme != "" && scheme != "sqlserver":
			bad(dsnKey, masked, "must be a sqlserver:// URL or ADO key=value pairs (server=...;user id=...) for the sqlserver driver")
		case strings.Contains(strings.ToLower(dsn), "timezone="):
			// go-mssqldb would read every datetime2 as wall time in that
			// zone, shifting the database clock and every time column.
			bad(dsnKey, masked, "must not set timezone: slotpoller stores UTC and reads it as UTC")
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
		bad("jobs.base_url", c.Jobs.BaseURL, "%s", why)
	}
	positive("jobs.timeout", c.Jobs.Timeout)
	if c.Jobs.Lease < Duration(time.Second) {
		bad("jobs.lease", c.Jobs.Lease, "must be at least 1s")
	}
	if c.Jobs.MaxAttempts < 1 || c.Jobs.MaxAttempts > 1000 {
		bad("jobs.max_attempts", c.Jobs.MaxAttempts, "must be between 1 and 1000")
	}
	positive("jobs.backoff", c.Jobs.Backoff)
	if c.Jobs.BackoffMax < c.Jobs.Backoff {
		bad("jobs.backoff_max", c.Jobs.BackoffMax, "must be at least jobs.backoff (%s)", c.Jobs.Backoff)
	}
	if c.Jobs.DrainTimeout < 0 {
		bad("jobs.drain_timeout", c.Jobs.DrainTimeout, "must not be negative")
	}

	// rotation
	if c.Rotation.Slot < Duration(10*time.Millisecond) {
		bad("rotation.slot", c.Rotation.Slot, "must be at least 10ms")
	}

	// checkin
	positive("checkin.heartbeat", c.Checkin.Heartbeat)
	if c.Checkin.TTL <= c.Checkin.Heartbeat {
		bad("checkin.ttl", c.Checkin.TTL, "must be greater than checkin.heartbeat (%s)", c.Checkin.Heartbeat)
	}

	// clock
	positive("clock.resync", c.Clock.Resync)
	if s := c.Clock.NTPServer; s != "" && (strings.Contains(s, "://") || strings.ContainsAny(s, " \t\r\n/")) {
		bad("clock.ntp_server", s, `must be a host name or "host:port" (or empty to turn the check off)`)
	}
	positive("clock.ntp_max_offset", c.Clock.NTPMaxOffset)

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
		return fmt.Sprintf("not a valid URL: %v", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "must be an http or https URL"
	case u.Host == "" || u.Hostname() == "":
		return "must be an absolute URL with a host (e.g. http://localhost)"
	case u.RawQuery != "" || u.ForceQuery:
		return "must not have a query (?...)"
	case u.Fragment != "" || strings.Contains(s, "#"):
		return "must not have a fragment (#...)"
	}
	return ""
}

// dsnScheme returns the lower-case URL scheme of dsn ("postgres" for
// "postgres://..."), or "" when dsn is not in URL form.
func dsnScheme(dsn string) string {
	i := strings.Index(dsn, "://")
	if i <= 0 || !validScheme(dsn[:i]) {
		return ""
	}
	return strings.ToLower(dsn[:i])
}

func validScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if i == 0 && !letter || !(letter || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.') {
			return false
		}
	}
	return s != ""
}

// Redacted returns a copy of c whose Database.DSN is masked, fit for logs
// and `config show`.
func (c Config) Redacted() Config {
	c.Database.DSN = MaskDSN(c.Database.DSN)
	if c.Jobs.SigningKey != "" {
		c.Jobs.SigningKey = "xxxxx"
	}
	return c
}

// MaskDSN hides the passwords in a DSN: the password of a URL's user info
// (postgres://user:pass@host/db, sqlserver://user:pass@host?database=x become
// user:xxxxx@) and the value of password-like keys in key=value form
// (password=secret, Password=secret;, pwd=..., also in a URL's query)
// become xxxxx. Anything else, such as a file path, is left untouched. When
// in doubt it hides more rather than less.
func MaskDSN(dsn string) string {
	return maskKeyValuePasswords(maskURLPassword(dsn))
}

func maskURLPassword(s string) string {
	i := strings.Index(s, "://")
	if i <= 0 || !validScheme(s[:i]) {
		return s
	}
	start := i + len("://")
	rest := s[start:]
	authority := rest
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		authority = rest[:end]
	}
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		colon := strings.IndexByte(authority[:at], ':')
		if colon < 0 {
			return s // a user name only
		}
		return s[:start+colon+1] + passwordMask + s[start+at:]
	}
	// No '@' in the authority proper. A later '@' after "user:..." means a
	// password holding an unescaped '/', '?' or '#'; hide up to that '@'
	// unless the ':' is clearly a port and the '@' is in the query.
	at := strings.LastIndexByte(rest, '@')
	colon := strings.IndexByte(authority, ':')
	if at < 0 || colon < 0 || strings.HasPrefix(authority, "[") {
		return s
	}
	if isPort(authority[colon+1:]) && strings.Contains(rest[len(authority):at], "?") {
		return s
	}
	return s[:start+colon+1] + passwordMask + s[start+at:]
}

func isPort(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// maskKeyValuePasswords hides the values of password-like keys in libpq
// (key=value key='quoted'), ADO (Key=Value;Key="quoted";Key={braced}) and
// URL query (key=value&key=value) forms.
func maskKeyValuePasswords(s string) string {
	var b strings.Builder
	copied := 0
	for pos := 0; pos < len(s); {
		eq := strings.IndexByte(s[pos:], '=')
		if eq < 0 {
			break
		}
		eq += pos
		pos = eq + 1
		keyEnd := eq
		for keyEnd > 0 && s[keyEnd-1] == ' ' {
			keyEnd--
		}
		keyStart := keyEnd
		for keyStart > 0 && isKeyChar(s[keyStart-1]) {
			keyStart--
		}
		if keyStart == keyEnd || (keyStart > 0 && !isPairSeparator(s[keyStart-1]) && s[keyStart-1] != '?') ||
			!isSecretKey(s[keyStart:keyEnd]) {
			continue
		}
		v := eq + 1
		for v < len(s) && s[v] == ' ' {
			v++
		}
		end := valueEnd(s, v)
		b.WriteString(s[copied:v])
		b.WriteString(passwordMask)
		copied, pos = end, end
	}
	if copied == 0 {
		return s
	}
	b.WriteString(s[copied:])
	return b.String()
}

func isKeyChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

func isPairSeparator(c byte) bool {
	return c == ';' || c == '&' || c == ' ' || c == '\t' || c == '\r' || c == '\n'
}

func isSecretKey(key string) bool {
	k := strings.ToLower(key)
	return k == "pwd" || k == "pass" || k == "passwd" || strings.Contains(k, "password")
}

// valueEnd returns the end of the value starting at s[v]: a quoted value
// ends at its closing quote, an unquoted one at the separator before the
// next key=, else at the end of s.
func valueEnd(s string, v int) int {
	if v >= len(s) {
		return v
	}
	switch q := s[v]; q {
	case '\'', '"', '{':
		closing := q
		if q == '{' {
			closing = '}'
		}
		for j := v + 1; j < len(s); j++ {
			switch {
			case s[j] == '\\' && q != '{':
				j++
			case s[j] == closing:
				if j+1 < len(s) && s[j+1] == closing { // doubled: escaped
					j++
					continue
				}
				return j + 1
			}
		}
		return len(s) // unterminated: hide the rest
	}
	for j := v; j < len(s); j++ {
		if isPairSeparator(s[j]) && nextIsPair(s, j) {
			return j
		}
	}
	return len(s)
}

// nextIsPair reports whether the separator at s[j] ends a value: what
// follows is another key= (or nothing but separators).
func nextIsPair(s string, j int) bool {
	spacesInKey := s[j] == ';' // ADO keys may hold spaces: "User ID=sa"
	for j < len(s) && isPairSeparator(s[j]) {
		j++
	}
	if j == len(s) {
		return true
	}
	k := j
	for k < len(s) && (isKeyChar(s[k]) || spacesInKey && s[k] == ' ') {
		k++
	}
	if k == j {
		return false
	}
	for k < len(s) && s[k] == ' ' {
		k++
	}
	return k < len(s) && s[k] == '='
}

// Duration is a time.Duration written as a Go duration string ("1s",
// "250ms", "1m30s") in YAML and in environment variables.
type Duration time.Duration

var (
	_ yaml.Unmarshaler         = (*Duration)(nil)
	_ yaml.Marshaler           = Duration(0)
	_ encoding.TextUnmarshaler = (*Duration)(nil)
	_ encoding.TextMarshaler   = Duration(0)
)

// String formats d like time.Duration without zero trailing units ("5m"
// rather than "5m0s").
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// MarshalYAML writes d as a duration string.
func (d Duration) MarshalYAML() (any, error) {
	return d.String(), nil
}

// UnmarshalYAML reads a duration string; a bad value is an error naming it.
func (d *Duration) UnmarshalYAML(value *yaml.Node) error {
	if value.Kind != yaml.ScalarNode {
		return fmt.Errorf("invalid duration: want a duration string such as \"30s\", not a %s", nodeKindName(value.Kind))
	}
	return d.UnmarshalText([]byte(value.Value))
}

// MarshalText writes d as a duration string (used by JSON, for instance).
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(d.String()), nil
}

// UnmarshalText reads a duration string; a bad value is an error naming it.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := parseDuration(string(text))
	if err != nil {
		return fmt.Errorf("invalid duration %q: %w", text, err)
	}
	*d = v
	return nil
}

// parseDuration parses a Go duration string; its error says why without
// repeating the value.
func parseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New(`empty; write a duration such as "30s" or "250ms"`)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		if _, numErr := strconv.ParseFloat(s, 64); numErr == nil {
			return 0, fmt.Errorf(`missing unit; write e.g. "%ss" or "%sms"`, s, s)
		}
		return 0, errors.New(`not a duration; write e.g. "30s", "250ms" or "1m30s"`)
	}
	return Duration(d), nil
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "t", "yes", "y", "on", "1":
		return true, nil
	case "false", "f", "no", "n", "off", "0":
		return false, nil
	}
	return false, errors.New("not a boolean; write true or false")
}

func parseInt(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, errors.New("number out of range")
		}
		return 0, errors.New("not a whole number")
	}
	return n, nil
}

// setValue parses raw according to the kind of the field v and stores it.
func setValue(v reflect.Value, raw string) error {
	if v.Type() == reflect.TypeFor[Duration]() {
		d, err := parseDuration(raw)
		if err != nil {
			return err
		}
		v.SetInt(int64(d))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(raw)
	case reflect.Int:
		n, err := parseInt(raw)
		if err != nil {
			return err
		}
		v.SetInt(int64(n))
	case reflect.Bool:
		b, err := parseBool(raw)
		if err != nil {
			return err
		}
		v.SetBool(b)
	default:
		panic(fmt.Sprintf("service: config field of unsupported type %s", v.Type()))
	}
	return nil
}

// yamlTag returns the yaml key of a struct field.
func yamlTag(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

// fieldIndex returns the index of the field of struct type t whose yaml key
// is key, or -1.
func fieldIndex(t reflect.Type, key string) int {
	for i := 0; i < t.NumField(); i++ {
		if yamlTag(t.Field(i)) == key {
			return i
		}
	}
	return -1
}

// yamlKeys lists the yaml keys of struct type t.
func yamlKeys(t reflect.Type) []string {
	keys := make([]string, 0, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		keys = append(keys, yamlTag(t.Field(i)))
	}
	return keys
}

// envName is the environment variable that overrides section.key.
func envName(section, key string) string {
	return envPrefix + strings.ToUpper(section) + "_" + strings.ToUpper(key)
}

// decodeYAML applies the YAML document data (read from name) to cfg and
// records in src where each key came from. It walks the node tree rather
// than decoding with KnownFields so that an unknown key is reported with
// its full path and line, and every problem in the file is reported at once.
// decodeList reads a list section (schedules): a sequence of mappings
// whose keys are checked like any other section's.
func decodeList(sv reflect.Value, section, name string, vn *yaml.Node, src Sources) []error {
	var errs []error
	fail := func(n *yaml.Node, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s", name, n.Line, fmt.Sprintf(format, args...)))
	}
	if vn.Kind != yaml.SequenceNode {
		fail(vn, "%s must be a list, not a %s", section, nodeKindName(vn.Kind))
		return errs
	}
	et := sv.Type().Elem()
	list := reflect.MakeSlice(sv.Type(), 0, len(vn.Content))
	for i, item := range vn.Content {
		item = deref(item)
		path := fmt.Sprintf("%s[%d]", section, i)
		if item.Kind != yaml.MappingNode {
			fail(item, "%s must be a mapping of keys (%s), not a %s", path, strings.Join(yamlKeys(et), ", "), nodeKindName(item.Kind))
			continue
		}
		ev := reflect.New(et).Elem()
		if et == reflect.TypeFor[ScheduleConfig]() {
			ev.Set(reflect.ValueOf(defaultSchedule()))
		}
		seen := map[string]int{}
		for j := 0; j+1 < len(item.Content); j += 2 {
			kn, leaf := item.Content[j], deref(item.Content[j+1])
			kp := path + "." + kn.Value
			if line, dup := seen[kn.Value]; dup {
				fail(kn, "duplicate key %q (first at line %d)", kp, line)
				continue
			}
			seen[kn.Value] = kn.Line
			ki := fieldIndex(et, kn.Value)
			if ki < 0 {
				fail(kn, "unknown key %q%s", kp, suggest(kn.Value, yamlKeys(et), path+"."))
				continue
			}
			if isNull(leaf) {
				continue
			}
			if leaf.Kind != yaml.ScalarNode {
				fail(leaf, "%s must be a single value, not a %s", kp, nodeKindName(leaf.Kind))
				continue
			}
			if err := setValue(ev.Field(ki), leaf.Value); err != nil {
				fail(leaf, "%s = %s: %v", kp, rawForError(kp, leaf.Value), err)
				continue
			}
			src[kp] = Source{Kind: FromFile, Where: fmt.Sprintf("%s:%d", name, leaf.Line)}
		}
		list = reflect.Append(list, ev)
	}
	if list.Len() > 0 {
		sv.Set(list)
	}
	return errs
}

func decodeYAML(cfg *Config, name string, data []byte, src Sources) []error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty file
		}
		return []error{fmt.Errorf("%s: %w", name, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return []error{fmt.Errorf("%s:%d: only one YAML document is allowed", name, extra.Line)}
	} else if !errors.Is(err, io.EOF) {
		return []error{fmt.Errorf("%s: %w", name, err)}
	}

	root := deref(&doc)
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil
		}
		root = deref(root.Content[0])
	}
	if isNull(root) {
		return nil
	}
	cv := reflect.ValueOf(cfg).Elem()
	if root.Kind != yaml.MappingNode {
		return []error{fmt.Errorf("%s:%d: must be a mapping of sections (%s), not a %s",
			name, root.Line, strings.Join(yamlKeys(cv.Type()), ", "), nodeKindName(root.Kind))}
	}

	var errs []error
	fail := func(n *yaml.Node, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s", name, n.Line, fmt.Sprintf(format, args...)))
	}
	sectionLines := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		kn, vn := root.Content[i], deref(root.Content[i+1])
		section := kn.Value
		if line, dup := sectionLines[section]; dup {
			fail(kn, "duplicate key %q (first at line %d)", section, line)
			continue
		}
		sectionLines[section] = kn.Line
		si := fieldIndex(cv.Type(), section)
		if si < 0 {
			fail(kn, "unknown key %q%s", section, suggest(section, yamlKeys(cv.Type()), ""))
			continue
		}
		if isNull(vn) {
			continue
		}
		sv := cv.Field(si)
		if sv.Kind() == reflect.Slice {
			errs = append(errs, decodeList(sv, section, name, vn, src)...)
			continue
		}
		if vn.Kind != yaml.MappingNode {
			fail(vn, "%s must be a mapping of keys (%s), not a %s", section, strings.Join(yamlKeys(sv.Type()), ", "), nodeKindName(vn.Kind))
			continue
		}
		keyLines := map[string]int{}
		for j := 0; j+1 < len(vn.Content); j += 2 {
			kn, leaf := vn.Content[j], deref(vn.Content[j+1])
			key := kn.Value
			path := section + "." + key
			if line, dup := keyLines[key]; dup {
				fail(kn, "duplicate key %q (first at line %d)", path, line)
				continue
			}
			keyLines[key] = kn.Line
			ki := fieldIndex(sv.Type(), key)
			if ki < 0 {
				fail(kn, "unknown key %q%s", path, suggest(key, yamlKeys(sv.Type()), section+"."))
				continue
			}
			if isNull(leaf) {
				continue // key: with no value keeps the default
			}
			if leaf.Kind != yaml.ScalarNode {
				fail(leaf, "%s must be a single value, not a %s", path, nodeKindName(leaf.Kind))
				continue
			}
			if err := setValue(sv.Field(ki), leaf.Value); err != nil {
				fail(leaf, "%s = %s: %v", path, rawForError(path, leaf.Value), err)
				continue
			}
			src[path] = Source{Kind: FromFile, Where: fmt.Sprintf("%s:%d", name, leaf.Line)}
		}
	}
	return errs
}

// rawForError shows a raw value in an error, hiding the DSN's.
func rawForError(path, raw string) string {
	if path == dsnKey || path == "jobs.signing_key" {
		return "(value hidden)"
	}
	return strconv.Quote(raw)
}

func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func nodeKindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "single value"
	case yaml.DocumentNode:
		return "document"
	case yaml.AliasNode:
		return "alias"
	}
	return "node"
}

// applyEnv applies SLOTPOLLER_<SECTION>_<KEY> variables from environ to cfg
// and records in src which variable set each key.
func applyEnv(cfg *Config, environ []string, src Sources) []error {
	var errs []error
	cv := reflect.ValueOf(cfg).Elem()
	ct := cv.Type()
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		match := name
		if runtime.GOOS == "windows" { // environment names are case-insensitive there
			match = strings.ToUpper(name)
		}
		rest, ok := strings.CutPrefix(match, envPrefix)
		if !ok {
			continue
		}
		si := -1
		var section, keyPart string
		for i := 0; i < ct.NumField(); i++ {
			s := yamlTag(ct.Field(i))
			if k, ok := strings.CutPrefix(rest, strings.ToUpper(s)+"_"); ok {
				si, section, keyPart = i, s, k
				break
			}
		}
		if si < 0 {
			continue // not a config section, e.g. SLOTPOLLER_TEST_POSTGRES_DSN
		}
		sv := cv.Field(si)
		if sv.Kind() != reflect.Struct {
			errs = append(errs, fmt.Errorf("config: %s: the %s list is set in the config file only", name, section))
			continue
		}
		ki := -1
		for i := 0; i < sv.NumField(); i++ {
			if strings.ToUpper(yamlTag(sv.Type().Field(i))) == keyPart {
				ki = i
				break
			}
		}
		if ki < 0 {
			keys := yamlKeys(sv.Type())
			vars := make([]string, len(keys))
			for i, k := range keys {
				vars[i] = envName(section, k)
			}
			hint := suggest(match, vars, "")
			if hint == "" {
				hint = " (the " + section + " section has " + strings.Join(vars, ", ") + ")"
			}
			errs = append(errs, fmt.Errorf("config: %s: unknown setting%s", name, hint))
			continue
		}
		key := yamlTag(sv.Type().Field(ki))
		path := section + "." + key
		if value == "" && sv.Field(ki).Kind() != reflect.String {
			errs = append(errs, fmt.Errorf("config: %s is empty: set a value or unset the variable", name))
			continue
		}
		if err := setValue(sv.Field(ki), value); err != nil {
			errs = append(errs, fmt.Errorf("config: %s = %s: %v", name, rawForError(path, value), err))
			continue
		}
		src[path] = Source{Kind: FromEnv, Where: name}
	}
	return errs
}

// suggest returns ` (did you mean "<prefix><candidate>"?)` for the candidate
// closest to word, or "" when none is close.
func suggest(word string, candidates []string, prefix string) string {
	best, bestDist := "", -1
	for _, c := range candidates {
		d := editDistance(strings.ToLower(word), strings.ToLower(c))
		if d <= 2 && d*2 < len(c) && (bestDist < 0 || d < bestDist) {
			best, bestDist = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", prefix+best)
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and swaps of neighbours each cost 1.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// SourceKind says which layer of the configuration a value came from.
type SourceKind string

// The layers, lowest first: each one overrides the ones before it.
const (
	FromDefault SourceKind = "default"
	FromFile    SourceKind = "file"
	FromEnv     SourceKind = "env"
	FromFlag    SourceKind = "flag"
)

// Source is where one key's value came from.
type Source struct {
	Kind SourceKind `json:"kind"`
	// Where is "path:line" for the file, the variable's name for the
	// environment and the flag ("-log-level") for a flag; empty for a
	// default.
	Where string `json:"where,omitempty"`
	// Note explains a default that Load computed (from the config file's
	// folder, the heartbeat, the host name).
	Note string `json:"note,omitempty"`
}

// String is the source as `config show` prints it: "default",
// "config.yaml:12", "env SLOTPOLLER_NODE_NAME", "flag -log-level".
func (s Source) String() string {
	switch s.Kind {
	case FromFile:
		return s.Where
	case FromEnv:
		return "env " + s.Where
	case FromFlag:
		return "flag " + s.Where
	}
	if s.Note != "" {
		return "default (" + s.Note + ")"
	}
	return "default"
}

// phrase is the source as a validation error quotes it.
func (s Source) phrase() string {
	switch s.Kind {
	case FromFile:
		return "set at " + s.Where
	case FromEnv:
		return "set by " + s.Where
	case FromFlag:
		return "set by flag " + s.Where
	}
	if s.Note != "" {
		return s.Note
	}
	return "default"
}

// Sources maps a key ("jobs.drain_timeout", "schedules[0].cron") to where
// its value came from.
type Sources map[string]Source

// Of returns the source of key: a plain default when nothing set it.
func (s Sources) Of(key string) Source {
	if src, ok := s[key]; ok {
		return src
	}
	return Source{Kind: FromDefault}
}

// Flag is a value given on the command line for one key; it wins over the
// file and the environment.
type Flag struct {
	Key   string // the key it sets, e.g. "log.level"
	Name  string // the flag as typed, e.g. "-log-level"; shown as the source
	Value string
}

// applyFlags applies command-line values to cfg and records them in src.
func applyFlags(cfg *Config, flags []Flag, src Sources) []error {
	var errs []error
	cv := reflect.ValueOf(cfg).Elem()
	for _, f := range flags {
		section, key, _ := strings.Cut(f.Key, ".")
		si := fieldIndex(cv.Type(), section)
		if si < 0 || cv.Field(si).Kind() != reflect.Struct || fieldIndex(cv.Field(si).Type(), key) < 0 {
			errs = append(errs, fmt.Errorf("config: flag %s: %q is not a setting", f.Name, f.Key))
			continue
		}
		sv := cv.Field(si)
		if err := setValue(sv.Field(fieldIndex(sv.Type(), key)), f.Value); err != nil {
			errs = append(errs, fmt.Errorf("config: flag %s = %s: %v", f.Name, rawForError(f.Key, f.Value), err))
			continue
		}
		src[f.Key] = Source{Kind: FromFlag, Where: f.Name}
	}
	return errs
}

// IsSecret reports whether key holds a secret (the DSN, which may carry a
// password, and the signing key): its value is shown only masked.
func IsSecret(key string) bool {
	return key == dsnKey || key == "jobs.signing_key"
}

// Setting is one key of the effective configuration, for `config show`.
type Setting struct {
	Key string `json:"key"`
	// Value is a string, an int, a bool, or a duration as a string ("30s").
	// Secrets are masked.
	Value  any    `json:"value"`
	Source Source `json:"source"`
}

// Settings lists every key of c, sections and keys in the file's order
// and then each schedule's keys, with where its value came from. Secrets are
// masked (as by Redacted), whatever c holds.
func (c Config) Settings(src Sources) []Setting {
	var out []Setting
	add := func(key string, v reflect.Value) {
		var value any
		switch {
		case v.Type() == reflect.TypeFor[Duration]():
			value = Duration(v.Int()).String()
		case v.Kind() == reflect.String:
			value = v.String()
		case v.Kind() == reflect.Int:
			value = int(v.Int())
		case v.Kind() == reflect.Bool:
			value = v.Bool()
		default:
			value = fmt.Sprint(v.Interface())
		}
		out = append(out, Setting{Key: key, Value: value, Source: src.Of(key)})
	}
	cv := reflect.ValueOf(c.Redacted())
	ct := cv.Type()
	for i := 0; i < ct.NumField(); i++ {
		section, sv := yamlTag(ct.Field(i)), cv.Field(i)
		switch sv.Kind() {
		case reflect.Struct:
			for j := 0; j < sv.NumField(); j++ {
				add(section+"."+yamlTag(sv.Type().Field(j)), sv.Field(j))
			}
		case reflect.Slice:
			for n := 0; n < sv.Len(); n++ {
				ev := sv.Index(n)
				for j := 0; j < ev.NumField(); j++ {
					add(fmt.Sprintf("%s[%d].%s", section, n, yamlTag(ev.Type().Field(j))), ev.Field(j))
				}
			}
		}
	}
	return out
}
