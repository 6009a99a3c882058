package benchkit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// clockTick is Linux's USER_HZ, the unit of /proc/PID/stat's times; it is
// 100 on every architecture Go runs on (sysconf(_SC_CLK_TCK) needs cgo).
const clockTick = 10 * time.Millisecond

// ReadCPU reads the CPU time of this process (getrusage) and of the
// database's processes (/proc): the postmaster with this process id and its
// children (the backends and workers), or, for postmaster 0, every process
// named postgres. Other PostgreSQL servers may be busy on the machine (tests
// run beside the bench): only a postmaster's id keeps them out.
func ReadCPU(postmaster int) (CPU, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return CPU{}, err
	}
	c := CPU{Side: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), Database: map[int]time.Duration{}}
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return c, err
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		comm, ppid, cpu, ok := procStat(pid)
		if ok && comm == "postgres" && (postmaster == 0 || pid == postmaster || ppid == postmaster) {
			c.Database[pid] = cpu
		}
	}
	if len(c.Database) == 0 {
		return c, errors.New("no PostgreSQL process in /proc: the database's CPU time cannot be read here")
	}
	return c, nil
}

// ReadProcessCPU reads the CPU time of this process (getrusage) and of
// the database server's process pid, all its threads (a server that runs
// one process, as MariaDB's does).
func ReadProcessCPU(pid int) (CPU, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return CPU{}, err
	}
	c := CPU{Side: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), Database: map[int]time.Duration{}}
	_, _, cpu, ok := procStat(pid)
	if !ok {
		return c, fmt.Errorf("no process %d in /proc: the database's CPU time cannot be read here", pid)
	}
	c.Database[pid] = cpu
	return c, nil
}

// parentOf is the parent of PostgreSQL process pid, 0 when /proc knows no
// such process (the server runs on another machine).
func parentOf(pid int) int {
	comm, ppid, _, ok := procStat(pid)
	if !ok || comm != "postgres" {
		return 0
	}
	return ppid
}

// procStat reads the name, the parent and the CPU time (user and system,
// of all its threads) of process pid from /proc/PID/stat; ok is false when
// there is no such process.
func procStat(pid int) (comm string, ppid int, cpu time.Duration, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0, 0, false // the process ended
	}
	// pid (comm) state ppid ... utime stime: comm may hold spaces and
	// parentheses, so the fields are counted from the last ')'.
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return "", 0, 0, false
	}
	f := bytes.Fields(b[end+1:])
	if len(f) < 13 {
		return "", 0, 0, false
	}
	ppid, err0 := strconv.Atoi(string(f[1]))
	ut, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	st, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err0 != nil || err1 != nil || err2 != nil {
		return "", 0, 0, false
	}
	return string(b[open+1 : end]), ppid, time.Duration(ut+st) * clockTick, true
}
