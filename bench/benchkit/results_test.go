package benchkit

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func rounds(table, row, better string, a, b []float64) []Result {
	var out []Result
	for i := range a {
		out = append(out,
			Result{Side: "A", Table: table, Row: row, Value: a[i], Better: better},
			Result{Side: "B", Table: table, Row: row, Value: b[i], Better: better})
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

	require.Equal(t, iv, RatioIntervals(rs, "A", "B", 0.9, 2000, 1), "the same seed gives the same intervals")
}
