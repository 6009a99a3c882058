package install

// The environment file: where a service manager that cannot hold the
// node's environment safely (System V init, whose script is a 0755 shell
// file) gets it instead. `slotpoller install` writes the carried
// variables to a file that root alone reads; the node reads it itself at
// start (`slotpoller run -env-file PATH`), so no shell ever parses a value
// and no secret sits in a world-readable script.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EnvFileDir is the folder of the environment files of the services
// installed on System V init.
const EnvFileDir = "/etc/slotpoller"

// EnvFilePath is where install writes the environment of the service
// named name when the service manager does not carry it.
func EnvFilePath(name string) string { return EnvFileDir + "/" + name + ".env" }

const envFileHeader = `# The environment of the service %s, written by ` + "`slotpoller install`" + ` and
# read by the node at start (slotpoller run -env-file). Root alone may read
# it: it can hold the database password and the signing key.
#
# One NAME=value a line. The value is everything after the first "=" up
# to the end of the line, taken literally: no quotes, no escapes, no
# variables (spaces, quotes, "$" and backslashes are part of the value).
# Lines that start with "#" and empty lines are skipped.
`

// EnvFileText renders env as an environment file for the service name.
// A value that holds a line break or a NUL cannot be written and is
// refused.
func EnvFileText(name string, env []EnvVar) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, envFileHeader, name)
	for _, e := range env {
		if !validEnvName(e.Name) {
			return "", fmt.Errorf("service: %q is not an environment variable name", e.Name)
		}
		if strings.ContainsAny(e.Value, "\n\r\x00") {
			return "", fmt.Errorf("service: %s holds a line break or a NUL character, which an environment file cannot carry", e.Name)
		}
		b.WriteString(e.Name + "=" + e.Value + "\n")
	}
	return b.String(), nil
}

// ParseEnvFile reads an environment file as EnvFileText writes it: one
// NAME=value a line, the value literal. It returns the variables as
// "NAME=value" strings, in the file's order; an error names the line.
func ParseEnvFile(data []byte) ([]string, error) {
	var env []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, ok := strings.Cut(line, "=")
		if !ok || !validEnvName(name) {
			return nil, fmt.Errorf("line %d: want NAME=value, with NAME made of letters, digits and _", n)
		}
		if strings.ContainsRune(line, 0) {
			return nil, fmt.Errorf("line %d: %s holds a NUL character", n, name)
		}
		env = append(env, line)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return env, nil
}

// ReadEnvFile reads the environment file at path (ParseEnvFile).
func ReadEnvFile(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("environment file: %w", err)
	}
	env, err := ParseEnvFile(data)
	if err != nil {
		return nil, fmt.Errorf("environment file %s: %w", path, err)
	}
	return env, nil
}

// writeEnvFile writes env for the service name to path, readable by root
// alone (0600), replacing nothing: a file already there is an error. Its
// folder is made if missing (0755).
func writeEnvFile(path, name string, env []EnvVar) error {
	text, err := EnvFileText(name, env)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("the environment file %s is there already (left by an earlier install?): remove it, or run `slotpoller uninstall`", path)
		}
		return err
	}
	// The mode of a new file passes through the umask; 0600 is narrower
	// than any umask leaves, but say it outright.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}
