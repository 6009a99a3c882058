package install

// System V init: where Linux runs without systemd, kardianos/service
// installs an init script, /etc/init.d/<name>, with links in /etc/rc?.d.
// slotpoller writes its own script (the SysvScript option) and keeps the
// node's environment out of it: the script is 0755 and is parsed by a
// shell, so the carried variables go to a root-only environment file the
// node reads itself (run -env-file). The script's stop waits as long as
// the stop timeout install prints; uninstall removes the script, its
// links, the pid file, the environment file and the log.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// sysvPlatform is kardianos/service's name for System V init.
const sysvPlatform = "unix-systemv"

// sysvPath is the PATH of the init script and of the node it starts: the
// environment of both is cleared, as at boot.
const sysvPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// SysvScriptPath is the init script of the service name.
func SysvScriptPath(name string) string { return "/etc/init.d/" + name }

// SysvPidFile is where the init script keeps the node's process id.
func SysvPidFile(name string) string { return "/var/run/" + name + ".pid" }

// SysvLogFile is where the node's log goes on System V init: its
// standard output and standard error, appended.
func SysvLogFile(name string) string { return "/var/log/" + name + ".log" }

// sysvScriptTemplate is the init script; SysvScript fills its @KEY@
// fields, each quoted for the shell.
//
//   - The node starts with a cleared environment (PATH only) in its own
//     session, its standard input from /dev/null, its output appended to
//     the log; its environment comes from the environment file.
//   - stop sends SIGTERM and waits up to stop_timeout (the stop timeout
//     install prints: the node's own bound plus a margin) while the node
//     drains, then kills it; the pid file goes either way.
//   - status answers as LSB asks: 0 running, 1 the node died (the pid
//     file is left), 3 stopped.
//   - A node that exits on its own is not started again: System V init
//     does not watch its services.
const sysvScriptTemplate = `#!/bin/sh
### BEGIN INIT INFO
# Provides:          @PROVIDES@
# Required-Start:    $remote_fs $network
# Required-Stop:     $remote_fs $network
# Default-Start:     2 3 4 5
# Default-Stop:      0 1 6
# Short-Description: slotpoller node
# Description:       @DESCRIPTION@
### END INIT INFO
#
# Written by "slotpoller install"; "slotpoller uninstall" removes it, its
# links in /etc/rc?.d, the pid file, the environment file and the log.
# The node reads its environment (which may hold secrets) from its
# environment file, readable by root alone: this script holds none.

name=@NAME@
exe=@EXE@
pid_file=@PID_FILE@
log_file=@LOG_FILE@
# How long stop waits for the node to drain before it kills it, in
# seconds: the node's own stop bound plus a margin.
stop_timeout=@STOP_TIMEOUT@

# running sets pid and succeeds when the pid file names a live node.
running() {
	pid=
	[ -r "$pid_file" ] || return 1
	read -r pid <"$pid_file" || [ -n "$pid" ] || return 1
	case "$pid" in '' | *[!0-9]*) return 1 ;; esac
	[ -r "/proc/$pid/cmdline" ] || return 1
	[ "$(tr '\000' '\n' <"/proc/$pid/cmdline" | head -n 1)" = "$exe" ]
}

nap() {
	sleep 0.2 2>/dev/null || sleep 1
}

do_start() {
	if running; then
		echo "$name is running already (pid $pid)"
		return 0
	fi
	cd / || return 1
	touch "$log_file" && chmod 0640 "$log_file" || return 1
	setsid=
	command -v setsid >/dev/null 2>&1 && setsid=setsid
	env -i @PATH@ $setsid "$exe" @ARGS@ </dev/null >>"$log_file" 2>&1 &
	echo $! >"$pid_file"
	chmod 0644 "$pid_file"
	# Wait until the process is the node, then a moment more: a node
	# that cannot load its configuration exits at once.
	i=0
	while ! running && [ "$i" -lt 25 ]; do
		nap
		i=$((i + 1))
	done
	nap
	nap
	if ! running; then
		rm -f "$pid_file"
		echo "$name did not start: see $log_file" >&2
		tail -n 5 "$log_file" >&2
		return 1
	fi
	echo "$name started (pid $pid), logging to $log_file"
}

do_stop() {
	if ! running; then
		rm -f "$pid_file"
		echo "$name is not running"
		return 0
	fi
	echo "stopping $name (pid $pid): it drains its calls in flight, for at most ${stop_timeout}s"
	kill -TERM "$pid" 2>/dev/null
	deadline=$(($(date +%s) + stop_timeout))
	while running; do
		if [ "$(date +%s)" -ge "$deadline" ]; then
			kill -KILL "$pid" 2>/dev/null
			rm -f "$pid_file"
			echo "$name did not stop within ${stop_timeout}s: killed (its work is left to its leases)" >&2
			return 1
		fi
		nap
	done
	rm -f "$pid_file"
	echo "$name stopped"
}

case "$1" in
start)
	do_start
	;;
stop)
	do_stop
	;;
restart | force-reload)
	do_stop
	do_start
	;;
status)
	if running; then
		echo "Running (pid $pid)"
		exit 0
	fi
	if [ -e "$pid_file" ]; then
		echo "Dead: the node exited without being stopped (see $log_file)"
		exit 1
	fi
	echo "Stopped"
	exit 3
	;;
*)
	echo "Usage: $0 {start|stop|restart|force-reload|status}" >&2
	exit 2
	;;
esac
`

// SysvScript renders the init script for s: what `slotpoller install`
// writes to /etc/init.d/<name> on System V init. s.Env is not in it: set
// s.EnvFile, which the node reads.
func SysvScript(s ServiceSpec) (string, error) {
	if err := s.validate(); err != nil {
		return "", err
	}
	name := s.name()
	for _, p := range []string{s.Executable, s.ConfigPath, s.EnvFile} {
		if strings.ContainsAny(p, "\n\r") {
			return "", fmt.Errorf("service: the path %q holds a line break", p)
		}
	}
	words := s.Arguments()
	for i, w := range words {
		words[i] = shellQuote(w)
	}
	stop := int64((s.ManagerStopTimeout() + time.Second - 1) / time.Second)
	script := strings.NewReplacer(
		"@PROVIDES@", name,
		"@DESCRIPTION@", serviceDescription,
		"@NAME@", shellQuote(name),
		"@EXE@", shellQuote(s.Executable),
		"@PID_FILE@", shellQuote(SysvPidFile(name)),
		"@LOG_FILE@", shellQuote(SysvLogFile(name)),
		"@STOP_TIMEOUT@", strconv.FormatInt(stop, 10),
		"@PATH@", sysvPath,
		"@ARGS@", strings.Join(words, " "),
	).Replace(sysvScriptTemplate)
	// kardianos/service runs the script through its own template engine,
	// which reads "{{" as an action; shellQuote never leaves one.
	if strings.Contains(script, "{{") {
		return "", errors.New("service: the init script would hold \"{{\"")
	}
	return script, nil
}

// shellQuote quotes s as one word for a POSIX shell: in single quotes,
// within which nothing is special. A single quote closes them, is written
// \' and opens them again; a "{" is written \{ the same way, so that no
// "{{" reaches kardianos/service's template engine.
func shellQuote(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for _, r := range s {
		switch r {
		case '\'':
			b.WriteString(`'\''`)
		case '{':
			b.WriteString(`'\{'`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// sysvScript runs the init script of the service name with action, in a
// cleared environment (as at boot, and as service(8) runs it), and
// returns what it printed.
func sysvScript(name, action string) (string, error) {
	cmd := exec.Command(SysvScriptPath(name), action)
	cmd.Env = []string{sysvPath}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	text := strings.TrimSpace(string(out))
	if err != nil {
		if text != "" {
			err = fmt.Errorf("%s %s: %w: %s", SysvScriptPath(name), action, err, text)
		} else {
			err = fmt.Errorf("%s %s: %w", SysvScriptPath(name), action, err)
		}
	}
	return text, err
}

// sysvState asks the init script for the state of the service name.
func sysvState(name string) ServiceState {
	st := ServiceState{Name: name, Platform: sysvPlatform}
	if !exists(SysvScriptPath(name)) {
		st.State = StateNotInstalled
		return st
	}
	st.Installed = true
	out, err := sysvScript(name, "status")
	var exit *exec.ExitError
	code := 0
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		st.State, st.Error = StateUnknown, err.Error()
		return st
	}
	switch {
	case code == 0 && strings.HasPrefix(out, "Running"):
		st.Running, st.State = true, StateRunning
	case code == 3 || strings.HasPrefix(out, "Stopped"):
		// 3 is LSB's "not running"; an init script written by an earlier
		// version printed "Stopped" with status 1.
		st.State = StateStopped
	case code == 1 && strings.HasPrefix(out, "Dead"):
		st.State = StateFailed
	default:
		st.State, st.Error = StateUnknown, fmt.Sprintf("%s status answered %q (exit status %d)", SysvScriptPath(name), out, code)
	}
	return st
}

// sysvLeftovers are the files a System V install of the service name
// leaves besides its script: the links in /etc/rc?.d that point to the
// script, the pid file, the environment file, and the log (with the
// ".err" log of scripts written by earlier versions).
func sysvLeftovers(name string) []string {
	var paths []string
	links, _ := filepath.Glob("/etc/rc[0-6S].d/[SK][0-9][0-9]" + name)
	for _, l := range links {
		fi, err := os.Lstat(l)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			continue
		}
		if target, err := os.Readlink(l); err == nil && filepath.Base(target) == name {
			paths = append(paths, l)
		}
	}
	for _, p := range []string{SysvPidFile(name), EnvFilePath(name), SysvLogFile(name), "/var/log/" + name + ".err"} {
		if _, err := os.Lstat(p); err == nil {
			paths = append(paths, p)
		}
	}
	return paths
}

// sysvRemove removes the init script of the service name and everything
// sysvLeftovers lists, and the environment files' folder when it is left
// empty. It returns what it removed.
func sysvRemove(name string) ([]string, error) {
	var removed []string
	var errs []error
	for _, p := range append([]string{SysvScriptPath(name)}, sysvLeftovers(name)...) {
		if err := os.Remove(p); err == nil {
			removed = append(removed, p)
		} else if !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(EnvFileDir); err == nil {
		removed = append(removed, EnvFileDir)
	}
	return removed, errors.Join(errs...)
}
