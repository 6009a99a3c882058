package service

import (
	"bytes"
	"errors"
	"log/slog"
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

// A part that fails turn after turn is logged once when it breaks and once
// when it works again, at the levels its failureLog names.
func TestFailureLogSaysWhenAPartBreaksAndWhenItHeals(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	fl := logs(slog.LevelWarn, "retention failed", "retention works again")
	broken := errors.New("database away")
	for _, err := range []error{nil, broken, broken, broken, nil, nil, broken} {
		fl.report(log, err, "slot", 7)
	}
	require.Equal(t, "level=WARN msg=\"retention failed\" slot=7 err=\"database away\"\n"+
		"level=INFO msg=\"retention works again\"\n"+
		"level=WARN msg=\"retention failed\" slot=7 err=\"database away\"\n", buf.String())
	require.True(t, fl.failing)
}
