//go:build linux

package storetest

import "syscall"

// dieWithTheTest makes a child process (a private database server) get
// SIGKILL when the test binary that started it dies: a test binary killed
// at its timeout runs no cleanup, and its server would go on running.
func dieWithTheTest() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
