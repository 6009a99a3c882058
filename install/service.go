// Package install is slotpoller's OS service: registering it with
// systemd, System V init or the Windows service manager through
// github.com/kardianos/service, to run `slotpoller run -service -config
// <absolute path>` with the node's environment overrides; starting,
// stopping and querying it; and the adapter (Program) that runs a node
// under the service manager.
//
// Invariants:
//   - Program.Start never blocks and Program.Stop never exits the process:
//     Stop returns within the node's own stop bound (service.StopTimeout),
//     and the service manager waits ManagerStopMargin longer before it
//     kills the process, so a node is never killed while it writes.
//   - A secret environment value is never printed; on Linux it lands only
//     in files root alone can read.
//
// The package wraps the node (it imports service); the node imports
// nothing of it. The database schema, which a node migrates at start, is
// the schema package's, for that reason.
package install

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	kservice "github.com/kardianos/service"
)

// ServiceName is the name of slotpoller's OS service: the systemd unit
// slotpoller.service, the Windows service and event log source slotpoller.
const ServiceName = "slotpoller"

const (
	serviceDescription = "slotpoller node: runs the farm's background jobs from the shared SQL database"

	// ManagerStopMargin is how much longer the service manager waits for a
	// stop than the program's own bound (ServiceSpec.StopBound): the
	// program gives up first and exits, rather than being killed while it
	// writes to the database.
	ManagerStopMargin = 5 * time.Second

	// restartDelay is how long the service manager waits before it starts
	// a node that exited again.
	restartDelay = 5 * time.Second

	// systemdPlatform is kardianos/service's name for systemd.
	systemdPlatform = "linux-systemd"
)

// systemdUnitPath is where kardianos/service writes the system unit of the
// service name.
func systemdUnitPath(name string) string { return "/etc/systemd/system/" + name + ".service" }

// ErrPrivileges means a service operation was refused for lack of rights.
var ErrPrivileges = errors.New("needs administrative rights: run as root/Administrator")

// EnvVar is one environment variable the service runs with.
type EnvVar struct {
	Name  string
	Value string
	// Secret values are never printed; on Linux a unit that holds one is
	// readable by root only.
	Secret bool
}

// ServiceSpec is what the OS service runs.
type ServiceSpec struct {
	// Name is the service's name; "" means ServiceName. Tests install
	// under names of their own.
	Name string
	// Executable is the absolute path of the slotpoller binary.
	Executable string
	// ConfigPath is the absolute path of the config file, passed as
	// `run -service -config`.
	ConfigPath string
	// Env are the SLOTPOLLER_* variables the node runs with (its
	// environment overrides at install time).
	Env []EnvVar
	// EnvFile, when set, is the root-only file the node reads Env from
	// (run -env-file): install sets it where the service manager cannot
	// carry the environment safely (System V init) and writes the file.
	// Otherwise the service manager carries Env (systemd's Environment=,
	// the Windows service's registry key).
	EnvFile string
	// StopBound is how long the program takes at most to stop
	// (service.StopTimeout: jobs.drain_timeout + checkin.ttl + 17s); the
	// service manager waits ManagerStopMargin longer before it kills the
	// process.
	StopBound time.Duration
}

// Arguments are the command-line arguments of the service's process:
// `run -service` says that the service manager runs it, so that the
// process never has to guess (Windows' guess, a parent services.exe with
// no interactive desktop, is wrong under other service managers, and a
// service that guesses "console" never reports to its manager).
func (s ServiceSpec) Arguments() []string {
	args := []string{"run", "-service", "-config", s.ConfigPath}
	if s.EnvFile != "" {
		args = append(args, "-env-file", s.EnvFile)
	}
	return args
}

func (s ServiceSpec) name() string {
	if s.Name == "" {
		return ServiceName
	}
	return s.Name
}

// validServiceName: a name that is safe in a path and a shell glob.
func validServiceName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// ManagerStopTimeout is how long the service manager waits for a stop
// before it kills the process: systemd's TimeoutStopSec, and on Windows
// the pre-shutdown timeout (how long a system shutdown waits).
func (s ServiceSpec) ManagerStopTimeout() time.Duration {
	return s.StopBound + ManagerStopMargin
}

func (s ServiceSpec) validate() error {
	var errs []error
	if !validServiceName(s.name()) {
		errs = append(errs, fmt.Errorf("service: %q is not a service name (letters, digits, - and _)", s.name()))
	}
	if s.EnvFile != "" && !filepath.IsAbs(s.EnvFile) {
		errs = append(errs, fmt.Errorf("service: the environment file path %q is not absolute", s.EnvFile))
	}
	if !filepath.IsAbs(s.Executable) {
		errs = append(errs, fmt.Errorf("service: the executable path %q is not absolute", s.Executable))
	}
	if !filepath.IsAbs(s.ConfigPath) {
		errs = append(errs, fmt.Errorf("service: the config path %q is not absolute", s.ConfigPath))
	}
	if s.StopBound <= 0 {
		errs = append(errs, fmt.Errorf("service: the stop bound %v must be positive", s.StopBound))
	}
	for _, e := range s.Env {
		if !validEnvName(e.Name) {
			errs = append(errs, fmt.Errorf("service: %q is not an environment variable name", e.Name))
		}
		if strings.ContainsRune(e.Value, 0) {
			errs = append(errs, fmt.Errorf("service: %s holds a NUL character", e.Name))
		}
	}
	return errors.Join(errs...)
}

func validEnvName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

func (s ServiceSpec) sortedEnv() []EnvVar {
	env := append([]EnvVar(nil), s.Env...)
	sort.Slice(env, func(i, j int) bool { return env[i].Name < env[j].Name })
	return env
}

func (s ServiceSpec) secret() bool {
	for _, e := range s.Env {
		if e.Secret {
			return true
		}
	}
	return false
}

// systemdUnitTemplate is the unit that `slotpoller install` writes on
// systemd (kardianos/service's SystemdScript option). Its @KEY@ fields are
// filled by SystemdUnit, each escaped for systemd.
//
//   - Restart=always with RestartSec: a node that gave up (a schema newer
//     than the binary, its name in use) or crashed comes back after a pause.
//   - TimeoutStopSec: the program's own stop bound (service.StopTimeout)
//     plus a margin, so that systemd does not kill a node while it
//     drains, leaves the registry and gives back its work.
//   - Logs go to standard error, which systemd hands to journald.
const systemdUnitTemplate = `[Unit]
Description=@DESCRIPTION@
Documentation=https://github.com/slotpoller/slotpoller/blob/main/docs/service.md
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
ExecStart=@EXEC_START@
Restart=always
RestartSec=@RESTART_SEC@
TimeoutStopSec=@TIMEOUT_STOP_SEC@
KillMode=mixed
@ENVIRONMENT@
[Install]
WantedBy=multi-user.target
`

// SystemdUnit renders the systemd unit for s: what `slotpoller install`
// writes to /etc/systemd/system/slotpoller.service.
func SystemdUnit(s ServiceSpec) (string, error) {
	if err := s.validate(); err != nil {
		return "", err
	}
	words := append([]string{s.Executable}, s.Arguments()...)
	for i, w := range words {
		words[i] = systemdExecWord(w)
	}
	var env strings.Builder
	for _, e := range s.sortedEnv() {
		env.WriteString("Environment=" + systemdEnvAssignment(e.Name, e.Value) + "\n")
	}
	unit := strings.NewReplacer(
		"@DESCRIPTION@", serviceDescription,
		"@EXEC_START@", strings.Join(words, " "),
		"@RESTART_SEC@", strconv.Itoa(int(restartDelay/time.Second)),
		"@TIMEOUT_STOP_SEC@", strconv.FormatInt(int64((s.ManagerStopTimeout()+time.Second-1)/time.Second), 10),
		"@ENVIRONMENT@", env.String(),
	).Replace(systemdUnitTemplate)
	// kardianos/service runs the script through its own template engine,
	// which reads "{{" as an action; the escapes above never leave one.
	if strings.Contains(unit, "{{") {
		return "", errors.New("service: the systemd unit would hold \"{{\"")
	}
	return unit, nil
}

// systemdExecWord writes one word of ExecStart: quoted when it holds
// anything but plain path characters, C-escaped inside the quotes, with
// "%" (a specifier) doubled and "$" (a variable) doubled.
func systemdExecWord(w string) string {
	plain := w != ""
	for i := 0; i < len(w); i++ {
		if !isPlainUnitChar(w[i]) {
			plain = false
			break
		}
	}
	if plain {
		return w
	}
	return `"` + systemdEscape(w, true) + `"`
}

// systemdEnvAssignment writes NAME=value for Environment=, quoted as a
// whole. Variables are not expanded there, so "$" stays as it is;
// specifiers are, so "%" is doubled.
func systemdEnvAssignment(name, value string) string {
	return `"` + systemdEscape(name+"="+value, false) + `"`
}

func isPlainUnitChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("/._-+,:=@", c) >= 0
}

// systemdEscape escapes s for the inside of a double-quoted word of a unit
// file: backslash and quote, control characters and "{" (for
// kardianos/service's template engine) as C escapes, "%" as "%%", and, in
// ExecStart, "$" as "$$".
func systemdEscape(s string, exec bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b.WriteString(`\\`)
		case c == '"':
			b.WriteString(`\"`)
		case c == '%':
			b.WriteString("%%")
		case c == '$' && exec:
			b.WriteString("$$")
		case c == '{':
			b.WriteString(`\x7b`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// serviceConfig is the kardianos/service configuration for s.
func serviceConfig(s ServiceSpec) (*kservice.Config, error) {
	unit, err := SystemdUnit(s)
	if err != nil {
		return nil, err
	}
	script, err := SysvScript(s)
	if err != nil {
		return nil, err
	}
	var env map[string]string
	if s.EnvFile == "" {
		env = make(map[string]string, len(s.Env))
		for _, e := range s.Env {
			env[e.Name] = e.Value
		}
	}
	return &kservice.Config{
		Name:        s.name(),
		DisplayName: s.name(),
		Description: serviceDescription,
		Executable:  s.Executable,
		Arguments:   s.Arguments(),
		EnvVars:     env,
		Option: kservice.KeyValue{
			"SystemdScript": unit,
			"SysvScript":    script,
			// Windows: start at boot; restart a node that exited
			// without being asked to (configureManager extends this to
			// a node that reports its service stopped with an error).
			"StartType":              "automatic",
			"OnFailure":              "restart",
			"OnFailureDelayDuration": restartDelay.String(),
			"OnFailureResetPeriod":   3600,
		},
	}, nil
}

// NewService returns slotpoller's OS service running prg, for `slotpoller
// run` under the service manager. options are kardianos/service options
// (RunWait, for instance).
func NewService(prg kservice.Interface, options kservice.KeyValue) (kservice.Service, error) {
	return kservice.New(prg, &kservice.Config{Name: ServiceName, DisplayName: ServiceName,
		Description: serviceDescription, Option: options})
}

// noProgram stands in for the program when the service is only controlled.
type noProgram struct{}

func (noProgram) Start(kservice.Service) error { return nil }
func (noProgram) Stop(kservice.Service) error  { return nil }

func controlled(name string) (kservice.Service, error) {
	s, err := kservice.New(noProgram{}, &kservice.Config{Name: name, DisplayName: name, Description: serviceDescription})
	if err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	return withSCM(s, name), nil
}

// scmController is a service that the Windows service manager controls
// directly (scm_windows.go: withSCM), rather than through
// kardianos/service: its states between running and stopped, and waits
// that end.
type scmController interface {
	scmState() ServiceState
	scmControl(action string) (done string, err error)
}

// Platform is the service manager install uses here, as kardianos/service
// names it: linux-systemd, unix-systemv, windows-service, ...
func Platform() string { return kservice.ChosenSystem().String() }

// carriesEnv tells whether the service manager of platform holds the
// node's environment itself, safely: systemd's unit (made root-only when
// it holds a secret) and the Windows service's registry key. Elsewhere
// (System V init, whose script is world-readable shell) the node reads
// it from an environment file.
func carriesEnv(platform string) bool {
	return platform == systemdPlatform || platform == "windows-service"
}

// Installed is what InstallService registered.
type Installed struct {
	// Spec is the service as installed: on System V init with its
	// EnvFile.
	Spec     ServiceSpec
	Platform string
	// Files are the files install wrote, each with what it is and its
	// mode ("/etc/init.d/slotpoller (init script, 0755)").
	Files []string
	// Log says where the node's log goes.
	Log string
	// Notes are what the service manager would not take, installed
	// without it ("the recovery actions apply to crashes only: ...").
	Notes []string
}

// InstallService registers the service with the OS service manager. It
// needs root or Administrator rights; without them it fails with
// ErrPrivileges.
func InstallService(spec ServiceSpec) (Installed, error) {
	if err := CheckRights("install"); err != nil {
		return Installed{}, err
	}
	name := spec.name()
	inst := Installed{Platform: Platform()}
	if !carriesEnv(inst.Platform) && len(spec.Env) > 0 {
		spec.EnvFile = EnvFilePath(name)
	}
	inst.Spec = spec
	cfg, err := serviceConfig(spec)
	if err != nil {
		return inst, err
	}
	s, err := kservice.New(noProgram{}, cfg)
	if err != nil {
		return inst, fmt.Errorf("service: %w", err)
	}
	s = withSCM(s, name)
	if st := stateOf(s, name); st.Installed {
		return inst, fmt.Errorf("the service %q is already installed (%s): run `slotpoller uninstall` first", name, st)
	}
	if spec.EnvFile != "" {
		// The environment file first: a service is never installed
		// without the environment it runs with.
		if err := writeEnvFile(spec.EnvFile, name, spec.Env); err != nil {
			return inst, fmt.Errorf("cannot write the service's environment file: %w", err)
		}
		inst.Files = append(inst.Files, spec.EnvFile+" (environment, 0600: root only)")
	}
	if err := s.Install(); err != nil {
		if spec.EnvFile != "" {
			os.Remove(spec.EnvFile)
		}
		return inst, explain("install", err)
	}
	notes, err := configureManager(spec)
	inst.Notes = notes
	if err != nil {
		return inst, fmt.Errorf("the service is installed, but its stop timeout, recovery or error control could not be set: %w", err)
	}
	switch inst.Platform {
	case systemdPlatform:
		mode := "0644"
		if spec.secret() {
			// The unit carries a secret: let root alone read it.
			if err := os.Chmod(systemdUnitPath(name), 0o600); err != nil {
				return inst, fmt.Errorf("the service is installed, but its unit holds a secret and could not be made readable by root only: %w", err)
			}
			mode = "0600: root only, it holds a secret"
		}
		inst.Files = append([]string{systemdUnitPath(name) + " (unit, " + mode + ")"}, inst.Files...)
		inst.Log = "journald: journalctl -u " + name
	case sysvPlatform:
		inst.Files = append([]string{SysvScriptPath(name) + " (init script, 0755; no secret), links in /etc/rc?.d"}, inst.Files...)
		inst.Log = SysvLogFile(name) + " (standard output and error, appended; removed by uninstall)"
	case "windows-service":
		inst.Log = "the Windows Event Log, log Application, source " + name
	}
	return inst, nil
}

// UninstallService stops the service if it runs and removes it from the
// OS service manager. It needs root or Administrator rights. On System V
// init it also removes the links in /etc/rc?.d, the pid file, the
// environment file and the log, and it returns what it removed.
func UninstallService() ([]string, error) {
	return uninstallService(ServiceName)
}

func uninstallService(name string) ([]string, error) {
	if err := CheckRights("uninstall"); err != nil {
		return nil, err
	}
	s, err := controlled(name)
	if err != nil {
		return nil, err
	}
	st := stateOf(s, name)
	if st.State == StateNotInstalled {
		if st.Platform == sysvPlatform {
			// What an earlier uninstall left behind goes now.
			if removed, err := sysvRemove(name); len(removed) > 0 || err != nil {
				return removed, err
			}
		}
		return nil, fmt.Errorf("the service %q is not installed", name)
	}
	if st.Running || st.State == StateStarting || st.State == StateStopping {
		if err := control(s, name, "stop"); err != nil {
			return nil, err
		}
	}
	if st.Platform == sysvPlatform {
		removed, err := sysvRemove(name)
		if err != nil {
			return removed, fmt.Errorf("cannot uninstall the service: %w", err)
		}
		return removed, nil
	}
	if err := s.Uninstall(); err != nil {
		return nil, explain("uninstall", err)
	}
	return nil, nil
}

// ControlService starts, stops or restarts the installed service: action
// is "start", "stop" or "restart"; done says what happened ("started",
// "stopped", "restarted"; on Windows also "already running", "already
// stopped"). A stop returns once the node has stopped (or the service
// manager gave up waiting); a restart of a stopped service starts it. On
// Windows, as systemctl does, a start of a running service and a stop of
// a stopped one change nothing and succeed, a second stop during a drain
// waits for it, and every wait is bounded (a stop by the pre-shutdown
// timeout install set).
func ControlService(action string) (done string, err error) {
	s, err := controlled(ServiceName)
	if err != nil {
		return "", err
	}
	return controlDone(s, ServiceName, action)
}

func controlService(name, action string) error {
	s, err := controlled(name)
	if err != nil {
		return err
	}
	return control(s, name, action)
}

func control(s kservice.Service, name, action string) error {
	_, err := controlDone(s, name, action)
	return err
}

func controlDone(s kservice.Service, name, action string) (string, error) {
	st := stateOf(s, name)
	if st.State == StateNotInstalled {
		return "", fmt.Errorf("the service %q is not installed: run `slotpoller install` first", name)
	}
	done, ok := map[string]string{"start": "started", "stop": "stopped", "restart": "restarted"}[action]
	if !ok {
		return "", fmt.Errorf("service: unknown action %q", action)
	}
	if c, ok := s.(scmController); ok {
		done, err := c.scmControl(action)
		if err != nil {
			return "", explain(action, err)
		}
		return done, nil
	}
	if st.Platform == sysvPlatform {
		// The init script itself: kardianos/service runs it through
		// service(8) and keeps none of what it says.
		if _, err := sysvScript(name, action); err != nil {
			return "", explain(action, err)
		}
		return done, nil
	}
	var err error
	switch action {
	case "start":
		err = s.Start()
	case "stop":
		err = s.Stop()
	case "restart":
		// A stopped service is started, as systemctl restart does: on
		// Windows, kardianos/service's Restart stops first, which fails on
		// a service that does not run ("Service not active"). A service
		// that stopped between the status and the restart is started too.
		if st.State == StateStopped {
			err = s.Start()
			break
		}
		if err = s.Restart(); err != nil && stateOf(s, name).State == StateStopped {
			err = s.Start()
		}
	}
	if err != nil {
		return "", explain(action, err)
	}
	return done, nil
}

// The states of ServiceState.State.
const (
	StateRunning      = "running"
	StateStopped      = "stopped"
	StateFailed       = "failed" // StateStarting and StateStopping: scm.go
	StateNotInstalled = "not installed"
	StateUnknown      = "unknown"
)

// ServiceState is the local OS service as the service manager sees it.
type ServiceState struct {
	Name      string `json:"name"`
	Platform  string `json:"platform"` // linux-systemd, windows-service, ...
	Installed bool   `json:"installed"`
	Running   bool   `json:"running"`
	State     string `json:"state"`           // running, stopped, failed, starting, stopping, not installed, unknown
	Error     string `json:"error,omitempty"` // why the state is unknown
}

// String says "installed, running (linux-systemd)", "not installed
// (windows-service)" or why the state is unknown.
func (s ServiceState) String() string {
	var what string
	switch s.State {
	case StateRunning, StateStopped, StateFailed, StateStarting, StateStopping:
		what = "installed, " + s.State
	case StateNotInstalled:
		what = StateNotInstalled
	default:
		what = "state unknown"
		if s.Error != "" {
			what += ": " + s.Error
		}
	}
	if s.Platform != "" {
		what += " (" + s.Platform + ")"
	}
	return what
}

// QueryService asks the service manager whether the service is installed
// and running. It needs no special rights.
func QueryService() ServiceState {
	return queryService(ServiceName)
}

func queryService(name string) ServiceState {
	s, err := controlled(name)
	if err != nil {
		return ServiceState{Name: name, State: StateUnknown, Error: err.Error()}
	}
	return stateOf(s, name)
}

func stateOf(s kservice.Service, name string) ServiceState {
	if s.Platform() == sysvPlatform {
		// The init script's status, read by its exit status: through
		// service(8), kardianos/service takes a stopped service for an
		// error.
		return sysvState(name)
	}
	if c, ok := s.(scmController); ok {
		return c.scmState()
	}
	st := ServiceState{Name: name, Platform: s.Platform()}
	status, err := s.Status()
	switch {
	case errors.Is(err, kservice.ErrNotInstalled):
		st.State = StateNotInstalled
	case err != nil && strings.Contains(err.Error(), "failed state"): // systemd: the unit failed
		st.Installed, st.State = true, StateFailed
	case err != nil:
		st.State, st.Error = StateUnknown, err.Error()
	case status == kservice.StatusRunning:
		st.Installed, st.Running, st.State = true, true, StateRunning
	case status == kservice.StatusStopped:
		st.Installed, st.State = true, StateStopped
	default:
		st.State = StateUnknown
	}
	return st
}

// CheckRights refuses op ("install", "uninstall") early, before anything
// is changed, where the rights can be read: not root on a Unix system. On
// Windows the service manager refuses, and the error says why.
func CheckRights(op string) error {
	return rightsError(op, runtime.GOOS, os.Geteuid())
}

func rightsError(op, goos string, euid int) error {
	if goos == "windows" || euid == 0 {
		return nil
	}
	hint := "sudo slotpoller " + op
	if op == "install" {
		// sudo drops the environment, and with it the overrides that
		// install carries into the service.
		hint = "sudo -E slotpoller install ...: -E keeps the SLOTPOLLER_* variables the service should carry"
	}
	return fmt.Errorf("cannot %s the service: %w (e.g. %s)", op, ErrPrivileges, hint)
}

// explain turns a refusal for lack of rights into ErrPrivileges, keeping
// the service manager's words.
func explain(op string, err error) error {
	msg := strings.ToLower(err.Error())
	if errors.Is(err, fs.ErrPermission) || strings.Contains(msg, "access denied") ||
		strings.Contains(msg, "access is denied") || strings.Contains(msg, "authentication required") ||
		strings.Contains(msg, "permission denied") {
		return fmt.Errorf("cannot %s the service: %w (%v)", op, ErrPrivileges, err)
	}
	return fmt.Errorf("cannot %s the service: %w", op, err)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
