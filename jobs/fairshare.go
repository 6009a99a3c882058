package jobs

import "github.com/slotpoller/slotpoller/internal/store"

// FairShare is how many of the due jobs a poller takes: its capacity's
// share of all outstanding work (due plus running anywhere), less what it
// already runs — but at least every urgent job, one that would miss its
// start window if left to the next poller — never more than it has free or
// than is due. Counting running work means that in a burst the pollers of a
// widened rotation each get their part; the urgent floor means fairness
// never costs a job its start.
func FairShare(load store.QueueLoad, mine, capacity, farmCapacity, free int) int {
	return max(0, min(max(capacityShare(load, mine, capacity, farmCapacity), load.Urgent), free, load.Due))
}

// capacityShare is the node's capacity's share of the outstanding work,
// less what it runs, at most what is due: what it may take of the due work
// in one turn, now or as its calls end (Refill), without the urgent floor,
// which is for jobs that can start now.
func capacityShare(load store.QueueLoad, mine, capacity, farmCapacity int) int {
	if farmCapacity < capacity || farmCapacity <= 0 {
		farmCapacity = capacity
	}
	if capacity <= 0 {
		return 0
	}
	outstanding := load.Due + load.Running
	target := (outstanding*capacity+farmCapacity-1)/farmCapacity - mine
	return max(0, min(target, load.Due))
}

// LoadLimit is the most due jobs a turn counts (store.JobsLoad), so that a
// turn costs the same whatever the depth of the queue. At the limit every
// node's capacity share is four times its capacity: FairShare is then all
// it has free, as it would be for any deeper queue, and what it may refill
// before the whole farm has heard of the backlog is three rounds of its
// calls more (an exact count of a deeper queue gave more: a node whose
// calls end faster than the backlog spreads may wait out the spread once
// per backlog, BacklogSpread, slot/8 on PostgreSQL). A burst of up to
// MinLoadCount jobs is still counted, and so spread, exactly.
func LoadLimit(farmCapacity, capacity int) int {
	return max(MinLoadCount, 4*max(farmCapacity, capacity))
}

// MinLoadCount is the least LoadLimit: counting ten thousand rows of an
// index is a few milliseconds of the database's time in a turn.
const MinLoadCount = 10_000
