package benchkit

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The database's CPU is the sum over its processes alive at the end: a
// backend that ended in between must not take its earlier time out of the
// total, and one that started in between counts whole.
func TestCPUSince(t *testing.T) {
	earlier := CPU{Side: time.Second, Database: map[int]time.Duration{10: 500 * time.Millisecond, 11: 300 * time.Millisecond}}
	later := CPU{Side: 1500 * time.Millisecond, Database: map[int]time.Duration{10: 700 * time.Millisecond, 12: 40 * time.Millisecond}}
	side, database := later.Since(earlier)
	require.Equal(t, 500*time.Millisecond, side)
	require.Equal(t, 240*time.Millisecond, database)

	// Process 11 ended and a new backend took its id: it counts whole.
	later.Database[11] = 20 * time.Millisecond
	_, database = later.Since(earlier)
	require.Equal(t, 260*time.Millisecond, database)
}

// A postmaster's id keeps every other process out, those of other
// PostgreSQL servers on the machine too: no process has parent -1.
func TestReadCPUOfOneServer(t *testing.T) {
	all, err := ReadCPU(0)
	if err != nil {
		t.Skipf("no PostgreSQL process to count here: %v", err)
	}
	require.NotEmpty(t, all.Database)
	_, err = ReadCPU(-1)
	require.Error(t, err)
}

// A server of one process (MariaDB's) is read by its id, whatever its
// name; a process that is gone is an error, not a zero.
func TestReadProcessCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("CPU times are read on Linux only")
	}
	c, err := ReadProcessCPU(os.Getpid())
	require.NoError(t, err)
	require.Len(t, c.Database, 1)
	_, err = ReadProcessCPU(-1)
	require.Error(t, err)
}
