// Package turns keeps the slots a node polled lately, as the node writes
// them on its registry row and the dashboard reads them back: the
// dashboard's rotation strip costs no statement of its own.
package turns

import (
	"strconv"
	"strings"
	"sync"
)

// turnsKept is how many of its latest turns a node writes on its row: the
// dashboard's strip shows 60 slots, and in a widened rotation a node polls
// in every one of them.
const turnsKept = 64

// Log is the slots this node polled lately. The poll loop records
// each turn; the heartbeat writes them on the node's row with the values
// it writes anyway, so the dashboard's rotation strip costs no statement.
type Log struct {
	mu    sync.Mutex
	slots []int64 // oldest first, at most turnsKept
}

// Record notes a turn taken in slot k. A turn again in the same slot (a
// widened rotation gives one per slot) is noted once.
func (l *Log) Record(k int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.slots); n > 0 && l.slots[n-1] == k {
		return
	}
	if len(l.slots) == turnsKept {
		l.slots = append(l.slots[:0], l.slots[1:]...)
	}
	l.slots = append(l.slots, k)
}

// Carry takes over the turns a previous incarnation of this node wrote on
// the node's row (prev, as Encode wrote it), those older than any turn of
// its own: the check-in leaves the row's turns as they were, but the first
// write of a restarted node would replace them with its own few, and the
// strip would show the slots the node polled before its restart as slots
// nobody polled. Called once, between the check-in and the first turn.
func (l *Log) Carry(prev string) {
	old := Decode(prev) // newest first
	l.mu.Lock()
	defer l.mu.Unlock()
	var carried []int64 // oldest first
	for i := len(old) - 1; i >= 0; i-- {
		if len(l.slots) == 0 || old[i] < l.slots[0] {
			carried = append(carried, old[i])
		}
	}
	l.slots = append(carried, l.slots...)
	if n := len(l.slots); n > turnsKept {
		l.slots = l.slots[n-turnsKept:]
	}
}

// Encode writes the turns newest first: the newest slot, then for each
// older one how far back it is from the one before ("1780000123,3,3").
// The gaps keep the text short (64 turns in well under 1000 characters
// whatever the slot numbers); "" when there are none.
func (l *Log) Encode() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for i := len(l.slots) - 1; i >= 0; i-- {
		if i == len(l.slots)-1 {
			b.WriteString(strconv.FormatInt(l.slots[i], 10))
			continue
		}
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(l.slots[i+1]-l.slots[i], 10))
	}
	return b.String()
}

// Decode reads what Encode wrote, newest first. Text it cannot read
// (another version's format, a truncated value) gives what it could read
// up to there: the strip is a picture, not a record.
func Decode(s string) []int64 {
	if s == "" {
		return nil
	}
	var out []int64
	for i, part := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(part, 10, 64)
		if err != nil {
			break
		}
		if i == 0 {
			out = append(out, v)
			continue
		}
		if v <= 0 || len(out) >= turnsKept {
			break
		}
		out = append(out, out[len(out)-1]-v)
	}
	return out
}
