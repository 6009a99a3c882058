package config

import "log/slog"

// HandlerOptions are the slog handler options of these log settings: the
// level (debug, info, warn, error; info when it does not parse) and
// durations written as the config writes them. The node's logger
// (service.NewLogger) and the OS service's (install.NewSystemLogger) are
// built from them, so both logs read alike.
func (c LogConfig) HandlerOptions() *slog.HandlerOptions {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	return &slog.HandlerOptions{Level: level, ReplaceAttr: DurationsAsText}
}

// DurationsAsText writes every duration of a log record as a Go duration
// string ("1.5s", "250ms", "5m"), as the config's Duration values and
// the config file write them: slog's JSON handler would write a
// time.Duration as nanoseconds beside Durations written as strings. It is
// a slog.HandlerOptions.ReplaceAttr.
func DurationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(Duration(a.Value.Duration()).String())
	}
	return a
}
