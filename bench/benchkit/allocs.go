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
	s := []metrics.Sample{
		{Name: "/gc/heap/allocs:objects"},
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/gc/cycles/total:gc-cycles"},
	}
	metrics.Read(s)
	var h Heap
	for i, p := range []*uint64{&h.Objects, &h.Bytes, &h.Cycles} {
		if s[i].Value.Kind() == metrics.KindUint64 {
			*p = s[i].Value.Uint64()
		}
	}
	return h
}
