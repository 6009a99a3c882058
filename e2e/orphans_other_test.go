//go:build unix && !linux

package e2e

import "syscall"

// dieWithTheTest: only Linux has a parent-death signal; elsewhere a test
// binary killed at its timeout leaves its node processes running.
func dieWithTheTest() *syscall.SysProcAttr { return nil }
