package jobs

import (
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func utc(y int, mo time.Month, d, h, mi, s int) time.Time {
	return time.Date(y, mo, d, h, mi, s, 0, time.UTC)
}

func mustFire(t *testing.T, s FireSpec) *FireTimes {
	t.Helper()
	f, err := CompileFireSpec(s)
	require.NoError(t, err)
	return f
}

func loadZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

func TestFireEveryGrid(t *testing.T) {
	every10m := mustFire(t, FireSpec{Every: 10 * time.Minute})
	require.Equal(t, utc(2026, 5, 4, 12, 10, 0), every10m.Next(utc(2026, 5, 4, 12, 3, 17)))
	require.Equal(t, utc(2026, 5, 4, 12, 20, 0), every10m.Next(utc(2026, 5, 4, 12, 10, 0)), "strictly after")
	require.Equal(t, utc(2026, 5, 4, 12, 10, 0), every10m.Next(utc(2026, 5, 4, 12, 10, 0).Add(-time.Nanosecond)))
	// The grid is the same whatever zone t is read in; the result is UTC.
	berlin := loadZone(t, "Europe/Berlin")
	next := every10m.Next(time.Date(2026, 5, 4, 14, 3, 0, 0, berlin))
	require.Equal(t, utc(2026, 5, 4, 12, 10, 0), next)
	require.Equal(t, time.UTC, next.Location())

	every1s := mustFire(t, FireSpec{Every: time.Second})
	require.Equal(t, utc(2026, 5, 4, 12, 0, 1), every1s.Next(utc(2026, 5, 4, 12, 0, 0).Add(500*time.Millisecond)))
	require.Equal(t, utc(2026, 5, 4, 12, 0, 1), every1s.Next(utc(2026, 5, 4, 12, 0, 0)))

	// A period that does not divide a day still sits on the epoch grid.
	every7m := mustFire(t, FireSpec{Every: 7 * time.Minute})
	n := every7m.Next(utc(2026, 5, 4, 12, 0, 0))
	require.Zero(t, n.Unix()%(7*60))
	require.True(t, n.After(utc(2026, 5, 4, 12, 0, 0)) && n.Sub(utc(2026, 5, 4, 12, 0, 0)) <= 7*time.Minute)

	// Before the epoch and far from it, without overflow.
	hourly := mustFire(t, FireSpec{Every: time.Hour})
	require.Equal(t, utc(1, 1, 1, 1, 0, 0), hourly.Next(time.Time{}))
	require.Equal(t, utc(1969, 12, 31, 23, 0, 0), hourly.Next(utc(1969, 12, 31, 22, 59, 59)))
	oddly := mustFire(t, FireSpec{Every: 1500 * time.Millisecond})
	for _, at := range []time.Time{{}, utc(1500, 3, 1, 0, 0, 0), utc(2026, 5, 4, 12, 0, 0), utc(9000, 1, 1, 0, 0, 0)} {
		n := oddly.Next(at)
		require.True(t, n.After(at) && n.Sub(at) <= 1500*time.Millisecond, "%v -> %v", at, n)
		ns := new(big.Int).Mul(big.NewInt(n.Unix()), big.NewInt(1e9))
		ns.Add(ns, big.NewInt(int64(n.Nanosecond())))
		require.Zero(t, new(big.Int).Mod(ns, big.NewInt(1.5e9)).Sign(), "%v is on the grid", n)
	}
}

func TestFireEveryBetween(t *testing.T) {
	every1s := mustFire(t, FireSpec{Every: time.Second})
	after := utc(2026, 5, 4, 12, 0, 0)
	until := after.Add(10 * time.Second)

	times, more := every1s.Between(after, until, 4)
	require.Equal(t, []time.Time{after.Add(time.Second), after.Add(2 * time.Second), after.Add(3 * time.Second), after.Add(4 * time.Second)}, times)
	require.True(t, more)

	times, more = every1s.Between(after, until, 10)
	require.Len(t, times, 10)
	require.Equal(t, after.Add(time.Second), times[0], "after is excluded")
	require.Equal(t, until, times[9], "until is included")
	require.False(t, more)

	times, more = every1s.Between(after, until, 0)
	require.Empty(t, times)
	require.True(t, more, "limit 0 only reports whether any are due")

	times, more = every1s.Between(after, after.Add(999*time.Millisecond), 5)
	require.Empty(t, times)
	require.False(t, more)
	times, more = every1s.Between(after, after, 5)
	require.Empty(t, times)
	require.False(t, more)
}

func TestFireEveryLatest(t *testing.T) {
	every10m := mustFire(t, FireSpec{Every: 10 * time.Minute})
	at := func(h, m int) time.Time { return utc(2026, 5, 4, h, m, 0) }
	require.Equal(t, at(12, 30), every10m.Latest(at(12, 0), at(12, 35)))
	require.Equal(t, at(12, 30), every10m.Latest(at(12, 29), at(12, 30)), "t is included")
	require.True(t, every10m.Latest(at(12, 30), at(12, 35)).IsZero(), "after is excluded")
	require.True(t, every10m.Latest(at(12, 31), at(12, 39)).IsZero())
	require.True(t, every10m.Latest(at(12, 40), at(12, 35)).IsZero(), "t before after")

	// A 10-day outage of an every-1s schedule is arithmetic, as is one of
	// a thousand years or since the zero time.
	every1s := mustFire(t, FireSpec{Every: time.Second})
	down := utc(2026, 5, 4, 12, 0, 0)
	up := down.Add(10*24*time.Hour + 700*time.Millisecond)
	require.Equal(t, down.Add(10*24*time.Hour), every1s.Latest(down, up))
	require.Equal(t, down.Add(10*24*time.Hour), every1s.Latest(down.AddDate(-1000, 0, 0), up))
	require.Equal(t, down.Add(10*24*time.Hour), every1s.Latest(time.Time{}, up))
}

func TestFireCronFields(t *testing.T) {
	weekdays := mustFire(t, FireSpec{Cron: "0 2 * * 1-5"})
	// Friday 2026-01-16 03:00 -> Monday 02:00.
	require.Equal(t, utc(2026, 1, 19, 2, 0, 0), weekdays.Next(utc(2026, 1, 16, 3, 0, 0)))
	require.Equal(t, utc(2026, 1, 16, 2, 0, 0), weekdays.Next(utc(2026, 1, 16, 1, 59, 59)))

	// Six fields: seconds first.
	quarterMinute := mustFire(t, FireSpec{Cron: "*/15 * * * * *"})
	require.Equal(t, utc(2026, 1, 16, 12, 0, 15), quarterMinute.Next(utc(2026, 1, 16, 12, 0, 7)))
	require.Equal(t, utc(2026, 1, 16, 12, 1, 0), quarterMinute.Next(utc(2026, 1, 16, 12, 0, 45)))
	at30s := mustFire(t, FireSpec{Cron: "30 0 2 * * *"})
	require.Equal(t, utc(2026, 1, 16, 2, 0, 30), at30s.Next(utc(2026, 1, 16, 2, 0, 0)))
	require.Equal(t, utc(2026, 1, 17, 2, 0, 30), at30s.Next(utc(2026, 1, 16, 2, 0, 30)))
	// Five fields fire at second 0, strictly after a sub-second t.
	everyMinute := mustFire(t, FireSpec{Cron: "* * * * *"})
	require.Equal(t, utc(2026, 1, 16, 12, 1, 0), everyMinute.Next(utc(2026, 1, 16, 12, 0, 0).Add(time.Nanosecond)))

	// Descriptors, names, and crontab's either-day rule when both day
	// fields are restricted: the 1st of the month or any Monday.
	require.Equal(t, utc(2026, 1, 16, 13, 0, 0), mustFire(t, FireSpec{Cron: "@hourly"}).Next(utc(2026, 1, 16, 12, 0, 0)))
	require.Equal(t, utc(2026, 1, 17, 0, 0, 0), mustFire(t, FireSpec{Cron: "@daily"}).Next(utc(2026, 1, 16, 12, 0, 0)))
	require.Equal(t, utc(2026, 2, 1, 0, 0, 0), mustFire(t, FireSpec{Cron: "@monthly"}).Next(utc(2026, 1, 16, 12, 0, 0)))
	require.Equal(t, utc(2026, 3, 2, 9, 0, 0), mustFire(t, FireSpec{Cron: "0 9 * MAR MON"}).Next(utc(2026, 1, 16, 12, 0, 0)))
	either, _ := mustFire(t, FireSpec{Cron: "0 0 1 * MON"}).Between(utc(2026, 1, 16, 0, 0, 0), utc(2026, 2, 10, 0, 0, 0), 10)
	require.Equal(t, []time.Time{utc(2026, 1, 19, 0, 0, 0), utc(2026, 1, 26, 0, 0, 0), utc(2026, 2, 1, 0, 0, 0), utc(2026, 2, 2, 0, 0, 0), utc(2026, 2, 9, 0, 0, 0)}, either)
}

func TestFireCronTimeZone(t *testing.T) {
	berlin := mustFire(t, FireSpec{Cron: "0 2 * * *", TimeZone: "Europe/Berlin"})
	require.Equal(t, utc(2026, 1, 15, 1, 0, 0), berlin.Next(utc(2026, 1, 14, 12, 0, 0)), "CET is UTC+1")
	require.Equal(t, utc(2026, 7, 15, 0, 0, 0), berlin.Next(utc(2026, 7, 14, 12, 0, 0)), "CEST is UTC+2")
	// 2026-03-29 02:00 does not exist in Berlin (02:00 CET -> 03:00 CEST):
	// it fires at the jump, 01:00Z, once.
	times, _ := berlin.Between(utc(2026, 3, 27, 12, 0, 0), utc(2026, 3, 31, 12, 0, 0), 10)
	require.Equal(t, []time.Time{utc(2026, 3, 28, 1, 0, 0), utc(2026, 3, 29, 1, 0, 0), utc(2026, 3, 30, 0, 0, 0), utc(2026, 3, 31, 0, 0, 0)}, times)

	// "" and "UTC" are the same zone.
	require.Equal(t, utc(2026, 1, 15, 2, 0, 0), mustFire(t, FireSpec{Cron: "0 2 * * *", TimeZone: "UTC"}).Next(utc(2026, 1, 14, 12, 0, 0)))
}

// New York springs forward on 2026-03-08: 02:00 EST (07:00Z) becomes
// 03:00 EDT, so 02:00-02:59 do not exist that day.
func TestFireCronDSTSpringForward(t *testing.T) {
	ny := "America/New_York"
	from, until := utc(2026, 3, 7, 0, 0, 0), utc(2026, 3, 10, 0, 0, 0)

	// 02:30 does not exist: the occurrence is shifted to the jump (03:00
	// EDT, 07:00Z), not skipped, and fires once.
	at0230 := mustFire(t, FireSpec{Cron: "30 2 * * *", TimeZone: ny})
	times, more := at0230.Between(from, until, 10)
	require.Equal(t, []time.Time{
		utc(2026, 3, 7, 7, 30, 0), // 02:30 EST
		utc(2026, 3, 8, 7, 0, 0),  // 02:30 does not exist: 03:00 EDT
		utc(2026, 3, 9, 6, 30, 0), // 02:30 EDT
	}, times)
	require.False(t, more)

	// Several fire times in the gap collapse into one at the jump.
	twice := mustFire(t, FireSpec{Cron: "15,45 2 * * *", TimeZone: ny})
	times, _ = twice.Between(utc(2026, 3, 8, 0, 0, 0), utc(2026, 3, 9, 0, 0, 0), 10)
	require.Equal(t, []time.Time{utc(2026, 3, 8, 7, 0, 0)}, times)

	// A schedule through the night keeps its pace in real time: 02:00,
	// 02:30 and 03:00 are all the instant 07:00Z.
	halfHourly := mustFire(t, FireSpec{Cron: "*/30 * * * *", TimeZone: ny})
	times, _ = halfHourly.Between(utc(2026, 3, 8, 5, 59, 0), utc(2026, 3, 8, 8, 0, 0), 10)
	require.Equal(t, []time.Time{utc(2026, 3, 8, 6, 0, 0), utc(2026, 3, 8, 6, 30, 0), utc(2026, 3, 8, 7, 0, 0), utc(2026, 3, 8, 7, 30, 0), utc(2026, 3, 8, 8, 0, 0)}, times)
}

// New York falls back on 2026-11-01: 02:00 EDT (06:00Z) becomes 01:00 EST,
// so 01:00-01:59 happen twice (05:00Z-05:59Z and 06:00Z-06:59Z).
func TestFireCronDSTFallBack(t *testing.T) {
	ny := "America/New_York"

	at0130 := mustFire(t, FireSpec{Cron: "30 1 * * *", TimeZone: ny})
	times, more := at0130.Between(utc(2026, 10, 31, 0, 0, 0), utc(2026, 11, 3, 0, 0, 0), 10)
	require.Equal(t, []time.Time{
		utc(2026, 10, 31, 5, 30, 0), // 01:30 EDT
		utc(2026, 11, 1, 5, 30, 0),  // first 01:30 (EDT); not again at 06:30Z
		utc(2026, 11, 2, 6, 30, 0),  // 01:30 EST
	}, times)
	require.False(t, more)
	// From inside the repeated hour, whichever pass.
	require.Equal(t, utc(2026, 11, 2, 6, 30, 0), at0130.Next(utc(2026, 11, 1, 5, 30, 0)))
	require.Equal(t, utc(2026, 11, 2, 6, 30, 0), at0130.Next(utc(2026, 11, 1, 6, 0, 0)))
	require.Equal(t, utc(2026, 11, 2, 6, 30, 0), at0130.Next(utc(2026, 11, 1, 6, 29, 59)))

	// Pinned hours fire once per wall-clock time.
	pinned := mustFire(t, FireSpec{Cron: "0 1-3 * * *", TimeZone: ny})
	times, _ = pinned.Between(utc(2026, 11, 1, 4, 0, 0), utc(2026, 11, 1, 12, 0, 0), 10)
	require.Equal(t, []time.Time{utc(2026, 11, 1, 5, 0, 0), utc(2026, 11, 1, 7, 0, 0), utc(2026, 11, 1, 8, 0, 0)}, times)

	// Schedules over every hour keep their pace through both passes.
	hourly := mustFire(t, FireSpec{Cron: "0 * * * *", TimeZone: ny})
	times, _ = hourly.Between(utc(2026, 11, 1, 3, 30, 0), utc(2026, 11, 1, 8, 0, 0), 10)
	require.Equal(t, []time.Time{utc(2026, 11, 1, 4, 0, 0), utc(2026, 11, 1, 5, 0, 0), utc(2026, 11, 1, 6, 0, 0), utc(2026, 11, 1, 7, 0, 0), utc(2026, 11, 1, 8, 0, 0)}, times)
	every20m := mustFire(t, FireSpec{Cron: "*/20 * * * *", TimeZone: ny})
	times, _ = every20m.Between(utc(2026, 11, 1, 4, 30, 0), utc(2026, 11, 1, 7, 30, 0), 20)
	require.Len(t, times, 9)
	for i := 1; i < len(times); i++ {
		require.Equal(t, 20*time.Minute, times[i].Sub(times[i-1]), "%v", times)
	}
}

func TestFireCronMonthEnds(t *testing.T) {
	day31 := mustFire(t, FireSpec{Cron: "0 0 31 * *"})
	times, _ := day31.Between(utc(2026, 1, 1, 0, 0, 0), utc(2027, 1, 1, 0, 0, 0), 20)
	require.Equal(t, []time.Time{
		utc(2026, 1, 31, 0, 0, 0), utc(2026, 3, 31, 0, 0, 0), utc(2026, 5, 31, 0, 0, 0), utc(2026, 7, 31, 0, 0, 0),
		utc(2026, 8, 31, 0, 0, 0), utc(2026, 10, 31, 0, 0, 0), utc(2026, 12, 31, 0, 0, 0),
	}, times)

	leap := mustFire(t, FireSpec{Cron: "0 0 29 2 *"})
	require.Equal(t, utc(2028, 2, 29, 0, 0, 0), leap.Next(utc(2026, 1, 1, 0, 0, 0)))
	require.Equal(t, utc(2032, 2, 29, 0, 0, 0), leap.Next(utc(2028, 2, 29, 0, 0, 0)))
	// 2100 is not a leap year: eight years to the next 29 February.
	require.Equal(t, utc(2104, 2, 29, 0, 0, 0), leap.Next(utc(2096, 3, 1, 0, 0, 0)))

	last := mustFire(t, FireSpec{Cron: "0 0 L * *"})
	require.Equal(t, utc(2027, 2, 28, 0, 0, 0), last.Next(utc(2027, 2, 1, 0, 0, 0)))
	require.Equal(t, utc(2028, 2, 29, 0, 0, 0), last.Next(utc(2028, 2, 1, 0, 0, 0)))
}

// firePropertySpecs covers UTC, zones with a one-hour change both ways, a
// half-hour change (Lord Howe) and a skipped day (Apia, 2011-12-30).
var firePropertySpecs = []FireSpec{
	{Cron: "30 2 * * *", TimeZone: "America/New_York"},
	{Cron: "30 1 * * *", TimeZone: "America/New_York"},
	{Cron: "*/20 * * * *", TimeZone: "America/New_York"},
	{Cron: "0 1-3 * * *", TimeZone: "America/New_York"},
	{Cron: "15,45 2 * * *", TimeZone: "America/New_York"},
	{Cron: "0 2 * * *", TimeZone: "Europe/Berlin"},
	{Cron: "*/7 * * * *", TimeZone: "Australia/Lord_Howe"},
	{Cron: "45 1 * * *", TimeZone: "Australia/Lord_Howe"},
	{Cron: "0 12 * * *", TimeZone: "Pacific/Apia"},
	{Cron: "0 2 * * 1-5"},
	{Every: 7 * time.Minute},
}

// Instants around the zones' changes of offset.
var fireTransitions = []time.Time{
	utc(2026, 3, 8, 7, 0, 0), utc(2026, 11, 1, 6, 0, 0), // New York
	utc(2026, 3, 29, 1, 0, 0), utc(2026, 10, 25, 1, 0, 0), // Berlin
	utc(2026, 4, 4, 15, 0, 0), utc(2026, 10, 3, 15, 30, 0), // Lord Howe
	utc(2011, 12, 30, 10, 0, 0), // Apia skips 30 December 2011
}

// A clock that jumps is just another t: Next is a pure, monotonic function
// whose fire times are fixed points, whatever order t comes in.
func TestFireNextConsistentWhenClockJumps(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range firePropertySpecs {
		f := mustFire(t, s)
		for _, center := range fireTransitions {
			// Forward a day, back an hour, in irregular steps around the change.
			at := center.Add(-36 * time.Hour)
			var sorted []time.Time
			for range 300 {
				switch rng.IntN(3) {
				case 0:
					at = at.Add(24 * time.Hour)
				case 1:
					at = at.Add(-time.Hour)
				default:
					at = at.Add(time.Duration(rng.Int64N(int64(3 * time.Hour))))
				}
				if at.After(center.Add(36 * time.Hour)) {
					at = center.Add(-time.Duration(rng.Int64N(int64(36 * time.Hour))))
				}
				n := f.Next(at)
				require.True(t, n.After(at), "%v: Next(%v) = %v", f, at, n)
				require.Equal(t, n, f.Next(n.Add(-time.Nanosecond)), "%v: Next(Next(%v)-1ns)", f, at)
				require.Equal(t, n, f.Next(at), "%v: Next(%v) is pure", f, at)
				sorted = append(sorted, at)
			}
			// Monotonic: a later t never gives an earlier Next.
			sorted = append(sorted, center.Add(-time.Nanosecond), center, center.Add(time.Nanosecond))
			slices.SortFunc(sorted, time.Time.Compare)
			for i := 1; i < len(sorted); i++ {
				require.False(t, f.Next(sorted[i]).Before(f.Next(sorted[i-1])), "%v: Next(%v) > Next(%v)", f, sorted[i-1], sorted[i])
			}
		}
	}
}

// refFireTimes is a slow model of the cron rules in the FireTimes comment:
// scan instants minute by minute; a matching wall-clock time fires at its
// first instant (and at its second if the hour field is every hour); wall
// times the clock jumps over fire at the jump.
func refFireTimes(f *FireTimes, from, until time.Time) []time.Time {
	matches := func(w time.Time) bool { return f.sched.Next(w.Add(-time.Second)).Equal(w) }
	seen := map[time.Time]bool{}
	var out []time.Time
	prevWall := f.wall(from)
	for x := from.Add(time.Minute); !x.After(until); x = x.Add(time.Minute) {
		w := f.wall(x)
		fire := false
		for skipped := prevWall.Add(time.Minute); skipped.Before(w); skipped = skipped.Add(time.Minute) {
			fire = fire || matches(skipped) // jumped over
			seen[skipped] = true
		}
		if matches(w) && (!seen[w] || f.everyHour) {
			fire = true
		}
		seen[w] = true
		if fire {
			out = append(out, x)
		}
		prevWall = w
	}
	return out
}

func TestFireCronMatchesReferenceAroundChanges(t *testing.T) {
	for _, s := range firePropertySpecs {
		if s.Cron == "" || s.TimeZone == "" {
			continue
		}
		f := mustFire(t, s)
		for _, center := range fireTransitions {
			from, until := center.Add(-30*time.Hour), center.Add(30*time.Hour)
			got, more := f.Between(from, until, 1000)
			require.False(t, more)
			require.Equal(t, refFireTimes(f, from, until), got, "%v around %v", f, center)
		}
	}
}

func TestFireLatest(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, s := range firePropertySpecs {
		f := mustFire(t, s)
		for _, center := range fireTransitions {
			for range 20 {
				after := center.Add(time.Duration(rng.Int64N(int64(48*time.Hour))) - 24*time.Hour)
				until := after.Add(time.Duration(rng.Int64N(int64(30 * time.Hour))))
				all, _ := f.Between(after, until, 10000)
				want := time.Time{}
				if len(all) > 0 {
					want = all[len(all)-1]
				}
				require.Equal(t, want, f.Latest(after, until), "%v: Latest(%v, %v)", f, after, until)
			}
		}
	}

	// A 10-day outage of a schedule firing every second, and a yearly one
	// missed for decades: found by search, not by walking.
	everySecond := mustFire(t, FireSpec{Cron: "* * * * * *", TimeZone: "America/New_York"})
	down := utc(2026, 10, 25, 12, 0, 0)
	up := down.Add(10*24*time.Hour + 300*time.Millisecond)
	require.Equal(t, down.Add(10*24*time.Hour), everySecond.Latest(down, up))
	yearly := mustFire(t, FireSpec{Cron: "@yearly", TimeZone: "Europe/Berlin"})
	require.Equal(t, utc(2025, 12, 31, 23, 0, 0), yearly.Latest(utc(1990, 1, 1, 0, 0, 0), utc(2026, 6, 1, 0, 0, 0)))
	require.Equal(t, utc(2025, 12, 31, 23, 0, 0), yearly.Latest(time.Time{}, utc(2026, 6, 1, 0, 0, 0)))
	require.True(t, yearly.Latest(utc(2025, 12, 31, 23, 0, 0), utc(2026, 6, 1, 0, 0, 0)).IsZero())
	// In the repeated hour of the fall-back, the occurrence is the first 01:30.
	at0130 := mustFire(t, FireSpec{Cron: "30 1 * * *", TimeZone: "America/New_York"})
	require.Equal(t, utc(2026, 11, 1, 5, 30, 0), at0130.Latest(utc(2026, 10, 31, 12, 0, 0), utc(2026, 11, 1, 6, 45, 0)))
}

func TestFireSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		spec FireSpec
		want string
	}{
		{FireSpec{}, "neither every nor cron"},
		{FireSpec{Every: time.Minute, Cron: "* * * * *"}, "both every and cron"},
		{FireSpec{Every: 500 * time.Millisecond}, "every 500ms: must be at least 1s"},
		{FireSpec{Every: -time.Minute}, "every -1m0s: must be at least 1s"},
		{FireSpec{Every: time.Minute, TimeZone: "Europe/Berlin"}, `time zone "Europe/Berlin" given with every 1m: time zones apply only to cron`},
		{FireSpec{Cron: "61 * * * *"}, `cron "61 * * * *": minute field "61": end of range (61) above maximum (59)`},
		{FireSpec{Cron: "0 0 * 13 *"}, `cron "0 0 * 13 *": month field "13"`},
		{FireSpec{Cron: "0 25 * * *"}, `cron "0 25 * * *": hour field "25"`},
		{FireSpec{Cron: "0 0 * * FUN"}, `cron "0 0 * * FUN": day of week field "FUN"`},
		{FireSpec{Cron: "60 0 0 * * *"}, `cron "60 0 0 * * *": second field "60"`},
		{FireSpec{Cron: "* * * *"}, `cron "* * * *": want 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first, have 4`},
		{FireSpec{Cron: "0 0 0 0 * * *"}, "have 7"},
		{FireSpec{Cron: "@fortnightly"}, `cron "@fortnightly": unrecognized descriptor`},
		{FireSpec{Cron: "@every 5m"}, `cron "@every 5m": use every instead of @every`},
		{FireSpec{Cron: "CRON_TZ=Europe/Berlin 0 2 * * *"}, "give the time zone as the schedule's time zone"},
		{FireSpec{Cron: "0 0 30 2 *"}, `cron "0 0 30 2 *": never fires`},
		{FireSpec{Cron: "0 2 * * *", TimeZone: "Mars/Olympus_Mons"}, `time zone "Mars/Olympus_Mons": unknown`},
		{FireSpec{Cron: "0 2 * * *", TimeZone: "Local"}, `time zone "Local": name an IANA zone`},
	} {
		f, err := CompileFireSpec(tc.spec)
		require.Error(t, err, "%+v", tc.spec)
		require.Nil(t, f)
		require.Contains(t, err.Error(), tc.want)
	}
}

func TestFireString(t *testing.T) {
	for spec, want := range map[FireSpec]string{
		{Every: 10 * time.Second}:                           "every 10s",
		{Every: 10 * time.Minute}:                           "every 10m",
		{Every: 90 * time.Minute}:                           "every 1h30m",
		{Every: 24 * time.Hour}:                             "every 24h",
		{Every: 1500 * time.Millisecond}:                    "every 1.5s",
		{Cron: " 0  2 * * 1-5 ", TimeZone: "Europe/Berlin"}: "cron 0 2 * * 1-5 (Europe/Berlin)",
		{Cron: "*/15 * * * * *"}:                            "cron */15 * * * * * (UTC)",
		{Cron: "@daily", TimeZone: "America/New_York"}:      "cron @daily (America/New_York)",
	} {
		require.Equal(t, want, mustFire(t, spec).String())
	}
}
