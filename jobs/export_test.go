package jobs

// MaterializeDue lets tests run a materializing step on schedules read
// earlier, to put another node's change between the read and the writes.
var MaterializeDue = materializeDue

// Pending is how many results wait for the completer's next batch.
func (r *Runner) Pending() int {
	r.fmu.Lock()
	defer r.fmu.Unlock()
	return len(r.pending)
}

// CapacityShare is a node's share of a turn's count, before free capacity
// and urgency: what it may refill up to while a backlog spreads.
var CapacityShare = capacityShare
