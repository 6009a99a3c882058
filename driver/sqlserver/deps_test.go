package sqlserver_test

import (
	"testing"

	"github.com/slotpoller/slotpoller/internal/depstest"
)

// An application on this database compiles in its driver and no other
// database's, nor the cron parser or the node's runner.
func TestPullsOnlyItsOwnDriver(t *testing.T) {
	deps := depstest.NonStandard(t, "github.com/slotpoller/slotpoller/driver/sqlserver")
	if len(depstest.Having(deps, "github.com/microsoft/go-mssqldb")) == 0 {
		t.Errorf("driver/sqlserver does not depend on github.com/microsoft/go-mssqldb, its own driver")
	}
	for _, unwanted := range []string{
		"github.com/jackc/pgx", "github.com/microsoft/go-mssqldb", "modernc.org/sqlite",
		"github.com/netresearch/go-cron", "github.com/slotpoller/slotpoller/jobs",
	} {
		if unwanted == "github.com/microsoft/go-mssqldb" {
			continue
		}
		if found := depstest.Having(deps, unwanted); len(found) > 0 {
			t.Errorf("driver/sqlserver depends on %s: %v", unwanted, found)
		}
	}
}
