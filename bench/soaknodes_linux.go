package main

import "syscall"

// dieWithTheBench makes a node process get SIGKILL when the bench ends,
// however it ends: an interrupted soak must not leave a farm running.
func dieWithTheBench() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
