package plugins

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/looopy-go/looopy/loop"
)

// metricValues reads every int64 sum and gauge by name and attributes.
func metricValues(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	key := func(name string, s attribute.Set) string {
		var parts []string
		for _, kv := range s.ToSlice() {
			parts = append(parts, string(kv.Key)+"="+kv.Value.String())
		}
		return name + "{" + strings.Join(parts, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = p.Value
				}
			}
		}
	}
	return out
}

// A trapping call discards its instance (counted, marked on its span),
// the next call creates a new one, and the ctx the guest's host functions
// see carries the call's span.
func TestTelemetryOfCallsAndDiscards(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	r := newRegistry(t, Config{Tracer: tp.Tracer("test"), Meter: mp.Meter("test")})
	dir := t.TempDir()
	if _, err := r.Load(context.Background(), install(t, dir, "trap", fixtureWasm(t, "trap"), func(m map[string]any) {
		caps(m)["callTimeout"] = "5s"
		caps(m)["instances"] = 2
	})); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := r.Call(context.Background(), call("trap_wat", `{}`), &loop.ToolEnv{}); err == nil {
			t.Fatal("the trap did not fail")
		}
	}
	v := metricValues(t, reader)
	for k, want := range map[string]int64{
		"looopy.plugin.instances.created{plugin=trap,version=1.0.0}":   2, // at load (used by the first call), then for the second
		"looopy.plugin.instances.discarded{plugin=trap,version=1.0.0}": 2,
		"looopy.plugin.loads{outcome=loaded,plugin=trap}":              1,
		"looopy.plugin.pool.size{plugin=trap,version=1.0.0}":           2,
		"looopy.plugin.pool.instances{plugin=trap,version=1.0.0}":      0,
	} {
		if v[k] != want {
			t.Errorf("%s = %d, want %d (all: %v)", k, v[k], want, v)
		}
	}
	if v["looopy.plugin.memory.pages{plugin=trap,version=1.0.0}"] <= 0 {
		t.Errorf("no memory recorded: %v", v)
	}
	var calls, inst, loads int
	for _, s := range exp.GetSpans() {
		switch s.Name {
		case "plugin.call":
			calls++
			var discarded bool
			for _, kv := range s.Attributes {
				if kv.Key == "looopy.plugin.instance_discarded" {
					discarded = kv.Value.AsBool()
				}
			}
			if s.Status.Code != codes.Error || !discarded {
				t.Errorf("trapped call span: status %v, discarded %v", s.Status, discarded)
			}
		case "plugin.instantiate":
			inst++
		case "plugin.load":
			loads++
		}
	}
	if calls != 2 || inst != 2 || loads != 1 {
		t.Errorf("spans: %d plugin.call, %d plugin.instantiate, %d plugin.load; want 2, 2, 1", calls, inst, loads)
	}
}
