//go:build !windows

package install

// setStopTimeout has nothing to do: systemd reads the stop timeout from
// the unit (TimeoutStopSec).
func setStopTimeout(ServiceSpec) error { return nil }
