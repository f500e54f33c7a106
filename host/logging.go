package host

import (
	"context"
	"encoding/json"
	"fmt"
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

func (h *logHandler) Handle(ctx context.Context, r slog.Record) (err error) {
	// No attribute a plugin, a manifest or a caller hands the logger may
	// take the host down: a panic while redacting or formatting becomes a
	// short line saying a record was dropped (its message redacted).
	defer func() {
		if v := recover(); v != nil {
			out := slog.NewRecord(r.Time, r.Level, h.redact(r.Message), r.PC)
			out.AddAttrs(slog.String("log_error", h.redact(fmt.Sprintf("record dropped: %v", v))))
			err = h.handleSafe(ctx, out)
		}
	}()
	if len(h.secrets) > 0 {
		r = h.redactRecord(r)
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.inner.Handle(ctx, r)
}

// handleSafe passes a record on, turning a panic of the inner handler into
// an error.
func (h *logHandler) handleSafe(ctx context.Context, r slog.Record) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("log handler: %v", v)
		}
	}()
	return h.inner.Handle(ctx, r)
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(h.secrets) > 0 {
		as = append([]slog.Attr(nil), as...)
		for i := range as {
			as[i], _ = h.redactAttr(as[i])
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
		b, ch := h.redactAttr(a)
		changed = changed || ch
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

// redactAttr returns a with every secret replaced, and whether it changed.
// It never compares values (a list or a map is not comparable): each kind
// says itself whether it changed.
func (h *logHandler) redactAttr(a slog.Attr) (slog.Attr, bool) {
	key := h.redact(a.Key)
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s := h.redact(v.String()); s != v.String() || key != a.Key {
			return slog.String(key, s), true
		}
	case slog.KindGroup:
		g := v.Group()
		out := make([]slog.Attr, len(g))
		changed := key != a.Key
		for i, ga := range g {
			var ch bool
			out[i], ch = h.redactAttr(ga)
			changed = changed || ch
		}
		if changed {
			return slog.Attr{Key: key, Value: slog.GroupValue(out...)}, true
		}
	case slog.KindAny:
		// Errors, Stringers, lists, maps, structs, byte slices: anything
		// whose text holds a secret is logged as its redacted text.
		if s, ok := h.anyText(v.Any()); ok {
			return slog.String(key, s), true
		}
	}
	if key != a.Key {
		return slog.Attr{Key: key, Value: v}, true
	}
	return a, false
}

// anyText renders a value of KindAny the way a reader of the log would see
// it and returns its redacted text when it holds a secret. A value whose
// rendering panics is reported as such rather than logged.
func (h *logHandler) anyText(v any) (s string, changed bool) {
	defer func() {
		if r := recover(); r != nil {
			s, changed = fmt.Sprintf("(value not logged: %v)", r), true
		}
	}()
	var text string
	switch x := v.(type) {
	case nil:
		return "", false
	case error:
		text = x.Error()
	case fmt.Stringer:
		text = x.String()
	case []byte:
		text = string(x)
	default:
		text = fmt.Sprintf("%+v", x)
		if b, err := json.Marshal(x); err == nil {
			text += "\n" + string(b) // the JSON handler's rendering (escapes, base64)
		}
	}
	if r := h.redact(text); r != text {
		if _, isBytes := v.([]byte); isBytes {
			return r, true
		}
		return h.redact(fmt.Sprintf("%+v", v)), true
	}
	return "", false
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
	add(cfg.Store.Redis.Password)
	add(cfg.Store.S3.AccessKey)
	add(cfg.Store.S3.SecretKey)
	for _, name := range cfg.Plugins.Secrets {
		if v := os.Getenv(name); v != "" {
			out = append(out, v)
		}
	}
	return out
}
