package store_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/stretchr/testify/require"
)

// A SQLite file removed or replaced under a running node is noticed: the
// node would go on writing to a file nobody else sees.
func TestSQLiteFileCheck(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, path string)
	}{
		{"removed", func(t *testing.T, path string) { require.NoError(t, os.Remove(path)) }},
		{"replaced", func(t *testing.T, path string) {
			other := path + ".new"
			require.NoError(t, os.WriteFile(other, nil, 0o600))
			require.NoError(t, os.Rename(other, path))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "farm.db")
			s, err := open.Store(ctx, "sqlite", path)
			require.NoError(t, err)
			defer s.Close()
			require.NoError(t, s.CheckFile())
			tc.change(t, path)
			err = s.CheckFile()
			require.ErrorIs(t, err, store.ErrFileGone)
			require.ErrorContains(t, err, path)
		})
	}
	// An in-memory database has no file to lose.
	s, err := open.Store(ctx, "sqlite", ":memory:")
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.CheckFile())
}
