package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/install"
	"github.com/slotpoller/slotpoller/service"
)

func cmdInstall(args []string, stdout, stderr io.Writer) error {
	fs, cfgPath := newFlags("install", stdout)
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := install.CheckRights("install"); err != nil {
		return err
	}
	path := *cfgPath
	if path == "" {
		path = "config.yaml"
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if _, err := os.Stat(abs); err != nil {
		return fmt.Errorf("the service runs `slotpoller run -service -config %s`, and there is no config file there (%v): write one (config.yaml in the release is a commented example) or pass -config PATH", abs, err)
	}
	environ := os.Environ()
	cfg, src, err := config.LoadWithSources(abs, true, environ)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find this program's path: %w", err)
	}
	if exe, err = filepath.Abs(exe); err != nil {
		return err
	}
	if strings.Contains(exe, "go-build") {
		return fmt.Errorf("%s is a temporary build (go run): build slotpoller, put the binary where it stays, and install from it", exe)
	}
	spec := install.ServiceSpec{Executable: exe, ConfigPath: abs, Env: carriedEnv(cfg, src, environ),
		StopBound: service.StopTimeout(cfg)}
	inst, err := install.InstallService(spec)
	if err != nil {
		return err
	}
	writeInstalled(stdout, inst.Spec, cfg)
	writeInstalledFiles(stdout, inst)
	fmt.Fprintln(stdout, "start it with: slotpoller start")
	return nil
}

// writeInstalled tells what install registered. Secret values (the DSN,
// the signing key) are never printed.
func writeInstalled(w io.Writer, spec install.ServiceSpec, cfg config.Config) {
	words := append([]string{spec.Executable}, spec.Arguments()...)
	for i, word := range words {
		words[i] = quoteWord(word)
	}
	fmt.Fprintf(w, "installed service %q: %s\n", install.ServiceName, strings.Join(words, " "))
	for _, e := range spec.Env {
		value := e.Value
		if e.Secret {
			value = "(hidden)"
		}
		fmt.Fprintf(w, "  environment %s=%s\n", e.Name, value)
	}
	stop, drain, ttl := spec.ManagerStopTimeout(), time.Duration(cfg.Jobs.DrainTimeout), time.Duration(cfg.Checkin.TTL)
	fmt.Fprintf(w, "  stop timeout %v (jobs.drain_timeout %v + checkin.ttl %v + %v)\n",
		stop, config.Duration(drain), config.Duration(ttl), config.Duration(stop-drain-ttl))
}

// writeInstalledFiles tells which files install wrote and where the
// node's log goes.
func writeInstalledFiles(w io.Writer, inst install.Installed) {
	for _, f := range inst.Files {
		fmt.Fprintf(w, "  wrote %s\n", f)
	}
	if inst.Log != "" {
		fmt.Fprintf(w, "  log %s\n", inst.Log)
	}
	for _, n := range inst.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

func quoteWord(s string) string {
	switch {
	case strings.ContainsRune(s, '"'):
		return strconv.Quote(s)
	case s == "" || strings.ContainsAny(s, " \t"):
		return `"` + s + `"`
	}
	return s
}

// carriedEnv lists the environment variables that set a key of the
// configuration: the node's environment overrides, which the service
// must run with too.
func carriedEnv(cfg config.Config, src config.Sources, environ []string) []install.EnvVar {
	values := map[string]string{}
	for _, kv := range environ {
		if name, value, ok := strings.Cut(kv, "="); ok {
			values[name] = value
		}
	}
	var env []install.EnvVar
	for _, s := range cfg.Settings(src) {
		if s.Source.Kind == config.FromEnv {
			env = append(env, install.EnvVar{Name: s.Source.Where, Value: values[s.Source.Where], Secret: config.IsSecret(s.Key)})
		}
	}
	return env
}

func cmdUninstall(args []string, stdout, stderr io.Writer) error {
	fs := newBareFlags("uninstall", stdout)
	if err := fs.parse(args); err != nil {
		return err
	}
	removed, err := install.UninstallService()
	for _, p := range removed {
		fmt.Fprintf(stdout, "removed %s\n", p)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "uninstalled service %q\n", install.ServiceName)
	return nil
}

func cmdControl(verb string, args []string, stdout, stderr io.Writer) error {
	fs := newBareFlags(verb, stdout)
	if err := fs.parse(args); err != nil {
		return err
	}
	done, err := install.ControlService(verb)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "service %q %s\n", install.ServiceName, done)
	return nil
}
