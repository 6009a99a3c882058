package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseVmRSS(t *testing.T) {
	status := "Name:\tslotpoller\nVmPeak:\t 1300000 kB\nVmRSS:\t   24576 kB\nRssAnon:\t 10000 kB\n"
	b, err := parseVmRSS([]byte(status))
	require.NoError(t, err)
	require.Equal(t, int64(24576*1024), b)

	_, err = parseVmRSS([]byte("Name:\tslotpoller\nState:\tZ (zombie)\n"))
	require.Error(t, err, "a zombie has no VmRSS")
	_, err = parseVmRSS([]byte("VmRSS:\t 12 MB\n"))
	require.Error(t, err)
}

// A line through the samples gives its slope back; noise around a flat
// line gives about none; the start-up's growth before settle is left out.
func TestRSSSlope(t *testing.T) {
	const mb = 1 << 20
	var rising, flat []rssSample
	for i := range 60 {
		age := time.Duration(i) * 10 * time.Second
		rising = append(rising, rssSample{age: age, bytes: 50*mb + int64(i)*mb/6}) // 1 MiB a minute
		noise := int64(0)
		if i%2 == 1 {
			noise = mb / 2
		}
		flat = append(flat, rssSample{age: age, bytes: 40*mb + noise})
	}
	slope, ok := leastSquaresSlope(rising)
	require.True(t, ok)
	require.InDelta(t, float64(mb)/60, slope, 1)

	s := summarizeRSS(rising, 0)
	require.InDelta(t, 10.0, s.slope/mb, 1e-6, "1 MiB a minute is 10 MiB per 10 minutes")
	require.Equal(t, 60, s.fitted)

	s = summarizeRSS(flat, 5*time.Minute)
	require.InDelta(t, 0, s.slope/mb, 0.2)
	require.Equal(t, int64(40*mb), s.atSettle, "the first sample at 5 minutes (age 300 s, an even one)")
	require.Equal(t, int64(40*mb+mb/2), s.max)
	require.Equal(t, 30, s.fitted)

	// Growth in the first 5 minutes, flat after: the slope is flat.
	var settling []rssSample
	for i := range 60 {
		age := time.Duration(i) * 10 * time.Second
		b := int64(80 * mb)
		if age < 5*time.Minute {
			b = 20*mb + int64(i)*2*mb
		}
		settling = append(settling, rssSample{age: age, bytes: b})
	}
	s = summarizeRSS(settling, 5*time.Minute)
	require.Zero(t, s.slope)
	require.Equal(t, 30, s.fitted)
	require.Equal(t, int64(80*mb), s.atEnd)

	// A process that did not live to settle, or too few samples after:
	// no slope, and no reading at settle.
	s = summarizeRSS(rising[:30], 5*time.Minute)
	require.Zero(t, s.fitted)
	require.Zero(t, s.atSettle)
	s = summarizeRSS(rising[:32], 5*time.Minute)
	require.Zero(t, s.fitted, "two samples after settle make no slope")
	_, ok = leastSquaresSlope([]rssSample{{age: time.Second, bytes: 1}, {age: time.Second, bytes: 2}})
	require.False(t, ok, "samples at one age have no slope")
}
