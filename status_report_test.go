package main

import (
	"bytes"
	"testing"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/service"
	"github.com/stretchr/testify/require"
)

func TestStatusShowsRetryingAndCappedCounts(t *testing.T) {
	rep := service.StatusReport{Jobs: map[string]int{store.StateReady: 7, store.StateRetrying: 2, store.StateDone: service.JobCountCap, store.StateDead: 3},
		JobsCountCap: service.JobCountCap}
	var b bytes.Buffer
	require.NoError(t, writeStatus(&b, rep))
	require.Contains(t, b.String(), "jobs: ready=7 retrying=2 done=10000+ dead=3\n")

	b.Reset()
	require.NoError(t, writeStatus(&b, service.StatusReport{Jobs: map[string]int{}}))
	require.Contains(t, b.String(), "jobs: none\n")
}
