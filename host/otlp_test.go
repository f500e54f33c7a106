package host_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/looopy-go/looopy/host"
)

// collector keeps the names of the spans an OTLP exporter sent it.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names map[string]int
}

func (c *collector) add(req *coltracepb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.names[s.Name]++
			}
		}
	}
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (c *collector) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.names[name]
}

// runTracedTurn runs a host configured by the environment alone, one turn,
// and closes it (which must flush the spans).
func runTracedTurn(t *testing.T) {
	t.Helper()
	m := host.NewMain()
	m.Config, m.Stdout = baseConfig(t.TempDir()), io.Discard
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	task := send(t, client10(t, m.URL(), ""), context.Background(), &a2a.SendMessageRequest{Message: userMsg("calc 2+2")})
	if task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("task %s", task.Status.State)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOTLPOverHTTPFromTheEnvironment(t *testing.T) {
	col := &collector{names: map[string]int{}}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		col.add(&req)
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
	runTracedTurn(t)
	for _, name := range []string{"SendMessage", "agent.turn", "llm.call", "tool[calc]", "plugin.call"} {
		if col.count(name) == 0 {
			t.Errorf("the collector got no %s span (got %v)", name, col.names)
		}
	}
}

func TestOTLPOverGRPCFromTheEnvironment(t *testing.T) {
	col := &collector{names: map[string]int{}}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, col)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	runTracedTurn(t)
	for _, name := range []string{"SendMessage", "agent.turn", "tool[calc]"} {
		if col.count(name) == 0 {
			t.Errorf("the collector got no %s span (got %v)", name, col.names)
		}
	}
}

// The sampler comes from the environment too: always_off exports nothing.
func TestSamplerFromTheEnvironment(t *testing.T) {
	col := &collector{names: map[string]int{}}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, col)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	runTracedTurn(t)
	if len(col.names) != 0 {
		t.Fatalf("spans exported with sampling off: %v", col.names)
	}
}

func TestBadExporterIsAnError(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "carrier-pigeon")
	m := host.NewMain()
	m.Config, m.Stdout = baseConfig(t.TempDir()), io.Discard
	err := m.Run(context.Background())
	if err == nil {
		_ = m.Close()
		t.Fatal("an unknown OTEL_TRACES_EXPORTER was accepted")
	}
	if !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
		t.Fatalf("error %q does not name the variable", err)
	}
}

// OTEL_TRACES_EXPORTER=stdout prints the spans on standard output.
func TestStdoutExporterFromTheEnvironment(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	orig := os.Stdout
	os.Stdout = w
	t.Cleanup(func() { os.Stdout = orig })
	out := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	t.Setenv("OTEL_TRACES_EXPORTER", "stdout")
	runTracedTurn(t)
	os.Stdout = orig
	w.Close()
	printed := <-out
	for _, name := range []string{`"Name":"agent.turn"`, `"Name":"tool[calc]"`, `"Name":"SendMessage"`} {
		if !strings.Contains(printed, name) {
			t.Errorf("stdout misses %s:\n%.2000s", name, printed)
		}
	}
}
