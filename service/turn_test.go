package service

import (
	"testing"

	"github.com/slotpoller/slotpoller/checkin"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/rotation"
	"github.com/stretchr/testify/require"
)

func TestPollersAheadSplitsAWidenedSlotEvenly(t *testing.T) {
	m := checkin.Membership{OK: true, Members: []checkin.Member{
		{Name: "a", Capacity: 10}, {Name: "b", Capacity: 10}, {Name: "c", Capacity: 10}, {Name: "d", Capacity: 10}}}
	// Slot 4 belongs to a (4 mod 4 = 0): ranks a0 b1 c2 d3.
	var got []int
	for r := range 4 {
		got = append(got, pollersAhead(m, rotation.Turn{Slot: 4, Rank: r}))
	}
	require.Equal(t, []int{40, 30, 20, 10}, got)
	// With 400 due jobs that finish at once, each turn's fair share of what
	// is left is then the same 100: one round spreads the burst evenly.
	left := 400
	for _, farm := range got {
		take := jobs.FairShare(store.QueueLoad{Due: left}, 0, 10, farm, 1000)
		require.Equal(t, 100, take)
		left -= take
	}
	require.Zero(t, left)
}
