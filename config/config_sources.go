package config

import (
	"fmt"
	"reflect"
)

// SourceKind says which layer of the configuration a value came from.
type SourceKind string

// The layers, lowest first: each one overrides the ones before it.
const (
	FromDefault SourceKind = "default"
	FromFile    SourceKind = "file"
	FromEnv     SourceKind = "env"
	FromFlag    SourceKind = "flag"
)

// Source is where one key's value came from.
type Source struct {
	Kind SourceKind `json:"kind"`
	// Where is "path:line" for the file, the variable's name for the
	// environment and the flag ("-log-level") for a flag; empty for a
	// default.
	Where string `json:"where,omitempty"`
	// Note explains a default that Load computed (from the config file's
	// folder, the heartbeat, the host name).
	Note string `json:"note,omitempty"`
}

// String is the source as `config show` prints it: "default",
// "config.yaml:12", "env SLOTPOLLER_NODE_NAME", "flag -log-level".
func (s Source) String() string {
	switch s.Kind {
	case FromFile:
		return s.Where
	case FromEnv:
		return "env " + s.Where
	case FromFlag:
		return "flag " + s.Where
	}
	if s.Note != "" {
		return "default (" + s.Note + ")"
	}
	return "default"
}

// phrase is the source as a validation error quotes it.
func (s Source) phrase() string {
	switch s.Kind {
	case FromFile:
		return "set at " + s.Where
	case FromEnv:
		return "set by " + s.Where
	case FromFlag:
		return "set by flag " + s.Where
	}
	if s.Note != "" {
		return s.Note
	}
	return "default"
}

// Sources maps a key ("jobs.drain_timeout", "schedules[0].cron") to where
// its value came from.
type Sources map[string]Source

// Of returns the source of key: a plain default when nothing set it.
func (s Sources) Of(key string) Source {
	if src, ok := s[key]; ok {
		return src
	}
	return Source{Kind: FromDefault}
}

// Setting is one key of the effective configuration, for `config show`.
type Setting struct {
	Key string `json:"key"`
	// Value is a string, an int, a bool, or a duration as a string ("30s").
	// Secrets are masked.
	Value  any    `json:"value"`
	Source Source `json:"source"`
}

// Settings lists every key of c, sections and keys in the file's order
// and then each schedule's keys, with where its value came from. Secrets are
// masked (as by Redacted), whatever c holds.
func (c Config) Settings(src Sources) []Setting {
	var out []Setting
	add := func(key string, v reflect.Value) {
		var value any
		switch {
		case v.Type() == reflect.TypeFor[Duration]():
			value = Duration(v.Int()).String()
		case v.Kind() == reflect.String:
			value = v.String()
		case v.Kind() == reflect.Int:
			value = int(v.Int())
		case v.Kind() == reflect.Bool:
			value = v.Bool()
		default:
			value = fmt.Sprint(v.Interface())
		}
		out = append(out, Setting{Key: key, Value: value, Source: src.Of(key)})
	}
	cv := reflect.ValueOf(c.Redacted())
	ct := cv.Type()
	for i := 0; i < ct.NumField(); i++ {
		section, sv := yamlTag(ct.Field(i)), cv.Field(i)
		switch sv.Kind() {
		case reflect.Struct:
			for j := 0; j < sv.NumField(); j++ {
				add(section+"."+yamlTag(sv.Type().Field(j)), sv.Field(j))
			}
		case reflect.Slice:
			for n := 0; n < sv.Len(); n++ {
				ev := sv.Index(n)
				for j := 0; j < ev.NumField(); j++ {
					add(fmt.Sprintf("%s[%d].%s", section, n, yamlTag(ev.Type().Field(j))), ev.Field(j))
				}
			}
		}
	}
	return out
}
