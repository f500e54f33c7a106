package host

import (
	"context"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// FreeMemoryThreshold is how much free heap memory (pages the Go runtime
// holds but no object uses) the host keeps before it gives them back to
// the operating system at once (returnFreeMemory). A burst of turns (a
// flood of events through Badger's write path) leaves hundreds of MiB of
// such pages once it ends; the runtime's own scavenger returns them slowly
// (a flood of 100 turns: the live heap was back to 147 MiB 20 s after, the
// process still held 1.2 GiB).
const FreeMemoryThreshold = 128 << 20

// freeMemoryEvery is how often the host looks at its free heap memory.
const freeMemoryEvery = 10 * time.Second

var freeHeapSample = []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}

// freeHeap is the heap memory the runtime holds free and has not returned.
func freeHeap() uint64 {
	s := []metrics.Sample{freeHeapSample[0]}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// returnFreeMemory gives the free heap memory back to the operating system
// when it is over threshold, and reports whether it did.
func returnFreeMemory(threshold uint64) bool {
	if freeHeap() <= threshold {
		return false
	}
	debug.FreeOSMemory()
	return true
}

// returnFreeMemoryEvery runs returnFreeMemory every interval until ctx ends.
func returnFreeMemoryEvery(ctx context.Context, every time.Duration, threshold uint64, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			before := freeHeap()
			if returnFreeMemory(threshold) {
				log.LogAttrs(ctx, slog.LevelDebug, "free memory returned to the system",
					slog.Uint64("free_bytes", before), slog.Uint64("left_bytes", freeHeap()))
			}
		}
	}
}

// setMemoryLimit sets the Go runtime's soft memory limit to three quarters
// of the memory the process may use (the cgroup's limit, else the
// machine's), unless GOMEMLIMIT sets one: near it the collector works
// harder and returns memory sooner, instead of the process growing into
// the cgroup's OOM killer. It returns the limit in force.
func setMemoryLimit() int64 {
	cur := debug.SetMemoryLimit(-1)
	if os.Getenv("GOMEMLIMIT") != "" {
		return cur
	}
	want := systemMemory() / 4 * 3
	if cur > 0 && cur < math.MaxInt64 && cur != want {
		// An embedder set its own.
		return cur
	}
	debug.SetMemoryLimit(want)
	return want
}
