package loop

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// EventKind names an event of Looopy's internal protocol.
type EventKind string

// Every event kind of the protocol. Kinds starting with "internal:" are for
// observability inside the host and never leave it.
const (
	// Task lifecycle.
	KindTaskCreated  EventKind = "task-created"
	KindTaskStatus   EventKind = "task-status"
	KindTaskComplete EventKind = "task-complete"
	// Content streaming.
	KindContentDelta    EventKind = "content-delta"
	KindContentComplete EventKind = "content-complete"
	// Tool execution.
	KindToolStart    EventKind = "tool-start"
	KindToolProgress EventKind = "tool-progress"
	KindToolComplete EventKind = "tool-complete"
	// Input requests.
	KindInputRequired EventKind = "input-required"
	KindInputReceived EventKind = "input-received"
	// Authentication.
	KindAuthRequired  EventKind = "auth-required"
	KindAuthCompleted EventKind = "auth-completed"
	// Artifacts.
	KindFileWrite    EventKind = "file-write"
	KindDataWrite    EventKind = "data-write"
	KindDatasetWrite EventKind = "dataset-write"
	// Sub-agents.
	KindSubtaskCreated EventKind = "subtask-created"
	// Thought streaming.
	KindThoughtStream EventKind = "thought-stream"
	// Warnings the client should see (a turn cut short by its iteration limit).
	KindWarning EventKind = "warning"
	// Internal debug events.
	KindInternalThoughtProcess EventKind = "internal:thought-process"
	KindInternalLLMCall        EventKind = "internal:llm-call"
	KindInternalLLMRetry       EventKind = "internal:llm-retry"
	KindInternalCheckpoint     EventKind = "internal:checkpoint"
)

// Internal reports whether events of kind k must stay inside the host.
func (k EventKind) Internal() bool { return strings.HasPrefix(string(k), "internal:") }

// Header is the part every event has.
type Header struct {
	Kind         EventKind `json:"kind"`
	ContextID    string    `json:"contextId"`
	TaskID       string    `json:"taskId"`
	ParentTaskID string    `json:"parentTaskId,omitempty"`
	Timestamp    time.Time `json:"timestamp"`
}

// Head returns the header; it makes every *event struct an Event.
func (h *Header) Head() *Header { return h }

// Event is one event of the protocol: a pointer to one of the structs below.
type Event interface {
	Head() *Header
}

// TaskCreated opens a task. Initiator is "user" or "agent" (a sub-task).
type TaskCreated struct {
	Header
	Initiator string         `json:"initiator"`
	AgentID   string         `json:"agentId,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

// TaskStatusEvent is a state transition. Message is the status message for
// the client (the reason of a failure, the question of an input request).
type TaskStatusEvent struct {
	Header
	Status   TaskStatus     `json:"status"`
	Message  string         `json:"message,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// TaskComplete closes a turn with its final content and why it ended.
type TaskComplete struct {
	Header
	Status   TaskStatus     `json:"status"`
	Content  string         `json:"content,omitempty"`
	Reason   string         `json:"reason,omitempty"` // stop, max_iterations, client_tool, error, canceled
	Usage    Usage          `json:"usage"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// ContentDelta is a piece of the assistant's text as the model streams it.
// Index counts deltas within one model response, from 0. Response names
// that model response, unique within its task (the turn's start and the
// iteration): the deltas and the ContentComplete of one response share it.
type ContentDelta struct {
	Header
	Delta     string `json:"delta"`
	Index     int    `json:"index"`
	Iteration int    `json:"iteration,omitempty"`
	Response  string `json:"response,omitempty"`
}

// ContentComplete carries the whole text of one model response. Deltas is
// how many ContentDelta events streamed it before (0: none, the text comes
// only here).
type ContentComplete struct {
	Header
	Content   string `json:"content"`
	Iteration int    `json:"iteration,omitempty"`
	Response  string `json:"response,omitempty"`
	Deltas    int    `json:"deltas,omitempty"`
}

// ToolStart announces a tool call about to run.
type ToolStart struct {
	Header
	ToolCallID string          `json:"toolCallId"`
	ToolName   string          `json:"toolName"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
}

// ToolProgress is progress reported by a running tool.
type ToolProgress struct {
	Header
	ToolCallID string         `json:"toolCallId"`
	Progress   float64        `json:"progress,omitempty"` // 0..1 when known
	Message    string         `json:"message,omitempty"`
	Metadata   map[string]any `json:"metadata,omitempty"`
}

// ToolComplete reports a tool call's outcome.
type ToolComplete struct {
	Header
	ToolCallID string        `json:"toolCallId"`
	ToolName   string        `json:"toolName"`
	Success    bool          `json:"success"`
	Result     string        `json:"result,omitempty"`
	Error      string        `json:"error,omitempty"`
	Duration   time.Duration `json:"durationNs,omitempty"`
}

// InputRequired asks for input. RequireUser false lets a coordinating agent
// answer; true routes the request to a person.
type InputRequired struct {
	Header
	InputID     string          `json:"inputId"`
	RequireUser bool            `json:"requireUser"`
	InputType   string          `json:"inputType"` // e.g. tool-execution, confirmation, text
	Prompt      string          `json:"prompt"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Options     []string        `json:"options,omitempty"`
	// Call is the tool call that waits (approvals, client tools).
	Call     *ToolCall      `json:"call,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// InputReceived acknowledges input.
type InputReceived struct {
	Header
	InputID    string         `json:"inputId"`
	ProvidedBy string         `json:"providedBy"` // user or agent
	UserID     string         `json:"userId,omitempty"`
	AgentID    string         `json:"agentId,omitempty"`
	Metadata   map[string]any `json:"metadata,omitempty"`
}

// AuthRequired asks the client to authenticate.
type AuthRequired struct {
	Header
	AuthID   string   `json:"authId"`
	AuthType string   `json:"authType"` // oauth2, api-key, password, custom
	Provider string   `json:"provider,omitempty"`
	Scopes   []string `json:"scopes,omitempty"`
	Prompt   string   `json:"prompt"`
	AuthURL  string   `json:"authUrl,omitempty"`
}

// AuthCompleted reports the end of an authentication request.
type AuthCompleted struct {
	Header
	AuthID  string `json:"authId"`
	Success bool   `json:"success"`
}

// FileWrite is a chunk of a file artifact. Index counts chunks from 0;
// Complete marks the last one. Name and MimeType come with the first chunk.
type FileWrite struct {
	Header
	ArtifactID string `json:"artifactId"`
	Data       string `json:"data"`
	Encoding   string `json:"encoding,omitempty"` // "" (text) or "base64"
	Index      int    `json:"index"`
	Complete   bool   `json:"complete"`
	Name       string `json:"name,omitempty"`
	MimeType   string `json:"mimeType,omitempty"`
	// Error is set when the artifact failed: nothing more will be written.
	Error string `json:"error,omitempty"`
}

// DataWrite replaces a data artifact atomically.
type DataWrite struct {
	Header
	ArtifactID  string         `json:"artifactId"`
	Data        map[string]any `json:"data"`
	Version     int            `json:"version,omitempty"`
	Name        string         `json:"name,omitempty"`
	Description string         `json:"description,omitempty"`
	// Complete marks the artifact as final: no further version follows.
	Complete bool `json:"complete,omitempty"`
	// Error is set when the artifact failed.
	Error string `json:"error,omitempty"`
}

// DatasetColumn is one column of a dataset schema.
type DatasetColumn struct {
	Name        string `json:"name"`
	Type        string `json:"type"` // string, number, integer, boolean, date, json
	Description string `json:"description,omitempty"`
}

// DatasetSchema names and types a dataset's columns.
type DatasetSchema struct {
	Columns []DatasetColumn `json:"columns"`
}

// DatasetWrite is a batch of rows of a dataset artifact.
type DatasetWrite struct {
	Header
	ArtifactID  string           `json:"artifactId"`
	Rows        []map[string]any `json:"rows"`
	Index       int              `json:"index"`
	Complete    bool             `json:"complete"`
	Name        string           `json:"name,omitempty"`
	Description string           `json:"description,omitempty"`
	Schema      *DatasetSchema   `json:"schema,omitempty"`
	// Error is set when the artifact failed: nothing more will be written.
	Error string `json:"error,omitempty"`
}

// SubtaskCreated announces a sub-agent's task under the current one.
type SubtaskCreated struct {
	Header
	SubtaskID string `json:"subtaskId"`
	AgentID   string `json:"agentId"`
	Prompt    string `json:"prompt"`
}

// ThoughtStream is a piece of the agent's reasoning shown to the client.
type ThoughtStream struct {
	Header
	ThoughtID   string         `json:"thoughtId"`
	ThoughtType string         `json:"thoughtType"` // planning, reasoning, reflection, decision, observation, strategy
	Verbosity   string         `json:"verbosity"`   // brief, normal, detailed
	Content     string         `json:"content"`
	Index       int            `json:"index"`
	Metadata    map[string]any `json:"metadata,omitempty"`
}

// Warning codes besides the turn's reasons (max_iterations, length,
// content_filter).
const (
	// WarningModelRetry: a model call failed with a transient error and is
	// being made again.
	WarningModelRetry = "model_retry"
)

// Warning tells the client something went less well than asked, without
// failing the task (the iteration limit was reached, a model call is
// retried, an answer was cut off).
type Warning struct {
	Header
	Code    string `json:"code"`
	Message string `json:"message"`
}

// InternalThoughtProcess records the loop's reasoning for debugging.
type InternalThoughtProcess struct {
	Header
	Iteration int            `json:"iteration"`
	Stage     string         `json:"stage"`
	Reasoning string         `json:"reasoning"`
	State     map[string]any `json:"state,omitempty"`
}

// InternalLLMCall records a model call about to be made.
type InternalLLMCall struct {
	Header
	Iteration    int `json:"iteration"`
	MessageCount int `json:"messageCount"`
	ToolCount    int `json:"toolCount"`
}

// InternalLLMRetry records a transient model error and the wait before the
// next attempt.
type InternalLLMRetry struct {
	Header
	Iteration int           `json:"iteration"`
	Attempt   int           `json:"attempt"`
	Delay     time.Duration `json:"delayNs"`
	Error     string        `json:"error"`
}

// InternalCheckpoint records that the loop state was persisted.
type InternalCheckpoint struct {
	Header
	Iteration int    `json:"iteration"`
	Stage     string `json:"stage"` // model-response, tool-result
}

// NewEvent returns a zero event of kind k, or nil for an unknown kind.
func NewEvent(k EventKind) Event {
	var e Event
	switch k {
	case KindTaskCreated:
		e = &TaskCreated{}
	case KindTaskStatus:
		e = &TaskStatusEvent{}
	case KindTaskComplete:
		e = &TaskComplete{}
	case KindContentDelta:
		e = &ContentDelta{}
	case KindContentComplete:
		e = &ContentComplete{}
	case KindToolStart:
		e = &ToolStart{}
	case KindToolProgress:
		e = &ToolProgress{}
	case KindToolComplete:
		e = &ToolComplete{}
	case KindInputRequired:
		e = &InputRequired{}
	case KindInputReceived:
		e = &InputReceived{}
	case KindAuthRequired:
		e = &AuthRequired{}
	case KindAuthCompleted:
		e = &AuthCompleted{}
	case KindFileWrite:
		e = &FileWrite{}
	case KindDataWrite:
		e = &DataWrite{}
	case KindDatasetWrite:
		e = &DatasetWrite{}
	case KindSubtaskCreated:
		e = &SubtaskCreated{}
	case KindThoughtStream:
		e = &ThoughtStream{}
	case KindWarning:
		e = &Warning{}
	case KindInternalThoughtProcess:
		e = &InternalThoughtProcess{}
	case KindInternalLLMCall:
		e = &InternalLLMCall{}
	case KindInternalLLMRetry:
		e = &InternalLLMRetry{}
	case KindInternalCheckpoint:
		e = &InternalCheckpoint{}
	default:
		return nil
	}
	e.Head().Kind = k
	return e
}

// EncodeEvent returns the JSON form of e, with its kind.
func EncodeEvent(e Event) ([]byte, error) { return json.Marshal(e) }

// DecodeEvent parses the JSON form of an event. An unknown or missing kind,
// or a body that does not match its kind, is an error; it never panics.
func DecodeEvent(data []byte) (Event, error) {
	var probe struct {
		Kind EventKind `json:"kind"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("decode event: %w", err)
	}
	e := NewEvent(probe.Kind)
	if e == nil {
		return nil, fmt.Errorf("decode event: unknown kind %q", probe.Kind)
	}
	if err := json.Unmarshal(data, e); err != nil {
		return nil, fmt.Errorf("decode %s event: %w", probe.Kind, err)
	}
	return e, nil
}

// AllKinds lists every event kind, in protocol order.
func AllKinds() []EventKind {
	return []EventKind{
		KindTaskCreated, KindTaskStatus, KindTaskComplete,
		KindContentDelta, KindContentComplete,
		KindToolStart, KindToolProgress, KindToolComplete,
		KindInputRequired, KindInputReceived,
		KindAuthRequired, KindAuthCompleted,
		KindFileWrite, KindDataWrite, KindDatasetWrite,
		KindSubtaskCreated, KindThoughtStream, KindWarning,
		KindInternalThoughtProcess, KindInternalLLMCall, KindInternalLLMRetry, KindInternalCheckpoint,
	}
}
