package install

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The systemd unit that `slotpoller install` writes, rendered without root
// and without systemd. The real install is in service_su_test.go.

func testSpec() ServiceSpec {
	return ServiceSpec{
		Executable: "/usr/local/bin/slotpoller",
		ConfigPath: "/etc/slotpoller/config.yaml",
		Env: []EnvVar{
			{Name: "SLOTPOLLER_NODE_NAME", Value: "web-01"},
			{Name: "SLOTPOLLER_DATABASE_DSN", Value: `host=db password='p w"%$x' dbname=farm`, Secret: true},
		},
		StopBound: 30 * time.Second, // any bound: the unit adds ManagerStopMargin
	}
}

// unitLines returns the unit's lines with key k ("ExecStart").
func unitLines(unit, k string) []string {
	var out []string
	for _, l := range strings.Split(unit, "\n") {
		if strings.HasPrefix(l, k+"=") {
			out = append(out, strings.TrimPrefix(l, k+"="))
		}
	}
	return out
}

func TestSystemdUnit(t *testing.T) {
	unit, err := SystemdUnit(testSpec())
	require.NoError(t, err)

	require.Equal(t, []string{"/usr/local/bin/slotpoller run -service -config /etc/slotpoller/config.yaml"}, unitLines(unit, "ExecStart"))
	require.Equal(t, []string{"always"}, unitLines(unit, "Restart"))
	require.Equal(t, []string{"5"}, unitLines(unit, "RestartSec"))
	require.Equal(t, []string{"35"}, unitLines(unit, "TimeoutStopSec"), "drain_timeout + 15s: the program's bound + 5s")
	require.Equal(t, []string{
		`"SLOTPOLLER_DATABASE_DSN=host=db password='p w\"%%$x' dbname=farm"`,
		`"SLOTPOLLER_NODE_NAME=web-01"`,
	}, unitLines(unit, "Environment"), "sorted, quoted, escaped")
	require.Equal(t, []string{"multi-user.target"}, unitLines(unit, "WantedBy"))
	require.NotContains(t, unit, "{{", "kardianos/service renders the script again: no action may remain")
	require.Contains(t, unit, "\n[Service]\n")
}

func TestSystemdUnitQuotesPathsWithSpacesAndSpecials(t *testing.T) {
	spec := testSpec()
	spec.Executable = "/opt/slot poller/slotpoller"
	spec.ConfigPath = `/srv/50%/$HOME/{{x}}/"q"\config.yaml`
	spec.Env = nil
	unit, err := SystemdUnit(spec)
	require.NoError(t, err)
	exec := unitLines(unit, "ExecStart")
	require.Equal(t, []string{`"/opt/slot poller/slotpoller" run -service -config "/srv/50%%/$$HOME/\x7b\x7bx}}/\"q\"\\config.yaml"`}, exec)
	require.Equal(t, []string{spec.Executable, "run", "-service", "-config", spec.ConfigPath}, systemdUnquote(t, exec[0], true))
	require.Empty(t, unitLines(unit, "Environment"))
	require.NotContains(t, unit, "{{")
}

// Every value reads back from the unit as it was, by systemd's rules.
func TestSystemdEnvironmentRoundTrips(t *testing.T) {
	values := []string{"", "plain", "two words", `quote " and \ backslash`, "50% and %n", "$HOME ${X}",
		"{{ .Name }}", "tab\there", "new\nline", "trailing space ", "'single'", "ünïcödé", "\x01\x7f"}
	for _, v := range values {
		got := systemdUnquote(t, systemdEnvAssignment("SLOTPOLLER_X", v), false)
		require.Equal(t, []string{"SLOTPOLLER_X=" + v}, got, "%q", v)
		require.NotContains(t, systemdEnvAssignment("SLOTPOLLER_X", v), "{{")
	}
}

// systemdUnquote splits a unit value into words as systemd does for
// ExecStart and Environment (extract_first_word with EXTRACT_UNQUOTE and
// EXTRACT_CUNESCAPE, then specifier expansion, and for ExecStart "$$"),
// for the escapes systemdEscape writes.
func systemdUnquote(t *testing.T, s string, exec bool) []string {
	t.Helper()
	var words []string
	for s = strings.TrimLeft(s, " "); s != ""; s = strings.TrimLeft(s, " ") {
		var w strings.Builder
		quoted := s[0] == '"'
		if quoted {
			s = s[1:]
		}
		for {
			require.NotEmpty(t, s, "unterminated word")
			c := s[0]
			if quoted && c == '"' {
				s = s[1:]
				break
			}
			if !quoted && c == ' ' {
				break
			}
			switch {
			case c == '\\':
				require.Greater(t, len(s), 1)
				switch e := s[1]; e {
				case '\\', '"':
					w.WriteByte(e)
					s = s[2:]
				case 'n':
					w.WriteByte('\n')
					s = s[2:]
				case 't':
					w.WriteByte('\t')
					s = s[2:]
				case 'x':
					n, err := strconv.ParseUint(s[2:4], 16, 8)
					require.NoError(t, err)
					w.WriteByte(byte(n))
					s = s[4:]
				default:
					t.Fatalf("unexpected escape \\%c", e)
				}
			case c == '%':
				require.True(t, strings.HasPrefix(s, "%%"), "a lone %% is a specifier: %q", s)
				w.WriteByte('%')
				s = s[2:]
			case c == '$' && exec:
				require.True(t, strings.HasPrefix(s, "$$"), "a lone $ is a variable: %q", s)
				w.WriteByte('$')
				s = s[2:]
			default:
				w.WriteByte(c)
				s = s[1:]
			}
			if !quoted && s == "" {
				break
			}
		}
		words = append(words, w.String())
	}
	return words
}

func TestSystemdUnitRefusesABadSpec(t *testing.T) {
	spec := testSpec()
	spec.ConfigPath = "config.yaml"
	_, err := SystemdUnit(spec)
	require.ErrorContains(t, err, "not absolute")

	spec = testSpec()
	spec.Env = append(spec.Env, EnvVar{Name: "BAD NAME", Value: "x"})
	_, err = SystemdUnit(spec)
	require.ErrorContains(t, err, "not an environment variable name")

	spec = testSpec()
	spec.StopBound = 0
	_, err = SystemdUnit(spec)
	require.ErrorContains(t, err, "stop bound")
}

// systemd-analyze, where it is installed, reads the unit without warnings.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	dir := t.TempDir()
	spec := testSpec()
	spec.Executable = filepath.Join(dir, "slot poller")
	require.NoError(t, os.WriteFile(spec.Executable, []byte("#!/bin/sh\n"), 0o755))
	unit, err := SystemdUnit(spec)
	require.NoError(t, err)
	path := filepath.Join(dir, ServiceName+".service")
	require.NoError(t, os.WriteFile(path, []byte(unit), 0o644))
	out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput()
	if err != nil && !strings.Contains(string(out), ServiceName) {
		t.Skipf("systemd-analyze verify cannot run here: %v: %s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		// Lines about the host (no systemd running, missing targets) are
		// not about the unit.
		if strings.Contains(l, ServiceName+".service:") {
			t.Errorf("systemd-analyze: %s", l)
		}
	}
}

func TestServiceConfigCarriesTheSpec(t *testing.T) {
	spec := testSpec()
	cfg, err := serviceConfig(spec)
	require.NoError(t, err)
	unit, err := SystemdUnit(spec)
	require.NoError(t, err)
	require.Equal(t, ServiceName, cfg.Name)
	require.Equal(t, spec.Executable, cfg.Executable)
	require.Equal(t, []string{"run", "-service", "-config", spec.ConfigPath}, cfg.Arguments)
	require.Equal(t, map[string]string{"SLOTPOLLER_NODE_NAME": "web-01", "SLOTPOLLER_DATABASE_DSN": spec.Env[1].Value}, cfg.EnvVars)
	require.Equal(t, unit, cfg.Option["SystemdScript"])
	require.Equal(t, "restart", cfg.Option["OnFailure"])
}

func TestRightsErrorSaysRunAsRootOrAdministrator(t *testing.T) {
	err := rightsError("install", "linux", 1000)
	require.ErrorIs(t, err, ErrPrivileges)
	require.ErrorContains(t, err, "run as root/Administrator")
	require.ErrorContains(t, err, "sudo -E", "sudo alone would drop the SLOTPOLLER_* variables install carries")
	require.ErrorContains(t, rightsError("uninstall", "darwin", 501), "sudo slotpoller uninstall")
	require.NoError(t, rightsError("install", "linux", 0))
	require.NoError(t, rightsError("install", "windows", -1), "the service manager decides on Windows")

	denied := explain("install", &fs.PathError{Op: "open", Path: systemdUnitPath(ServiceName), Err: fs.ErrPermission})
	require.ErrorIs(t, denied, ErrPrivileges)
	require.ErrorContains(t, denied, "run as root/Administrator")
	require.ErrorIs(t, explain("uninstall", errors.New("Access is denied.")), ErrPrivileges)
	other := explain("start", errors.New("exit status 5"))
	require.NotErrorIs(t, other, ErrPrivileges)
	require.EqualError(t, other, "cannot start the service: exit status 5")
}

func TestServiceStateString(t *testing.T) {
	for want, st := range map[string]ServiceState{
		"installed, running (linux-systemd)":                   {Platform: "linux-systemd", Installed: true, Running: true, State: StateRunning},
		"installed, stopped (windows-service)":                 {Platform: "windows-service", Installed: true, State: StateStopped},
		"not installed (linux-systemd)":                        {Platform: "linux-systemd", State: StateNotInstalled},
		"state unknown: no service manager (unix-systemv)":     {Platform: "unix-systemv", State: StateUnknown, Error: "no service manager"},
		fmt.Sprintf("installed, %s (linux-systemd)", "failed"): {Platform: "linux-systemd", Installed: true, State: StateFailed},
	} {
		require.Equal(t, want, st.String())
	}
}
