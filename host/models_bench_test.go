package host_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/examples/plugins/wasmtest/chatserver"
	"github.com/looopy-go/looopy/host"
)

// BenchmarkRealModelOverhead: what the host adds to a streamed answer of an
// OpenAI-compatible server on loopback (the chatserver fake: 40 content
// chunks, 2 ms apart, as a model generating), against the same server
// called directly with net/http in the same run. "direct" parses the
// server's stream as a client would; "looopy" is the default host (Badger
// on disk) running the real openai.wasm, read through the official a2a-go
// client's SendStreamingMessage; "looopy-mem" is the same in memory.
// Reports the medians of the time to the first text and to the end, of
// how long the server took to stream (server-ms: on a small machine the
// host's work per chunk delays the server's own timers, so the whole
// answer takes longer even when each chunk is handled within its gap) and
// of how long the client waited after the server's last flush
// (after-server-ms: the latency the host adds at the end), and the CPU
// time of this process per turn (cpu-ms/turn: user and system, every
// thread: the client, the host, and the server unless it runs apart),
// which a loaded machine moves far less than the latencies.
// LOOOPY_BENCH_CHUNKS and LOOOPY_BENCH_CHUNK_DELAY (a Go duration, 0 for
// none) change the answer's shape: 400 chunks with no delay measure the
// host's cost per chunk when the model is faster than the host. The
// "-server-process" variants run the same server in a child process (this
// test binary, see TestMain), so that its timers and goroutines share only
// the machine's cores with the host, not its Go scheduler and collector.
func BenchmarkRealModelOverhead(b *testing.B) {
	chunks, delay := 40, 2*time.Millisecond
	if v, err := strconv.Atoi(os.Getenv("LOOOPY_BENCH_CHUNKS")); err == nil && v > 0 {
		chunks = v
	}
	if v, err := time.ParseDuration(os.Getenv("LOOOPY_BENCH_CHUNK_DELAY")); err == nil {
		delay = v
	}
	text := benchWords(chunks)
	reply := chatserver.Reply{Text: text, ChunkDelay: delay}
	for _, mode := range []string{"direct", "looopy", "looopy-mem",
		"direct-server-process", "looopy-server-process", "looopy-mem-server-process"} {
		b.Run(mode, func(b *testing.B) {
			var base string
			var lastStream func() (time.Time, time.Time, error)
			kind, apart := strings.CutSuffix(mode, "-server-process")
			if apart {
				p := startChatProcess(b, chunks, delay)
				base, lastStream = p.base, p.LastStream
			} else {
				srv := chatserver.Start(b.Cleanup)
				srv.Default = reply
				base = srv.BaseURL()
				lastStream = func() (time.Time, time.Time, error) {
					f, d := srv.LastStream()
					return f, d, nil
				}
			}
			var turn func(ctx context.Context) (first, end time.Duration, err error)
			if kind == "direct" {
				turn = directTurn(base, text[len(text)-1])
			} else {
				h := openAIHostAt(b, base, "LOOOPY_BENCH_OPENAI_KEY", "sk-bench", func(cfg *host.Config) {
					cfg.InMemory = kind == "looopy-mem"
				})
				turn = a2aTurn(b, h.URL())
			}
			ctx := context.Background()
			for range 3 { // connections, plugin instances
				if _, _, err := turn(ctx); err != nil {
					b.Fatal(err)
				}
			}
			firsts, ends := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
			paces, afters := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
			cpu0 := processCPU(b)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				first, end, err := turn(ctx)
				if err != nil {
					b.Fatal(err)
				}
				firsts, ends = append(firsts, first), append(ends, end)
				from, done, err := lastStream()
				if err != nil {
					b.Fatal(err)
				}
				paces, afters = append(paces, done.Sub(from)), append(afters, t0.Add(end).Sub(done))
			}
			b.StopTimer()
			cpu := processCPU(b) - cpu0
			median := func(d []time.Duration) float64 {
				slices.Sort(d)
				return float64(d[len(d)/2].Microseconds()) / 1000
			}
			b.ReportMetric(median(firsts), "first-text-ms")
			b.ReportMetric(median(ends), "end-ms")
			b.ReportMetric(median(paces), "server-ms")
			b.ReportMetric(median(afters), "after-server-ms")
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/turn")
		})
	}
}

// directTurn streams one chat completion from the server itself.
func directTurn(base, want string) func(ctx context.Context) (time.Duration, time.Duration, error) {
	client := &http.Client{Timeout: time.Minute}
	body := []byte(`{"model":"bench","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello"}]}`)
	return func(ctx context.Context) (first, end time.Duration, err error) {
		t0 := time.Now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/chat/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk-bench")
		resp, err := client.Do(req)
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var text strings.Builder
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok || line == "[DONE]" {
				continue
			}
			var chunk struct {
				Choices []struct {
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(line), &chunk); err != nil {
				return 0, 0, err
			}
			for _, c := range chunk.Choices {
				if c.Delta.Content != "" && first == 0 {
					first = time.Since(t0)
				}
				text.WriteString(c.Delta.Content)
			}
		}
		if err := sc.Err(); err != nil {
			return 0, 0, err
		}
		if !strings.HasSuffix(text.String(), want) {
			return 0, 0, fmt.Errorf("answer %q", text.String())
		}
		return first, time.Since(t0), nil
	}
}

// a2aTurn streams one turn from a host through the official client.
func a2aTurn(b *testing.B, url string) func(ctx context.Context) (time.Duration, time.Duration, error) {
	c := benchClient(b, url+"/a2a/v1")
	return func(ctx context.Context) (first, end time.Duration, err error) {
		t0 := time.Now()
		var state a2a.TaskState
		for ev, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: userMsg("hello")}) {
			if err != nil {
				return 0, 0, err
			}
			switch e := ev.(type) {
			case *a2a.TaskArtifactUpdateEvent:
				if first == 0 {
					for _, p := range e.Artifact.Parts {
						if p.Text() != "" {
							first = time.Since(t0)
						}
					}
				}
			case *a2a.TaskStatusUpdateEvent:
				state = e.Status.State
			case *a2a.Task:
				state = e.Status.State
			}
		}
		if state != a2a.TaskStateCompleted || first == 0 {
			return 0, 0, fmt.Errorf("turn ended %s, first text after %s", state, first)
		}
		return first, time.Since(t0), nil
	}
}
