package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// writeConfig writes body to config.yaml in a fresh temporary folder and
// returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

// resolvedDefaults is Default with Load's derived values for a config
// file in dir.
func resolvedDefaults(t *testing.T, dir string) Config {
	t.Helper()
	host, err := os.Hostname()
	require.NoError(t, err)
	want := Default()
	want.Database.DSN = filepath.Join(dir, "slotpoller.db")
	want.Node.Name = host
	want.Checkin.TTL = Duration(3 * time.Second)
	return want
}

func TestLoadDefaultsWithoutFile(t *testing.T) {
	dir := t.TempDir()
	cfg, err := Load(filepath.Join(dir, "config.yaml"), false, nil)
	require.NoError(t, err)

	require.True(t, filepath.IsAbs(cfg.Database.DSN), cfg.Database.DSN)
	require.True(t, strings.HasSuffix(cfg.Database.DSN, "slotpoller.db"), cfg.Database.DSN)
	require.Equal(t, Duration(3*time.Second), cfg.Checkin.TTL)
	require.Equal(t, resolvedDefaults(t, dir), cfg)
	require.NoError(t, cfg.Validate())
}

func TestLoadWithoutPathUsesWorkingDirectory(t *testing.T) {
	cfg, err := Load("", false, nil)
	require.NoError(t, err)
	wd, err := os.Getwd()
	require.NoError(t, err)
	require.Equal(t, filepath.Join(wd, "slotpoller.db"), cfg.Database.DSN)
}

func TestLoadFileOverrides(t *testing.T) {
	path := writeConfig(t, `
database:
  driver: postgres
  dsn: postgres://slot:pw@db:5432/slotpoller
  schema: farm_jobs
  migrate: false
node:
  name: web-01
  capacity: 4
jobs:
  base_url: https://127.0.0.1:8443/jobs/
  timeout: 1m30s
  lease: 20s
  max_attempts: 9
  backoff: 250ms
  backoff_max: 1h
  drain_timeout: 0s
  retention_done: 2h
  retention_failed: 0s
  retention_dead: 720h
  retention_cancelled: 1m
  retention_missed: 48h
rotation:
  slot: 500ms
checkin:
  heartbeat: 2s
  ttl: 10s
  retention: 0s
clock:
  skew: -90s
  resync: 1m
  ntp_server: pool.ntp.org
  ntp_max_offset: 100ms
log:
  level: debug
  format: json
`)
	cfg, err := Load(path, true, nil)
	require.NoError(t, err)
	require.Equal(t, Config{
		Database: DatabaseConfig{Driver: "postgres", DSN: "postgres://slot:pw@db:5432/slotpoller", Schema: "farm_jobs", Migrate: false},
		Node:     NodeConfig{Name: "web-01", Capacity: 4},
		Jobs: JobsConfig{
			BaseURL:       "https://127.0.0.1:8443/jobs/",
			Timeout:       Duration(90 * time.Second),
			Lease:         Duration(20 * time.Second),
			MaxAttempts:   9,
			Backoff:       Duration(250 * time.Millisecond),
			BackoffMax:    Duration(time.Hour),
			DrainTimeout:  0,
			RetentionDone: Duration(2 * time.Hour), RetentionDead: Duration(720 * time.Hour),
			RetentionCancelled: Duration(time.Minute), RetentionMissed: Duration(48 * time.Hour), RetentionAudit: Duration(90 * 24 * time.Hour),
		},
		Rotation: RotationConfig{Slot: Duration(500 * time.Millisecond)},
		Checkin:  CheckinConfig{Heartbeat: Duration(2 * time.Second), TTL: Duration(10 * time.Second)},
		Clock: ClockConfig{
			Skew:         Duration(-90 * time.Second),
			Resync:       Duration(time.Minute),
			NTPServer:    "pool.ntp.org",
			NTPMaxOffset: Duration(100 * time.Millisecond),
		},
		Log: LogConfig{Level: "debug", Format: "json"},
	}, cfg)
}

func TestLoadPartialFileKeepsOtherDefaults(t *testing.T) {
	path := writeConfig(t, "jobs:\n  timeout: 5s\nlog:\nnode:\n  capacity:\n")
	cfg, err := Load(path, true, nil)
	require.NoError(t, err)
	want := resolvedDefaults(t, filepath.Dir(path))
	want.Jobs.Timeout = Duration(5 * time.Second)
	require.Equal(t, want, cfg)
}

func TestLoadEmptyOrCommentOnlyFile(t *testing.T) {
	for _, body := range []string{"", "# nothing here\n", "---\n"} {
		path := writeConfig(t, body)
		cfg, err := Load(path, true, nil)
		require.NoError(t, err, "body %q", body)
		require.Equal(t, resolvedDefaults(t, filepath.Dir(path)), cfg, "body %q", body)
	}
}

func TestLoadEnvOverridesFile(t *testing.T) {
	path := writeConfig(t, `
node:
  name: from-file
  capacity: 4
jobs:
  base_url: http://file.local
  timeout: 10s
database:
  migrate: true
`)
	cfg, err := Load(path, true, []string{
		"PATH=/usr/bin",
		"SLOTPOLLER_NODE_NAME=from-env",
		"SLOTPOLLER_JOBS_BASE_URL=http://env.local:8080",
		"SLOTPOLLER_JOBS_TIMEOUT=45s",
		"SLOTPOLLER_DATABASE_MIGRATE=false",
		"SLOTPOLLER_CLOCK_NTP_SERVER=time.example.com:123",
		"SLOTPOLLER_CLOCK_SKEW=-2s",
		"SLOTPOLLER_LOG_FORMAT=json",
	})
	require.NoError(t, err)
	require.Equal(t, "from-env", cfg.Node.Name)
	require.Equal(t, 4, cfg.Node.Capacity, "file value kept where env is silent")
	require.Equal(t, "http://env.local:8080", cfg.Jobs.BaseURL)
	require.Equal(t, Duration(45*time.Second), cfg.Jobs.Timeout)
	require.False(t, cfg.Database.Migrate)
	require.Equal(t, "time.example.com:123", cfg.Clock.NTPServer)
	require.Equal(t, Duration(-2*time.Second), cfg.Clock.Skew)
	require.Equal(t, "json", cfg.Log.Format)
}

func TestLoadEnvSetsEveryKey(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "farm.db")
	cfg, err := Load("", false, []string{
		"SLOTPOLLER_DATABASE_DRIVER=sqlite",
		"SLOTPOLLER_DATABASE_DSN=" + dbPath,
		"SLOTPOLLER_DATABASE_SCHEMA=sp1",
		"SLOTPOLLER_DATABASE_MIGRATE=0",
		"SLOTPOLLER_NODE_NAME=n1",
		"SLOTPOLLER_NODE_CAPACITY=7",
		"SLOTPOLLER_JOBS_BASE_URL=http://h",
		"SLOTPOLLER_JOBS_TIMEOUT=2s",
		"SLOTPOLLER_JOBS_LEASE=3s",
		"SLOTPOLLER_JOBS_MAX_ATTEMPTS=2",
		"SLOTPOLLER_JOBS_BACKOFF=4s",
		"SLOTPOLLER_JOBS_BACKOFF_MAX=5s",
		"SLOTPOLLER_JOBS_DRAIN_TIMEOUT=6s",
		"SLOTPOLLER_JOBS_RETENTION_DONE=13m",
		"SLOTPOLLER_JOBS_RETENTION_FAILED=14m",
		"SLOTPOLLER_JOBS_RETENTION_DEAD=15m",
		"SLOTPOLLER_JOBS_RETENTION_CANCELLED=16m",
		"SLOTPOLLER_JOBS_RETENTION_MISSED=17m",
		"SLOTPOLLER_JOBS_RETENTION_AUDIT=19m",
		"SLOTPOLLER_ROTATION_SLOT=7s",
		"SLOTPOLLER_CHECKIN_HEARTBEAT=8s",
		"SLOTPOLLER_CHECKIN_TTL=9s",
		"SLOTPOLLER_CHECKIN_RETENTION=18h",
		"SLOTPOLLER_CLOCK_SKEW=10s",
		"SLOTPOLLER_CLOCK_RESYNC=11s",
		"SLOTPOLLER_CLOCK_NTP_SERVER=ntp",
		"SLOTPOLLER_CLOCK_NTP_MAX_OFFSET=12s",
		"SLOTPOLLER_LOG_LEVEL=warn",
		"SLOTPOLLER_LOG_FORMAT=json",
	})
	require.NoError(t, err)
	s, m := Duration(time.Second), Duration(time.Minute)
	require.Equal(t, Config{
		Database: DatabaseConfig{Driver: "sqlite", DSN: dbPath, Schema: "sp1", Migrate: false},
		Node:     NodeConfig{Name: "n1", Capacity: 7},
		Jobs: JobsConfig{BaseURL: "http://h", Timeout: 2 * s, Lease: 3 * s, MaxAttempts: 2,
			Backoff: 4 * s, BackoffMax: 5 * s, DrainTimeout: 6 * s,
			RetentionDone: 13 * m, RetentionFailed: 14 * m, RetentionDead: 15 * m, RetentionCancelled: 16 * m, RetentionMissed: 17 * m, RetentionAudit: 19 * m},
		Rotation: RotationConfig{Slot: 7 * s},
		Checkin:  CheckinConfig{Heartbeat: 8 * s, TTL: 9 * s, Retention: 18 * 60 * m},
		Clock:    ClockConfig{Skew: 10 * s, Resync: 11 * s, NTPServer: "ntp", NTPMaxOffset: 12 * s},
		Log:      LogConfig{Level: "warn", Format: "json"},
	}, cfg)
}

func TestLoadTTLFollowsHeartbeatUnlessSet(t *testing.T) {
	t.Run("heartbeat in file", func(t *testing.T) {
		cfg, err := Load(writeConfig(t, "checkin:\n  heartbeat: 2s\n"), true, nil)
		require.NoError(t, err)
		require.Equal(t, Duration(6*time.Second), cfg.Checkin.TTL)
	})
	t.Run("heartbeat in env", func(t *testing.T) {
		cfg, err := Load("", false, []string{"SLOTPOLLER_CHECKIN_HEARTBEAT=2s"})
		require.NoError(t, err)
		require.Equal(t, Duration(6*time.Second), cfg.Checkin.TTL)
	})
	t.Run("null ttl in file still follows", func(t *testing.T) {
		cfg, err := Load(writeConfig(t, "checkin:\n  heartbeat: 2s\n  ttl:\n"), true, nil)
		require.NoError(t, err)
		require.Equal(t, Duration(6*time.Second), cfg.Checkin.TTL)
	})
	t.Run("explicit ttl in file kept", func(t *testing.T) {
		cfg, err := Load(writeConfig(t, "checkin:\n  heartbeat: 2s\n  ttl: 10s\n"), true, nil)
		require.NoError(t, err)
		require.Equal(t, Duration(10*time.Second), cfg.Checkin.TTL)
	})
	t.Run("explicit ttl in file kept when env changes heartbeat", func(t *testing.T) {
		cfg, err := Load(writeConfig(t, "checkin:\n  ttl: 10s\n"), true, []string{"SLOTPOLLER_CHECKIN_HEARTBEAT=2s"})
		require.NoError(t, err)
		require.Equal(t, Duration(10*time.Second), cfg.Checkin.TTL)
	})
	t.Run("explicit ttl in env kept", func(t *testing.T) {
		cfg, err := Load(writeConfig(t, "checkin:\n  heartbeat: 2s\n"), true, []string{"SLOTPOLLER_CHECKIN_TTL=7s"})
		require.NoError(t, err)
		require.Equal(t, Duration(7*time.Second), cfg.Checkin.TTL)
	})
}

func TestLoadUnknownYAMLKey(t *testing.T) {
	path := writeConfig(t, "jobs:\n  timeout: 5s\n  bse_url: http://x\njbos:\n  lease: 2s\n")
	_, err := Load(path, true, nil)
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, path+`:3: unknown key "jobs.bse_url" (did you mean "jobs.base_url"?)`)
	require.Contains(t, msg, path+`:4: unknown key "jbos" (did you mean "jobs"?)`)
}

func TestLoadDuplicateYAMLKey(t *testing.T) {
	_, err := Load(writeConfig(t, "jobs:\n  timeout: 5s\n  timeout: 6s\n"), true, nil)
	require.ErrorContains(t, err, `:3: duplicate key "jobs.timeout" (first at line 2)`)
}

func TestLoadYAMLShapeErrors(t *testing.T) {
	for body, want := range map[string]string{
		"- a\n- b\n":                     "must be a mapping of sections",
		"jobs: 5\n":                      "jobs must be a mapping of keys",
		"jobs:\n  timeout: [1s, 2s]\n":   "jobs.timeout must be a single value, not a list",
		"jobs:\n  timeout: 1s\n bad\n":   "yaml:",
		"log:\n  level: info\n---\nx: 1": "only one YAML document",
	} {
		_, err := Load(writeConfig(t, body), true, nil)
		require.ErrorContains(t, err, want, "body %q", body)
	}
}

func TestLoadUnknownEnvKeyInKnownSection(t *testing.T) {
	_, err := Load("", false, []string{"SLOTPOLLER_JOBS_BSE_URL=http://x"})
	require.ErrorContains(t, err, "SLOTPOLLER_JOBS_BSE_URL")
	require.ErrorContains(t, err, "SLOTPOLLER_JOBS_BASE_URL", "suggests the right name")

	_, err = Load("", false, []string{"SLOTPOLLER_NODE_COLOR=blue"})
	require.ErrorContains(t, err, "SLOTPOLLER_NODE_COLOR: unknown setting")
	require.ErrorContains(t, err, "SLOTPOLLER_NODE_CAPACITY", "lists the section's variables")
}

func TestLoadIgnoresTestSuiteVariablesOnly(t *testing.T) {
	cfg, err := Load("", false, []string{
		"SLOTPOLLER_TEST_POSTGRES_DSN=postgres://u:secret@localhost/test",
		"SLOTPOLLER_TEST_SQLSERVER_DSN=sqlserver://sa:secret@localhost",
		"SLOTPOLLER_CHAOS_DURATION=1m",
		"SLOTPOLLER_E2E_LOGS=/tmp/logs",
		"OTHER_JOBS_BASE_URL=ftp://nope",
		"NOEQUALSSIGN",
	})
	require.NoError(t, err)
	require.Equal(t, "http://localhost", cfg.Jobs.BaseURL)
	require.Equal(t, "sqlite", cfg.Database.Driver)

	// Any other SLOTPOLLER_ variable is a setting or a mistake.
	for name, want := range map[string]string{
		"SLOTPOLLER_JOBS":           "SLOTPOLLER_JOBS: unknown setting (settings are SLOTPOLLER_<SECTION>_<KEY>",
		"SLOTPOLLER_DATABSE_DRIVER": `SLOTPOLLER_DATABSE_DRIVER: unknown setting (did you mean "SLOTPOLLER_DATABASE_DRIVER"?)`,
		"SLOTPOLLER_DB_DSN":         `SLOTPOLLER_DB_DSN: unknown setting (did you mean "SLOTPOLLER_DATABASE_DSN"?)`,
		"SLOTPOLLER_LOGLEVEL":       `SLOTPOLLER_LOGLEVEL: unknown setting (did you mean "SLOTPOLLER_LOG_LEVEL"?)`,
		"SLOTPOLLER_TESTS_PG":       "SLOTPOLLER_TESTS_PG: unknown setting",
	} {
		_, err := Load("", false, []string{name + "=x"})
		require.ErrorContains(t, err, want, name)
	}
}

func TestLoadBadDurationInFile(t *testing.T) {
	path := writeConfig(t, "jobs:\n  timeout: 5 seconds\n  lease: 30\n")
	_, err := Load(path, true, nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), `:2: jobs.timeout = "5 seconds": not a duration`)
	require.Contains(t, err.Error(), `:3: jobs.lease = "30": missing unit`)
}

func TestLoadBadValuesInEnv(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"SLOTPOLLER_JOBS_TIMEOUT=abc", `SLOTPOLLER_JOBS_TIMEOUT = "abc": not a duration`},
		{"SLOTPOLLER_ROTATION_SLOT=100", `SLOTPOLLER_ROTATION_SLOT = "100": missing unit`},
		{"SLOTPOLLER_NODE_CAPACITY=lots", `SLOTPOLLER_NODE_CAPACITY = "lots": not a whole number`},
		{"SLOTPOLLER_DATABASE_MIGRATE=maybe", `SLOTPOLLER_DATABASE_MIGRATE = "maybe": not a boolean`},
		{"SLOTPOLLER_JOBS_LEASE=", "SLOTPOLLER_JOBS_LEASE is empty"},
	} {
		_, err := Load("", false, []string{tc.env})
		require.ErrorContains(t, err, tc.want, tc.env)
	}
}

func TestLoadReportsAllParseErrorsTogether(t *testing.T) {
	path := writeConfig(t, "jobs:\n  timeout: x\n  nope: 1\n")
	_, err := Load(path, true, []string{"SLOTPOLLER_NODE_CAPACITY=y"})
	require.ErrorContains(t, err, "jobs.timeout")
	require.ErrorContains(t, err, `"jobs.nope"`)
	require.ErrorContains(t, err, "SLOTPOLLER_NODE_CAPACITY")
}

func TestLoadBadDriver(t *testing.T) {
	_, err := Load("", false, []string{"SLOTPOLLER_DATABASE_DRIVER=oracle"})
	require.ErrorContains(t, err, `config: database.driver = "oracle": must be one of sqlite, postgres, sqlserver, mysql`)
	require.ErrorContains(t, err, "SLOTPOLLER_DATABASE_DRIVER", "names where the value came from")

	_, err = Load(writeConfig(t, "database:\n  driver: mssql\n  dsn: sqlserver://sa:pw@h?database=x\n"), true, nil)
	require.ErrorContains(t, err, `database.driver = "mssql": write sqlserver for SQL Server`)
}

func TestLoadSQLServer(t *testing.T) {
	cfg, err := Load(writeConfig(t, "database:\n  driver: sqlserver\n  dsn: sqlserver://sa:pw@h:1433?database=farm\n"), true, nil)
	require.NoError(t, err)
	require.Equal(t, "sqlserver", cfg.Database.Driver)
	require.Equal(t, "sqlserver://sa:pw@h:1433?database=farm", cfg.Database.DSN, "a sqlserver DSN is used as it is")
	require.Equal(t, "slotpoller", cfg.Database.Schema, "the default schema")

	cfg, err = Load("", false, []string{
		"SLOTPOLLER_DATABASE_DRIVER=sqlserver",
		"SLOTPOLLER_DATABASE_DSN=server=db;user id=svc;password=pw;database=farm",
		"SLOTPOLLER_DATABASE_SCHEMA=farm_jobs",
	})
	require.NoError(t, err)
	require.Equal(t, "farm_jobs", cfg.Database.Schema)

	_, err = Load("", false, []string{"SLOTPOLLER_DATABASE_DRIVER=sqlserver"})
	require.ErrorContains(t, err, "database.dsn")
	require.ErrorContains(t, err, "no default DSN")
	require.ErrorContains(t, err, "SLOTPOLLER_DATABASE_DSN")

	_, err = Load("", false, []string{"SLOTPOLLER_DATABASE_DRIVER=sqlserver", "SLOTPOLLER_DATABASE_DSN=postgres://u:pw@h/farm"})
	require.ErrorContains(t, err, "must be a sqlserver:// URL")

	_, err = Load("", false, []string{"SLOTPOLLER_DATABASE_DSN=sqlserver://u:pw@h?database=farm"})
	require.ErrorContains(t, err, "is a sqlserver DSN but database.driver is sqlite")
}

func TestValidateSchema(t *testing.T) {
	for _, ok := range []string{"slotpoller", "_x", "Farm_Jobs_2", strings.Repeat("s", 128)} {
		c := Default()
		c.Database.Driver, c.Database.DSN, c.Node.Name = "sqlserver", "sqlserver://h?database=farm", "n"
		c.Database.Schema = ok
		require.NoError(t, c.Validate(), ok)
	}
	for _, bad := range []string{"", "2fast", "farm-jobs", "farm jobs", "dbo].[x", "x'; DROP TABLE t; --", "sch\u00e9ma", strings.Repeat("s", 129)} {
		c := Default()
		c.Database.Driver, c.Database.DSN, c.Node.Name = "sqlserver", "sqlserver://h?database=farm", "n"
		c.Database.Schema = bad
		require.ErrorContains(t, c.Validate(), "config: database.schema = "+strconv.Quote(bad)+": must be a letter or _", bad)
	}
	// It names where the value came from.
	_, err := Load("", false, []string{"SLOTPOLLER_DATABASE_SCHEMA=a.b"})
	require.ErrorContains(t, err, `database.schema = "a.b"`)
	require.ErrorContains(t, err, "SLOTPOLLER_DATABASE_SCHEMA")
}

func TestLoadPostgresNeedsExplicitDSN(t *testing.T) {
	_, err := Load("", false, []string{"SLOTPOLLER_DATABASE_DRIVER=postgres"})
	require.ErrorContains(t, err, "database.dsn")
	require.ErrorContains(t, err, "no default DSN")
	require.ErrorContains(t, err, "SLOTPOLLER_DATABASE_DSN")

	cfg, err := Load("", false, []string{
		"SLOTPOLLER_DATABASE_DRIVER=postgres",
		"SLOTPOLLER_DATABASE_DSN=host=db user=slot password=pw dbname=slot",
	})
	require.NoError(t, err)
	require.Equal(t, "host=db user=slot password=pw dbname=slot", cfg.Database.DSN)
}

func TestLoadSQLiteDSNPaths(t *testing.T) {
	path := writeConfig(t, "database:\n  dsn: data/farm.db?_pragma=busy_timeout(5000)\n")
	cfg, err := Load(path, true, nil)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(filepath.Dir(path), "data", "farm.db")+"?_pragma=busy_timeout(5000)", cfg.Database.DSN)

	for _, dsn := range []string{":memory:", "file::memory:?cache=shared", "file:farm.db?mode=rwc"} {
		cfg, err := Load("", false, []string{"SLOTPOLLER_DATABASE_DSN=" + dsn})
		require.NoError(t, err)
		require.Equal(t, dsn, cfg.Database.DSN)
	}
}

func TestLoadBadBaseURL(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"ftp://x", `config: jobs.base_url = "ftp://x": must be an http or https URL`},
		{"localhost:8080", "must be an http or https URL"},
		{"/jobs", "must be an http or https URL"},
		{"http://", "with a host"},
		{"http:///jobs", "with a host"},
		{"http://localhost/?a=1", "must not have a query"},
		{"http://localhost/#top", "must not have a fragment"},
		{"http://local host/", "not a valid URL"},
		{"", "must be set"},
	} {
		_, err := Load("", false, []string{"SLOTPOLLER_JOBS_BASE_URL=" + tc.url})
		require.ErrorContains(t, err, tc.want, tc.url)
		require.ErrorContains(t, err, "jobs.base_url", tc.url)
	}
}

func TestLoadTTLMustExceedHeartbeat(t *testing.T) {
	for _, ttl := range []string{"2s", "1s"} {
		path := writeConfig(t, "checkin:\n  heartbeat: 2s\n  ttl: "+ttl+"\n")
		_, err := Load(path, true, nil)
		require.ErrorContains(t, err, `config: checkin.ttl = `+ttl+`: must be greater than checkin.heartbeat (2s)`)
		require.ErrorContains(t, err, path+":3", "names where the value came from")
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := Load(path, true, nil)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, "nope.yaml")

	_, err = Load(path, false, nil)
	require.NoError(t, err)

	_, err = Load("", true, nil)
	require.Error(t, err)
}

func TestRepoConfigYAMLLoadsAtDefaults(t *testing.T) {
	cfg, err := Load("../config.yaml", true, nil)
	require.NoError(t, err)
	dir, err := filepath.Abs("..")
	require.NoError(t, err)
	require.Equal(t, resolvedDefaults(t, dir), cfg, "the example config.yaml should state the defaults")
}

func TestValidate(t *testing.T) {
	valid := func() Config {
		c := Default()
		c.Database.DSN = "/var/lib/slotpoller/slotpoller.db"
		c.Node.Name = "web01"
		return c
	}
	require.NoError(t, valid().Validate())

	for _, tc := range []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"empty sqlite dsn", func(c *Config) { c.Database.DSN = "" }, `database.dsn = "": the sqlite driver needs`},
		{"empty driver", func(c *Config) { c.Database.Driver = "" }, `database.driver = "": must be set`},
		{"empty name", func(c *Config) { c.Node.Name = "" }, `node.name = "": must not be empty`},
		{"long name", func(c *Config) { c.Node.Name = strings.Repeat("a", 65) }, `node.name = "` + strings.Repeat("a", 65) + `": must be at most 64 characters`},
		{"bad name", func(c *Config) { c.Node.Name = "web 01" }, `node.name = "web 01": may only contain`},
		{"capacity 0", func(c *Config) { c.Node.Capacity = 0 }, "node.capacity = 0: must be between 1 and 10000"},
		{"capacity high", func(c *Config) { c.Node.Capacity = 10001 }, "node.capacity = 10001"},
		{"timeout", func(c *Config) { c.Jobs.Timeout = 0 }, "jobs.timeout = 0s: must be at least 1ms"},
		{"lease", func(c *Config) { c.Jobs.Lease = Duration(999 * time.Millisecond) }, "jobs.lease = 999ms: must be at least 1s"},
		{"attempts", func(c *Config) { c.Jobs.MaxAttempts = 1001 }, "jobs.max_attempts = 1001"},
		{"backoff", func(c *Config) { c.Jobs.Backoff = -1 }, "jobs.backoff = -1ns"},
		{"backoff_max", func(c *Config) { c.Jobs.BackoffMax = Duration(time.Millisecond) }, "jobs.backoff_max = 1ms: must be at least jobs.backoff (1s)"},
		{"drain", func(c *Config) { c.Jobs.DrainTimeout = Duration(-time.Second) }, "jobs.drain_timeout = -1s: must not be negative"},
		{"slot", func(c *Config) { c.Rotation.Slot = Duration(5 * time.Millisecond) }, "rotation.slot = 5ms: must be at least 100ms (the farm polls the database once per slot)"},
		{"heartbeat", func(c *Config) { c.Checkin.Heartbeat = 0 }, "checkin.heartbeat = 0s"},
		{"resync", func(c *Config) { c.Clock.Resync = 0 }, "clock.resync = 0s"},
		{"ntp server", func(c *Config) { c.Clock.NTPServer = "udp://pool.ntp.org" }, `clock.ntp_server = "udp://pool.ntp.org"`},
		{"ntp offset", func(c *Config) { c.Clock.NTPMaxOffset = 0 }, "clock.ntp_max_offset = 0s"},
		{"level", func(c *Config) { c.Log.Level = "verbose" }, `log.level = "verbose": must be one of debug, info, warn, error`},
		{"format", func(c *Config) { c.Log.Format = "xml" }, `log.format = "xml": must be one of text, json`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.modify(&c)
			require.ErrorContains(t, c.Validate(), "config: "+tc.want)
		})
	}
}

func TestValidateCollectsAllProblems(t *testing.T) {
	c := Default()
	c.Node.Name = "n"
	c.Database.DSN = "x.db"
	c.Node.Capacity = 0
	c.Log.Level = "loud"
	c.Jobs.BaseURL = "ftp://x"
	err := c.Validate()
	require.ErrorContains(t, err, "node.capacity")
	require.ErrorContains(t, err, "log.level")
	require.ErrorContains(t, err, "jobs.base_url")
	require.Len(t, strings.Split(err.Error(), "\n"), 3)
}

func TestValidateNeverShowsDSNPassword(t *testing.T) {
	const secret = "s3cr3t-Pa55"
	for _, tc := range []struct{ driver, dsn, want string }{
		{"postgres", "mysql://app:" + secret + "@db:3306/farm", "must be a postgres:// URL"},
		{"sqlite", "postgres://app:" + secret + "@db:5432/farm", "is a postgres DSN but database.driver is sqlite"},
		{"sqlserver", "mysql://sa:" + secret + "@db?database=farm", "must be a sqlserver:// URL"},
		{"sqlite", "sqlserver://sa:" + secret + "@db?database=farm", "is a sqlserver DSN"},
		{"mysql", "mysql://app:" + secret + "@db:3306/farm", "not a URL, for the mysql driver"},
		{"sqlite", "app:" + secret + "@tcp(db:3306)/farm?parseTime=true", "is a mysql DSN but database.driver is sqlite"},
		{"postgres", "app:" + secret + "@tcp(db:3306)/farm?parseTime=true", "is a mysql DSN but database.driver is postgres"},
		{"sqlserver", "app:" + secret + "@unix(/run/mysqld/mysqld.sock)/farm", "is a mysql DSN but database.driver is sqlserver"},
	} {
		c := Default()
		c.Node.Name = "n"
		c.Database.Driver = tc.driver
		c.Database.DSN = tc.dsn
		err := c.Validate()
		require.ErrorContains(t, err, tc.want, tc.dsn)
		require.NotContains(t, err.Error(), secret, tc.dsn)
	}

	// Through Load, from the environment and from a file.
	_, err := Load("", false, []string{"SLOTPOLLER_DATABASE_DSN=postgres://app:" + secret + "@db/farm"})
	require.ErrorContains(t, err, "database.dsn")
	require.NotContains(t, err.Error(), secret)

	_, err = Load(writeConfig(t, "database:\n  dsn: [postgres://app:"+secret+"@db/farm]\n"), true, nil)
	require.ErrorContains(t, err, "database.dsn")
	require.NotContains(t, err.Error(), secret)
}

func TestMaskDSN(t *testing.T) {
	const secret = "s3cr3t"
	for _, tc := range []struct{ in, want string }{
		{"postgres://user:s3cr3t@host/db", "postgres://user:xxxxx@host/db"},
		{"postgresql://user:s3cr3t@host:5432/db?sslmode=require", "postgresql://user:xxxxx@host:5432/db?sslmode=require"},
		{"sqlserver://user:s3cr3t@host?database=x", "sqlserver://user:xxxxx@host?database=x"},
		{"postgres://:s3cr3t@host/db", "postgres://:xxxxx@host/db"},
		{"postgres://user:s3cr3t@@host/db", "postgres://user:xxxxx@host/db"},
		{"postgres://user:s3cr3t/x@host/db", "postgres://user:xxxxx@host/db"},
		{"postgres://user:s3cr3t?x@host/db", "postgres://user:xxxxx@host/db"},
		{"postgres://host/db?user=u&password=s3cr3t&sslmode=disable", "postgres://host/db?user=u&password=xxxxx&sslmode=disable"},
		{"postgres://user@host/db", "postgres://user@host/db"},
		{"postgres://host:5432/db?application_name=a@b", "postgres://host:5432/db?application_name=a@b"},
		{"host=db user=u password=s3cr3t dbname=x", "host=db user=u password=xxxxx dbname=x"},
		{"host=db password = s3cr3t", "host=db password = xxxxx"},
		{"host=db password='s3 cr\\'3t' dbname=x", "host=db password=xxxxx dbname=x"},
		{"Server=db;User ID=sa;Password=s3cr3t;Database=x", "Server=db;User ID=sa;Password=xxxxx;Database=x"},
		{"server=db;pwd=s3cr3t", "server=db;pwd=xxxxx"},
		{`Server=db;Password="s3;cr3t";Database=x`, "Server=db;Password=xxxxx;Database=x"},
		{"Server=db;Password={s3;cr}}3t};Database=x", "Server=db;Password=xxxxx;Database=x"},
		{"Server=db;Password=s3cr3t with space;Database=x", "Server=db;Password=xxxxx;Database=x"},
		{"host=db sslpassword=s3cr3t", "host=db sslpassword=xxxxx"},
		{"/var/lib/slotpoller/slotpoller.db", "/var/lib/slotpoller/slotpoller.db"},
		{`C:\ProgramData\slotpoller\slotpoller.db`, `C:\ProgramData\slotpoller\slotpoller.db`},
		{"file:slotpoller.db?_pragma=busy_timeout(5000)", "file:slotpoller.db?_pragma=busy_timeout(5000)"},
		{":memory:", ":memory:"},
		{"", ""},
	} {
		got := MaskDSN(tc.in)
		require.Equal(t, tc.want, got, tc.in)
		require.NotContains(t, got, secret, tc.in)
		require.NotContains(t, got, "3t", tc.in)
	}
}

func TestRedacted(t *testing.T) {
	c := Default()
	c.Database.DSN = "postgres://u:s3cr3t@h/db"
	r := c.Redacted()
	require.Equal(t, "postgres://u:xxxxx@h/db", r.Database.DSN)
	require.Equal(t, "postgres://u:s3cr3t@h/db", c.Database.DSN, "the original is unchanged")
	r.Database.DSN = c.Database.DSN
	require.Equal(t, c, r, "only the DSN differs")
}

func TestDurationYAML(t *testing.T) {
	var v struct {
		D Duration `yaml:"d"`
	}
	require.NoError(t, yaml.Unmarshal([]byte("d: 1m30s\n"), &v))
	require.Equal(t, Duration(90*time.Second), v.D)

	err := yaml.Unmarshal([]byte("d: soon\n"), &v)
	require.ErrorContains(t, err, `"soon"`)
	err = yaml.Unmarshal([]byte("d: [1s]\n"), &v)
	require.ErrorContains(t, err, "invalid duration")

	for d, want := range map[Duration]string{
		0:                                 "0s",
		Duration(250 * time.Millisecond):  "250ms",
		Duration(5 * time.Minute):         "5m",
		Duration(time.Hour):               "1h",
		Duration(90 * time.Minute):        "1h30m",
		Duration(time.Hour + time.Second): "1h0m1s",
		Duration(-90 * time.Second):       "-1m30s",
		Duration(30 * time.Second):        "30s",
	} {
		require.Equal(t, want, d.String())
		out, err := yaml.Marshal(d)
		require.NoError(t, err)
		require.Equal(t, want+"\n", string(out))
		parsed, err := parseDuration(want)
		require.NoError(t, err)
		require.Equal(t, d, parsed)
	}
}

func TestConfigRoundTripsThroughYAML(t *testing.T) {
	want := resolvedDefaults(t, t.TempDir())
	want.Checkin.Heartbeat = Duration(2 * time.Second)
	want.Checkin.TTL = Duration(5 * time.Second)
	want.Clock.Skew = Duration(-1500 * time.Millisecond)
	out, err := yaml.Marshal(want)
	require.NoError(t, err)

	got, err := Load(writeConfig(t, string(out)), true, nil)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

func TestSchedulesInConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(p, []byte(`
schedules:
  - name: nightly
    cron: "0 2 * * 1-5"
    time_zone: Europe/Berlin
    endpoint: /jobs/report
  - name: tick
    every: 10s
    endpoint: /jobs/tick
    misfire: skip
    tolerance: 30s
    overlap: allow
`), 0o600))
	cfg, err := Load(p, true, nil)
	require.NoError(t, err)
	require.Len(t, cfg.Schedules, 2)
	n := cfg.Schedules[0].Schedule(cfg.Jobs.MaxAttempts)
	require.Equal(t, "POST", n.Method)
	require.Equal(t, 5*time.Minute, n.Tolerance, "default tolerance")
	require.Equal(t, "once", n.Misfire)
	require.Equal(t, "forbid", n.Overlap)
	require.True(t, n.Enabled)
	require.Equal(t, cfg.Jobs.MaxAttempts, n.MaxAttempts)
	require.Equal(t, "config", n.Source)
	tick := cfg.Schedules[1].Schedule(5)
	require.Equal(t, 10*time.Second, tick.Every)
	require.Equal(t, "skip", tick.Misfire)

	for body, want := range map[string]string{
		"schedules:\n  - name: a\n    every: 1s\n    endpont: /x\n":                                    `unknown key "schedules[0].endpont"`,
		"schedules:\n  - name: a\n    every: soon\n    endpoint: /x\n":                                 "schedules[0].every",
		"schedules:\n  - name: a\n    cron: \"61 * * * *\"\n    endpoint: /x\n":                        "schedules[0]",
		"schedules:\n  - name: a\n    every: 1s\n    endpoint: /x\n    misfire: later\n":               "misfire",
		"schedules:\n  - {name: a, every: 1s, endpoint: /x}\n  - {name: a, every: 2s, endpoint: /y}\n": "the same name",
		"schedules:\n  name: a\n": "must be a list",
	} {
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		_, err := Load(p, true, nil)
		require.ErrorContains(t, err, want, body)
	}
	_, err = Load(p, true, []string{"SLOTPOLLER_SCHEDULES_NAME=x"})
	require.ErrorContains(t, err, "config file only")
}

func TestSQLServerDSNMustNotSetATimeZone(t *testing.T) {
	cfg := Default()
	cfg.Database.Driver, cfg.Database.DSN, cfg.Node.Name = "sqlserver", "sqlserver://u:secretpw@db:1433?database=farm&timezone=Europe/Berlin", "n1"
	err := cfg.Validate()
	require.ErrorContains(t, err, "timezone")
	require.NotContains(t, err.Error(), "secretpw")
}

func TestSigningKeyAndAdminListen(t *testing.T) {
	cfg, err := Load(filepath.Join(t.TempDir(), "none.yaml"), false, []string{
		"SLOTPOLLER_JOBS_SIGNING_KEY=0123456789abcdef-secret", "SLOTPOLLER_ADMIN_LISTEN=:9090", "SLOTPOLLER_NODE_NAME=n1"})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9090", cfg.Admin.AdminAddr(), "a bare port binds to loopback")
	require.Equal(t, "xxxxx", cfg.Redacted().Jobs.SigningKey)
	require.Equal(t, "0123456789abcdef-secret", cfg.Jobs.SigningKey)

	_, err = Load(filepath.Join(t.TempDir(), "none.yaml"), false, []string{"SLOTPOLLER_JOBS_SIGNING_KEY=short-secret", "SLOTPOLLER_NODE_NAME=n1"})
	require.ErrorContains(t, err, "at least 16")
	require.NotContains(t, err.Error(), "short-secret", "the key never appears in an error")
	_, err = Load(filepath.Join(t.TempDir(), "none.yaml"), false, []string{"SLOTPOLLER_ADMIN_LISTEN=9090", "SLOTPOLLER_NODE_NAME=n1"})
	require.ErrorContains(t, err, "admin.listen")
}

func TestAdminToken(t *testing.T) {
	load := func(env ...string) (Config, error) {
		return Load(filepath.Join(t.TempDir(), "none.yaml"), false, append(env, "SLOTPOLLER_NODE_NAME=n1"))
	}
	const token = "0123456789abcdef-admin-token"

	// Beyond loopback without a token: a config error, not an open API.
	for _, l := range []string{"0.0.0.0:9090", "[::]:9090", "10.1.2.3:9090", "admin.example.com:9090"} {
		_, err := load("SLOTPOLLER_ADMIN_LISTEN=" + l)
		require.ErrorContains(t, err, "binds beyond loopback, so the admin endpoint needs admin.token", l)
	}
	// Loopback is open without one.
	for _, l := range []string{":9090", "127.0.0.1:9090", "[::1]:9090", "localhost:9090", "127.0.0.2:0"} {
		cfg, err := load("SLOTPOLLER_ADMIN_LISTEN=" + l)
		require.NoError(t, err, l)
		require.True(t, cfg.Admin.Loopback(), l)
	}
	cfg, err := load("SLOTPOLLER_ADMIN_LISTEN=0.0.0.0:9090", "SLOTPOLLER_ADMIN_TOKEN="+token)
	require.NoError(t, err)
	require.False(t, cfg.Admin.Loopback())
	require.Equal(t, token, cfg.Admin.Token)
	require.Equal(t, "xxxxx", cfg.Redacted().Admin.Token, "config show and logs see it masked")
	require.True(t, IsSecret("admin.token"))
	for _, s := range cfg.Settings(Sources{}) {
		require.NotContains(t, fmt.Sprint(s.Value), token, s.Key)
	}

	for _, bad := range []string{"short-token", "0123456789abcdef with space", strings.Repeat("x", 257), "0123456789abcdef\u00e9"} {
		_, err := load("SLOTPOLLER_ADMIN_TOKEN=" + bad)
		require.ErrorContains(t, err, "admin.token (value hidden)")
		require.NotContains(t, err.Error(), bad, "the token never appears in an error")
	}
}
