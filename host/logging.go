package host

import (
	"context"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// redacted replaces a secret wherever it would appear in a log line.
const redacted = "[REDACTED]"

// logHandler adds the trace and span ids of the record's context to each
// line, and replaces any known secret (API keys, the admin token, plugin
// secrets) by [REDACTED]: secrets are never written to the log, even by
// code that logs an error quoting one.
type logHandler struct {
	inner   slog.Handler
	secrets []string
}

var _ slog.Handler = (*logHandler)(nil)

func newLogHandler(inner slog.Handler, secrets []string) *logHandler {
	var kept []string
	for _, s := range secrets {
		if len(s) >= 4 { // shorter ones would redact ordinary words
			kept = append(kept, s)
		}
	}
	return &logHandler{inner: inner, secrets: kept}
}

func (h *logHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	if len(h.secrets) > 0 {
		r = h.redactRecord(r)
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.inner.Handle(ctx, r)
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(h.secrets) > 0 {
		as = append([]slog.Attr(nil), as...)
		for i := range as {
			as[i] = h.redactAttr(as[i])
		}
	}
	return &logHandler{inner: h.inner.WithAttrs(as), secrets: h.secrets}
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{inner: h.inner.WithGroup(name), secrets: h.secrets}
}

func (h *logHandler) redactRecord(r slog.Record) slog.Record {
	msg := h.redact(r.Message)
	changed := msg != r.Message
	attrs := make([]slog.Attr, 0, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool {
		b := h.redactAttr(a)
		if !b.Equal(a) {
			changed = true
		}
		attrs = append(attrs, b)
		return true
	})
	if !changed {
		return r
	}
	out := slog.NewRecord(r.Time, r.Level, msg, r.PC)
	out.AddAttrs(attrs...)
	return out
}

func (h *logHandler) redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s := h.redact(v.String()); s != v.String() {
			return slog.String(a.Key, s)
		}
	case slog.KindGroup:
		g := v.Group()
		out := make([]slog.Attr, len(g))
		for i, ga := range g {
			out[i] = h.redactAttr(ga)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			if s := h.redact(err.Error()); s != err.Error() {
				return slog.String(a.Key, s)
			}
		}
	}
	return a
}

func (h *logHandler) redact(s string) string {
	for _, sec := range h.secrets {
		if strings.Contains(s, sec) {
			s = strings.ReplaceAll(s, sec, redacted)
		}
	}
	return s
}

// configSecrets lists the secret values of cfg the log must never show:
// API keys, the admin and metrics tokens, the plugin secrets.
func configSecrets(cfg Config) []string {
	var out []string
	add := func(v string) {
		if s, err := resolveSecret(v); err == nil && s != "" {
			out = append(out, s)
		}
	}
	for _, k := range cfg.Auth.Keys {
		add(k.Key)
	}
	add(cfg.Admin.Token)
	add(cfg.Observability.MetricsToken)
	for _, name := range cfg.Plugins.Secrets {
		if v := os.Getenv(name); v != "" {
			out = append(out, v)
		}
	}
	return out
}
