package mysql_test

import (
	"testing"

	"github.com/slotpoller/slotpoller/internal/depstest"
)

// An application on this database compiles in its driver and no other
// database's, nor the cron parser or the node's runner.
func TestPullsOnlyItsOwnDriver(t *testing.T) {
	depstest.RequireOnly(t, "github.com/slotpoller/slotpoller/driver/mysql", "github.com/go-sql-driver/mysql")
}
