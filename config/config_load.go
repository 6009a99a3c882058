package config

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
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

func (e *FlagError) Error() string { return e.Err.Error() }
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

// Duration is a time.Duration written as a Go duration string ("1s",
// "250ms", "1m30s") in YAML and in environment variables.
type Duration time.Duration

var (
	_ yaml.Unmarshaler         = (*Duration)(nil)
	_ yaml.Marshaler           = Duration(0)
	_ encoding.TextUnmarshaler = (*Duration)(nil)
	_ encoding.TextMarshaler   = Duration(0)
)

// String formats d like time.Duration without zero trailing units ("5m"
// rather than "5m0s").
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// MarshalYAML writes d as a duration string.
func (d Duration) MarshalYAML() (any, error) {
	return d.String(), nil
}

// UnmarshalYAML reads a duration string; a bad value is an error naming it.
func (d *Duration) UnmarshalYAML(value *yaml.Node) error {
	if value.Kind != yaml.ScalarNode {
		return fmt.Errorf("invalid duration: want a duration string such as \"30s\", not a %s", nodeKindName(value.Kind))
	}
	return d.UnmarshalText([]byte(value.Value))
}

// MarshalText writes d as a duration string (used by JSON, for instance).
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(d.String()), nil
}

// UnmarshalText reads a duration string; a bad value is an error naming it.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := parseDuration(string(text))
	if err != nil {
		return fmt.Errorf("invalid duration %q: %w", text, err)
	}
	*d = v
	return nil
}

// parseDuration parses a Go duration string; its error says why without
// repeating the value.
func parseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New(`empty; write a duration such as "30s" or "250ms"`)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		if _, numErr := strconv.ParseFloat(s, 64); numErr == nil {
			return 0, fmt.Errorf(`missing unit; write e.g. "%ss" or "%sms"`, s, s)
		}
		return 0, errors.New(`not a duration; write e.g. "30s", "250ms" or "1m30s"`)
	}
	return Duration(d), nil
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
		panic(fmt.Sprintf("service: config field of unsupported type %s", v.Type()))
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

// envName is the environment variable that overrides section.key.
func envName(section, key string) string {
	return envPrefix + strings.ToUpper(section) + "_" + strings.ToUpper(key)
}

// decodeYAML applies the YAML document data (read from name) to cfg and
// records in src where each key came from. It walks the node tree rather
// than decoding with KnownFields so that an unknown key is reported with
// its full path and line, and every problem in the file is reported at once.
// decodeList reads a list section (schedules): a sequence of mappings
// whose keys are checked like any other section's.
func decodeList(sv reflect.Value, section, name string, vn *yaml.Node, src Sources) []error {
	var errs []error
	fail := func(n *yaml.Node, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s", name, n.Line, fmt.Sprintf(format, args...)))
	}
	if vn.Kind != yaml.SequenceNode {
		fail(vn, "%s must be a list, not a %s", section, nodeKindName(vn.Kind))
		return errs
	}
	et := sv.Type().Elem()
	list := reflect.MakeSlice(sv.Type(), 0, len(vn.Content))
	for i, item := range vn.Content {
		item = deref(item)
		path := fmt.Sprintf("%s[%d]", section, i)
		if item.Kind != yaml.MappingNode {
			fail(item, "%s must be a mapping of keys (%s), not a %s", path, strings.Join(yamlKeys(et), ", "), nodeKindName(item.Kind))
			continue
		}
		ev := reflect.New(et).Elem()
		if et == reflect.TypeFor[ScheduleConfig]() {
			ev.Set(reflect.ValueOf(defaultSchedule()))
		}
		seen := map[string]int{}
		for j := 0; j+1 < len(item.Content); j += 2 {
			kn, leaf := item.Content[j], deref(item.Content[j+1])
			kp := path + "." + kn.Value
			if line, dup := seen[kn.Value]; dup {
				fail(kn, "duplicate key %q (first at line %d)", kp, line)
				continue
			}
			seen[kn.Value] = kn.Line
			ki := fieldIndex(et, kn.Value)
			if ki < 0 {
				fail(kn, "unknown key %q%s", kp, suggest(kn.Value, yamlKeys(et), path+"."))
				continue
			}
			if isNull(leaf) {
				continue
			}
			if leaf.Kind != yaml.ScalarNode {
				fail(leaf, "%s must be a single value, not a %s", kp, nodeKindName(leaf.Kind))
				continue
			}
			if err := setValue(ev.Field(ki), leaf.Value); err != nil {
				fail(leaf, "%s = %s: %v", kp, rawForError(kp, leaf.Value), err)
				continue
			}
			src[kp] = Source{Kind: FromFile, Where: fmt.Sprintf("%s:%d", name, leaf.Line)}
		}
		list = reflect.Append(list, ev)
	}
	if list.Len() > 0 {
		sv.Set(list)
	}
	return errs
}

func decodeYAML(cfg *Config, name string, data []byte, src Sources) []error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty file
		}
		return []error{fmt.Errorf("%s: %w", name, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return []error{fmt.Errorf("%s:%d: only one YAML document is allowed", name, extra.Line)}
	} else if !errors.Is(err, io.EOF) {
		return []error{fmt.Errorf("%s: %w", name, err)}
	}

	root := deref(&doc)
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil
		}
		root = deref(root.Content[0])
	}
	if isNull(root) {
		return nil
	}
	cv := reflect.ValueOf(cfg).Elem()
	if root.Kind != yaml.MappingNode {
		return []error{fmt.Errorf("%s:%d: must be a mapping of sections (%s), not a %s",
			name, root.Line, strings.Join(yamlKeys(cv.Type()), ", "), nodeKindName(root.Kind))}
	}

	var errs []error
	fail := func(n *yaml.Node, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s", name, n.Line, fmt.Sprintf(format, args...)))
	}
	sectionLines := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		kn, vn := root.Content[i], deref(root.Content[i+1])
		section := kn.Value
		if line, dup := sectionLines[section]; dup {
			fail(kn, "duplicate key %q (first at line %d)", section, line)
			continue
		}
		sectionLines[section] = kn.Line
		si := fieldIndex(cv.Type(), section)
		if si < 0 {
			fail(kn, "unknown key %q%s", section, suggest(section, yamlKeys(cv.Type()), ""))
			continue
		}
		if isNull(vn) {
			continue
		}
		sv := cv.Field(si)
		if sv.Kind() == reflect.Slice {
			errs = append(errs, decodeList(sv, section, name, vn, src)...)
			continue
		}
		if vn.Kind != yaml.MappingNode {
			fail(vn, "%s must be a mapping of keys (%s), not a %s", section, strings.Join(yamlKeys(sv.Type()), ", "), nodeKindName(vn.Kind))
			continue
		}
		keyLines := map[string]int{}
		for j := 0; j+1 < len(vn.Content); j += 2 {
			kn, leaf := vn.Content[j], deref(vn.Content[j+1])
			key := kn.Value
			path := section + "." + key
			if line, dup := keyLines[key]; dup {
				fail(kn, "duplicate key %q (first at line %d)", path, line)
				continue
			}
			keyLines[key] = kn.Line
			ki := fieldIndex(sv.Type(), key)
			if ki < 0 {
				fail(kn, "unknown key %q%s", path, suggest(key, yamlKeys(sv.Type()), section+"."))
				continue
			}
			if isNull(leaf) {
				continue // key: with no value keeps the default
			}
			if leaf.Kind != yaml.ScalarNode {
				fail(leaf, "%s must be a single value, not a %s", path, nodeKindName(leaf.Kind))
				continue
			}
			if err := setValue(sv.Field(ki), leaf.Value); err != nil {
				fail(leaf, "%s = %s: %v", path, rawForError(path, leaf.Value), err)
				continue
			}
			src[path] = Source{Kind: FromFile, Where: fmt.Sprintf("%s:%d", name, leaf.Line)}
		}
	}
	return errs
}

// rawForError shows a raw value in an error, hiding the secrets'.
func rawForError(path, raw string) string {
	if IsSecret(path) {
		return "(value hidden)"
	}
	return strconv.Quote(raw)
}

func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func nodeKindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "single value"
	case yaml.DocumentNode:
		return "document"
	case yaml.AliasNode:
		return "alias"
	}
	return "node"
}

// applyEnv applies SLOTPOLLER_<SECTION>_<KEY> variables from environ to cfg
// and records in src which variable set each key.
func applyEnv(cfg *Config, environ []string, src Sources) []error {
	var errs []error
	cv := reflect.ValueOf(cfg).Elem()
	ct := cv.Type()
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		match := name
		if runtime.GOOS == "windows" { // environment names are case-insensitive there
			match = strings.ToUpper(name)
		}
		rest, ok := strings.CutPrefix(match, envPrefix)
		if !ok {
			continue
		}
		si := -1
		var section, keyPart string
		for i := 0; i < ct.NumField(); i++ {
			s := yamlTag(ct.Field(i))
			if k, ok := strings.CutPrefix(rest, strings.ToUpper(s)+"_"); ok {
				si, section, keyPart = i, s, k
				break
			}
		}
		if si < 0 {
			if !isTestVariable(rest) {
				errs = append(errs, fmt.Errorf("config: %s: unknown setting%s", name, suggestEnv(match, ct)))
			}
			continue
		}
		sv := cv.Field(si)
		if sv.Kind() != reflect.Struct {
			errs = append(errs, fmt.Errorf("config: %s: the %s list is set in the config file only", name, section))
			continue
		}
		ki := -1
		for i := 0; i < sv.NumField(); i++ {
			if strings.ToUpper(yamlTag(sv.Type().Field(i))) == keyPart {
				ki = i
				break
			}
		}
		if ki < 0 {
			keys := yamlKeys(sv.Type())
			vars := make([]string, len(keys))
			for i, k := range keys {
				vars[i] = envName(section, k)
			}
			hint := suggest(match, vars, "")
			if hint == "" {
				hint = " (the " + section + " section has " + strings.Join(vars, ", ") + ")"
			}
			errs = append(errs, fmt.Errorf("config: %s: unknown setting%s", name, hint))
			continue
		}
		key := yamlTag(sv.Type().Field(ki))
		path := section + "." + key
		if value == "" && sv.Field(ki).Kind() != reflect.String {
			errs = append(errs, fmt.Errorf("config: %s is empty: set a value or unset the variable", name))
			continue
		}
		if err := setValue(sv.Field(ki), value); err != nil {
			errs = append(errs, fmt.Errorf("config: %s = %s: %v", name, rawForError(path, value), err))
			continue
		}
		src[path] = Source{Kind: FromEnv, Where: name}
	}
	return errs
}

// testVariablePrefixes start the variables of slotpoller's own test
// suites (SLOTPOLLER_TEST_POSTGRES_DSN, SLOTPOLLER_CHAOS_DURATION,
// SLOTPOLLER_E2E_LOGS): CI sets them and the node processes of the tests
// inherit them, so they are not settings and not mistakes.
var testVariablePrefixes = []string{"TEST_", "CHAOS_", "E2E_"}

func isTestVariable(rest string) bool {
	for _, p := range testVariablePrefixes {
		if strings.HasPrefix(rest, p) {
			return true
		}
	}
	return false
}

// suggestEnv says which setting an unknown SLOTPOLLER_ variable may have
// meant: the closest variable name, else the setting with the same key in
// another section (SLOTPOLLER_DB_DSN: SLOTPOLLER_DATABASE_DSN), else how
// the names are made.
func suggestEnv(name string, ct reflect.Type) string {
	var vars []string
	for i := 0; i < ct.NumField(); i++ {
		if st := ct.Field(i).Type; st.Kind() == reflect.Struct {
			section := yamlTag(ct.Field(i))
			for _, k := range yamlKeys(st) {
				vars = append(vars, envName(section, k))
			}
		}
	}
	if hint := suggest(name, vars, ""); hint != "" {
		return hint
	}
	var same []string
	for _, v := range vars {
		key := v[strings.IndexByte(v[len(envPrefix):], '_')+len(envPrefix)+1:]
		if strings.HasSuffix(name, "_"+key) {
			same = append(same, v)
		}
	}
	if len(same) == 1 {
		return fmt.Sprintf(" (did you mean %q?)", same[0])
	}
	sections := make([]string, 0, ct.NumField())
	for i := 0; i < ct.NumField(); i++ {
		if ct.Field(i).Type.Kind() == reflect.Struct {
			sections = append(sections, strings.ToUpper(yamlTag(ct.Field(i))))
		}
	}
	return fmt.Sprintf(" (settings are %s<SECTION>_<KEY> with SECTION one of %s; %sTEST_*, %sCHAOS_* and %sE2E_* belong to the test suites and are ignored)",
		envPrefix, strings.Join(sections, ", "), envPrefix, envPrefix, envPrefix)
}

// suggest returns ` (did you mean "<prefix><candidate>"?)` for the candidate
// closest to word, or "" when none is close.
func suggest(word string, candidates []string, prefix string) string {
	best, bestDist := "", -1
	for _, c := range candidates {
		d := editDistance(strings.ToLower(word), strings.ToLower(c))
		if d <= 2 && d*2 < len(c) && (bestDist < 0 || d < bestDist) {
			best, bestDist = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", prefix+best)
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and swaps of neighbours each cost 1.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
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
