//go:build !windows

package install

// scmControl is Windows' only: elsewhere kardianos/service (systemd) or
// the init script controls the service.
func scmControl(string, string) (string, bool, error) { return "", false, nil }

// scmQuery is Windows' only.
func scmQuery(string) (ServiceState, bool) { return ServiceState{}, false }
