package benchkit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// clockTick is Linux's USER_HZ, the unit of /proc/PID/stat's times; it is
// 100 on every architecture Go runs on (sysconf(_SC_CLK_TCK) needs cgo).
const clockTick = 10 * time.Millisecond

// ReadCPU reads the CPU time of this process (getrusage) and of every
// process named postgres (/proc): on a machine whose only busy PostgreSQL
// is the bench's, those are the database's.
func ReadCPU() (CPU, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return CPU{}, err
	}
	c := CPU{Side: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), Database: map[int]time.Duration{}}
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return c, err
	}
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the process ended
		}
		// pid (comm) state ppid ... utime stime: comm may hold spaces and
		// parentheses, so the fields are counted from the last ')'.
		open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || end < open || string(b[open+1:end]) != "postgres" {
			continue
		}
		f := bytes.Fields(b[end+1:])
		if len(f) < 13 {
			continue
		}
		pid, err0 := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
		ut, err1 := strconv.ParseInt(string(f[11]), 10, 64)
		st, err2 := strconv.ParseInt(string(f[12]), 10, 64)
		if err0 == nil && err1 == nil && err2 == nil {
			c.Database[pid] = time.Duration(ut+st) * clockTick
		}
	}
	if len(c.Database) == 0 {
		return c, errors.New("no process named postgres in /proc: the database's CPU time cannot be read here")
	}
	return c, nil
}
