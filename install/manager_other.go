//go:build !windows

package install

// configureManager has nothing to do: systemd reads the stop timeout and
// the restart from the unit, System V init from the script.
func configureManager(ServiceSpec) ([]string, error) { return nil, nil }
