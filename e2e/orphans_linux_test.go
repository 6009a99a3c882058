//go:build linux

package e2e

import "syscall"

// dieWithTheTest makes a child process get SIGKILL when the test binary
// that started it dies: a test binary killed at its timeout (go test's
// -timeout panics, then exits) runs no cleanup, and its node processes
// would go on polling the shared test databases, slowing every package
// tested after it.
func dieWithTheTest() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
