package postgres_test

import (
	"testing"

	"github.com/slotpoller/slotpoller/internal/depstest"
)

// An application on this database compiles in its driver and no other
// database's, nor the cron parser or the node's runner.
func TestPullsOnlyItsOwnDriver(t *testing.T) {
	deps := depstest.NonStandard(t, "github.com/slotpoller/slotpoller/driver/postgres")
	if len(depstest.Having(deps, "github.com/jackc/pgx")) == 0 {
		t.Errorf("driver/postgres does not depend on github.com/jackc/pgx, its own driver")
	}
	for _, unwanted := range []string{
		"github.com/jackc/pgx", "github.com/microsoft/go-mssqldb", "modernc.org/sqlite",
		"github.com/netresearch/go-cron", "github.com/slotpoller/slotpoller/jobs",
	} {
		if unwanted == "github.com/jackc/pgx" {
			continue
		}
		if found := depstest.Having(deps, unwanted); len(found) > 0 {
			t.Errorf("driver/postgres depends on %s: %v", unwanted, found)
		}
	}
}
