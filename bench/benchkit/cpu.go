package benchkit

import "time"

// CPU is processor time spent so far: by this process (the side's nodes,
// the endpoint and the feeder) and by each of the database server's
// processes.
type CPU struct {
	Side     time.Duration
	Database map[int]time.Duration // by process id
}

// Since is the CPU time spent between earlier and c: this process's, and
// the database's over the processes alive at c (a backend that started in
// between counts whole, also under a process id that an ended one had;
// one that ended in between is lost: both sides keep their pools open
// through a burst).
func (c CPU) Since(earlier CPU) (side, database time.Duration) {
	for pid, t := range c.Database {
		if before := earlier.Database[pid]; before <= t {
			t -= before
		}
		database += t
	}
	return c.Side - earlier.Side, database
}
