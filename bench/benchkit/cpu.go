package benchkit

import "time"

// CPU is processor time spent so far: by this process (the side's nodes,
// the endpoint and the feeder) and by the database server's processes.
type CPU struct {
	Side, Database time.Duration
}
