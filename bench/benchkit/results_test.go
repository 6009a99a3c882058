package benchkit

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func rounds(table, row, better string, a, b []float64) []Result {
	var out []Result
	for i := range a {
		out = append(out,
			Result{Side: "A", Table: table, Row: row, Value: a[i], Better: better, Round: i + 1},
			Result{Side: "B", Table: table, Row: row, Value: b[i], Better: better, Round: i + 1})
	}
	return out
}

func TestRatioIntervals(t *testing.T) {
	var rs []Result
	// B ahead by 20 % in every round, while the machine drifts by 30 %.
	rs = append(rs, rounds("burn", "jobs/s", Higher,
		[]float64{100, 110, 90, 120, 95, 105, 85},
		[]float64{120, 132, 108, 144, 114, 126, 102})...)
	// The same in every round.
	rs = append(rs, rounds("burn", "fewest", Higher, []float64{1, 2, 3}, []float64{1, 2, 3})...)
	// Lower is better: B sends half the statements.
	rs = append(rs, rounds("burn", "statements", Lower, []float64{10, 12, 11}, []float64{5, 6, 5.5})...)
	// Ahead in some rounds, behind in others.
	rs = append(rs, rounds("burn", "mixed", Higher,
		[]float64{100, 100, 100, 100, 100, 100}, []float64{80, 120, 90, 110, 85, 115})...)
	// Two rounds say nothing about a spread.
	rs = append(rs, rounds("burn", "short", Higher, []float64{1, 2}, []float64{2, 3})...)

	iv := RatioIntervals(rs, "A", "B", 0.9, 2000, 1)
	got := iv[[2]string{"burn", "jobs/s"}]
	require.InDelta(t, 1.2, got.Lo, 0.001, "a lead kept in every round holds in every resampling")
	require.InDelta(t, 1.2, got.Hi, 0.001)
	require.Equal(t, Interval{1, 1}, iv[[2]string{"burn", "fewest"}])
	require.Equal(t, Interval{2, 2}, iv[[2]string{"burn", "statements"}], "lower is better: A ÷ B")
	mixed := iv[[2]string{"burn", "mixed"}]
	require.Less(t, mixed.Lo, 1.0)
	require.Greater(t, mixed.Hi, 1.0, "a lead in some rounds only must not look like a lead")
	_, ok := iv[[2]string{"burn", "short"}]
	require.False(t, ok)

	// A zero to divide by in some draws: no interval rather than one from
	// the draws that happened to avoid it.
	zero := rounds("burn", "zeros", Higher, []float64{0, 5, 6, 7}, []float64{1, 5, 6, 7})
	_, ok = RatioIntervals(zero, "A", "B", 0.9, 2000, 1)[[2]string{"burn", "zeros"}]
	require.False(t, ok)

	// Rounds pair by their number: a round one side lacks is left out,
	// not paired with the other side's next.
	gap := rounds("burn", "gap", Higher, []float64{100, 1, 100, 100, 100}, []float64{150, 150, 1, 150, 150})
	gap = slices.DeleteFunc(gap, func(r Result) bool { return r.Side == "A" && r.Round == 3 || r.Side == "B" && r.Round == 2 })
	gap = append(gap, Result{Side: "A", Table: "burn", Row: "gap", Value: 1, Better: Higher, Round: 6})
	require.Equal(t, Interval{1.5, 1.5}, RatioIntervals(gap, "A", "B", 0.9, 2000, 1)[[2]string{"burn", "gap"}])

	// Repeatable for noisy rows too, whatever the order the rows come in.
	var noisy []Result
	for i, row := range []string{"a", "b", "c", "d", "e", "f"} {
		noisy = append(noisy, rounds("t", row, Higher,
			[]float64{100, 93, 107, 88, 112, 97, 104}, []float64{101 + float64(i), 90, 115, 92, 105, 99, 111})...)
	}
	want := RatioIntervals(noisy, "A", "B", 0.9, 2000, 7)
	for range 20 {
		rand.Shuffle(len(noisy), func(i, j int) { noisy[i], noisy[j] = noisy[j], noisy[i] })
		require.Equal(t, want, RatioIntervals(noisy, "A", "B", 0.9, 2000, 7), "the same seed gives the same intervals")
	}
}

// A figure folded from rounds keeps its range, and the table shows it;
// one that did not move shows alone.
func TestMediansKeepTheRange(t *testing.T) {
	rs := rounds("burn", "jobs/s", Higher, []float64{110, 90, 100}, []float64{200, 200, 200})
	m := Medians(rs)
	require.Len(t, m, 2)
	require.Equal(t, []float64{100, 90, 110}, []float64{m[0].Value, m[0].Min, m[0].Max})
	var b strings.Builder
	Tables(&b, []string{"A", "B"}, m, nil)
	require.Contains(t, b.String(), "| jobs/s | 100 (90.0–110) | 200 | 2.00× |")
}
