package host_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"iter"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/looopy-go/looopy/host"
)

// The benchmarks measure the host next to a reference A2A server built
// from a2a-go's own a2asrv (in-memory task store, net/http) with an echo
// executor, in the same run, both driven by the official a2a-go client.
// The host's model is the scripted-model plugin (echo), its store Badger
// on disk: every task is durable, the reference's is not.

// benchScript makes the scripted model answer "stream N" with N text
// chunks, with no delay, and echo anything else.
const benchScript = `{"rules":[{"name":"stream","match":"^stream (\\d+)$","steps":[{"text":" t{{i}}","repeat":"$1"}]}]}`

// benchPluginDir writes a plugin folder with the scripted model configured
// with benchScript.
func benchPluginDir(b testing.TB) string {
	b.Helper()
	return scriptedPluginDir(b, benchScript)
}

// scriptedPluginDir writes a plugin folder with the scripted model
// playing script (inline).
func scriptedPluginDir(b testing.TB, script string) string {
	b.Helper()
	src := "../examples/plugins/scripted-model/scripted-model.wasm"
	wasm, err := os.ReadFile(src)
	if err != nil {
		b.Fatalf("read %s (run make plugins-go): %v", src, err)
	}
	dir := filepath.Join(b.TempDir(), "plugins", "scripted-model")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scripted-model.wasm"), wasm, 0o644); err != nil {
		b.Fatal(err)
	}
	tmpl, err := os.ReadFile("../examples/plugins/scripted-model/plugin.template.json")
	if err != nil {
		b.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(tmpl, &m); err != nil {
		b.Fatal(err)
	}
	sum := sha256.Sum256(wasm)
	m["sha256"] = hex.EncodeToString(sum[:])
	m["config"] = map[string]any{"script": script}
	// The inline script needs no folder (the template's grant names a
	// placeholder only the build fills).
	delete(m["capabilities"].(map[string]any), "allowedPaths")
	manifest, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, "plugin.json"), manifest, 0o644); err != nil {
		b.Fatal(err)
	}
	return filepath.Dir(dir)
}

func startBenchHost(b *testing.B) string { return startBenchHostWith(b, false) }

// startBenchHostMem keeps the host's stores in memory, so that the figures
// show the host without the synced writes that make each task durable.
func startBenchHostMem(b *testing.B) string { return startBenchHostWith(b, true) }

func startBenchHostWith(b *testing.B, inMemory bool) string {
	cfg := baseConfig(b.TempDir())
	cfg.InMemory = inMemory
	cfg.PluginDir = benchPluginDir(b)
	cfg.Plugins.Only = nil
	cfg.Limits.Heartbeat = host.Duration(15 * time.Second)
	if r := os.Getenv("LOOOPY_BENCH_THOUGHTS"); r != "" {
		cfg.Thoughts.Record = r
	}
	h := startHost(b, cfg)
	return h.URL()
}

// refExecutor is the reference agent: it echoes the message as a task with
// an artifact, or streams N chunks for "stream N".
type refExecutor struct{}

func (refExecutor) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		text := ec.Message.Parts[0].Text()
		if !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil) {
			return
		}
		var n int
		if _, err := fmt.Sscanf(text, "stream %d", &n); err == nil {
			id := a2a.NewArtifactID()
			for i := 1; i <= n; i++ {
				ev := a2a.NewArtifactUpdateEvent(ec, id, a2a.NewTextPart(fmt.Sprintf(" t%d", i)))
				ev.Append = i > 1
				if !yield(ev, nil) {
					return
				}
			}
		} else if !yield(a2a.NewArtifactEvent(ec, a2a.NewTextPart("You said: "+text)), nil) {
			return
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
	}
}

func (refExecutor) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

func startReference(b *testing.B) string {
	handler := a2asrv.NewHandler(refExecutor{})
	mux := http.NewServeMux()
	mux.Handle("/", a2asrv.NewJSONRPCHandler(handler))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// benchClient talks JSON-RPC 1.0 to url with pooled connections.
func benchClient(b *testing.B, url string) *a2aclient.Client {
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}
	b.Cleanup(tr.CloseIdleConnections)
	c, err := a2aclient.NewFromEndpoints(context.Background(),
		[]*a2a.AgentInterface{a2a.NewAgentInterface(url, a2a.TransportProtocolJSONRPC)},
		a2aclient.WithJSONRPCTransport(&http.Client{Transport: tr, Timeout: time.Minute}))
	if err != nil {
		b.Fatal(err)
	}
	return c
}

var servers = []struct {
	name  string
	start func(*testing.B) string
}{
	{"looopy", startBenchHost},
	{"looopy-mem", startBenchHostMem},
	{"a2asrv", startReference},
}

// BenchmarkSendMessage: blocking SendMessage round trips (a new task each,
// echo model) from c concurrent clients. Reports requests/s and the
// latency percentiles.
func BenchmarkSendMessage(b *testing.B) {
	for _, srv := range servers {
		for _, conc := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("%s/c=%d", srv.name, conc), func(b *testing.B) {
				c := benchClient(b, srv.start(b))
				ctx := context.Background()
				// Warm up: connections, plugin instances.
				for range conc {
					if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: userMsg("warm")}); err != nil {
						b.Fatal(err)
					}
				}
				lat := make([]time.Duration, b.N)
				var next atomic.Int64
				var wg sync.WaitGroup
				var failed atomic.Value
				b.ResetTimer()
				cpu0 := processCPU(b)
				start := time.Now()
				for range conc {
					wg.Go(func() {
						for {
							i := next.Add(1) - 1
							if i >= int64(b.N) {
								return
							}
							t0 := time.Now()
							r, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: userMsg("ping")})
							lat[i] = time.Since(t0)
							if err != nil {
								failed.Store(err)
								return
							}
							if tk, ok := r.(*a2a.Task); !ok || tk.Status.State != a2a.TaskStateCompleted {
								failed.Store(fmt.Errorf("unexpected result %#v", r))
								return
							}
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
				reportLatency(b, lat, elapsed)
				reportCPU(b, cpu0, len(lat))
			})
		}
	}
}

// processCPU is the CPU time (user and system) the process has used: the
// server's and the client's, both in this process. Unlike the wall time, it
// does not grow when other work shares the machine.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per request since cpu0.
func reportCPU(b *testing.B, cpu0 time.Duration, n int) {
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(n), "cpu-us/op")
}

func reportLatency(b *testing.B, lat []time.Duration, elapsed time.Duration) {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "req/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.90), "p90-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// BenchmarkStreamingEvents: one SendStreamingMessage whose answer is 200
// text chunks; reports the events the client receives per second.
func BenchmarkStreamingEvents(b *testing.B) {
	const chunks = 200
	for _, srv := range servers {
		b.Run(srv.name, func(b *testing.B) {
			c := benchClient(b, srv.start(b))
			ctx := context.Background()
			events := 0
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				n := 0
				for ev, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: userMsg(fmt.Sprintf("stream %d", chunks))}) {
					if err != nil {
						b.Fatal(err)
					}
					if _, ok := ev.(*a2a.TaskArtifactUpdateEvent); ok {
						n++
					}
				}
				if n < chunks {
					b.Fatalf("%d chunks, want at least %d", n, chunks)
				}
				events += n
			}
			b.ReportMetric(float64(events)/time.Since(start).Seconds(), "events/s")
		})
	}
}
