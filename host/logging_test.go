package host

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func TestLogHandlerRedactsAndAddsTrace(t *testing.T) {
	var buf bytes.Buffer
	const secret = "sk-SECRET-0123456789"
	log := slog.New(newLogHandler(slog.NewJSONHandler(&buf, nil), []string{secret, "ab"}))
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "op")
	defer span.End()

	log.With("header", "Bearer "+secret).WithGroup("g").InfoContext(ctx, "calling with "+secret,
		"err", errors.New("401 for key "+secret), slog.Group("req", "auth", secret), "n", 3, "word", "abc")
	out := buf.String()
	if strings.Contains(out, secret) {
		t.Fatalf("the secret was logged: %s", out)
	}
	for _, want := range []string{`"msg":"calling with [REDACTED]"`, `"header":"Bearer [REDACTED]"`,
		`"err":"401 for key [REDACTED]"`, `"auth":"[REDACTED]"`, `"n":3`, `"word":"abc"`,
		`"trace_id":"` + span.SpanContext().TraceID().String() + `"`, `"span_id":"` + span.SpanContext().SpanID().String() + `"`} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %s in %s", want, out)
		}
	}
	// Without a span in the context, no ids.
	buf.Reset()
	log.Info("plain")
	if strings.Contains(buf.String(), "trace_id") {
		t.Fatalf("ids without a span: %s", buf.String())
	}
}
