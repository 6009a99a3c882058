package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
)

// TestOpenErrorsNeverShowThePassword opens every shape against a closed
// port: whatever the driver makes of a badly written password, the error
// (which the node logs on every retry) shows none of it.
func TestOpenErrorsNeverShowThePassword(t *testing.T) {
	for _, dsn := range store.PasswordShapes {
		driver := "postgres"
		switch {
		case strings.HasPrefix(strings.ToLower(dsn), "sqlserver") || strings.HasPrefix(dsn, "Server") || strings.HasPrefix(dsn, "odbc"):
			driver = "sqlserver"
		case strings.Contains(dsn, "@tcp(") || strings.Contains(dsn, "@unix(") || strings.Contains(dsn, "@/"):
			driver = "mysql"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := open.Store(ctx, driver, dsn)
		cancel()
		require.Error(t, err, dsn)
		require.Empty(t, store.Leaks(err.Error()), "%s: %v", dsn, err)
	}
}
