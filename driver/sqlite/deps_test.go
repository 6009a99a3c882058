package sqlite_test

import (
	"testing"

	"github.com/slotpoller/slotpoller/internal/depstest"
)

// An application on this database compiles in its driver and no other
// database's, nor the cron parser or the node's runner.
func TestPullsOnlyItsOwnDriver(t *testing.T) {
	deps := depstest.NonStandard(t, "github.com/slotpoller/slotpoller/driver/sqlite")
	if len(depstest.Having(deps, "modernc.org/sqlite")) == 0 {
		t.Errorf("driver/sqlite does not depend on modernc.org/sqlite, its own driver")
	}
	for _, unwanted := range []string{
		"github.com/jackc/pgx", "github.com/microsoft/go-mssqldb", "modernc.org/sqlite",
		"github.com/netresearch/go-cron", "github.com/slotpoller/slotpoller/jobs",
	} {
		if unwanted == "modernc.org/sqlite" {
			continue
		}
		if found := depstest.Having(deps, unwanted); len(found) > 0 {
			t.Errorf("driver/sqlite depends on %s: %v", unwanted, found)
		}
	}
}
