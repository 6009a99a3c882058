//go:build service_su

// The real install/uninstall: it registers, starts, stops and removes the
// OS service "slotpoller" on this machine, so it runs only when asked for:
//
//	sudo -E go test -tags service_su -run TestServiceInstall -v ./install
//
// on a systemd Linux host or (as Administrator) on Windows, with no
// slotpoller service installed.

package install

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/stretchr/testify/require"
)

func TestServiceInstall(t *testing.T) {
	if err := CheckRights("install"); err != nil {
		t.Skip(err)
	}
	before := QueryService()
	switch {
	case before.Platform != "linux-systemd" && before.Platform != "windows-service":
		t.Skipf("the service test runs on systemd or Windows, not %q", before.Platform)
	case before.State != StateNotInstalled:
		t.Skipf("a slotpoller service is installed here already (%s): not touching it", before)
	}

	// A slotpoller binary and a config in a folder the service can read
	// (not a private temporary folder of this user).
	dir, err := os.MkdirTemp("", "slotpoller-service-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	exe := filepath.Join(dir, "slotpoller")
	if runtime.GOOS == "windows" {
		exe += ".exe"
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on this user's PATH (sudo resets it): it builds the binary the service runs")
	}
	build := exec.Command(gobin, "build", "-o", exe, "github.com/slotpoller/slotpoller")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())
	db := filepath.Join(dir, "farm.db")
	cfgPath := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte("database:\n  dsn: "+db+"\njobs:\n  drain_timeout: 2s\n"), 0o644))

	spec := ServiceSpec{Executable: exe, ConfigPath: cfgPath, StopBound: 12 * time.Second,
		Env: []EnvVar{{Name: "SLOTPOLLER_NODE_NAME", Value: "service-test"}}}
	_, err = InstallService(spec)
	require.NoError(t, err)
	t.Cleanup(func() {
		if QueryService().Installed {
			_, _ = UninstallService()
		}
	})
	_, err = InstallService(spec)
	require.Error(t, err, "a second install is refused")

	st := QueryService()
	require.True(t, st.Installed, "%s", st)
	require.False(t, st.Running, "%s", st)
	if st.Platform == "linux-systemd" {
		written, err := os.ReadFile(systemdUnitPath(ServiceName))
		require.NoError(t, err)
		want, err := SystemdUnit(spec)
		require.NoError(t, err)
		require.Equal(t, want, string(written), "the unit on disk is the one rendered in the plain test")
	}

	_, err = ControlService("start")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return QueryService().Running }, 30*time.Second, 200*time.Millisecond)

	// The node, run by the service manager with the carried environment,
	// checks in under the carried name.
	s, err := open.Store(context.Background(), "sqlite", db)
	require.NoError(t, err)
	defer s.Close()
	state := func() string {
		nodes, _, err := s.Nodes(context.Background(), 3*time.Second)
		if err != nil {
			return ""
		}
		for _, n := range nodes {
			if n.Name == "service-test" {
				return n.State
			}
		}
		return ""
	}
	require.Eventually(t, func() bool { return state() == "up" }, 60*time.Second, 200*time.Millisecond)

	_, err = ControlService("restart")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return QueryService().Running }, 30*time.Second, 200*time.Millisecond)

	begin := time.Now()
	_, err = ControlService("stop")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !QueryService().Running }, spec.ManagerStopTimeout(), 200*time.Millisecond)
	require.Less(t, time.Since(begin), spec.ManagerStopTimeout(), "the node stops before the service manager would kill it")
	require.Equal(t, "left", state(), "a stopped service leaves the registry")

	_, err = UninstallService()
	require.NoError(t, err)
	require.Equal(t, StateNotInstalled, QueryService().State)
}
