package host

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestWithRequestTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tr := tp.Tracer("test")
	reqCtx, cancelReq := context.WithCancel(context.Background())
	reqCtx, reqSpan := tr.Start(reqCtx, "SendMessage")
	turnCtx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	ctx := withRequestTrace(turnCtx, reqCtx)
	cancelReq() // the request ends; the turn goes on
	reqSpan.End()
	if ctx.Err() != nil {
		t.Fatal("the turn inherited the request's cancellation")
	}
	if _, ok := ctx.Deadline(); !ok {
		t.Fatal("the turn lost its own deadline")
	}
	_, turn := tr.Start(ctx, "agent.turn")
	turn.End()
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[1].Parent.SpanID() != spans[0].SpanContext.SpanID() ||
		spans[1].SpanContext.TraceID() != spans[0].SpanContext.TraceID() {
		t.Fatalf("agent.turn is not the request span's child: %+v", spans)
	}
	if got := withRequestTrace(turnCtx, context.Background()); got != turnCtx {
		t.Fatal("a request without a span changed the turn's context")
	}
}
