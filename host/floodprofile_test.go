package host_test

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// thoughtFloodScript: "tflood N" thinks N thoughts of about 80 bytes, then
// answers.
const thoughtFloodScript = `{"rules":[{"name":"tflood","match":"^tflood (\\d+)$","steps":[` +
	`{"thought":"tttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttt{{i}}","repeat":"$1"},{"text":"ok"}]}]}`

// TestFloodMemoryProfile prints what a flood of turns makes the host hold,
// for docs/PERFORMANCE.md ("A flood of turns"): LOOOPY_FLOODPROF=N turns at
// once of LOOOPY_FLOODREPS thoughts each (default 10,000), with no bound on
// running turns; the peak heap, the live heap right after and 20 s after,
// and the heap memory the process still holds then.
// LOOOPY_HEAPPROFILE=file writes the heap profile at the peak.
func TestFloodMemoryProfile(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("LOOOPY_FLOODPROF"))
	if n <= 0 {
		t.Skip("set LOOOPY_FLOODPROF=<turns> to print the figures")
	}
	reps := os.Getenv("LOOOPY_FLOODREPS")
	if reps == "" {
		reps = "10000"
	}
	cfg := baseConfig(t.TempDir())
	cfg.PluginDir = scriptedPluginDir(t, thoughtFloodScript)
	cfg.Plugins.Only = nil
	cfg.Limits.MaxRunning = -1
	h := startHost(t, cfg)
	var peak atomic.Int64
	stop := make(chan struct{})
	var sampled sync.WaitGroup
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if int64(ms.HeapAlloc) > peak.Load() {
				peak.Store(int64(ms.HeapAlloc))
				if f := os.Getenv("LOOOPY_HEAPPROFILE"); f != "" {
					if out, err := os.Create(f); err == nil {
						_ = pprof.WriteHeapProfile(out)
						out.Close()
					}
				}
			}
		}
	}()
	var wg sync.WaitGroup
	start := time.Now()
	var failed atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, r := rpc(t, h.URL()+"/a2a/v1", "", fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"SendMessage","params":{"message":{"messageId":"m%d","role":"ROLE_USER","parts":[{"text":"tflood %s"}]}}}`, i, i, reps))
			if r.Error != nil {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(stop)
	sampled.Wait()
	right := liveHeap()
	time.Sleep(20 * time.Second)
	later := liveHeap()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("%d turns of %s thoughts in %v (%d failed): peak heap %d MiB; live heap right after %d MiB, 20 s later %d MiB; heap memory held then %d MiB",
		n, reps, took.Round(time.Second), failed.Load(), peak.Load()>>20, right>>20, later>>20, (ms.HeapSys-ms.HeapReleased)>>20)
}
