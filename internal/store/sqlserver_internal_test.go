package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The session options slotpoller cannot work with: NOCOUNT (no row counts)
// and IMPLICIT_TRANSACTIONS (every UPDATE left in a transaction that never
// commits). Others, such as ANSI_NULLS, pass.
func TestSQLServerSessionOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		options int64
		want    string // "" for accepted
	}{
		{"defaults", 0, ""},
		{"ansi options", 32 | 64 | 4096, ""},
		{"nocount", 512, "NOCOUNT"},
		{"implicit transactions", 2, "IMPLICIT_TRANSACTIONS"},
		{"implicit transactions among others", 2 | 32 | 4096, "IMPLICIT_TRANSACTIONS"},
		{"both", 2 | 512, "NOCOUNT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := sessionOptionsError(tc.options)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
	require.ErrorContains(t, sessionOptionsError(2|512), "IMPLICIT_TRANSACTIONS", "both are named")
}
