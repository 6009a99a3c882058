package jobspec

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseTraceparent(t *testing.T) {
	const good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tr, err := ParseTraceparent(good)
	require.NoError(t, err)
	require.Equal(t, good, tr.String(), "a parsed traceparent writes back as it was")
	require.Equal(t, byte(1), tr.Flags)

	// Upper case is read, and stored lowercased.
	got, err := CheckTraceparent(strings.ToUpper(good))
	require.NoError(t, err)
	require.Equal(t, good, got)
	got, err = CheckTraceparent("")
	require.NoError(t, err)
	require.Empty(t, got, "no traceparent is no trace")
	// A later version is read by its first four fields.
	_, err = ParseTraceparent("01" + good[2:])
	require.NoError(t, err)

	for name, bad := range map[string]string{
		"short":                good[:54],
		"long":                 good + "0",
		"not hex":              "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
		"dash misplaced":       "00-4bf92f3577b34da6a3ce929d0e0e47360-0f067aa0ba902b7-01",
		"version ff":           "ff" + good[2:],
		"version not hex":      "0x" + good[2:],
		"flags not hex":        good[:53] + "+1",
		"trace id zeros":       "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"parent id zeros":      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"control character":    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\n",
		"spaces around fields": "00 4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7 01",
	} {
		_, err := CheckTraceparent(bad)
		require.Error(t, err, name)
		require.Contains(t, err.Error(), "is not a W3C traceparent", name)
	}
}

// A job's own trace is the same for every attempt, and differs between
// jobs, even two that share an idempotency key.
func TestJobTraceIsTheJobs(t *testing.T) {
	a := JobTrace(7, "slotpoller-abc")
	require.Equal(t, a, JobTrace(7, "slotpoller-abc"))
	require.NotEqual(t, a.ID, JobTrace(8, "slotpoller-abc").ID)
	require.NotEqual(t, a.ID, JobTrace(7, "slotpoller-abd").ID)
	require.NotEqual(t, [16]byte{}, a.ID)
	require.Equal(t, [8]byte{}, a.Parent, "the node gives each call its own span")
	require.Equal(t, byte(1), a.Flags, "sampled")
}
