package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/install"
	"github.com/slotpoller/slotpoller/service"
	"github.com/stretchr/testify/require"
)

// Tests of the service verbs and `config show`. Installing for real needs
// root and a service manager: see install/service_su_test.go.

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/*.golden from the output")

// setting is one entry of `config show -json`.
type setting struct {
	Key    string        `json:"key"`
	Value  any           `json:"value"`
	Source config.Source `json:"source"`
}

func configShowJSON(t *testing.T, args ...string) map[string]setting {
	t.Helper()
	code, out, errOut := cli(t, append([]string{"config", "show", "-json"}, args...)...)
	require.Equal(t, 0, code, errOut)
	var doc struct {
		ConfigFile string    `json:"config_file"`
		Settings   []setting `json:"settings"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	byKey := map[string]setting{}
	for _, s := range doc.Settings {
		byKey[s.Key] = s
	}
	return byKey
}

const showConfig = `database:
  driver: postgres
node:
  name: web-01
  capacity: 8
jobs:
  drain_timeout: 25s
log:
  level: error
schedules:
  - name: nightly
    cron: "0 2 * * *"
    endpoint: /jobs/report
`

// config show: every key, its value with secrets masked, and where it
// came from: default, file:line, env VAR or flag.
func TestConfigShow(t *testing.T) {
	t.Chdir(t.TempDir())
	require.NoError(t, os.WriteFile("config.yaml", []byte(showConfig), 0o600))
	t.Setenv("SLOTPOLLER_DATABASE_DSN", "postgres://farm:s3cr3tpw@db.example:5432/farm?sslmode=require")
	t.Setenv("SLOTPOLLER_JOBS_SIGNING_KEY", "0123456789abcdef-signing")
	t.Setenv("SLOTPOLLER_ADMIN_TOKEN", "fedcba9876543210-admin")
	t.Setenv("SLOTPOLLER_LOG_LEVEL", "warn")

	code, out, errOut := cli(t, "config", "show", "-log-level", "debug")
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, out, "s3cr3tpw", "the DSN's password is masked")
	require.NotContains(t, out, "0123456789abcdef", "the signing key is masked")
	require.NotContains(t, out, "fedcba9876543210", "the admin token is masked")
	golden := filepath.Join(pkgDir, "testdata", "config-show.golden")
	if *updateGolden {
		require.NoError(t, os.WriteFile(golden, []byte(out), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test -run TestConfigShow -update-golden to write it")
	require.Equal(t, string(want), out)

	got := configShowJSON(t, "-log-level", "debug")
	require.Equal(t, "postgres://farm:xxxxx@db.example:5432/farm?sslmode=require", got["database.dsn"].Value)
	require.Equal(t, config.Source{Kind: config.FromEnv, Where: "SLOTPOLLER_DATABASE_DSN"}, got["database.dsn"].Source)
	require.Equal(t, "xxxxx", got["jobs.signing_key"].Value)
	require.Equal(t, "xxxxx", got["admin.token"].Value)
	require.Equal(t, config.Source{Kind: config.FromFile, Where: "config.yaml:5"}, got["node.capacity"].Source)
	require.Equal(t, float64(8), got["node.capacity"].Value)
	require.Equal(t, config.Source{Kind: config.FromFlag, Where: "-log-level"}, got["log.level"].Source)
	require.Equal(t, config.Source{Kind: config.FromDefault}, got["jobs.timeout"].Source)
	require.Equal(t, "30s", got["jobs.timeout"].Value)
	require.Equal(t, config.FromDefault, got["checkin.ttl"].Source.Kind)
	require.Contains(t, got["checkin.ttl"].Source.Note, "3 × checkin.heartbeat")
	require.Equal(t, "0 2 * * *", got["schedules[0].cron"].Value)
	require.Equal(t, config.Source{Kind: config.FromFile, Where: "config.yaml:12"}, got["schedules[0].cron"].Source)
	require.Equal(t, config.Source{Kind: config.FromDefault}, got["schedules[0].misfire"].Source)
}

// pkgDir is the package folder, read before any test changes directory.
var pkgDir, _ = os.Getwd()

// defaults < config.yaml < environment < flags.
func TestFlagsOverrideEnvironmentOverrideFile(t *testing.T) {
	cfg := writeConfig(t, "node:\n  name: file-node\n  capacity: 3\nlog:\n  level: error\n  format: json\nadmin:\n  listen: \":9100\"\n")
	t.Setenv("SLOTPOLLER_NODE_NAME", "env-node")
	t.Setenv("SLOTPOLLER_LOG_LEVEL", "warn")
	t.Setenv("SLOTPOLLER_ADMIN_LISTEN", ":9200")

	got := configShowJSON(t, "-config", cfg, "-node-name", "flag-node", "-admin-listen", "")
	for key, want := range map[string]struct {
		value any
		kind  config.SourceKind
	}{
		"node.name":     {"flag-node", config.FromFlag}, // file, env and flag: the flag wins
		"admin.listen":  {"", config.FromFlag},          // an empty flag still counts: it turns the endpoint off
		"log.level":     {"warn", config.FromEnv},       // file and env: the env wins
		"log.format":    {"json", config.FromFile},
		"node.capacity": {float64(3), config.FromFile},
		"jobs.lease":    {"15s", config.FromDefault},
	} {
		require.Equal(t, want.value, got[key].Value, key)
		require.Equal(t, want.kind, got[key].Source.Kind, key)
	}
	require.Equal(t, "-node-name", got["node.name"].Source.Where)

	// `run` takes the same flags; a bad value names the flag as its source.
	code, _, errOut := cli(t, "run", "-config", cfg, "-log-format", "yaml")
	require.Equal(t, 2, code, "a bad flag value is bad usage")
	require.Contains(t, errOut, `log.format = "yaml"`)
	require.Contains(t, errOut, "set by flag -log-format")
	code, _, errOut = cli(t, "run", "-config", cfg, "-node-name", "bad name")
	require.Equal(t, 2, code, "a bad flag value is bad usage")
	require.Contains(t, errOut, "node.name")
	require.Contains(t, errOut, "set by flag -node-name")
}

func TestStatusShowsTheLocalService(t *testing.T) {
	db := filepath.Join(t.TempDir(), "farm.db")
	cfg := writeConfig(t, "database:\n  dsn: "+db+"\n")
	code, _, errOut := cli(t, "schema", "migrate", "-config", cfg)
	require.Equal(t, 0, code, errOut)

	code, out, errOut := cli(t, "status", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(out, "\n")
	require.True(t, strings.HasPrefix(lines[0], "service: "), out)
	require.Equal(t, "database: sqlite "+db, lines[1], "the database it read: %s", out)
	require.True(t, strings.HasPrefix(lines[2], "database time "), "the farm's status follows, as before: %s", out)

	code, out, errOut = cli(t, "status", "-json", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	var rep struct {
		Service *install.ServiceState `json:"service"`
		Nodes   []map[string]any      `json:"nodes"`
		Jobs    map[string]int        `json:"jobs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.NotNil(t, rep.Service, out)
	require.Equal(t, install.ServiceName, rep.Service.Name)
	require.NotEmpty(t, rep.Service.State)
	require.NotNil(t, rep.Nodes, "still an object with a nodes array")
	require.NotNil(t, rep.Jobs)
}

func TestStatusShowsTheServiceWhenTheDatabaseIsAway(t *testing.T) {
	cfg := writeConfig(t, "database:\n  driver: postgres\n  dsn: postgres://farm:s3cr3tpw@127.0.0.1:1/farm?connect_timeout=2\n")
	code, out, errOut := cli(t, "status", "-config", cfg)
	require.Equal(t, 1, code)
	require.True(t, strings.HasPrefix(out, "service: "), out)
	require.Contains(t, errOut, "cannot reach the database")

	code, out, errOut = cli(t, "status", "-json", "-config", cfg)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "cannot reach the database")
	var rep map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Contains(t, rep, "service")
	require.NotContains(t, rep, "nodes", "no farm status without the database")
	require.NotContains(t, out+errOut, "s3cr3tpw")
}

func TestInstallCarriesTheEnvironmentOverridesAndHidesSecrets(t *testing.T) {
	path := writeConfig(t, "node:\n  capacity: 2\n")
	environ := []string{
		"SLOTPOLLER_NODE_NAME=web-07",
		"SLOTPOLLER_DATABASE_DSN=/var/lib/slotpoller/farm.db",
		"SLOTPOLLER_JOBS_SIGNING_KEY=0123456789abcdef-signing",
		"SLOTPOLLER_TEST_POSTGRES_DSN=postgres://not-a-setting", // not a config section: not carried
		"PATH=/usr/bin",
	}
	cfg, src, err := config.LoadWithSources(path, true, environ)
	require.NoError(t, err)
	env := carriedEnv(cfg, src, environ)
	require.ElementsMatch(t, []install.EnvVar{
		{Name: "SLOTPOLLER_NODE_NAME", Value: "web-07"},
		{Name: "SLOTPOLLER_DATABASE_DSN", Value: "/var/lib/slotpoller/farm.db", Secret: true},
		{Name: "SLOTPOLLER_JOBS_SIGNING_KEY", Value: "0123456789abcdef-signing", Secret: true},
	}, env)

	var out bytes.Buffer
	spec := install.ServiceSpec{Executable: "/usr/local/bin/slotpoller", ConfigPath: path, Env: env, StopBound: service.StopTimeout(cfg)}
	writeInstalled(&out, spec, cfg)
	require.Contains(t, out.String(), "/usr/local/bin/slotpoller run -service -config "+path)
	require.Contains(t, out.String(), "SLOTPOLLER_NODE_NAME=web-07")
	require.Contains(t, out.String(), "SLOTPOLLER_DATABASE_DSN=(hidden)")
	require.Contains(t, out.String(), "SLOTPOLLER_JOBS_SIGNING_KEY=(hidden)")
	require.NotContains(t, out.String(), "farm.db")
	require.NotContains(t, out.String(), "0123456789abcdef")
	require.Contains(t, out.String(), "stop timeout 45s (jobs.drain_timeout 20s + checkin.ttl 3s + 22s)")

	// Paths with spaces are quoted, as the service manager's entry is.
	out.Reset()
	spec.Executable, spec.ConfigPath = `C:\Program Files\slotpoller\slotpoller.exe`, `C:\Program Data\slotpoller\config.yaml`
	writeInstalled(&out, spec, cfg)
	require.Contains(t, out.String(), `"C:\Program Files\slotpoller\slotpoller.exe" run -service -config "C:\Program Data\slotpoller\config.yaml"`)
}

func TestInstallNeedsAConfigFileAndTheRights(t *testing.T) {
	code, _, errOut := cli(t, "install", "-config", filepath.Join(t.TempDir(), "missing.yaml"))
	require.Equal(t, 1, code)
	if os.Geteuid() > 0 {
		require.Contains(t, errOut, "run as root/Administrator")
	} else {
		require.Contains(t, errOut, "missing.yaml")
		require.Contains(t, errOut, "no config file there")
	}
	code, _, errOut = cli(t, "install", "extra")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "unexpected argument")
	code, _, errOut = cli(t, "config")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "config show")
}
