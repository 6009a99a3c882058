package main

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A long stop reports a new checkpoint at every interval, from the start
// until the stop is over.
func TestStopWithProgressReportsUntilStopped(t *testing.T) {
	release := make(chan struct{})
	reports := make(chan uint32, 100)
	done := make(chan error, 1)
	go func() {
		done <- stopWithProgress(func() error { <-release; return errors.New("late") }, time.Millisecond,
			func(c uint32) { reports <- c })
	}()
	for want := uint32(1); want <= 3; want++ {
		require.Equal(t, want, <-reports, "checkpoints count up")
	}
	close(release)
	require.EqualError(t, <-done, "late")

	var got []uint32
	require.NoError(t, stopWithProgress(func() error { return nil }, time.Hour, func(c uint32) { got = append(got, c) }))
	require.Equal(t, []uint32{1}, got, "a quick stop reports once")
}
