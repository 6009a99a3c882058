package clock

import "time"

// Instant is a moment on a Clock's monotonic time (Clock.Monotonic): what
// a node keeps for itself, such as the end of a lease as it last confirmed
// it, a call's cut-off, or when to look again. A step of the wall clock
// (NTP, an operator, a VM resume) does not move it, so a lease judged on
// Instants never looks an hour longer after the wall clock stepped back.
//
// An Instant is never shown, sent or compared with a time another node or
// the database wrote: those are wall or database times. Only Instants of
// one Clock compare. The zero Instant is none (IsZero), and no reading.
type Instant struct{ t time.Time }

// Mono reads c's monotonic time as an Instant. Instants count from the
// Unix epoch: any time will do that is not the zero time and carries no
// monotonic reading, so that Instant{} stays apart from every reading.
func Mono(c Clock) Instant { return Instant{time.Unix(0, 0).Add(c.Monotonic())} }

// Add returns i moved by d.
func (i Instant) Add(d time.Duration) Instant { return Instant{i.t.Add(d)} }

// Sub returns i - j.
func (i Instant) Sub(j Instant) time.Duration { return i.t.Sub(j.t) }

// Before reports whether i is before j.
func (i Instant) Before(j Instant) bool { return i.t.Before(j.t) }

// After reports whether i is after j.
func (i Instant) After(j Instant) bool { return i.t.After(j.t) }

// IsZero reports whether i is the zero Instant (none).
func (i Instant) IsZero() bool { return i.t.IsZero() }
