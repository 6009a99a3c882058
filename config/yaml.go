package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// The file layer: config.yaml, walked key by key.

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
			if f := ev.Field(ki); f.Type() == reflect.TypeFor[[]string]() {
				// A list of text (a queue's endpoints): a sequence of
				// single values, or one value.
				if err := setStrings(f, leaf); err != nil {
					fail(leaf, "%s %v", kp, err)
					continue
				}
				src[kp] = Source{Kind: FromFile, Where: fmt.Sprintf("%s:%d", name, leaf.Line)}
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

// setStrings sets a []string field from a sequence of single values, or
// from one value.
func setStrings(f reflect.Value, n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		f.Set(reflect.ValueOf([]string{n.Value}))
		return nil
	case yaml.SequenceNode:
		out := make([]string, 0, len(n.Content))
		for _, item := range n.Content {
			item = deref(item)
			if item.Kind != yaml.ScalarNode {
				return fmt.Errorf("must be a list of single values, and item %d is a %s", len(out), nodeKindName(item.Kind))
			}
			out = append(out, item.Value)
		}
		f.Set(reflect.ValueOf(out))
		return nil
	}
	return fmt.Errorf("must be a list of single values, not a %s", nodeKindName(n.Kind))
}

// decodeYAML applies the YAML document data (read from name) to cfg and
// records in src where each key came from. It walks the node tree rather
// than decoding with KnownFields so that an unknown key is reported with
// its full path and line, and every problem in the file is reported at once.
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
