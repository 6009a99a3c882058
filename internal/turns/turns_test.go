package turns

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The turn log keeps the latest 64 turns, one per slot, and its text
// reads back as the same slots.
func TestTurnLogEncodesTheLatestTurns(t *testing.T) {
	var l Log
	require.Equal(t, "", l.Encode())
	require.Nil(t, Decode(""))
	for k := int64(1_780_000_000); k < 1_780_000_000+300; k += 3 {
		l.Record(k)
		l.Record(k) // a widened slot's second turn
	}
	enc := l.Encode()
	got := Decode(enc)
	require.Len(t, got, turnsKept)
	require.Equal(t, int64(1_780_000_297), got[0], "newest first")
	require.Equal(t, int64(1_780_000_297-3*(turnsKept-1)), got[turnsKept-1])
	require.True(t, strings.HasPrefix(enc, "1780000297,3,3"), enc)
	require.Less(t, len(enc), 1000, "fits the column")
	require.Equal(t, []int64{10, 7}, Decode("10,3,x,4"), "unreadable text ends the list")
}
