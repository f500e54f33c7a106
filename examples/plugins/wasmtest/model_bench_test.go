package wasmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/plugins"
)

// processCPU is the process's user and system CPU time in nanoseconds: on
// a busy machine it moves far less than the wall time of a call.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchTools are n tool definitions shaped like the host's own (a
// description of a sentence or two, an object schema with a few typed and
// described properties): about 450 bytes each as JSON.
func benchTools(n int) []loop.ToolDefinition {
	tools := make([]loop.ToolDefinition, n)
	for i := range tools {
		tools[i] = loop.ToolDefinition{
			Name:        fmt.Sprintf("tool_%02d", i),
			Description: "Does one thing of the demo's toolbox with the arguments given; answers in text, or an error that says what was wrong.",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"path":{"type":"string","description":"a path inside the granted folder"},` +
				`"limit":{"type":"integer","minimum":1,"maximum":1000,"description":"at most this many lines"},` +
				`"mode":{"type":"string","enum":["text","json","lines"],"description":"how to answer"}},` +
				`"required":["path"],"additionalProperties":false}`),
		}
	}
	return tools
}

// benchHistory is a conversation of n messages: user questions, assistant
// answers of a paragraph, and now and then a tool call and its result.
func benchHistory(n int) []loop.Message {
	answer := strings.Repeat("The host answered with a paragraph of ordinary text. ", 6)
	msgs := make([]loop.Message, 0, n+1)
	for i := 0; len(msgs) < n; i++ {
		msgs = append(msgs, loop.Message{Role: loop.RoleUser, Content: fmt.Sprintf("question %d about the host and its plugins", i)})
		if i%3 == 2 && len(msgs)+2 < n {
			id := fmt.Sprintf("call-%d", i)
			msgs = append(msgs,
				loop.Message{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{{ID: id, Name: "tool_01", Arguments: json.RawMessage(`{"path":"notes.txt","limit":20}`)}}},
				loop.Message{Role: loop.RoleTool, ToolCallID: id, Name: "tool_01", Content: answer})
		}
		if len(msgs) < n {
			msgs = append(msgs, loop.Message{Role: loop.RoleAssistant, Content: answer})
		}
	}
	return append(msgs[:n], loop.Message{Role: loop.RoleUser, Content: "say this back"})
}

// BenchmarkModelCall is one call of the scripted model (a Go guest built
// with pdk) through the plugin runtime, with the host's 25 tools offered
// and a history of 2 to 40 messages: what a turn pays per model call on top
// of the model itself. One caller, one warm instance. cpu-ns/op is the
// whole process's CPU per call (the host's encoding and decoding, wazero,
// the guest, and whatever the Go runtime does meanwhile); guest-cpu-ns/op is
// the part spent inside the guest's calls (plugins.GuestClock: the calling
// thread's CPU clock around them, host functions the guest calls included,
// taken over as many calls again after the measured ones), and
// host-cpu-ns/op the rest of the process's CPU over those same calls (it
// carries the clock's system calls).
func BenchmarkModelCall(b *testing.B) {
	// One rule, no delay: the answer repeats the last message.
	dir := install(b, b.TempDir(), "scripted-model", func(man map[string]any) {
		man["config"] = map[string]any{"script": `{"rules":[{"name":"any","match":"(?s)^(.*)$","steps":[{"text":"You said: $1"}]}]}`}
		delete(man["capabilities"].(map[string]any), "allowedPaths")
	})
	r, err := plugins.New(plugins.Config{CacheDir: cacheDir})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	if _, err := r.Load(context.Background(), filepath.Join(dir, "plugin.json")); err != nil {
		b.Fatal(err)
	}
	m, err := r.Model("scripted-model")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		tools, history int
		stream         bool
	}{{0, 0, false}, {25, 0, false}, {25, 2, false}, {25, 20, false}, {25, 40, false}, {25, 20, true}} {
		req := &loop.ModelRequest{Messages: benchHistory(c.history), Tools: benchTools(c.tools), Stream: c.stream}
		in, _ := json.Marshal(req)
		name := fmt.Sprintf("tools=%d/history=%d", c.tools, c.history)
		// A turn streams its model calls: the answer also comes in
		// pieces, each a host function call.
		var onDelta func(loop.Delta)
		pieces := 0
		if c.stream {
			name += "/stream"
			onDelta = func(loop.Delta) { pieces++ }
		}
		b.Run(name, func(b *testing.B) {
			// One thread for the loop, so that the thread's CPU clock
			// times each guest call whole (plugins.GuestClock). Reading
			// it is a system call, two per call timed: the calls the
			// whole process's figure is taken of are not timed, and as
			// many calls again, after them, are.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ctx := context.Background()
			if _, err := m.Generate(ctx, req, onDelta); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				resp, err := m.Generate(ctx, req, onDelta)
				if err != nil {
					b.Fatal(err)
				}
				if !strings.Contains(resp.Message.Content, "say this back") {
					b.Fatalf("answer %q", resp.Message.Content)
				}
			}
			cpu := float64(processCPU()-cpu0) / float64(b.N)
			if c.stream && pieces < b.N {
				b.Fatalf("%d pieces streamed in %d calls", pieces, b.N)
			}
			b.ReportMetric(cpu, "cpu-ns/op")
			var guest plugins.GuestClock
			timed := plugins.WithGuestClock(ctx, &guest)
			cpu0 = processCPU()
			for range b.N {
				if _, err := m.Generate(timed, req, onDelta); err != nil {
					b.Fatal(err)
				}
			}
			if n := guest.Calls(); n > 0 {
				inGuest := float64(guest.CPU()) / float64(n)
				b.ReportMetric(inGuest, "guest-cpu-ns/op")
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)-inGuest, "host-cpu-ns/op")
			}
		})
	}
}
