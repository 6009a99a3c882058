package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A call that starts while another call of its key is in flight is run
// twice at once; one that starts after the other ended is a repeat.
func TestCallLogSeesTwiceAtOnce(t *testing.T) {
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	l := newCallLog(t0)
	l.start("a", "node-0", at(1))
	l.start("b", "node-1", at(1))
	l.start("a", "node-1", at(1.5)) // a is still running on node-0
	require.Equal(t, 2, l.byNode["node-1"])
	l.finish("a", "node-0")
	l.finish("a", "node-1")
	l.finish("b", "node-1")
	l.start("b", "node-2", at(40)) // after b ended
	l.finish("b", "node-2")
	require.Zero(t, l.byNode["node-0"])

	require.Len(t, l.repeats, 2)
	require.True(t, l.repeats[0].atOnce)
	require.Equal(t, "node-0", l.repeats[0].prevNode)
	require.False(t, l.repeats[1].atOnce)
	require.Equal(t, at(1), l.repeats[1].prevStart)
	require.Equal(t, 4, l.calls)
	require.Len(t, l.keys, 2)
	first, ok := l.firstStart("b")
	require.True(t, ok)
	require.Equal(t, at(1), first)
	_, ok = l.firstStart("c")
	require.False(t, ok)
}

// A repeat is explained by a death when the previous call came from the
// incarnation that died (it started within that incarnation's life) and
// the repeat came after the death.
func TestRepeatKinds(t *testing.T) {
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	deaths := []death{
		{node: "node-0", from: at(0), until: at(62), at: at(60)},
		{node: "node-1", from: at(0), at: at(120)}, // not started again
	}
	repeats := []repeatCall{
		{key: "a", prevNode: "node-0", prevStart: at(59.9), node: "node-1", start: at(91)}, // re-run after death 0
		{key: "b", prevNode: "node-0", prevStart: at(63), node: "node-1", start: at(95)},   // the next incarnation's call: unexplained
		{key: "c", prevNode: "node-2", prevStart: at(59), node: "node-1", start: at(91)},   // another node's: unexplained
		{key: "d", prevNode: "node-1", prevStart: at(119), node: "node-0", start: at(151)}, // re-run after death 1
		{key: "e", prevNode: "node-1", prevStart: at(100), node: "node-0", start: at(110)}, // repeated before node-1 died
		{key: "f", prevNode: "node-0", prevStart: at(59), node: "node-1", start: at(59.5), atOnce: true},
	}
	atOnce, afterDeath, unexplained, perDeath := repeatKinds(repeats, deaths)
	require.Equal(t, 1, atOnce)
	require.Equal(t, 2, afterDeath)
	require.Equal(t, 3, unexplained)
	require.Equal(t, []int{1, 1}, perDeath)
}

func TestWindowIndex(t *testing.T) {
	t0 := time.Now()
	bounds := []time.Time{t0, t0.Add(time.Minute), t0.Add(2 * time.Minute)}
	require.Equal(t, -1, windowIndex(bounds, t0.Add(-time.Second)))
	require.Equal(t, 0, windowIndex(bounds, t0))
	require.Equal(t, 0, windowIndex(bounds, t0.Add(59*time.Second)))
	require.Equal(t, 1, windowIndex(bounds, t0.Add(time.Minute)))
	require.Equal(t, -1, windowIndex(bounds, t0.Add(2*time.Minute)))
}

func TestShortDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		5 * time.Minute:                       "5m",
		30*time.Minute + 40*time.Second:       "30m40s",
		time.Hour:                             "1h",
		time.Hour + 2*time.Minute:             "1h2m",
		42 * time.Second:                      "42s",
		1500 * time.Millisecond:               "2s",
		250 * time.Millisecond:                "250ms",
		10*time.Minute + 400*time.Millisecond: "10m",
	} {
		require.Equal(t, want, shortDur(d), d.String())
	}
}
