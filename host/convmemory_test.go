package host_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	"github.com/looopy-go/looopy/host"
)

// convMemoryChildEnv, set, makes TestConversationMemoryBoundedByBytes
// measure in this process: its parent started it for that alone.
const convMemoryChildEnv = "LOOOPY_CONVMEMORY_CHILD"

// liveHeap is the heap still in use once everything collectable is gone.
func liveHeap() int64 {
	var ms runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// conversationHeap runs one conversation of n user messages of size bytes
// each (the scripted model echoes every one back) on a host with the
// given history window. It returns the heap the conversation left live
// (after it, minus before its first large message), and how much of that
// grew after its first warm messages, once the host's fixed costs (the
// model's instances growing their memory, Badger's memtables) are paid.
func conversationHeap(t testing.TB, historyBytes, n, warm, size int) (total, grown int64) {
	cfg := baseConfig(t.TempDir())
	cfg.PluginDir = benchPluginDir(t)
	cfg.Plugins.Only = nil
	cfg.Agent.HistoryBytes = historyBytes
	cfg.Limits.MaxBodyBytes = size + 64<<10
	h := startHost(t, cfg)
	// A large turn under the race detector on a loaded machine is slow:
	// the client's timeout is only a hang guard.
	c := client10With(t, h.URL(), 5*time.Minute)
	bg := context.Background()
	first := send(t, c, bg, &a2a.SendMessageRequest{Message: userMsg("hello")})
	before := liveHeap()
	var warmed int64
	for i := range n {
		if i == warm {
			warmed = liveHeap()
		}
		m := userMsg(fmt.Sprintf("%d %s", i, strings.Repeat("x", size)))
		m.ContextID = first.ContextID
		task := send(t, c, bg, &a2a.SendMessageRequest{Message: m})
		if task.Status.State != a2a.TaskStateCompleted {
			why := ""
			if task.Status.Message != nil && len(task.Status.Message.Parts) > 0 {
				why = task.Status.Message.Parts[0].Text()
			}
			t.Fatalf("turn %d: %s: %.300s", i, task.Status.State, why)
		}
	}
	after := liveHeap()
	if f := os.Getenv("LOOOPY_HEAPPROFILE"); f != "" {
		if out, err := os.Create(f); err == nil {
			_ = pprof.WriteHeapProfile(out)
			out.Close()
		}
	}
	return after - before, after - warmed
}

// TestConversationMemoryBoundedByBytes: a conversation of large messages
// leaves live on the heap no more than its history window (the agent's
// cache) and a few messages in flight, however many messages it had. The
// bound is in bytes, proportional to the window and the message size,
// never to the length of the conversation.
func TestConversationMemoryBoundedByBytes(t *testing.T) {
	if os.Getenv(convMemoryChildEnv) == "" {
		// The heap measured is the process's: measure it in a process of
		// its own (this test binary again, running only this test), where
		// what other tests left behind (hosts still closing, the
		// collector's pace after them) does not allocate meanwhile. In
		// the whole package's run it once counted 2.4 MiB that alone is
		// 0. This process only waits for it: it runs beside the other
		// tests (what they allocate is not in its heap; the bound is in
		// bytes, not time).
		t.Parallel()
		cmd := exec.Command(os.Args[0], "-test.run", "^TestConversationMemoryBoundedByBytes$", "-test.v", "-test.count=1", "-test.timeout=10m")
		cmd.Env = append(os.Environ(), convMemoryChildEnv+"=1")
		out, err := cmd.CombinedOutput()
		t.Logf("the conversation's own process:\n%s", out)
		if err != nil {
			t.Fatalf("the conversation's own process failed: %v", err)
		}
		if !strings.Contains(string(out), "--- PASS: TestConversationMemoryBoundedByBytes") {
			t.Fatal("the conversation's own process did not run the test")
		}
		return
	}
	// The model's Go guest reaches its steady size (its linear memory,
	// on the host's heap, grows once by about 2.5 MiB) within its first
	// few large messages, at a point its collector chooses: the growth
	// is measured over the 16 messages after the first 8.
	const window, n, warm, size = 512 << 10, 24, 8, 256 << 10
	total, grown := conversationHeap(t, window, n, warm, size)
	// Each turn stores the message and its echo, 2*size: the last 16
	// turns add 8 MiB. The agent's cache holds at most twice the window and a
	// turn's messages; allow a message more for what is in flight.
	bound := int64(2*window + 4*size)
	t.Logf("%d messages of %d KiB: %d KiB live in all, %d KiB grown after the first %d (bound %d KiB)",
		n, size>>10, total>>10, grown>>10, warm, bound>>10)
	if grown > bound {
		t.Fatalf("the conversation's last %d messages left %d KiB more live on the heap, bound %d KiB (window %d KiB, messages of %d KiB)",
			n-warm, grown>>10, bound>>10, window>>10, size>>10)
	}
}

// TestConversationMemoryProfile prints the live heap a conversation leaves
// against its message size, for docs/PERFORMANCE.md. Run it with
// LOOOPY_MEMPROFILE=1 (and optionally LOOOPY_MEMPROFILE_N, the messages).
func TestConversationMemoryProfile(t *testing.T) {
	if os.Getenv("LOOOPY_MEMPROFILE") == "" {
		t.Skip("set LOOOPY_MEMPROFILE=1 to print the figures")
	}
	n := 20
	if v, err := strconv.Atoi(os.Getenv("LOOOPY_MEMPROFILE_N")); err == nil && v > 0 {
		n = v
	}
	for _, size := range profileSizes() {
		total, grown := conversationHeap(t, host.DefaultHistoryBytes, n, n/3, size)
		t.Logf("message %4d KiB: %d messages, input %6d KiB, live heap %7d KiB (%.2fx input), of which %5d KiB after message %d",
			size>>10, n, n*size>>10, total>>10, float64(total)/float64(n*size), grown>>10, n/3)
	}
}

func profileSizes() []int {
	if v, err := strconv.Atoi(os.Getenv("LOOOPY_MEMPROFILE_KIB")); err == nil && v > 0 {
		return []int{v << 10}
	}
	return []int{16 << 10, 64 << 10, 256 << 10}
}

// client10With is client10 with the given HTTP timeout.
func client10With(t testing.TB, base string, timeout time.Duration) *a2aclient.Client {
	t.Helper()
	ctx := context.Background()
	hc := &http.Client{Timeout: timeout}
	card, err := agentcard.NewResolver(hc).Resolve(ctx, base)
	if err != nil {
		t.Fatalf("resolve card: %v", err)
	}
	c, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(hc))
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}
