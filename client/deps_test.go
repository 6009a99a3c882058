package client_test

import (
	"testing"

	"github.com/slotpoller/slotpoller/internal/depstest"
)

// An application's client compiles in no database driver (the application
// brings its own, and the driver package of its database), no cron parser
// and not the node's runner.
func TestClientPullsNoDriver(t *testing.T) {
	deps := depstest.NonStandard(t, "github.com/slotpoller/slotpoller/client")
	for _, unwanted := range []string{
		"github.com/jackc/pgx", "github.com/microsoft/go-mssqldb", "modernc.org/sqlite",
		"github.com/netresearch/go-cron", "github.com/slotpoller/slotpoller/jobs",
	} {
		if found := depstest.Having(deps, unwanted); len(found) > 0 {
			t.Errorf("the client depends on %s: %v", unwanted, found)
		}
	}
}
