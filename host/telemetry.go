package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// instrumentation is the name of the host's tracer and meter.
const instrumentation = "github.com/looopy-go/looopy"

func init() {
	// "stdout" is the name operators expect for local debugging; the
	// OpenTelemetry spec calls it "console". Both print spans as JSON.
	autoexport.RegisterSpanExporter("stdout", func(context.Context) (sdktrace.SpanExporter, error) {
		return stdouttrace.New(stdouttrace.WithWriter(os.Stdout))
	})
}

// telemetry is the host's OpenTelemetry: spans go where the standard
// OTEL_* environment says (nowhere by default), metrics are read by
// GET /metrics in the Prometheus text format (and pushed by OTLP when
// OTEL_METRICS_EXPORTER says so).
type telemetry struct {
	tp         *sdktrace.TracerProvider // nil: tracing off
	tracer     trace.Tracer             // nil: tracing off
	mp         *sdkmetric.MeterProvider
	meter      metric.Meter
	registry   *prometheus.Registry
	propagator propagation.TextMapPropagator
}

// telemetryOptions say where spans go besides the environment's choice.
type telemetryOptions struct {
	// LogSpans writes each finished span to the log (Config.TraceSpans).
	LogSpans bool
	// Exporter, when set, receives every span synchronously (tests and
	// embedders: an in-memory exporter).
	Exporter sdktrace.SpanExporter
	Log      *slog.Logger
}

// tracesConfigured tells whether the environment asks for span export:
// OTEL_TRACES_EXPORTER set to something else than "none", or an OTLP
// endpoint given (the exporter then defaults to OTLP, as the spec says).
func tracesConfigured() bool {
	switch v := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); v {
	case "none":
		return false
	case "":
		return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	}
	return true
}

func newTelemetry(ctx context.Context, opts telemetryOptions) (*telemetry, error) {
	res, err := resource.Merge(resource.Default(),
		resource.NewSchemaless(attribute.String("service.name", serviceName())))
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	t := &telemetry{propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}

	var tpo []sdktrace.TracerProviderOption
	if tracesConfigured() {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("span exporter from OTEL_TRACES_EXPORTER: %w", err)
		}
		if !autoexport.IsNoneSpanExporter(exp) {
			tpo = append(tpo, sdktrace.WithBatcher(exp))
		}
	}
	if opts.LogSpans {
		tpo = append(tpo, sdktrace.WithBatcher(&logExporter{log: opts.Log.With("component", "trace")}))
	}
	if opts.Exporter != nil {
		tpo = append(tpo, sdktrace.WithSyncer(opts.Exporter))
	}
	if len(tpo) > 0 {
		// The sampler comes from OTEL_TRACES_SAMPLER (default: parent-based,
		// always on).
		t.tp = sdktrace.NewTracerProvider(append(tpo, sdktrace.WithResource(res))...)
		t.tracer = t.tp.Tracer(instrumentation)
	}

	t.registry = prometheus.NewRegistry()
	promExp, err := otelprom.New(otelprom.WithRegisterer(t.registry), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	mpo := []sdkmetric.Option{sdkmetric.WithReader(promExp), sdkmetric.WithResource(res)}
	if v := os.Getenv("OTEL_METRICS_EXPORTER"); v != "" && v != "none" && v != "prometheus" {
		r, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return nil, fmt.Errorf("metric reader from OTEL_METRICS_EXPORTER: %w", err)
		}
		mpo = append(mpo, sdkmetric.WithReader(r))
	}
	t.mp = sdkmetric.NewMeterProvider(mpo...)
	t.meter = t.mp.Meter(instrumentation)
	return t, nil
}

func serviceName() string {
	if v := os.Getenv("OTEL_SERVICE_NAME"); v != "" {
		return v
	}
	return "looopy"
}

// noSpan is a span that records nothing (ending it does nothing).
var noSpan = trace.SpanFromContext(context.Background())

// startSpan starts a span when tracing is on.
func (t *telemetry) startSpan(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t == nil || t.tracer == nil {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, name, opts...)
}

// Shutdown flushes the spans and metrics not yet exported and stops.
func (t *telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	if t.tp != nil {
		errs = append(errs, t.tp.Shutdown(ctx))
	}
	errs = append(errs, t.mp.Shutdown(ctx))
	return errors.Join(errs...)
}

// recordError marks a span failed with err.
func recordError(span trace.Span, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
