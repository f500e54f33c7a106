package plugins

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/looopy-go/looopy/pdk"
)

// telemetry is the registry's tracing and metrics; both optional. Without
// a tracer no span is made, without a meter nothing is recorded.
type telemetry struct {
	tracer trace.Tracer

	created   metric.Int64Counter
	discarded metric.Int64Counter
	loads     metric.Int64Counter
	callDur   metric.Float64Histogram
}

var callBuckets = []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120}

func newTelemetry(tracer trace.Tracer, meter metric.Meter) (*telemetry, error) {
	t := &telemetry{tracer: tracer}
	if meter == nil {
		return t, nil
	}
	var errs [4]error
	t.created, errs[0] = meter.Int64Counter("looopy.plugin.instances.created", metric.WithUnit("{instance}"),
		metric.WithDescription("Plugin instances created, by plugin and version."))
	t.discarded, errs[1] = meter.Int64Counter("looopy.plugin.instances.discarded", metric.WithUnit("{instance}"),
		metric.WithDescription("Plugin instances discarded after a trap, a timeout or a cancel, by plugin and version."))
	t.loads, errs[2] = meter.Int64Counter("looopy.plugin.loads", metric.WithUnit("{load}"),
		metric.WithDescription("Plugin loads (first loads and hot reloads), by outcome."))
	t.callDur, errs[3] = meter.Float64Histogram("looopy.plugin.call.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of plugin calls, by plugin, operation and outcome."),
		metric.WithExplicitBucketBoundaries(callBuckets...))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("plugin metrics: %w", err)
	}
	return t, nil
}

// registerGauges observes, at each collection, the pools and memory of the
// serving plugin versions.
func (r *Registry) registerGauges(meter metric.Meter) error {
	live, err1 := meter.Int64ObservableGauge("looopy.plugin.pool.instances", metric.WithUnit("{instance}"),
		metric.WithDescription("Live instances of each serving plugin version."))
	idle, err2 := meter.Int64ObservableGauge("looopy.plugin.pool.idle", metric.WithUnit("{instance}"),
		metric.WithDescription("Idle instances of each serving plugin version."))
	size, err3 := meter.Int64ObservableGauge("looopy.plugin.pool.size", metric.WithUnit("{instance}"),
		metric.WithDescription("Most instances each serving plugin version may have."))
	mem, err4 := meter.Int64ObservableGauge("looopy.plugin.memory.pages", metric.WithUnit("{page}"),
		metric.WithDescription("Largest linear memory (64 KiB pages) an instance of each serving plugin version has had."))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return fmt.Errorf("plugin metrics: %w", err)
	}
	_, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		r.mu.RLock()
		defer r.mu.RUnlock()
		for _, p := range r.plugins {
			attrs := metric.WithAttributeSet(p.attrs)
			nLive, nIdle, nSize := p.pool.stats()
			o.ObserveInt64(live, int64(nLive), attrs)
			o.ObserveInt64(idle, int64(nIdle), attrs)
			o.ObserveInt64(size, int64(nSize), attrs)
			o.ObserveInt64(mem, p.memPages.Load(), attrs)
		}
		return nil
	}, live, idle, size, mem)
	if err != nil {
		return fmt.Errorf("plugin metrics: %w", err)
	}
	return nil
}

// opName is an operation's name as a span attribute and metric label.
func opName(op pdk.Op) string { return strings.ReplaceAll(op.String(), " ", "_") }

// startCall starts the plugin.call span of one call.
func (p *Plugin) startCall(ctx context.Context, op pdk.Op) (context.Context, trace.Span) {
	t := p.tel
	if t == nil || t.tracer == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	attrs := []attribute.KeyValue{attribute.String("looopy.plugin.name", p.man.Name),
		attribute.String("looopy.plugin.version", p.man.Version), attribute.String("looopy.plugin.op", opName(op))}
	if op == pdk.OpGenerate {
		if model, ok := p.man.Config["model"].(string); ok && model != "" {
			// The model a model plugin is configured with (OpenTelemetry's
			// GenAI name for it).
			attrs = append(attrs, attribute.String("gen_ai.request.model", model))
		}
	}
	return t.tracer.Start(ctx, "plugin.call", trace.WithAttributes(attrs...))
}

// noteMemory keeps the largest memory an instance of p has had. The
// instance is still the caller's (not back in the pool).
func (p *Plugin) noteMemory(inst instance) {
	m, ok := inst.(interface{ memoryPages() int64 })
	if !ok || p.tel == nil {
		return
	}
	pages := m.memoryPages()
	for {
		cur := p.memPages.Load()
		if pages <= cur || p.memPages.CompareAndSwap(cur, pages) {
			return
		}
	}
}

// endCall ends a call's span and records its duration and, when its
// instance was discarded, the discard.
func (p *Plugin) endCall(ctx context.Context, span trace.Span, op pdk.Op, began time.Time, discarded bool, err error) {
	if span.IsRecording() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		if discarded {
			span.SetAttributes(attribute.Bool("looopy.plugin.instance_discarded", true))
		}
		span.End()
	}
	t := p.tel
	if t == nil || t.callDur == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	t.callDur.Record(ctx, time.Since(began).Seconds(), metric.WithAttributes(
		attribute.String("plugin", p.man.Name), attribute.String("version", p.man.Version),
		attribute.String("op", opName(op)), attribute.String("outcome", outcome)))
	if discarded {
		t.discarded.Add(ctx, 1, metric.WithAttributeSet(p.attrs))
	}
}

// newInstance makes an instance for the pool, in a plugin.instantiate span.
func (p *Plugin) newInstance(ctx context.Context) (instance, error) {
	t := p.tel
	if t == nil || (t.tracer == nil && t.created == nil) {
		return p.drv.newInstance(ctx)
	}
	span := trace.SpanFromContext(ctx)
	if t.tracer != nil {
		ctx, span = t.tracer.Start(ctx, "plugin.instantiate", trace.WithAttributes(
			attribute.String("looopy.plugin.name", p.man.Name), attribute.String("looopy.plugin.version", p.man.Version)))
		defer span.End()
	}
	in, err := p.drv.newInstance(ctx)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	if t.created != nil {
		t.created.Add(ctx, 1, metric.WithAttributeSet(p.attrs))
	}
	return in, nil
}

// startLoad starts the span of a load (a first load or a hot reload).
func (r *Registry) startLoad(ctx context.Context, path string) (context.Context, trace.Span) {
	t := r.env.tel
	if t == nil || t.tracer == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.tracer.Start(ctx, "plugin.load", trace.WithAttributes(attribute.String("looopy.plugin.source", path)))
}

// endLoad records a load's outcome on its span and in the load counter.
func (r *Registry) endLoad(ctx context.Context, span trace.Span, ev Event) {
	t := r.env.tel
	if t == nil {
		return
	}
	outcome := "loaded"
	switch {
	case ev.Err != nil:
		outcome = "failed"
	case ev.Previous != "":
		outcome = "reloaded"
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("looopy.plugin.name", ev.Name), attribute.String("looopy.plugin.version", ev.Version),
			attribute.String("looopy.plugin.previous_version", ev.Previous), attribute.String("looopy.plugin.outcome", outcome))
		if ev.Err != nil {
			span.RecordError(ev.Err)
			span.SetStatus(codes.Error, ev.Err.Error())
		}
		span.End()
	}
	if t.loads != nil {
		t.loads.Add(ctx, 1, metric.WithAttributes(attribute.String("plugin", ev.Name), attribute.String("outcome", outcome)))
	}
}
