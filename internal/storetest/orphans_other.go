//go:build !linux

package storetest

import "syscall"

// dieWithTheTest: only Linux has a parent-death signal; elsewhere a test
// binary killed at its timeout leaves its private server running.
func dieWithTheTest() *syscall.SysProcAttr { return nil }
