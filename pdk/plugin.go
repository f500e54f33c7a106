package pdk

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
)

// A Go plugin is a package main that imports pdk, registers its tools, model
// or agent in init, and has an empty main. Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o plugin.wasm .
//
// (`looopy plugin build` does). Importing pdk is all it takes to export the
// Looopy ABI (looopy_abi_v1, looopy_alloc, looopy_call): with GOOS=wasip1 the
// exports live in this package. On every other GOOS the same API compiles,
// so go doc, editors and the plugin's own native tests see it: registration
// works and CallLocal runs a registered tool in-process; the functions that
// need the host answer ErrNoHost.

// The registry a plugin fills in init. A plugin instance serves one call at a
// time, so none of this needs locking.
var registry struct {
	name, version string
	tools         map[string]*toolEntry
	order         []string
	generate      func(ctx context.Context, in []byte) ([]byte, error)
	run           func(ctx context.Context, in []byte) ([]byte, error)
	agentTool     *ToolDefinition
}

type toolEntry struct {
	def  ToolDefinition
	call func(ctx context.Context, args json.RawMessage) (ToolResult, error)
}

// Info names the plugin in its describe answer. Optional: the host knows the
// name and version from the manifest and uses those when they differ.
func Info(name, version string) {
	registry.name, registry.version = name, version
}

// ToolOption refines a tool's definition.
type ToolOption func(*ToolDefinition)

// Idempotent marks a tool safe to run twice with the same arguments.
func Idempotent() ToolOption { return func(d *ToolDefinition) { d.Idempotent = true } }

// WithSchema replaces the derived JSON Schema of the arguments.
func WithSchema(schema json.RawMessage) ToolOption {
	return func(d *ToolDefinition) { d.Parameters = schema }
}

// Tool registers a tool. The arguments decode into A (its JSON Schema is
// derived from A, see SchemaOf); the result R becomes the tool result's
// content: a string as it is, a ToolResult as it is, anything else as JSON.
// An error from fn becomes a tool result marked IsError, with the error's text.
// Tool panics when A has no JSON Schema form or the name is taken: both are
// programming errors found when the plugin loads.
func Tool[A, R any](name, description string, fn func(ctx context.Context, args A) (R, error), opts ...ToolOption) {
	schema, err := SchemaOf[A]()
	if err != nil {
		panic(fmt.Sprintf("pdk: tool %q: %v", name, err))
	}
	def := ToolDefinition{Name: name, Description: description, Parameters: schema}
	for _, o := range opts {
		o(&def)
	}
	if registry.tools == nil {
		registry.tools = map[string]*toolEntry{}
	}
	if _, dup := registry.tools[name]; dup {
		panic(fmt.Sprintf("pdk: tool %q registered twice", name))
	}
	registry.order = append(registry.order, name)
	flat := newFlatDecoder(reflect.TypeFor[A]())
	registry.tools[name] = &toolEntry{def: def, call: func(ctx context.Context, raw json.RawMessage) (ToolResult, error) {
		var args A
		if len(raw) > 0 && string(raw) != "null" {
			if flat == nil || !flat.decode(raw, reflect.ValueOf(&args)) {
				var zero A
				args = zero
				if err := json.Unmarshal(raw, &args); err != nil {
					return ToolResult{IsError: true, Content: "invalid arguments: " + err.Error()}, nil
				}
			}
		}
		r, err := fn(ctx, args)
		if err != nil {
			return ToolResult{IsError: true, Content: err.Error()}, nil
		}
		switch v := any(r).(type) {
		case string:
			return ToolResult{Content: v}, nil
		case ToolResult:
			return v, nil
		case *ToolResult:
			if v == nil {
				return ToolResult{}, nil
			}
			return *v, nil
		}
		if b, ok := appendScalar(nil, any(r)); ok {
			return ToolResult{Content: string(b)}, nil
		}
		b, err := json.Marshal(r)
		if err != nil {
			return ToolResult{}, fmt.Errorf("encode result: %w", err)
		}
		return ToolResult{Content: string(b)}, nil
	}}
}

// ModelFunc answers one model call. req.Messages is the whole conversation,
// in a list of the function's own; the tool calls and metadata inside the
// messages are kept for the instance's next call (FeatureHistoryRef): read
// them, do not change them in place. When req.Stream is true it may send the
// answer in pieces with delta before returning the whole response; delta
// returns an error once the call was cancelled, and fn should then return.
// An error of type *Error keeps its code and Transient flag (a rate limit or
// a 5xx is transient: the host retries).
type ModelFunc func(ctx context.Context, req *ModelRequest, delta func(Delta) error) (*ModelResponse, error)

// Model registers the plugin's model adapter.
func Model(fn ModelFunc) {
	registry.generate = func(ctx context.Context, in []byte) ([]byte, error) {
		req, ok := parseModelRequest(in)
		if !ok {
			req = ModelRequest{}
			if err := json.Unmarshal(in, &req); err != nil {
				return nil, &Error{Code: CodeBadInput, Message: "model request: " + err.Error()}
			}
		}
		if err := keptHistory.resolve(&req); err != nil {
			return nil, err
		}
		if err := keptTools.resolve(&req); err != nil {
			return nil, err
		}
		resp, err := fn(ctx, &req, sendDelta)
		if err != nil {
			return nil, err
		}
		if resp == nil {
			return nil, &Error{Code: CodeInternal, Message: "model returned no response"}
		}
		if cap(respBuf) > 1<<20 {
			respBuf = nil // a large answer's buffer is not kept
		}
		out, ok := appendModelResponse(respBuf[:0], resp)
		respBuf = out[:0]
		if ok {
			return out, nil
		}
		return json.Marshal(resp)
	}
}

// respBuf is the encoding buffer of the model's answers, reused: its
// contents are copied out (output) before the next call.
var respBuf []byte

// keptTools is the tool set of the instance's last model request that
// carried one (FeatureToolsRef).
var keptTools toolSet

type toolSet struct {
	ref   string
	tools []ToolDefinition
}

// resolve fills req.Tools from the kept set when the request names it, and
// keeps the set a request carries.
func (k *toolSet) resolve(req *ModelRequest) error {
	switch {
	case req.ToolsRef == "":
	case len(req.Tools) > 0:
		k.ref, k.tools = req.ToolsRef, req.Tools
	case req.ToolsRef == k.ref:
		req.Tools = k.tools
	default:
		return &Error{Code: CodeToolsRefUnknown, Message: "model request names tool set " + req.ToolsRef + ", which this instance does not hold"}
	}
	return nil
}

// keptHistory is the conversation of the instance's last model request
// that named one (FeatureHistoryRef).
var keptHistory history

type history struct {
	ref  string
	msgs []Message
	// spare is the array of the conversation kept before msgs: only this
	// type refers to it, and the next conversation kept is built in it.
	spare []Message
}

// resolve puts the kept messages a request continues before its own, and
// keeps the whole conversation when the request names it. The function
// answering the request gets its own copy of the list: whatever it does to
// it, the kept one stays as the host sent it.
func (h *history) resolve(req *ModelRequest) error {
	if req.HistoryFrom != "" {
		skip, keep := req.HistorySkip, req.HistoryKeep
		if req.HistoryFrom != h.ref || skip < 0 || keep < 0 || skip > len(h.msgs) || keep > len(h.msgs)-skip {
			return &Error{Code: CodeHistoryRefUnknown, Message: "model request continues conversation " + req.HistoryFrom + ", which this instance does not hold"}
		}
		var full []Message
		if req.HistoryRef != "" {
			// The conversation goes on in the spare array (never the one
			// it is copied from), which the kept one replaces below.
			full = h.spare[:0]
			h.spare = nil
		}
		full = slices.Grow(full, keep+len(req.Messages))
		full = append(append(full, h.msgs[skip:skip+keep]...), req.Messages...)
		clear(full[len(full):cap(full)]) // what the array held before
		req.Messages = full
	}
	if req.HistoryRef != "" {
		h.ref, h.msgs, h.spare = req.HistoryRef, req.Messages, h.msgs[:0]
		req.Messages = append(make([]Message, 0, len(h.msgs)), h.msgs...)
	}
	req.HistoryRef, req.HistoryFrom, req.HistorySkip, req.HistoryKeep = "", "", 0, 0
	return nil
}

// AgentFunc answers one sub-agent run. It reaches the host's model with
// CallModel and the host's tools (req.Tools) with CallTool.
type AgentFunc func(ctx context.Context, req *AgentRequest) (*AgentResponse, error)

// Agent registers the plugin's sub-agent. The parent's model sees it as a
// tool; def names that tool and its schema (nil: the manifest's name, taking
// {"prompt": string}).
func Agent(def *ToolDefinition, fn AgentFunc) {
	registry.agentTool = def
	registry.run = func(ctx context.Context, in []byte) ([]byte, error) {
		var req AgentRequest
		if err := json.Unmarshal(in, &req); err != nil {
			return nil, &Error{Code: CodeBadInput, Message: "agent request: " + err.Error()}
		}
		resp, err := fn(ctx, &req)
		if err != nil {
			return nil, err
		}
		if resp == nil {
			return nil, &Error{Code: CodeInternal, Message: "agent returned no response"}
		}
		return json.Marshal(resp)
	}
}

// CallMeta is what a handler knows of the call it serves.
type CallMeta struct {
	ContextID  string
	TaskID     string
	ToolCallID string
}

type metaKey struct{}

// Meta returns the call's context and task ids (empty outside a call).
func Meta(ctx context.Context) CallMeta {
	m, _ := ctx.Value(metaKey{}).(CallMeta)
	return m
}

// CallLocal runs a registered tool in-process, through the same decoding and
// result conversion the host's calls take: for a plugin's own native tests
// (go test, any GOOS). Host functions the tool uses answer ErrNoHost outside
// the sandbox.
func CallLocal(ctx context.Context, name string, arguments json.RawMessage) (ToolResult, error) {
	t := registry.tools[name]
	if t == nil {
		return ToolResult{}, &Error{Code: CodeUnknownTool, Message: fmt.Sprintf("no tool %q", name)}
	}
	ctx = context.WithValue(ctx, metaKey{}, CallMeta{ToolCallID: "local"})
	return t.call(ctx, arguments)
}

// Tools lists the tools registered so far, in registration order.
func Tools() []ToolDefinition {
	out := make([]ToolDefinition, 0, len(registry.order))
	for _, n := range registry.order {
		out = append(out, registry.tools[n].def)
	}
	return out
}
