package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
)

// taskIDOf returns the task id of an A2A 1.0 stream's first frame.
func taskIDOf(data string) string {
	var f struct {
		Result struct {
			Task struct {
				ID string `json:"id"`
			} `json:"task"`
		} `json:"result"`
	}
	_ = json.Unmarshal([]byte(data), &f)
	return f.Result.Task.ID
}

// holdScript: "flood N" thinks N thoughts, says "held", then holds its
// model call (10 minutes, until canceled).
const holdScript = `{"rules":[{"name":"flood","match":"^flood (\\d+)$","steps":[` +
	`{"thought":"tttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttt{{i}}","repeat":"$1"},` +
	`{"text":"held"},{"text":"end","delayMs":600000}]}]}`

// TestFloodMemoryBounded: a client floods the host with turns whose model
// floods thoughts. The host admits limits.maxRunning of them (the rest are
// refused at once), and the live heap they make the host hold, while each
// has flooded and holds its model call, stays under maxRunning turns of
// host.TurnMemory (the worst case the default bound is derived from). Once
// they end, the heap comes back: what is left is under one turn's worth.
func TestFloodMemoryBounded(t *testing.T) {
	const maxRunning, tries, thoughts = 4, 40, 4000
	cfg := baseConfig(t.TempDir())
	cfg.PluginDir = scriptedPluginDir(t, holdScript)
	cfg.Plugins.Only = nil
	cfg.Limits.MaxRunning = maxRunning
	cfg.Limits.MaxBodyBytes = 1 << 20
	h := startHost(t, cfg)
	c := client10With(t, h.URL(), 5*time.Minute)
	ctx := context.Background()
	send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("warm up")})
	before := liveHeap()

	var mu sync.Mutex
	var admitted, refused int
	var held sync.WaitGroup
	var tasks []string
	var wg sync.WaitGroup
	for i := range tries {
		wg.Add(1)
		held.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"SendStreamingMessage","params":{"message":{"messageId":"f%d","role":"ROLE_USER","parts":[{"text":"flood %d"}]}}}`, i, i, thoughts)
			resp := openSSE(t, ctx, h.URL()+"/a2a/v1", "", body)
			first := true
			isHeld := false
			readFrames(t, resp.Body, func(f frame) bool {
				if first {
					first = false
					mu.Lock()
					defer mu.Unlock()
					if strings.Contains(f.Data, `"error"`) {
						if !strings.Contains(f.Data, "HOST_BUSY") {
							t.Errorf("a refused turn of the flood: %.300s, want HOST_BUSY", f.Data)
						}
						refused++
						return true
					}
					admitted++
					if id := taskIDOf(f.Data); id != "" {
						tasks = append(tasks, id)
					}
					return false
				}
				isHeld = strings.Contains(f.Data, `"held"`)
				return isHeld
			})
			resp.Body.Close()
			held.Done()
		}()
	}
	wg.Wait()
	held.Wait()
	if admitted != maxRunning || refused != tries-maxRunning {
		t.Fatalf("a flood of %d turns: %d admitted, %d refused; want %d admitted (limits.maxRunning)", tries, admitted, refused, maxRunning)
	}
	during := liveHeap()
	if f := os.Getenv("LOOOPY_HEAPPROFILE"); f != "" {
		if out, err := os.Create(f); err == nil {
			_ = pprof.WriteHeapProfile(out)
			out.Close()
		}
	}
	bound := int64(maxRunning * host.TurnMemory)
	t.Logf("%d turns of %d thoughts held, %d refused: live heap +%d KiB (bound %d KiB)", admitted, thoughts, refused, (during-before)>>10, bound>>10)
	if during-before > bound {
		t.Fatalf("the flood's %d admitted turns hold %d KiB of live heap, bound %d KiB (%d turns of host.TurnMemory)",
			admitted, (during-before)>>10, bound>>10, maxRunning)
	}
	for _, id := range tasks {
		rpc(t, h.URL()+"/a2a/v1", "", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"CancelTask","params":{"id":%q}}`, id))
	}
	for _, id := range tasks {
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			_, r := rpc(t, h.URL()+"/a2a/v1", "", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":%q}}`, id))
			if strings.Contains(string(r.Result), "TASK_STATE_CANCELED") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s not canceled 2 minutes after it was asked: %.300s", id, r.raw)
			}
		}
	}
	// Badger's table builders are pooled between flushes and released one
	// every 2 s once idle (bounded by store.memoryBytes, not by turns):
	// give them that time, the guard only fails fast.
	after := liveHeap()
	for deadline := time.Now().Add(time.Minute); after-before > host.TurnMemory && time.Now().Before(deadline); after = liveHeap() {
		time.Sleep(time.Second)
	}
	t.Logf("after the flood: live heap +%d KiB", (after-before)>>10)
	if after-before > host.TurnMemory {
		t.Fatalf("after the flood ended the host holds %d KiB more live heap than before, bound %d KiB", (after-before)>>10, host.TurnMemory>>10)
	}
}
