package host

import (
	"context"
	"log/slog"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// logExporter writes each finished span as one log record.
type logExporter struct{ log *slog.Logger }

var _ sdktrace.SpanExporter = (*logExporter)(nil)

func (e *logExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	for _, s := range spans {
		attrs := []slog.Attr{
			slog.String("span", s.Name()),
			slog.String("trace_id", s.SpanContext().TraceID().String()),
			slog.String("span_id", s.SpanContext().SpanID().String()),
			slog.Duration("took", s.EndTime().Sub(s.StartTime())),
		}
		if p := s.Parent(); p.IsValid() {
			attrs = append(attrs, slog.String("parent_id", p.SpanID().String()))
		}
		if st := s.Status(); st.Description != "" {
			attrs = append(attrs, slog.String("status", st.Description))
		}
		for _, kv := range s.Attributes() {
			attrs = append(attrs, slog.String(string(kv.Key), kv.Value.String()))
		}
		e.log.LogAttrs(ctx, slog.LevelInfo, "span", attrs...)
	}
	return nil
}

func (e *logExporter) Shutdown(context.Context) error { return nil }
