package config

import (
	"encoding"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

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
