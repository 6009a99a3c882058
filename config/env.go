package config

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
)

// The environment layer: SLOTPOLLER_<SECTION>_<KEY> variables.

// envName is the environment variable that overrides section.key.
func envName(section, key string) string {
	return envPrefix + strings.ToUpper(section) + "_" + strings.ToUpper(key)
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
