package turns

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A node restarted under its name takes over the turns its previous
// incarnation wrote, older than its own, and keeps the latest 64 in all:
// the slots polled before the restart stay polled on the strip.
func TestTurnLogCarriesThePreviousIncarnationsTurns(t *testing.T) {
	var before Log
	for k := int64(1000); k < 1030; k += 3 {
		before.Record(k)
	}
	var l Log
	l.Carry(before.Encode())
	require.Equal(t, before.Encode(), l.Encode(), "carried into an empty log, the turns are the same")

	l = Log{}
	l.Record(1027) // a turn of its own in the last carried slot, then more
	l.Record(1035)
	l.Carry(before.Encode())
	require.Equal(t, []int64{1035, 1027, 1024, 1021, 1018, 1015, 1012, 1009, 1006, 1003, 1000}, Decode(l.Encode()),
		"its own turns kept, the previous ones before them, no slot twice")

	l = Log{}
	for k := int64(2000); k < 2000+turnsKept-2; k++ {
		l.Record(k)
	}
	l.Carry(before.Encode())
	got := Decode(l.Encode())
	require.Len(t, got, turnsKept)
	require.Equal(t, []int64{1027, 1024}, got[turnsKept-2:], "the oldest carried turns dropped first")

	l = Log{}
	l.Record(5)
	l.Carry("")
	l.Carry("not turns")
	require.Equal(t, "5", l.Encode(), "nothing to carry changes nothing")
}
