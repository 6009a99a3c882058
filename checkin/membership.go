package checkin

import "time"

// Member is a live node as the registry last read it.
type Member struct {
	Name        string
	Incarnation string
	Capacity    int
	Free        int
	Backlog     bool
	Tasks       int // endless tasks the member's incarnation holds
}

// Membership is the live part of the farm at one reading.
type Membership struct {
	Members []Member  // live, sorted by name
	Read    time.Time // local time of the reading
	OK      bool      // false until the first successful reading
}

// Names returns the members' names in rotation order.
func (m Membership) Names() []string {
	out := make([]string, len(m.Members))
	for i, n := range m.Members {
		out[i] = n.Name
	}
	return out
}

// Backlog reports whether any live node reported due work it left behind.
func (m Membership) Backlog() bool {
	for _, n := range m.Members {
		if n.Backlog {
			return true
		}
	}
	return false
}

// TasksOf returns how many endless tasks the member with the incarnation
// holds, as last read.
func (m Membership) TasksOf(incarnation string) int {
	for _, n := range m.Members {
		if n.Incarnation == incarnation {
			return n.Tasks
		}
	}
	return 0
}

// Capacity returns the total capacity and the total free capacity of the
// live nodes.
func (m Membership) Capacity() (total, free int) {
	for _, n := range m.Members {
		total += n.Capacity
		free += n.Free
	}
	return total, free
}
