package install

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/callproto"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/schema"
	"github.com/stretchr/testify/require"
)

// The real System V install, on a Linux host without systemd, as root
// (CI runs so): under a name of its own, it installs a node whose DSN
// and signing key hold spaces, quotes, "$" and backslashes, starts it,
// sees a signed job run against that database, stops the node while a
// 5 s call is in flight (the stop waits for it), and uninstalls, leaving
// nothing behind. It skips elsewhere.
func TestSysvInstallStartStopUninstall(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the System V install needs root")
	}
	if p := Platform(); p != sysvPlatform {
		t.Skipf("the System V test runs where kardianos/service picks System V init, not %q", p)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH: it builds the binary the service runs")
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := "slotpoller-test-" + hex.EncodeToString(rnd[:])
	t.Cleanup(func() {
		// Whatever happened: stop the node (the script kills it after
		// its stop timeout) and remove every file of the install.
		if exists(SysvScriptPath(name)) {
			_, _ = sysvScript(name, "stop")
		}
		if removed, err := sysvRemove(name); len(removed) > 0 || err != nil {
			t.Logf("cleanup removed %v (%v)", removed, err)
		}
	})

	// The binary, its config and the database in a folder whose name a
	// shell would split and expand.
	dir, err := os.MkdirTemp("", `slotpoller sysv 'test' $HOME-`)
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	exe := filepath.Join(dir, "slotpoller")
	build := exec.Command(gobin, "build", "-o", exe, "github.com/slotpoller/slotpoller")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())
	cfgPath := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte("database:\n  driver: sqlite\njobs:\n  drain_timeout: 10s\n"), 0o644))
	dsn := filepath.Join(dir, `farm "db" $HOME \ x.db`)
	key := `k3y with 'quotes' "and" $HOME \ backslash`

	// The database, with a job whose call takes 5 s.
	ctx := context.Background()
	s, err := open.Store(ctx, "sqlite", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	_, err = schema.Migrate(ctx, s)
	require.NoError(t, err)
	var called, finished atomic.Int64
	callStarted := make(chan struct{}, 1)
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := callproto.VerifySignature(r, []byte(key), time.Minute, time.Time{}); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden) // a 4xx fails the job at once
			return
		}
		called.Store(time.Now().UnixNano())
		select {
		case callStarted <- struct{}{}:
		default:
		}
		time.Sleep(5 * time.Second)
		finished.Store(time.Now().UnixNano())
	}))
	t.Cleanup(endpoint.Close)
	_, err = jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/slow", Method: "POST", MaxAttempts: 1, Timeout: 30 * time.Second})
	require.NoError(t, err)

	spec := ServiceSpec{Name: name, Executable: exe, ConfigPath: cfgPath, StopBound: 30 * time.Second, Env: []EnvVar{
		{Name: "SLOTPOLLER_DATABASE_DSN", Value: dsn, Secret: true},
		{Name: "SLOTPOLLER_JOBS_SIGNING_KEY", Value: key, Secret: true},
		{Name: "SLOTPOLLER_JOBS_BASE_URL", Value: endpoint.URL},
		{Name: "SLOTPOLLER_NODE_NAME", Value: name},
	}}
	inst, err := InstallService(spec)
	require.NoError(t, err)
	require.Equal(t, EnvFilePath(name), inst.Spec.EnvFile)
	require.Equal(t, StateStopped, queryService(name).State, "%s", queryService(name))

	// The secrets are in the root-only environment file, not in the
	// init script.
	script, err := os.ReadFile(SysvScriptPath(name))
	require.NoError(t, err)
	for _, secret := range []string{dsn, key, "k3y"} {
		require.NotContains(t, string(script), secret)
	}
	fi, err := os.Stat(SysvScriptPath(name))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
	fi, err = os.Stat(EnvFilePath(name))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the environment file holds secrets")
	env, err := ReadEnvFile(EnvFilePath(name))
	require.NoError(t, err)
	require.Contains(t, env, "SLOTPOLLER_DATABASE_DSN="+dsn)
	require.Contains(t, env, "SLOTPOLLER_JOBS_SIGNING_KEY="+key)
	_, err = InstallService(spec)
	require.ErrorContains(t, err, "already installed")

	// Started by the init script, the node finds the job in that
	// database and calls with that key.
	require.NoError(t, controlService(name, "start"))
	require.True(t, queryService(name).Running, "%s", queryService(name))
	select {
	case <-callStarted:
	case <-time.After(90 * time.Second):
		log, _ := os.ReadFile(SysvLogFile(name))
		t.Fatalf("the node did not call the job's endpoint; its log:\n%s", log)
	}

	// A stop while the call runs waits for it.
	require.NoError(t, controlService(name, "stop"))
	require.NotZero(t, finished.Load(), "stop returned before the call in flight ended")
	require.GreaterOrEqual(t, time.Duration(finished.Load()-called.Load()), 5*time.Second)
	require.Equal(t, StateStopped, queryService(name).State, "%s", queryService(name))
	require.NoFileExists(t, SysvPidFile(name))
	counts, err := s.JobCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, counts["done"], "%v", counts)
	log, err := os.ReadFile(SysvLogFile(name))
	require.NoError(t, err)
	require.NotEmpty(t, log, "the node logs to %s", SysvLogFile(name))
	require.NotContains(t, string(log), key)

	// restart starts a stopped node, and stops a running one first.
	require.NoError(t, controlService(name, "restart"))
	require.True(t, queryService(name).Running, "%s", queryService(name))
	require.NoError(t, controlService(name, "restart"))
	require.True(t, queryService(name).Running, "%s", queryService(name))

	// uninstall stops the node, waiting for it as stop does.
	removed, err := uninstallService(name)
	require.NoError(t, err)
	require.Contains(t, removed, SysvScriptPath(name))
	require.Contains(t, removed, EnvFilePath(name))
	require.Contains(t, removed, SysvLogFile(name))
	require.Empty(t, sysvLeftovers(name), "uninstall leaves nothing")
	require.NoFileExists(t, SysvScriptPath(name))
	links, _ := filepath.Glob("/etc/rc?.d/*" + name)
	require.Empty(t, links)
	require.Equal(t, StateNotInstalled, queryService(name).State)
	_, err = uninstallService(name)
	require.ErrorContains(t, err, "not installed")
	require.False(t, strings.Contains(strings.Join(removed, " "), dir), "uninstall leaves the user's files alone")
	require.NoFileExists(t, SysvPidFile(name))
	require.FileExists(t, dsn, "uninstall leaves the database alone")

	// What an install by an earlier version left after its uninstall (the
	// links, the pid file, two logs) goes at the next uninstall.
	var debris []string
	for _, l := range []string{"/etc/rc2.d/S50" + name, "/etc/rc0.d/K02" + name} {
		require.NoError(t, os.Symlink(SysvScriptPath(name), l))
		debris = append(debris, l)
	}
	for _, f := range []string{SysvPidFile(name), "/var/log/" + name + ".log", "/var/log/" + name + ".err"} {
		require.NoError(t, os.WriteFile(f, []byte("x\n"), 0o644))
		debris = append(debris, f)
	}
	removed, err = uninstallService(name)
	require.NoError(t, err)
	require.ElementsMatch(t, debris, removed)
	require.Empty(t, sysvLeftovers(name))
}
