package host

import (
	"runtime"
	"testing"
)

var sink [][]byte

// A burst that leaves much free heap memory behind has it returned to the
// operating system at once, and a small amount is left alone.
func TestFreeMemoryReturned(t *testing.T) {
	for range 512 {
		sink = append(sink, make([]byte, 1<<20))
	}
	for _, b := range sink {
		b[0] = 1
	}
	sink = nil
	runtime.GC()
	before := freeHeap()
	if before <= FreeMemoryThreshold {
		t.Fatalf("512 MiB freed left only %d MiB free in the heap: the test needs more than %d MiB", before>>20, FreeMemoryThreshold>>20)
	}
	if !returnFreeMemory(FreeMemoryThreshold) {
		t.Fatal("free memory over the threshold not returned")
	}
	if after := freeHeap(); after > FreeMemoryThreshold {
		t.Fatalf("free heap after returning it: %d MiB, want at most %d MiB", after>>20, FreeMemoryThreshold>>20)
	}
	if returnFreeMemory(FreeMemoryThreshold) {
		t.Fatal("free memory under the threshold returned again")
	}
}
