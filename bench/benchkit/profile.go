package benchkit

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// CPUProfile starts a CPU profile of this process written to path, for a
// side's -cpuprofile flag; stop ends it and closes the file. An empty path
// profiles nothing.
func CPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
