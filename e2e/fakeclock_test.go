//go:build unix

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// libfaketime is where Debian's libfaketime package puts the library.
const libfaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

// fakeClock is the offset of a private server's wall clock from real
// time: the server runs under libfaketime, which reads the offset's file
// afresh on every clock reading (FAKETIME_NO_CACHE), so writing it steps
// the clock of every connection at once.
type fakeClock struct{ file string }

// newFakeClock makes a clock at real time in dir, or skips the test saying
// why it cannot. CI installs libfaketime (.ci/run), so the test runs there.
func newFakeClock(t *testing.T, dir string) *fakeClock {
	t.Helper()
	if _, err := os.Stat(libfaketime); err != nil {
		t.Skipf("no libfaketime (%s: %v): skipping the test that steps the database clock; apt-get install faketime libfaketime", libfaketime, err)
	}
	c := &fakeClock{file: filepath.Join(dir, "clock-offset")}
	if err := os.WriteFile(c.file, []byte("+0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return c
}

// env is the server's environment for the clock. Only wall-clock readings
// are offset: the server's timeouts and waits run on its monotonic clock,
// as a real clock step leaves it.
func (c *fakeClock) env() []string {
	return []string{"LD_PRELOAD=" + libfaketime, "FAKETIME_TIMESTAMP_FILE=" + c.file,
		"FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1"}
}

// step sets the clock to real time + offset and checks, with now (the
// server's clock read by a statement), that the server's clock moved
// there: a step that did not happen must not pass for one the farm rode
// out.
func (c *fakeClock) step(t *testing.T, offset time.Duration, now func(ctx context.Context) (time.Time, error)) {
	t.Helper()
	if c == nil {
		t.Fatal("the private server was not started with a fake clock")
	}
	if err := os.WriteFile(c.file, []byte(fmt.Sprintf("%+d\n", int64(offset/time.Second))), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	read, err := now(ctx)
	if err != nil {
		t.Fatalf("read the stepped clock: %v", err)
	}
	if got := read.Sub(t0); got < offset-5*time.Second || got > offset+5*time.Second {
		t.Fatalf("the database clock did not step: it reads real time %+v, want %+v", got.Round(time.Millisecond), offset)
	}
}
