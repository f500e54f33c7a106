package pdk

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// This file holds the portable part of the plugin ABI (docs/PLUGIN_ABI.md):
// operation codes, status bytes, host-function codes and the JSON shapes that
// cross the boundary. It builds for every GOOS, so the host and the guest SDK
// share one definition.

// Kind is what a plugin provides.
type Kind string

// Plugin kinds.
const (
	KindTool  Kind = "tool"  // one or more tools
	KindModel Kind = "model" // an LLM adapter
	KindAgent Kind = "agent" // a sub-agent, offered to the parent's model as a tool
)

// Valid reports whether k is one of the known kinds.
func (k Kind) Valid() bool { return k == KindTool || k == KindModel || k == KindAgent }

// Op is an operation of looopy_call.
type Op int32

// Operations of the Looopy ABI.
const (
	OpDescribe Op = 0 // {} -> Describe
	OpToolCall Op = 1 // ToolCallRequest -> ToolResult
	OpGenerate Op = 2 // ModelRequest -> ModelResponse
	OpRun      Op = 3 // AgentRequest -> AgentResponse
)

// String names the operation.
func (o Op) String() string {
	switch o {
	case OpDescribe:
		return "describe"
	case OpToolCall:
		return "tool call"
	case OpGenerate:
		return "generate"
	case OpRun:
		return "run"
	}
	return fmt.Sprintf("op %d", int32(o))
}

// Status bytes: the first byte of every looopy_call output.
const (
	StatusOK    byte = 0 // the rest is the operation's result JSON
	StatusError byte = 1 // the rest is an Error JSON
)

// Names of the ABI's exports and of the host-function module.
const (
	ExportABIMarker = "looopy_abi_v1"
	ExportAlloc     = "looopy_alloc"
	ExportCall      = "looopy_call"
	HostModule      = "looopy"
)

// Names of the host functions (imports of module "looopy").
const (
	HostLog           = "log"
	HostEmit          = "emit"
	HostResultRead    = "result_read"
	HostKVGet         = "kv_get"
	HostKVSet         = "kv_set"
	HostKVDelete      = "kv_delete"
	HostHTTPRequest   = "http_request"
	HostHTTPRead      = "http_read"
	HostHTTPClose     = "http_close"
	HostModelCall     = "model_call"
	HostToolCall      = "tool_call"
	HostArtifactWrite = "artifact_write"
	HostCredential    = "credential"
)

// Error codes the host and the SDK use in Error.Code.
const (
	CodeUnsupported = "unsupported"    // the plugin does not answer this operation
	CodeBadInput    = "bad_input"      // the input JSON did not decode
	CodeInvalidArgs = "invalid_args"   // tool arguments do not match the schema
	CodeUnknownTool = "unknown_tool"   // no tool of that name
	CodeToolFailed  = "tool_failed"    // the handler returned an error
	CodeCanceled    = "canceled"       // the call was cancelled
	CodeDenied      = "denied"         // a capability was not granted
	CodeInternal    = "internal_error" // anything else
	// CodeToolsRefUnknown: a model request named a tool set (toolsRef)
	// that the instance does not hold; the host sends it again whole.
	CodeToolsRefUnknown = "tools_ref_unknown"
	// CodeHistoryRefUnknown: a model request continued a conversation
	// (historyFrom) that the instance does not hold; the host sends the
	// whole conversation again.
	CodeHistoryRefUnknown = "history_ref_unknown"
	// CodeAuthRequired: the credential a plugin asked for is not there
	// yet. The plugin returns from its call (with any error); the task
	// pauses in auth-required, and the call runs again once the client
	// has supplied it.
	CodeAuthRequired = "auth_required"
)

// LogLevel is the level of the log host function.
type LogLevel int32

// Log levels.
const (
	LevelDebug LogLevel = 0
	LevelInfo  LogLevel = 1
	LevelWarn  LogLevel = 2
	LevelError LogLevel = 3
)

// EmitKind is the first argument of the emit host function.
type EmitKind int32

// Emit kinds.
const (
	EmitDelta    EmitKind = 0 // Delta JSON: a piece of a streamed model answer
	EmitProgress EmitKind = 1 // ToolProgress JSON: progress of the running tool call
	EmitEvent    EmitKind = 2 // EventOut JSON: an event of the task
)

// Describe is the answer of OpDescribe.
type Describe struct {
	Name    string           `json:"name,omitempty"`
	Version string           `json:"version,omitempty"`
	Kind    Kind             `json:"kind"`
	Tools   []ToolDefinition `json:"tools,omitempty"`
	// Agent plugins: the tool the parent's model sees (name, description,
	// schema). The default takes {"prompt": string}.
	Agent *ToolDefinition `json:"agent,omitempty"`
	// Features lists what the guest understands beyond the base ABI
	// (FeatureToolsRef). The host uses only what a guest lists.
	Features []string `json:"features,omitempty"`
}

// FeatureToolsRef: the model guest keeps the tool definitions of a request
// under the name in its toolsRef field, and a later request to the same
// instance may carry only that name. A model call then does not ship and
// decode every tool's schema again (25 tools are about 12 KB of JSON).
const FeatureToolsRef = "toolsRef"

// FeatureHistoryRef: the model guest keeps the conversation of a request
// under the name in its historyRef field, and a later request to the same
// instance may carry only the messages that follow a part of it
// (historyFrom, historySkip, historyKeep). A model call then ships and
// decodes only what is new since the instance's previous call, not the
// whole history again.
const FeatureHistoryRef = "historyRef"

// ToolCallRequest is the input of OpToolCall.
type ToolCallRequest struct {
	Call      ToolCall `json:"call"`
	ContextID string   `json:"contextId,omitempty"`
	TaskID    string   `json:"taskId,omitempty"`
}

// AgentRequest is the input of OpRun: the conversation the sub-agent starts
// from and the tools the host lends it (call them with the tool_call host
// function).
type AgentRequest struct {
	Messages  []Message        `json:"messages"`
	ContextID string           `json:"contextId,omitempty"`
	TaskID    string           `json:"taskId,omitempty"`
	Tools     []ToolDefinition `json:"tools,omitempty"`
	Depth     int              `json:"depth,omitempty"`
}

// AgentResponse is the answer of OpRun.
type AgentResponse struct {
	Content  string    `json:"content"`
	Messages []Message `json:"messages,omitempty"`
	Usage    Usage     `json:"usage,omitempty"`
}

// ToolProgress is a tool's progress report (emit kind 1).
type ToolProgress struct {
	Progress float64        `json:"progress,omitempty"` // 0..1 when known
	Message  string         `json:"message,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// EventOut is an event a plugin sends to the task (emit kind 2). Kind is an
// event kind of Looopy's protocol that plugins may send (thought-stream,
// warning, ...); Data is the event body without its header.
type EventOut struct {
	Kind string          `json:"kind"`
	Data json.RawMessage `json:"data,omitempty"`
}

// HTTPRequest is an outbound request through the host's egress broker
// (http_request). Body is text; a binary body goes base64-encoded in
// BodyBase64 instead.
type HTTPRequest struct {
	Method     string            `json:"method,omitempty"` // default GET
	URL        string            `json:"url"`
	Headers    map[string]string `json:"headers,omitempty"`
	Body       string            `json:"body,omitempty"`
	BodyBase64 string            `json:"bodyBase64,omitempty"`
}

// BodyBytes returns the request body, decoding BodyBase64 when set.
func (r *HTTPRequest) BodyBytes() ([]byte, error) {
	if r.BodyBase64 != "" {
		if r.Body != "" {
			return nil, fmt.Errorf("http request: both body and bodyBase64 set")
		}
		b, err := base64.StdEncoding.DecodeString(r.BodyBase64)
		if err != nil {
			return nil, fmt.Errorf("http request: bodyBase64: %w", err)
		}
		return b, nil
	}
	return []byte(r.Body), nil
}

// HTTPResponseHead is the status line and headers of a response; the body is
// read with http_read.
type HTTPResponseHead struct {
	Status  int                 `json:"status"`
	Headers map[string][]string `json:"headers,omitempty"`
}

// ArtifactWrite creates, appends to or completes an artifact of the task
// (artifact_write). The first write of an artifact has no ArtifactID and
// gets one back; later writes name it.
type ArtifactWrite struct {
	ArtifactID  string           `json:"artifactId,omitempty"`
	Type        string           `json:"type"` // file, data, dataset
	Name        string           `json:"name,omitempty"`
	Description string           `json:"description,omitempty"`
	MimeType    string           `json:"mimeType,omitempty"`
	Text        string           `json:"text,omitempty"`     // file: a chunk of text
	Base64      string           `json:"base64,omitempty"`   // file: a chunk of binary data
	Data        map[string]any   `json:"data,omitempty"`     // data: the whole value
	Rows        []map[string]any `json:"rows,omitempty"`     // dataset: a batch of rows
	Columns     []ArtifactColumn `json:"columns,omitempty"`  // dataset: the schema, with the first batch
	Complete    bool             `json:"complete,omitempty"` // the last write
}

// ArtifactColumn is one column of a dataset artifact.
type ArtifactColumn struct {
	Name        string `json:"name"`
	Type        string `json:"type"` // string, number, integer, boolean, date, json
	Description string `json:"description,omitempty"`
}

// EnvConfig and EnvSecretPrefix name how configuration and secrets reach a
// guest: the manifest's config map as one JSON object in environment
// variable LOOOPY_CONFIG, and each granted secret in LOOOPY_SECRET_<NAME>.
const (
	EnvConfig       = "LOOOPY_CONFIG"
	EnvSecretPrefix = "LOOOPY_SECRET_"
)
