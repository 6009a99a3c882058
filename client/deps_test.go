package client_test

import (
	"testing"

	"github.com/slotpoller/slotpoller/internal/depstest"
)

// An application's client compiles in no database driver (the application
// brings its own, and the driver package of its database), no cron parser
// and not the node's runner.
func TestClientPullsNoDriver(t *testing.T) {
	depstest.RequireOnly(t, "github.com/slotpoller/slotpoller/client", "")
}
