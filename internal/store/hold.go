package store

import (
	"math"
	"strconv"
	"time"
)

// MaxHeldTimeout is the longest call a hold covers, and so the longest
// timeout any door accepts (jobs.MaxCallTimeout is this).
const MaxHeldTimeout = 24 * time.Hour

// MaxHold bounds every hold a claim or a renewal writes: the longest
// lease (24h) or the longest call and its margin, with a day to spare.
const MaxHold = 2*MaxHeldTimeout + 24*time.Hour

// Hold is how long a claim keeps a job or a task from every other node,
// counted from the database's now at the claim and at every renewal.
//
// A call may run until its deadline, and the endpoint is told that
// deadline: a node that froze (SIGSTOP, a paused VM) cannot cut its call
// off, so another node must not start the same work before the deadline
// has passed, whatever the lease. A row is therefore held for the longer
// of the lease and its call's length plus a margin (time for the endpoint
// to see its deadline pass). Both are durations from the database's now,
// never a stored time: a hold written after a step of the database clock
// is measured on the clock as it reads after the step.
//
// The zero Call and Margin hold every row for Lease (Lease(d)).
type Hold struct {
	// Lease is the least hold: how long a dead node's work waits when its
	// calls are short.
	Lease time.Duration
	// Calls: each row is held at least its call's length (its timeout_ms,
	// or DefaultTimeout when that is 0) plus Margin. Without it, every row
	// is held for Lease, and its calls must fit in the lease.
	Calls bool
	// DefaultTimeout is the call length of a row with no timeout of its
	// own (timeout_ms 0); zero holds such a row for Lease.
	DefaultTimeout time.Duration
	Margin         time.Duration
}

// Lease is a hold of d for every row.
func Lease(d time.Duration) Hold { return Hold{Lease: d} }

// For is the hold of a row whose call timeout is timeout (0: none of its
// own): the same arithmetic as the statements' (holdMillis).
func (h Hold) For(timeout time.Duration) time.Duration {
	if !h.Calls {
		return h.Lease
	}
	if timeout <= 0 || timeout > MaxHeldTimeout {
		if h.DefaultTimeout <= 0 {
			return h.Lease
		}
		timeout = h.DefaultTimeout
	}
	return max(h.Lease, timeout+h.Margin)
}

// args are holdMillis' four parameters, in its order: the hold of a row
// with no timeout, the timeout above which a row is held longer than the
// lease, the margin, and the lease.
func (h Hold) args() []any {
	above := int64(math.MaxInt64)
	if h.Calls {
		above = millis(h.Lease - h.Margin)
	}
	return []any{millis(h.For(0)), above, millis(h.Margin), millis(h.Lease)}
}

// holdMillis is the hold of a row in milliseconds, as an expression over
// its timeout_ms column (col, qualified where a statement needs it) with
// the four parameters of Hold.args (p1..p4).
// Each is cast to a bigint so that PostgreSQL need not guess their type.
//
// A timeout above MaxHeldTimeout (a row no door would write) is held as
// if it had none: the hold stays a few days at most, which SQL Server adds
// in one DATEADD, and such a row's call is bounded by that hold.
func holdMillis(col, p1, p2, p3, p4 string) string {
	return "CASE WHEN " + col + " <= 0 OR " + col + " > " + strconv.FormatInt(MaxHeldTimeout.Milliseconds(), 10) + " THEN CAST(" + p1 +
		" AS BIGINT) WHEN " + col + " > CAST(" + p2 + " AS BIGINT) THEN " + col + " + CAST(" + p3 + " AS BIGINT) ELSE CAST(" + p4 + " AS BIGINT) END"
}

// holdMarker stands, in a statement written once, for the database's now
// plus a row's hold (holdMillis with four ? parameters, Hold.args).
const holdMarker = "{now+hold}"
