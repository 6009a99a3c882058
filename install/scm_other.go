//go:build !windows

package install

import kservice "github.com/kardianos/service"

// withSCM returns s: only Windows' service manager is controlled directly.
func withSCM(s kservice.Service, _ string) kservice.Service { return s }
