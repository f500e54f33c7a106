package host

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

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

// panicky is a value whose rendering panics.
type panicky struct{}

func (panicky) String() string { panic("boom") }

// The redaction handler compares no values: lists, maps, structs, byte
// slices, nil and values whose String panics are logged (redacted when they
// hold a secret) without taking the host down.
func TestLogHandlerNeverPanics(t *testing.T) {
	var buf bytes.Buffer
	const secret = "sk-SECRET-0123456789"
	log := slog.New(newLogHandler(slog.NewJSONHandler(&buf, nil), []string{secret}))
	var nilErr *strings.Builder
	log.Warn("capabilities asked for and not granted",
		"refused", []string{"host evil.example", "secret token ($OPENAI_API_KEY)"},
		"leaked", []string{"a", "Bearer " + secret},
		"m", map[string]any{"k": []int{1, 2}, "s": secret},
		"b", []byte("raw "+secret),
		"st", struct{ A []string }{[]string{secret}},
		"nil", nil, "nilptr", nilErr,
		"p", panicky{},
		slog.Group("g", "list", []string{"x"}),
		secret, "value of a key that is a secret")
	out := buf.String()
	if strings.Contains(out, secret) {
		t.Fatalf("the secret was logged: %s", out)
	}
	for _, want := range []string{`"refused":["host evil.example","secret token ($OPENAI_API_KEY)"]`,
		`"leaked":"[a Bearer [REDACTED]]"`, `"b":"raw [REDACTED]"`, `"p":"(value not logged: boom)"`,
		`"g":{"list":["x"]}`, `"[REDACTED]":"value of a key that is a secret"`} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %s in %s", want, out)
		}
	}
	// With attributes added through With, too.
	buf.Reset()
	log.With("list", []string{secret}, "ok", []string{"y"}).Info("with")
	if strings.Contains(buf.String(), secret) || !strings.Contains(buf.String(), `"ok":["y"]`) {
		t.Fatalf("With: %s", buf.String())
	}
}

// A handler that panics under the redaction handler costs a line, not the
// process.
func TestLogHandlerSurvivesInnerPanic(t *testing.T) {
	h := newLogHandler(panicHandler{}, []string{"sk-SECRET-0123456789"})
	if err := h.Handle(context.Background(), slog.NewRecord(time.Now(), slog.LevelInfo, "x", 0)); err == nil {
		t.Fatal("a panicking inner handler reported no error")
	}
}

type panicHandler struct{ slog.Handler }

func (panicHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (panicHandler) Handle(context.Context, slog.Record) error { panic("inner") }

// FuzzLogHandler feeds the handler attributes of every slog kind built from
// fuzzed text: it must never panic, and never write a secret.
func FuzzLogHandler(f *testing.F) {
	f.Add("msg", "key", "value with sk-SECRET-0123456789", int64(3), 1.5, true, []byte("b"))
	f.Add("", "", "", int64(0), 0.0, false, []byte(nil))
	f.Fuzz(func(t *testing.T, msg, key, text string, n int64, x float64, b bool, raw []byte) {
		const secret = "sk-SECRET-0123456789"
		var buf bytes.Buffer
		log := slog.New(newLogHandler(slog.NewJSONHandler(&buf, nil), []string{secret, text}))
		attrs := []any{
			slog.String(key, text), slog.Int64(key, n), slog.Float64(key, x), slog.Bool(key, b),
			slog.Duration(key, time.Duration(n)), slog.Time(key, time.Unix(n%1e9, 0)), slog.Uint64(key, uint64(n)),
			slog.Any(key, []string{text, secret}), slog.Any(key, map[string]string{key: text}),
			slog.Any(key, raw), slog.Any(key, errors.New(text)), slog.Any(key, panicky{}),
			slog.Any(key, []any{nil, text, n}), slog.Group(key, slog.Any(key, []string{secret}), slog.String(key, text)),
			slog.Any(key, slog.GroupValue(slog.String(key, secret))),
		}
		log.With(key, []string{text}).WithGroup(key).Info(msg+secret, attrs...)
		if strings.Contains(buf.String(), secret) {
			t.Fatalf("secret logged: %s", buf.String())
		}
	})
}
