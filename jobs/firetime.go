package jobs

import (
	// Zone rules built into the binary: a Windows server has no zoneinfo of
	// its own, and every node must turn a cron time into the same instant.
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"time"
	_ "time/tzdata"

	cron "github.com/netresearch/go-cron"
)

// FireSpec says when a schedule fires: exactly one of Every and Cron.
type FireSpec struct {
	// Every fires on the grid of multiples of Every since the Unix epoch, so
	// every 10m fires at :00, :10, ... whatever the time zone; at least 1s.
	Every time.Duration
	// Cron is 5 fields (minute hour day-of-month month day-of-week) or 6 with
	// a leading seconds field, or a descriptor (@yearly, @monthly, @weekly,
	// @daily, @hourly). Beyond the classic syntax it takes names (MON, JAN),
	// wrap-around ranges (22-2) and the Quartz extensions L, L-n, LW, nW (day
	// of month) and FRI#3, FRI#L (day of week). When both day fields are
	// restricted a day matches either of them, as in crontab(5).
	Cron string
	// TimeZone is the IANA zone Cron's fields are read in; "" means UTC.
	// It is rejected with Every, whose grid is the same in every zone.
	TimeZone string
}

// FireTimes is a compiled FireSpec. It is immutable and safe for concurrent
// use; its methods are pure functions of their arguments and return UTC.
//
// Cron fires on wall-clock times in its zone. Where the zone's clock jumps
// forward (spring, 02:00 to 03:00 in New York), wall-clock times in the gap
// do not exist: each such fire time is shifted to the instant of the jump,
// and several in the same gap fire once there. Where the clock goes back
// (autumn, 01:00 to 02:00 happens twice), a fire time in the repeated hour
// fires once, at its first occurrence, unless the hour field matches every
// hour (*, @hourly, */15 * * * *): such schedules keep their pace through
// the second pass too, as ISC cron does. Either way no instant fires twice.
type FireTimes struct {
	every time.Duration

	expr       string             // normalized cron expression
	zone       string             // IANA name, "UTC" for ""
	loc        *time.Location     // nil for UTC
	sched      *cron.SpecSchedule // matches wall-clock times, computed in UTC
	everyHour  bool               // hour field matches all 24 hours
	secondPass bool               // fire also on the second pass of a repeated hour
}

// cronSearchYears bounds the library's search for the next match: more than
// the 8 years between two 29 Februaries across a century (2096 to 2104).
const cronSearchYears = 30

var cronParser = cron.MustNewParser(
	cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow |
		cron.Descriptor | cron.Extended | cron.DowOrDom,
).WithMaxSearchYears(cronSearchYears)

// CompileFireSpec validates s and compiles it. Its errors name what is
// wrong in the operator's terms.
func CompileFireSpec(s FireSpec) (*FireTimes, error) {
	expr := strings.Join(strings.Fields(s.Cron), " ")
	switch {
	case s.Every != 0 && expr != "":
		return nil, errors.New("schedule has both every and cron: give exactly one")
	case s.Every == 0 && expr == "":
		return nil, errors.New("schedule has neither every nor cron: give exactly one")
	case expr == "":
		if s.Every < time.Second {
			return nil, fmt.Errorf("every %v: must be at least 1s", s.Every)
		}
		if s.TimeZone != "" {
			return nil, fmt.Errorf("time zone %q given with every %v: time zones apply only to cron; every fires on the same grid in every zone", s.TimeZone, formatEvery(s.Every))
		}
		return &FireTimes{every: s.Every}, nil
	}

	f := &FireTimes{expr: expr, zone: "UTC"}
	if s.TimeZone != "" && s.TimeZone != "UTC" {
		if s.TimeZone == "Local" {
			return nil, fmt.Errorf("time zone %q: name an IANA zone such as Europe/Berlin, not the host's zone", s.TimeZone)
		}
		loc, err := time.LoadLocation(s.TimeZone)
		if err != nil {
			return nil, fmt.Errorf("time zone %q: unknown, expected an IANA name such as Europe/Berlin: %w", s.TimeZone, err)
		}
		f.zone, f.loc = s.TimeZone, loc
	}

	sched, err := parseCron(expr)
	if err != nil {
		return nil, err
	}
	sched.Location = time.UTC // the schedule only ever sees wall-clock times as UTC
	f.sched = sched
	const allHours = 1<<24 - 1
	f.everyHour = sched.Hour&allHours == allHours
	f.secondPass = f.everyHour && f.loc != nil
	if sched.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fmt.Errorf("cron %q: never fires (no date matches its day and month fields)", expr)
	}
	return f, nil
}

// parseCron parses expr, naming the field at fault when it can.
func parseCron(expr string) (*cron.SpecSchedule, error) {
	switch {
	case strings.HasPrefix(expr, "@every"):
		return nil, fmt.Errorf("cron %q: use every instead of @every", expr)
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return nil, fmt.Errorf("cron %q: give the time zone as the schedule's time zone, not in the expression", expr)
	}
	parsed, err := cronParser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("cron %q: %s", expr, cronFieldError(expr, err))
	}
	sched, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("cron %q: not a calendar schedule", expr)
	}
	return sched, nil
}

// cronFieldError finds the single field of expr the parser rejects, by
// parsing each field with wildcards in the others, and prefixes its name to
// the parser's message. It returns the original message when no single
// field is to blame.
func cronFieldError(expr string, err error) string {
	fields := strings.Fields(expr)
	names := []string{"minute", "hour", "day of month", "month", "day of week"}
	switch {
	case strings.HasPrefix(expr, "@"):
		return err.Error()
	case len(fields) == 6:
		names = append([]string{"second"}, names...)
	case len(fields) != 5:
		return fmt.Sprintf("want 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first, have %d", len(fields))
	}
	for i := range fields {
		probe := make([]string, len(fields))
		for j := range probe {
			probe[j] = "*"
		}
		probe[i] = fields[i]
		if _, ferr := cronParser.Parse(strings.Join(probe, " ")); ferr != nil {
			return fmt.Sprintf("%s field %q: %v", names[i], fields[i], ferr)
		}
	}
	return err.Error()
}

// Next returns the first fire time strictly after t, or the zero time if
// there is none (only past the year 9999).
func (f *FireTimes) Next(t time.Time) time.Time {
	if f.every > 0 {
		return f.gridFloor(t).Add(f.every).UTC()
	}
	if f.loc == nil {
		return f.sched.Next(t.UTC())
	}
	n := f.nextFirst(t)
	if f.secondPass {
		if s := f.nextSecond(t); !s.IsZero() && (n.IsZero() || s.Before(n)) {
			n = s
		}
	}
	return n
}

// Between returns the fire times in (after, until], oldest first, at most
// limit of them, and whether more fire times in the range were left out.
// A limit <= 0 returns none and only reports whether there are any.
func (f *FireTimes) Between(after, until time.Time, limit int) (times []time.Time, more bool) {
	for t := f.Next(after); !t.IsZero() && !t.After(until); t = f.Next(t) {
		if len(times) >= limit {
			return times, true
		}
		times = append(times, t)
	}
	return times, false
}

// Latest returns the last fire time that is after after and not after t,
// or the zero time if there is none: the occurrence the "once" misfire
// policy runs after an outage.
//
// For every it is arithmetic. For cron it gallops back from t in doubling
// steps until a step contains a fire time, then bisects that step to the
// second: about 2·log2(t - latest in seconds) calls of Next, however long
// the outage and however dense the schedule.
func (f *FireTimes) Latest(after, t time.Time) time.Time {
	if !t.After(after) {
		return time.Time{}
	}
	if f.every > 0 {
		if g := f.gridFloor(t); g.After(after) {
			return g.UTC()
		}
		return time.Time{}
	}
	if first := f.Next(after); first.IsZero() || first.After(t) {
		return time.Time{}
	}
	// Next is monotonic, so "Next(x) <= t" holds up to some x and fails
	// after. Invariant: it holds at lo and fails at hi.
	lo, hi := after, t
	for step := time.Second; ; step *= 2 {
		x := t.Add(-step)
		if !x.After(after) {
			break // lo = after, where it holds
		}
		if n := f.Next(x); n.IsZero() || !n.After(t) {
			lo = x
			break
		}
		hi = x
	}
	// Cron fire times are whole seconds, so once hi - lo < 1s at most one
	// lies in (lo, hi], and that is Next(lo).
	for hi.Sub(lo) >= time.Second {
		mid := lo.Add(hi.Sub(lo) / 2)
		if n := f.Next(mid); n.IsZero() || !n.After(t) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return f.Next(lo)
}

// String renders the spec for the CLI: "every 10s",
// "cron 0 2 * * 1-5 (Europe/Berlin)".
func (f *FireTimes) String() string {
	if f.every > 0 {
		return "every " + formatEvery(f.every)
	}
	return fmt.Sprintf("cron %s (%s)", f.expr, f.zone)
}

// formatEvery renders d as time.Duration does, without the zero units it
// appends: 10m rather than 10m0s, 1h rather than 1h0m0s.
func formatEvery(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// gridFloor returns the last multiple of f.every since the Unix epoch that
// is not after t, without overflow for any representable t.
func (f *FireTimes) gridFloor(t time.Time) time.Time {
	e := int64(f.every)
	// (sec*1e9 + nsec) mod e, with sec reduced mod e first and the product
	// taken in 128 bits.
	s := t.Unix() % e
	if s < 0 {
		s += e
	}
	hi, lo := bits.Mul64(uint64(s), uint64(time.Second))
	r := bits.Rem64(hi, lo, uint64(e))
	r = (r + uint64(t.Nanosecond())) % uint64(e)
	return t.Add(-time.Duration(r))
}

// Cron in a zone other than UTC. A wall-clock time is held as the UTC time
// with the same fields; the schedule steps through those, and zone periods
// (time.ZoneBounds) map them back to instants.

// wall returns the wall-clock time of t in f's zone.
func (f *FireTimes) wall(t time.Time) time.Time {
	_, off := t.In(f.loc).Zone()
	return t.UTC().Add(time.Duration(off) * time.Second)
}

// zonePeriod is a stretch of time with one UTC offset; a zero start or end
// means unbounded.
type zonePeriod struct {
	start, end time.Time
	off        time.Duration
}

func (f *FireTimes) periodAt(t time.Time) zonePeriod {
	lt := t.In(f.loc)
	_, off := lt.Zone()
	start, end := lt.ZoneBounds()
	return zonePeriod{start: start, end: end, off: time.Duration(off) * time.Second}
}

func (p zonePeriod) contains(t time.Time) bool {
	return (p.start.IsZero() || !t.Before(p.start)) && (p.end.IsZero() || t.Before(p.end))
}

// firstInstant returns the earliest instant whose wall-clock time is w or,
// if w does not exist because the clock jumped over it, the instant of the
// jump.
func (f *FireTimes) firstInstant(w time.Time) time.Time {
	// UTC offsets lie within -12h..+14h, so the instant lies within
	// [w-14h, w+12h]: walk the zone periods over that span.
	var prev zonePeriod
	for t, i := w.Add(-15*time.Hour), 0; ; i++ {
		p := f.periodAt(t)
		if i > 0 && prev.off < p.off && !w.Before(p.start.Add(prev.off)) && w.Before(p.start.Add(p.off)) {
			return p.start.UTC() // w lies in the gap this jump left
		}
		if x := w.Add(-p.off); p.contains(x) {
			return x.UTC()
		}
		if p.end.IsZero() || p.end.After(w.Add(13*time.Hour)) {
			// Not reached for real zones; read w in the offset at w.
			return w.Add(-f.periodAt(w).off).UTC()
		}
		prev, t = p, p.end
	}
}

// nextFirst returns the first fire time after t, counting each wall-clock
// time once at its first instant.
func (f *FireTimes) nextFirst(t time.Time) time.Time {
	w := f.wall(t)
	// In the second pass of a repeated hour the walls ahead in that hour
	// first happened before t: resume after the repeated hour.
	p := f.periodAt(t)
	if !p.start.IsZero() {
		before := f.periodAt(p.start.Add(-time.Nanosecond))
		if d := before.off - p.off; d > 0 && t.Before(p.start.Add(d)) {
			if end := p.start.UTC().Add(before.off - time.Nanosecond); end.After(w) {
				w = end
			}
		}
	}
	for {
		w = f.sched.Next(w)
		if w.IsZero() {
			return w
		}
		if x := f.firstInstant(w); x.After(t) {
			return x
		}
	}
}

// nextSecond returns the first fire time after t on the second pass of a
// repeated hour (the current one or the next), or zero if there is none
// before the next change of offset.
func (f *FireTimes) nextSecond(t time.Time) time.Time {
	var best time.Time
	p := f.periodAt(t)
	// t is itself in the second pass of a repeated hour.
	if !p.start.IsZero() {
		before := f.periodAt(p.start.Add(-time.Nanosecond))
		if d := before.off - p.off; d > 0 && t.Before(p.start.Add(d)) {
			if w := f.sched.Next(f.wall(t)); !w.IsZero() && w.Before(p.start.UTC().Add(before.off)) {
				best = w.Add(-p.off)
			}
		}
	}
	if best.IsZero() && !p.end.IsZero() {
		next := f.periodAt(p.end)
		if next.off < p.off { // the clock goes back at p.end
			from := p.end.UTC().Add(next.off) // wall clock just after the change
			if w := f.sched.Next(from.Add(-time.Nanosecond)); !w.IsZero() && w.Before(p.end.UTC().Add(p.off)) {
				best = w.Add(-next.off)
			}
		}
	}
	return best
}
