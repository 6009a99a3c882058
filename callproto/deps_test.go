package callproto_test

import (
	"strings"
	"testing"

	"github.com/slotpoller/slotpoller/internal/depstest"
)

// callproto is what an endpoint's program imports to check calls: it must
// compile in nothing beyond the standard library (no database driver, no
// other part of slotpoller).
func TestDependsOnTheStandardLibraryOnly(t *testing.T) {
	var outside []string
	for _, p := range depstest.NonStandard(t, "github.com/slotpoller/slotpoller/callproto") {
		if p != "github.com/slotpoller/slotpoller/callproto" {
			outside = append(outside, p)
		}
	}
	if len(outside) > 0 {
		t.Fatalf("callproto depends on packages outside the standard library: %s", strings.Join(outside, ", "))
	}
}
