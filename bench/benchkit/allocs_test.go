package benchkit

import (
	"runtime"
	"testing"
)

var sink [][]byte

// TestReadHeapCountsAllocations: a metric name the runtime does not know
// reads as zero, which would make every side look allocation-free.
func TestReadHeapCountsAllocations(t *testing.T) {
	before := ReadHeap()
	for range 1000 {
		sink = append(sink, make([]byte, 4096))
	}
	runtime.GC()
	after := ReadHeap()
	sink = nil
	if got := after.Objects - before.Objects; got < 1000 {
		t.Errorf("objects allocated: %d, want at least 1000", got)
	}
	if got := after.Bytes - before.Bytes; got < 1000*4096 {
		t.Errorf("bytes allocated: %d, want at least %d", got, 1000*4096)
	}
	if after.Cycles <= before.Cycles {
		t.Errorf("collections: %d then %d, want more after runtime.GC", before.Cycles, after.Cycles)
	}
}
