package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// thoughtsScript: "tflood N" thinks N thoughts of about 80 bytes, then
// answers.
const thoughtsScript = `{"rules":[{"name":"tflood","match":"^tflood (\\d+)$","steps":[` +
	`{"thought":"tttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttt{{i}}","repeat":"$1"},{"text":"ok"}]}],` +
	`"default":{"steps":[{"text":"ok"}]}}`

// procRSS is the resident memory of process pid (VmRSS), in bytes.
func procRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		fs := strings.Fields(rest)
		if len(fs) == 0 {
			return 0
		}
		kb, _ := strconv.ParseInt(fs[0], 10, 64)
		return kb << 10
	}
	return 0
}

// floodResult is what floodTurns measured.
type floodResult struct {
	peakRSS, baseRSS int64
	took             time.Duration
	done, failed     int
	firstFailure     string
}

// floodTurns runs n turns of reps thoughts each at once against the real
// binary h (returnImmediately), waits until every one ended, and samples
// the host's resident memory all along.
func floodTurns(t *testing.T, h *sandboxHost, n, reps int) floodResult {
	t.Helper()
	var peak atomic.Int64
	base := procRSS(h.pid)
	stop := make(chan struct{})
	var sampled sync.WaitGroup
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		for {
			if r := procRSS(h.pid); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, a := h.startTurn(t, "", fmt.Sprintf("tflood %d", reps))
			if id == "" {
				t.Errorf("flood turn %d refused: %+v", i, a.Error)
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	res := floodResult{baseRSS: base}
	h.waitFor(t, "the flood's turns to end", 20*time.Minute, func() bool {
		for _, id := range ids {
			if id == "" {
				continue
			}
			if st := h.taskState(t, "", id); st == "TASK_STATE_WORKING" || st == "TASK_STATE_SUBMITTED" {
				return false
			}
		}
		return true
	})
	res.took = time.Since(start)
	close(stop)
	sampled.Wait()
	for _, id := range ids {
		if id == "" {
			continue
		}
		a := h.rpc(t, "", "GetTask", map[string]any{"id": id, "historyLength": 0})
		var task struct {
			Status struct {
				State   string          `json:"state"`
				Message json.RawMessage `json:"message"`
			} `json:"status"`
		}
		_ = json.Unmarshal(a.Result, &task)
		if task.Status.State == "TASK_STATE_COMPLETED" {
			res.done++
			continue
		}
		if res.failed++; res.failed == 1 {
			res.firstFailure = task.Status.State + " " + string(task.Status.Message)
		}
	}
	res.peakRSS = peak.Load()
	return res
}

// TestBlackBoxFloodRSSProfile prints the resident memory of the real
// binary under a flood of turns, for docs/PERFORMANCE.md ("The store's
// memory under a flood"): LOOOPY_FLOODRSS=N turns at once of
// LOOOPY_FLOODREPS thoughts each (default 10,000); LOOOPY_FLOODMEM sets
// the host's memory (GOMEMLIMIT, from which it derives its limits),
// LOOOPY_FLOODSTOREMEM its store.memoryBytes, LOOOPY_FLOODBIN another
// build of the host to run (to compare with an earlier commit).
func TestBlackBoxFloodRSSProfile(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("LOOOPY_FLOODRSS"))
	if n <= 0 {
		t.Skip("set LOOOPY_FLOODRSS=<turns> to print the figures")
	}
	reps, _ := strconv.Atoi(os.Getenv("LOOOPY_FLOODREPS"))
	if reps <= 0 {
		reps = 10000
	}
	if m := os.Getenv("LOOOPY_FLOODMEM"); m != "" {
		t.Setenv("GOMEMLIMIT", m)
	}
	if bin := os.Getenv("LOOOPY_FLOODBIN"); bin != "" {
		hostBinOnce.Do(func() { hostBin = bin })
	}
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}},
		map[string]any{"script": thoughtsScript})
	extra := map[string]any{"limits": map[string]any{"shutdownGrace": "2s", "maxRunning": n}}
	if m, _ := strconv.ParseInt(os.Getenv("LOOOPY_FLOODSTOREMEM"), 10, 64); m > 0 {
		extra["store"] = map[string]any{"memoryBytes": m}
	}
	h := startSandboxHostWith(t, top, pluginDir, nil, extra)
	r := floodTurns(t, h, n, reps)
	t.Logf("%d turns of %d thoughts: %d completed, %d not, in %v (%.0f thoughts/s); RSS before %d MiB, peak %d MiB",
		n, reps, r.done, r.failed, r.took.Round(time.Second), float64(n*reps)/r.took.Seconds(), r.baseRSS>>20, r.peakRSS>>20)
	if r.failed > 0 {
		t.Logf("the first turn not completed: %s", r.firstFailure)
	}
}
