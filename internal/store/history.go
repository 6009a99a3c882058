package store

import (
	"strconv"
	"strings"
	"time"
)

// A job's history is a text column, one line per event: an attempt that
// ended (done, failed, retry, dead, reclaimed, released) or an operator's
// cancel or retry. Each line is written by the statement that ends the
// attempt (finish, reclaim, release) or makes the change, so it costs no
// statement of its own; its times are the database clock's, turned into
// text inside the statement. The column keeps the last HistoryMax
// characters, about twenty attempts.
//
// A line's fields are separated by tabs:
//
//	attempt  node  started  ended  outcome  status  error
//
// The separators travel as parameters, since a statement holds no string
// literals.

// HistoryMax is how many characters of history a job keeps.
const HistoryMax = 8000

// maxHistoryError is the longest error text a history line keeps.
const maxHistoryError = 300

// Outcomes in the history beyond the job states.
const (
	OutcomeRetry     = "retry"     // failed, due again after a backoff
	OutcomeReclaimed = "reclaimed" // lease expired, due again
	OutcomeReleased  = "released"  // given back unrun by a stopping node
	OutcomeRetried   = "retried"   // an operator's retry: a fresh attempt budget
)

// Event is one line of a job's history. Times are the database clock's.
type Event struct {
	Attempt int
	Node    string     // the node that ran the attempt, or who acted
	Started *time.Time // nil for an operator's action
	Ended   time.Time
	Outcome string // a job state or one of the Outcome constants
	Status  int    // HTTP status, 0 when none
	Error   string
}

// historyLine returns an expression for the history with one more line, with the node and started columns (or expressions) given, and
// suffix, an expression (taking parameters) for the rest of the line from
// the outcome on. The arguments are historySeps followed by suffix's.
func historyLine(d Dialect, node, started, suffix string) string {
	return historyLineOf(d, "", node, started, suffix)
}

// historyLineOf is historyLine for a statement that must name the table
// of its history and attempt columns: t is the table's name or alias and
// a dot (a join where Babelfish finds the bare names ambiguous).
func historyLineOf(d Dialect, t, node, started, suffix string) string {
	p := d.TextParam()
	line := "CONCAT(" + t + "history, " + t + "attempt, " + p + ", " + node + ", " + p + ", " + d.TimeText(started) + ", " + p + ", " +
		d.TimeText(d.Now()) + ", " + suffix + ")"
	return d.Tail(line, HistoryMax)
}

// historySeps are the arguments of the separators historyLine writes
// before its suffix.
func historySeps() []any { return []any{"\t", "\t", "\t"} }

// historySuffix is the end of a line: outcome, status and error.
func historySuffix(outcome string, status int, errText string) string {
	st := ""
	if status != 0 {
		st = strconv.Itoa(status)
	}
	errText = strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, errText)
	if len(errText) > maxHistoryError {
		errText = errText[:maxHistoryError] + "..."
	}
	return "\t" + outcome + "\t" + st + "\t" + errText + "\n"
}

// parseHistory reads the history column. A history cut at HistoryMax
// starts in the middle of a line, which is dropped.
func parseHistory(h string) []Event {
	lines := strings.Split(h, "\n")
	if len([]rune(h)) >= HistoryMax && len(lines) > 0 {
		lines = lines[1:]
	}
	var out []Event
	for _, l := range lines {
		f := strings.Split(l, "\t")
		if len(f) != 7 {
			continue
		}
		e := Event{Node: f[1], Outcome: f[4], Error: f[6]}
		e.Attempt, _ = strconv.Atoi(f[0])
		e.Status, _ = strconv.Atoi(f[5])
		if t, ok := parseTimeText(f[2]); ok {
			e.Started = &t
		}
		e.Ended, _ = parseTimeText(f[3])
		out = append(out, e)
	}
	return out
}

// parseTimeText reads a time written by Dialect.TimeText: Unix
// milliseconds (SQLite) or a UTC wall time.
func parseTimeText(s string) (time.Time, bool) {
	if s == "" {
		return time.Time{}, false
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms).UTC(), true
	}
	t, err := time.Parse("2006-01-02 15:04:05.999999999", s)
	return t, err == nil
}
