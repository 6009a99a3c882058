package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// rssSample is a process's resident set at an age of the process: the
// soak judges a node's memory by how it moves over the node's own life, so
// every series starts again with a restarted node.
type rssSample struct {
	age   time.Duration // since the process started
	bytes int64
}

// readRSS reads VmRSS of process pid from /proc (Linux only).
func readRSS(pid int) (int64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, fmt.Errorf("read the resident set of process %d: %w", pid, err)
	}
	return parseVmRSS(b)
}

// parseVmRSS finds the "VmRSS:  1234 kB" line of /proc/PID/status.
func parseVmRSS(status []byte) (int64, error) {
	for _, line := range bytes.Split(status, []byte("\n")) {
		rest, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("VmRSS line %q: want a number of kB", line)
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("VmRSS line %q: %w", line, err)
		}
		return kb * 1024, nil
	}
	// A zombie (killed, not yet reaped) has no VmRSS line.
	return 0, errors.New("no VmRSS in the process's status: it has ended")
}

// rssSummary is what the soak reports of one process's series.
type rssSummary struct {
	atSettle, atEnd, max int64 // bytes; atSettle is 0 when the process did not live to settle
	// slope is the least-squares growth of the samples taken from settle
	// on, in bytes per 10 minutes; fitted is how many samples it stands
	// on (0: too few, no slope).
	slope  float64
	fitted int
}

// minFitted is the fewest samples a slope is drawn through: two points
// always make a line, noise included.
const minFitted = 3

// summarizeRSS reads a series (in age order): its first sample at or after
// settle, its last, its largest, and the slope after settle, which leaves
// out the start-up's growth (pools filling, the heap finding its size).
func summarizeRSS(samples []rssSample, settle time.Duration) rssSummary {
	var s rssSummary
	var after []rssSample
	for _, x := range samples {
		s.max = max(s.max, x.bytes)
		if x.age >= settle {
			if len(after) == 0 {
				s.atSettle = x.bytes
			}
			after = append(after, x)
		}
	}
	if len(samples) > 0 {
		s.atEnd = samples[len(samples)-1].bytes
	}
	if slope, ok := leastSquaresSlope(after); ok && len(after) >= minFitted {
		s.slope, s.fitted = slope*(10*time.Minute).Seconds(), len(after)
	}
	return s
}

// leastSquaresSlope is the slope of the least-squares line through the
// samples, in bytes per second; ok is false when the ages do not spread.
func leastSquaresSlope(samples []rssSample) (float64, bool) {
	n := float64(len(samples))
	if n < 2 {
		return 0, false
	}
	var mx, my float64
	for _, s := range samples {
		mx += s.age.Seconds()
		my += float64(s.bytes)
	}
	mx, my = mx/n, my/n
	var sxy, sxx float64
	for _, s := range samples {
		dx := s.age.Seconds() - mx
		sxy += dx * (float64(s.bytes) - my)
		sxx += dx * dx
	}
	if sxx == 0 {
		return 0, false
	}
	return sxy / sxx, true
}
