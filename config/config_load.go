package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
)

// Load builds the node's configuration: defaults, then the YAML file at path,
// then environment overrides from environ (os.Environ format, "K=V"), then
// derived defaults, then Validate.
//
// When explicit is false a missing file (or an empty path) means defaults;
// when explicit is true a missing file is an error. Unknown keys in the file
// and unknown SLOTPOLLER_<SECTION>_<KEY> variables of a known section are
// errors; variables whose section is not a config section (such as
// SLOTPOLLER_TEST_POSTGRES_DSN) are ignored. Derived defaults: an empty
// sqlite DSN becomes slotpoller.db beside the config file (the working
// directory without a path) and a relative sqlite path is taken from there;
// checkin.ttl becomes three heartbeats unless the file or the environment
// sets it; an empty node.name becomes the host name. All problems found are
// reported together (errors.Join).
func Load(path string, explicit bool, environ []string) (Config, error) {
	cfg, _, err := LoadWithSources(path, explicit, environ)
	return cfg, err
}

// LoadWithSources is Load with command-line flags as the last layer
// (defaults < file < environment < flags), and it reports where each key's
// value came from: every key set by the file, the environment or a flag,
// and the defaults Load computes (database.dsn, checkin.ttl, node.name).
// Keys missing from the Sources kept their plain default; Sources.Of says
// so.
func LoadWithSources(path string, explicit bool, environ []string, flags ...Flag) (Config, Sources, error) {
	cfg := Default()
	src := Sources{} // key path -> where its value came from

	if path == "" && explicit {
		return Config{}, nil, errors.New("config: no config file path given")
	}

	var errs []error
	if path != "" {
		data, err := readConfigFile(path)
		switch {
		case err == nil:
			errs = append(errs, decodeYAML(&cfg, path, data, src)...)
		case errors.Is(err, fs.ErrNotExist) && !explicit:
			// No file: defaults and environment only.
		default:
			return Config{}, nil, fmt.Errorf("config: %w", err)
		}
	}
	errs = append(errs, applyEnv(&cfg, environ, src)...)
	errs = append(errs, applyFlags(&cfg, flags, src)...)
	if len(errs) > 0 {
		return Config{}, nil, errors.Join(errs...)
	}

	if err := resolveDerived(&cfg, path, src); err != nil {
		return Config{}, nil, err
	}

	problems := cfg.problems()
	if len(problems) > 0 {
		errs := make([]error, 0, len(problems))
		for _, p := range problems {
			var err error = errors.New(p.text)
			if from, ok := src[p.key]; ok {
				err = errors.New(p.text + " (" + from.phrase() + ")")
				if from.Kind == FromFlag {
					err = &FlagError{Flag: from.Where, Err: err}
				}
			}
			errs = append(errs, err)
		}
		return Config{}, nil, errors.Join(errs...)
	}
	return cfg, src, nil
}

// MaxConfigFileSize is the largest config file Load reads: a config is a
// few kilobytes, and a path such as /dev/zero must not eat the memory.
const MaxConfigFileSize = 1 << 20

// readConfigFile reads the config file at path: a regular file (not a FIFO,
// which would block, nor a device) of at most MaxConfigFileSize bytes.
func readConfigFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		what := "not a regular file"
		switch m := fi.Mode(); {
		case m.IsDir():
			what = "a directory"
		case m&fs.ModeNamedPipe != 0:
			what = "a named pipe (FIFO)"
		case m&fs.ModeDevice != 0 || m&fs.ModeCharDevice != 0:
			what = "a device"
		case m&fs.ModeSocket != 0:
			what = "a socket"
		}
		return nil, fmt.Errorf("%s is %s; the config file must be a regular YAML file", path, what)
	}
	if fi.Size() > MaxConfigFileSize {
		return nil, fmt.Errorf("%s is %d bytes; a config file may be at most 1 MiB", path, fi.Size())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxConfigFileSize { // it grew after the Stat
		return nil, fmt.Errorf("%s is larger than 1 MiB; a config file may be at most 1 MiB", path)
	}
	return data, nil
}

// FlagError is a problem with a value given on the command line: bad
// usage, which the CLI reports with exit code 2.
type FlagError struct {
	Flag string // as typed, e.g. "-log-format"
	Err  error
}

// Error is the problem, which names the flag and the value.
func (e *FlagError) Error() string { return e.Err.Error() }

// Unwrap returns the problem.
func (e *FlagError) Unwrap() error { return e.Err }

// resolveDerived fills the defaults that depend on the file's location, on
// other keys and on the host.
func resolveDerived(cfg *Config, path string, src Sources) error {
	if cfg.Database.Driver == "sqlite" && !isInMemorySQLite(cfg.Database.DSN) {
		baseDir, err := configDir(path)
		if err != nil {
			return err
		}
		switch {
		case cfg.Database.DSN == "":
			cfg.Database.DSN = filepath.Join(baseDir, defaultSQLiteFile)
			src[dsnKey] = Source{Kind: FromDefault, Note: "default beside the config file"}
		case isRelativeSQLitePath(cfg.Database.DSN):
			file, query, hasQuery := strings.Cut(cfg.Database.DSN, "?")
			cfg.Database.DSN = filepath.Join(baseDir, file)
			if hasQuery {
				cfg.Database.DSN += "?" + query
			}
		}
	}

	if _, set := src["checkin.ttl"]; !set {
		cfg.Checkin.TTL = ttlHeartbeats * cfg.Checkin.Heartbeat
		src["checkin.ttl"] = Source{Kind: FromDefault, Note: "derived as 3 × checkin.heartbeat; set checkin.ttl to choose it"}
	}

	if cfg.Node.Name == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("config: node.name is not set and the host name cannot be read (%v); set node.name or %s", err, envName("node", "name"))
		}
		cfg.Node.Name = host
		src["node.name"] = Source{Kind: FromDefault, Note: "taken from the host name; set node.name or " + envName("node", "name")}
	}
	return nil
}

// configDir is the folder that holds the config file, or the working
// directory when there is no config file path, as an absolute path.
func configDir(path string) (string, error) {
	if path == "" {
		dir, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("config: cannot place the default sqlite database: %w", err)
		}
		return dir, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("config: cannot place the default sqlite database: %w", err)
	}
	return filepath.Dir(abs), nil
}

func isInMemorySQLite(dsn string) bool {
	return dsn == ":memory:" || strings.HasPrefix(dsn, "file::memory:")
}

// isRelativeSQLitePath reports whether dsn is a plain relative file path
// (not a file: URI, not a URL).
func isRelativeSQLitePath(dsn string) bool {
	file, _, _ := strings.Cut(dsn, "?")
	return file != "" && !strings.HasPrefix(dsn, "file:") && !strings.Contains(dsn, "://") &&
		!filepath.IsAbs(file) && filepath.VolumeName(file) == ""
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "t", "yes", "y", "on", "1":
		return true, nil
	case "false", "f", "no", "n", "off", "0":
		return false, nil
	}
	return false, errors.New("not a boolean; write true or false")
}

func parseInt(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, errors.New("number out of range")
		}
		return 0, errors.New("not a whole number")
	}
	return n, nil
}

// setValue parses raw according to the kind of the field v and stores it.
func setValue(v reflect.Value, raw string) error {
	if v.Type() == reflect.TypeFor[Duration]() {
		d, err := parseDuration(raw)
		if err != nil {
			return err
		}
		v.SetInt(int64(d))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(raw)
	case reflect.Int:
		n, err := parseInt(raw)
		if err != nil {
			return err
		}
		v.SetInt(int64(n))
	case reflect.Bool:
		b, err := parseBool(raw)
		if err != nil {
			return err
		}
		v.SetBool(b)
	default:
		panic(fmt.Sprintf("config: field of unsupported type %s", v.Type()))
	}
	return nil
}

// yamlTag returns the yaml key of a struct field.
func yamlTag(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

// fieldIndex returns the index of the field of struct type t whose yaml key
// is key, or -1.
func fieldIndex(t reflect.Type, key string) int {
	for i := 0; i < t.NumField(); i++ {
		if yamlTag(t.Field(i)) == key {
			return i
		}
	}
	return -1
}

// yamlKeys lists the yaml keys of struct type t.
func yamlKeys(t reflect.Type) []string {
	keys := make([]string, 0, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		keys = append(keys, yamlTag(t.Field(i)))
	}
	return keys
}

// Flag is a value given on the command line for one key; it wins over the
// file and the environment.
type Flag struct {
	Key   string // the key it sets, e.g. "log.level"
	Name  string // the flag as typed, e.g. "-log-level"; shown as the source
	Value string
}

// applyFlags applies command-line values to cfg and records them in src.
func applyFlags(cfg *Config, flags []Flag, src Sources) []error {
	var errs []error
	cv := reflect.ValueOf(cfg).Elem()
	for _, f := range flags {
		section, key, _ := strings.Cut(f.Key, ".")
		si := fieldIndex(cv.Type(), section)
		if si < 0 || cv.Field(si).Kind() != reflect.Struct || fieldIndex(cv.Field(si).Type(), key) < 0 {
			errs = append(errs, fmt.Errorf("config: flag %s: %q is not a setting", f.Name, f.Key))
			continue
		}
		sv := cv.Field(si)
		if err := setValue(sv.Field(fieldIndex(sv.Type(), key)), f.Value); err != nil {
			errs = append(errs, &FlagError{Flag: f.Name, Err: fmt.Errorf("config: flag %s = %s: %v", f.Name, rawForError(f.Key, f.Value), err)})
			continue
		}
		src[f.Key] = Source{Kind: FromFlag, Where: f.Name}
	}
	return errs
}
