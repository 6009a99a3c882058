//go:build !linux

package main

import "syscall"

// dieWithTheBench: only Linux has a parent-death signal; elsewhere a
// bench killed mid-soak leaves its node processes running.
func dieWithTheBench() *syscall.SysProcAttr { return nil }
