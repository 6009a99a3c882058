package benchkit

import "runtime/metrics"

// Heap is this process's allocation work so far: the side's nodes, the
// endpoint and the feeder. Unlike CPU time it does not move with what else
// the machine runs, so it shows a change in a side's code in one round.
type Heap struct {
	Objects uint64 // heap objects allocated
	Bytes   uint64 // heap bytes allocated
	Cycles  uint64 // garbage collections completed
}

// ReadHeap reads Heap from the runtime's metrics.
func ReadHeap() Heap {
	// allocs:objects leaves out the tiny allocator's objects (under 16
	// bytes, no pointers), which tiny/allocs:objects counts.
	s := []metrics.Sample{
		{Name: "/gc/heap/allocs:objects"},
		{Name: "/gc/heap/tiny/allocs:objects"},
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/gc/cycles/total:gc-cycles"},
	}
	metrics.Read(s)
	var v [4]uint64
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	return Heap{Objects: v[0] + v[1], Bytes: v[2], Cycles: v[3]}
}
