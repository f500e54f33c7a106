package pdk

import "encoding/json"

// Role is who wrote a message.
type Role string

// The roles of a conversation.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one entry of a conversation. Tool calls asked for by the model
// ride on the assistant message; each tool result is a message of role tool
// that names the call it answers.
type Message struct {
	Role       Role           `json:"role"`
	Content    string         `json:"content,omitempty"`
	Name       string         `json:"name,omitempty"`       // tool name, on tool messages
	ToolCallID string         `json:"toolCallId,omitempty"` // on tool messages
	ToolCalls  []ToolCall     `json:"toolCalls,omitempty"`  // on assistant messages
	Pinned     bool           `json:"pinned,omitempty"`     // kept whole by history compaction
	Metadata   map[string]any `json:"metadata,omitempty"`
}

// ToolCall is a model's request to run one tool. Arguments is a JSON object.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// ToolDefinition describes a tool to the model.
type ToolDefinition struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"` // JSON Schema of the arguments object
	// Client marks a tool the client runs: a call to it ends the turn as
	// input-required and the next turn carries the client's result.
	Client bool `json:"client,omitempty"`
	// Idempotent says running the tool twice with the same arguments is
	// harmless, so an execution interrupted by a crash may be run again.
	Idempotent bool `json:"idempotent,omitempty"`
}

// ToolResult is what a tool returns to the model.
type ToolResult struct {
	ToolCallID string          `json:"toolCallId,omitempty"`
	Content    string          `json:"content"`
	IsError    bool            `json:"isError,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"` // optional structured result
}

// Usage counts tokens.
type Usage struct {
	PromptTokens     int `json:"promptTokens,omitempty"`
	CompletionTokens int `json:"completionTokens,omitempty"`
	TotalTokens      int `json:"totalTokens,omitempty"`
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		PromptTokens:     u.PromptTokens + v.PromptTokens,
		CompletionTokens: u.CompletionTokens + v.CompletionTokens,
		TotalTokens:      u.TotalTokens + v.TotalTokens,
	}
}

// FinishReason says why the model stopped.
type FinishReason string

// Finish reasons, as the OpenAI-compatible APIs name them.
const (
	FinishStop          FinishReason = "stop"
	FinishLength        FinishReason = "length"
	FinishToolCalls     FinishReason = "tool_calls"
	FinishContentFilter FinishReason = "content_filter"
)

// ModelRequest is one call of a model.
type ModelRequest struct {
	Messages    []Message        `json:"messages"`
	Tools       []ToolDefinition `json:"tools,omitempty"`
	Temperature *float64         `json:"temperature,omitempty"`
	MaxTokens   int              `json:"maxTokens,omitempty"`
	Stream      bool             `json:"stream,omitempty"`
	Metadata    map[string]any   `json:"metadata,omitempty"`
	// ToolsRef names the tool set (see FeatureToolsRef). With Tools, the
	// guest keeps them under this name; without, it uses the set it kept.
	// The pdk resolves it before a ModelFunc runs: the function always
	// sees Tools.
	ToolsRef string `json:"toolsRef,omitempty"`
	// History by name (see FeatureHistoryRef). HistoryFrom names a
	// conversation the guest kept: the request's messages follow its
	// messages [HistorySkip, HistorySkip+HistoryKeep). HistoryRef is the
	// name the guest keeps the whole conversation of this request under.
	// The pdk resolves them before a ModelFunc runs: the function always
	// sees the whole conversation in Messages, and these fields empty.
	HistoryRef  string `json:"historyRef,omitempty"`
	HistoryFrom string `json:"historyFrom,omitempty"`
	HistorySkip int    `json:"historySkip,omitempty"`
	HistoryKeep int    `json:"historyKeep,omitempty"`
}

// ModelResponse is a model's complete answer. Tool calls are on Message.
type ModelResponse struct {
	Message      Message      `json:"message"`
	FinishReason FinishReason `json:"finishReason,omitempty"`
	Usage        Usage        `json:"usage,omitempty"`
}

// Delta is a piece of a streamed model answer.
type Delta struct {
	Content string `json:"content,omitempty"`
	Thought string `json:"thought,omitempty"`
}

// Error is the error shape that crosses the plugin boundary.
// Transient marks an error worth retrying (rate limit, 5xx, timeout).
type Error struct {
	Code      string `json:"code,omitempty"`
	Message   string `json:"message"`
	Transient bool   `json:"transient,omitempty"`
	// RetryAfter is how long the service asked to be left alone before a
	// retry (an HTTP Retry-After); the host waits at least that long, up
	// to its own bound, before it calls again.
	RetryAfter Duration `json:"retryAfter,omitempty"`
}

func (e *Error) Error() string {
	if e.Code == "" {
		return e.Message
	}
	return e.Code + ": " + e.Message
}

// CredentialRequest asks the host for a credential (host function
// credential). Provider "caller" asks for the credentials of the client
// that sent the turn's message (the operator must grant the plugin
// callerAuth); any other provider names a third party (an OAuth provider,
// an API) whose token the client supplies for this task.
type CredentialRequest struct {
	Provider string   `json:"provider"`
	Scopes   []string `json:"scopes,omitempty"`
	AuthURL  string   `json:"authUrl,omitempty"`
	AuthType string   `json:"authType,omitempty"` // oauth2, api-key, bearer, ...
}

// Credential is the host's answer: a token, and for the caller its
// principal, scopes and claims. The plugin must not return it, log it or
// store it; the host redacts it from what the call hands back.
type Credential struct {
	Provider  string            `json:"provider"`
	Token     string            `json:"token,omitempty"`
	TokenType string            `json:"tokenType,omitempty"`
	Principal string            `json:"principal,omitempty"`
	Scopes    []string          `json:"scopes,omitempty"`
	Claims    map[string]string `json:"claims,omitempty"`
}
