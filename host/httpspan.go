package host

import (
	"context"

	"github.com/gofiber/fiber/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// fiberCarrier reads W3C trace context headers of a Fiber request.
type fiberCarrier struct{ c *fiber.Ctx }

var _ propagation.TextMapCarrier = fiberCarrier{}

func (f fiberCarrier) Get(key string) string { return f.c.Get(key) }
func (f fiberCarrier) Set(string, string)    {}
func (f fiberCarrier) Keys() []string        { return []string{"traceparent", "tracestate", "baggage"} }

// a2aMethods are the JSON-RPC methods of both A2A versions: the names a
// span or a metric label may take (a client's made-up method must not
// create new series).
var a2aMethods = map[string]bool{
	"SendMessage": true, "SendStreamingMessage": true, "GetTask": true, "ListTasks": true, "CancelTask": true,
	"SubscribeToTask": true, "GetTaskPushNotificationConfig": true, "CreateTaskPushNotificationConfig": true,
	"ListTaskPushNotificationConfigs": true, "DeleteTaskPushNotificationConfig": true, "GetExtendedAgentCard": true,
	"message/send": true, "message/stream": true, "tasks/get": true, "tasks/cancel": true, "tasks/resubscribe": true,
	"tasks/pushNotificationConfig/get": true, "tasks/pushNotificationConfig/set": true,
	"tasks/pushNotificationConfig/list": true, "tasks/pushNotificationConfig/delete": true,
	"agent/getAuthenticatedExtendedCard": true,
}

// spanName is the span name of a JSON-RPC call: its A2A method, or
// "jsonrpc" for anything else.
func spanName(method string) string {
	if !a2aMethods[method] {
		return "jsonrpc"
	}
	return method
}

// endRPCSpan records the outcome of a JSON-RPC call on its span and in the
// request counter.
func (s *Server) endRPCSpan(ctx context.Context, span trace.Span, call *rpcCall, v03 bool) {
	outcome := "ok"
	if call.err != nil {
		outcome = "error"
	}
	method := spanName(call.req.Method)
	if s.metrics.requests != nil {
		s.metrics.requests.Add(ctx, 1, metric.WithAttributes(attribute.String("method", method), attribute.String("outcome", outcome)))
	}
	if !span.IsRecording() {
		return
	}
	version := "1.0"
	if v03 {
		version = "0.3"
	}
	raw := call.req.Method
	if len(raw) > 128 {
		raw = raw[:128]
	}
	span.SetAttributes(attribute.String("rpc.system", "jsonrpc"), attribute.String("rpc.method", raw),
		attribute.String("a2a.version", version))
	if call.err != nil {
		recordError(span, call.err)
	}
}

// withRequestTrace makes a turn's context continue the trace of the
// request that started it: the request's span becomes the parent of the
// turn's spans, while the turn keeps its own cancellation and deadline
// (a turn never runs on the request's context).
func withRequestTrace(turnCtx, reqCtx context.Context) context.Context {
	if sc := trace.SpanContextFromContext(reqCtx); sc.IsValid() {
		return trace.ContextWithSpanContext(turnCtx, sc)
	}
	return turnCtx
}
