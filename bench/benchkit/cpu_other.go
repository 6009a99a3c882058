//go:build !linux

package benchkit

import "errors"

// ReadCPU is Linux's only (getrusage and /proc).
func ReadCPU(postmaster int) (CPU, error) {
	return CPU{}, errors.New("CPU times are read on Linux only")
}

// ReadProcessCPU is Linux's only (getrusage and /proc).
func ReadProcessCPU(int) (CPU, error) {
	return CPU{}, errors.New("CPU times are read on Linux only")
}

func parentOf(int) int { return 0 }
