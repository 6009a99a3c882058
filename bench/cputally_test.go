package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Processes that end, start, or hand their id to another between samples
// each count what the samples saw them spend after the first.
func TestCPUTally(t *testing.T) {
	const ms = time.Millisecond
	var c cpuTally
	c.add(map[int]time.Duration{1: 100 * ms, 2: 50 * ms}) // the baseline
	require.Zero(t, c.total())
	c.add(map[int]time.Duration{1: 130 * ms, 2: 60 * ms, 3: 5 * ms}) // 3 started: all of it counts
	require.Equal(t, 45*ms, c.total())
	c.add(map[int]time.Duration{1: 150 * ms, 3: 25 * ms}) // 2 ended: its 10 ms stay
	require.Equal(t, 50*ms+10*ms+25*ms, c.total())
	c.add(map[int]time.Duration{1: 150 * ms, 3: 2 * ms}) // 3's id went to a new process
	require.Equal(t, 50*ms+10*ms+25*ms+2*ms, c.total())
}
