package loop_test

import (
	"context"
	"fmt"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// discardExporter takes spans and drops them: the cost of a batching
// pipeline without the network.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// telemetrySetups are the configurations the overhead is measured in.
var telemetrySetups = []struct {
	name string
	set  func(b *testing.B, cfg *loop.Config)
}{
	{"off", func(*testing.B, *loop.Config) {}},
	{"spans-no-exporter", func(b *testing.B, cfg *loop.Config) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		cfg.Tracer = tp.Tracer("bench")
	}},
	{"spans-unsampled", func(b *testing.B, cfg *loop.Config) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithBatcher(discardExporter{}))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		cfg.Tracer = tp.Tracer("bench")
	}},
	{"spans-batch-exporter", func(b *testing.B, cfg *loop.Config) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discardExporter{}))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		cfg.Tracer = tp.Tracer("bench")
	}},
	{"spans-in-memory-exporter", func(b *testing.B, cfg *loop.Config) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		cfg.Tracer = tp.Tracer("bench")
	}},
	{"metrics", func(b *testing.B, cfg *loop.Config) {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		cfg.Meter = mp.Meter("bench")
	}},
	{"spans-batch+metrics", func(b *testing.B, cfg *loop.Config) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discardExporter{}))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
		cfg.Tracer, cfg.Meter = tp.Tracer("bench"), mp.Meter("bench")
	}},
}

// BenchmarkTelemetryOverhead measures what tracing and metrics cost on the
// durable turn (one tool call; history, metadata, task record, checkpoints
// and journal synced to Badger on disk), with 1 and 64 contexts at once,
// and on the bare loop iteration (no store: the worst case, relatively).
func BenchmarkTelemetryOverhead(b *testing.B) {
	for _, contexts := range []int{1, 64} {
		for _, s := range telemetrySetups {
			b.Run(fmt.Sprintf("durable-turn/contexts=%d/%s", contexts, s.name), func(b *testing.B) {
				benchTelemetryTurn(b, contexts, s.set)
			})
		}
	}
	for _, s := range telemetrySetups {
		b.Run("loop-iteration/"+s.name, func(b *testing.B) {
			const perTurn = 10
			m := &instantModel{iterations: perTurn, toolCall: calls(call("c1", "noop", `{}`)), answer: text("done")}
			cfg := loop.Config{Model: m, Toolsets: []loop.Toolset{instantTools{defs: []loop.ToolDefinition{{Name: "noop"}}}}, MaxIterations: perTurn}
			s.set(b, &cfg)
			l, err := loop.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			turn := loop.Turn{ContextID: "c", TaskID: "t", Sink: loop.SinkFunc(func(loop.Event) {}),
				Messages: []loop.Message{{Role: loop.RoleUser, Content: "go"}}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += perTurn {
				if out := l.Run(context.Background(), turn); out.Status != loop.TaskCompleted {
					b.Fatalf("turn %s (%v)", out.Status, out.Err)
				}
			}
		})
	}
}

func benchTelemetryTurn(b *testing.B, contexts int, set func(*testing.B, *loop.Config)) {
	benchTurns(b, contexts, func(db *store.Badger, cfg *loop.Config) {
		cfg.Checkpoints, cfg.Journal = durableStores(db)
		set(b, cfg)
	})
}
