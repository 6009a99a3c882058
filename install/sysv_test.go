package install

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The System V init script and the environment file, rendered without
// root. The real install, start, stop and uninstall is in
// sysv_linux_test.go.

// awkward are values that a shell, a template engine or a line-based
// file could mangle.
var awkward = []string{"", "plain", "two words", `quote " and \ backslash`, "it's", `'`, "''", "50% and %n",
	"$HOME ${X} $(id) `id`", "{{ .Name }}", "{", "tab\there", "trailing space ", " leading", "ünïcödé",
	"host=127.0.0.1 port=5432 dbname=farm user=postgres password='p w\"$x\\'", "a=b=c", "#not a comment",
	"farm:p&ss(w)|rd;x@tcp(db:3306)/farm?parseTime=true&loc=UTC"}

func TestSysvScriptHoldsNoEnvironment(t *testing.T) {
	spec := testSpec()
	spec.EnvFile = "/etc/slotpoller/slotpoller.env"
	script, err := SysvScript(spec)
	require.NoError(t, err)
	for _, e := range spec.Env {
		require.NotContains(t, script, e.Value, "the environment is in the environment file, not in the 0755 script")
	}
	require.NotContains(t, script, "{{", "kardianos/service renders the script again: no action may remain")
	require.Contains(t, script, "\nstop_timeout=35\n", "the stop timeout install prints: the program's bound + 5s")
	require.Contains(t, script, `'/usr/local/bin/slotpoller'`)
	require.Contains(t, script, `'run' '-service' '-config' '/etc/slotpoller/config.yaml' '-env-file' '/etc/slotpoller/slotpoller.env'`)
	require.Contains(t, script, "\npid_file='/var/run/slotpoller.pid'\n")
	require.Contains(t, script, "\nlog_file='/var/log/slotpoller.log'\n")
	require.Contains(t, script, "# Provides:          slotpoller\n")

	if sh, err := exec.LookPath("sh"); err == nil {
		out, err := exec.Command(sh, "-n", "-c", script).CombinedOutput()
		require.NoError(t, err, "sh -n: %s", out)
	}
}

func TestSysvScriptRefusesLineBreaksAndBadNames(t *testing.T) {
	spec := testSpec()
	spec.ConfigPath = "/etc/slot\npoller/config.yaml"
	_, err := SysvScript(spec)
	require.ErrorContains(t, err, "line break")
	spec = testSpec()
	spec.Name = "slot poller"
	_, err = SysvScript(spec)
	require.ErrorContains(t, err, "not a service name")
}

// Every word reads back from the script as it was, by the shell's rules.
func TestShellQuoteRoundTrips(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh here")
	}
	for _, v := range append(awkward, "new\nline", "/srv/50%/$HOME/{{x}}/\"q\"\\config.yaml") {
		q := shellQuote(v)
		require.NotContains(t, q, "{{")
		out, err := exec.Command(sh, "-c", `printf '%s' `+q).Output()
		require.NoError(t, err, "%q", v)
		require.Equal(t, v, string(out), "%s", q)
	}
}

// Every value reads back from the environment file as it was.
func TestEnvFileRoundTrips(t *testing.T) {
	var env []EnvVar
	var want []string
	for i, v := range awkward {
		name := "SLOTPOLLER_X" + strings.Repeat("X", i)
		env = append(env, EnvVar{Name: name, Value: v})
		want = append(want, name+"="+v)
	}
	text, err := EnvFileText("slotpoller", env)
	require.NoError(t, err)
	got, err := ParseEnvFile([]byte(text))
	require.NoError(t, err)
	require.Equal(t, want, got)
}

func TestEnvFileRefusesLineBreaks(t *testing.T) {
	for _, v := range []string{"new\nline", "carriage\rreturn", "nul\x00"} {
		_, err := EnvFileText("slotpoller", []EnvVar{{Name: "SLOTPOLLER_DATABASE_DSN", Value: v, Secret: true}})
		require.ErrorContains(t, err, "SLOTPOLLER_DATABASE_DSN holds a line break or a NUL", "%q", v)
		require.NotContains(t, err.Error(), v, "the value may be a secret")
	}
	_, err := ParseEnvFile([]byte("# comment\n\nSLOTPOLLER_A=1\nnot an assignment\n"))
	require.EqualError(t, err, "line 4: want NAME=value, with NAME made of letters, digits and _")
	_, err = ParseEnvFile([]byte("BAD NAME=1\n"))
	require.ErrorContains(t, err, "line 1")
}

func TestReadEnvFileNamesThePath(t *testing.T) {
	path := t.TempDir() + "/missing.env"
	_, err := ReadEnvFile(path)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, path)
}
