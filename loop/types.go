package loop

import "github.com/looopy-go/looopy/pdk"

// The conversation types are defined once, in pdk, so that the host and Go
// guest plugins share one definition and a call crosses the plugin boundary
// without conversion. loop re-exports them under its own names.
type (
	Role           = pdk.Role
	Message        = pdk.Message
	ToolCall       = pdk.ToolCall
	ToolDefinition = pdk.ToolDefinition
	ToolResult     = pdk.ToolResult
	Usage          = pdk.Usage
	FinishReason   = pdk.FinishReason
	ModelRequest   = pdk.ModelRequest
	ModelResponse  = pdk.ModelResponse
	Delta          = pdk.Delta
)

// Roles and finish reasons, re-exported from pdk.
const (
	RoleSystem    = pdk.RoleSystem
	RoleUser      = pdk.RoleUser
	RoleAssistant = pdk.RoleAssistant
	RoleTool      = pdk.RoleTool

	FinishStop          = pdk.FinishStop
	FinishLength        = pdk.FinishLength
	FinishToolCalls     = pdk.FinishToolCalls
	FinishContentFilter = pdk.FinishContentFilter
)

// TaskStatus is the state of a task (one turn of an agent), with the names of
// Looopy's internal event protocol. sse maps them to A2A task states.
type TaskStatus string

// Task states.
const (
	TaskSubmitted      TaskStatus = "submitted"
	TaskWorking        TaskStatus = "working"
	TaskWaitingInput   TaskStatus = "waiting-input"
	TaskWaitingAuth    TaskStatus = "waiting-auth"
	TaskWaitingSubtask TaskStatus = "waiting-subtask"
	TaskCompleted      TaskStatus = "completed"
	TaskFailed         TaskStatus = "failed"
	TaskCanceled       TaskStatus = "canceled"
	TaskRejected       TaskStatus = "rejected"
)

// Terminal reports whether no further transition can follow s.
func (s TaskStatus) Terminal() bool {
	switch s {
	case TaskCompleted, TaskFailed, TaskCanceled, TaskRejected:
		return true
	}
	return false
}

// Interrupted reports whether the task waits on someone outside the host
// (input or auth): the turn is over but the task may continue.
func (s TaskStatus) Interrupted() bool {
	return s == TaskWaitingInput || s == TaskWaitingAuth
}

// AuthContext is the caller's identity for one turn. It is handed to tools
// for that turn and never stored with the agent.
type AuthContext struct {
	Principal string            `json:"principal,omitempty"`
	Token     string            `json:"-"` // never serialized, never logged
	Scopes    []string          `json:"scopes,omitempty"`
	Claims    map[string]string `json:"claims,omitempty"`
	// Lost says the caller's token is not known: a turn the host went on
	// with by itself (a request that expired). A plugin granted the
	// caller's credentials asks the client for them again.
	Lost bool `json:"-"`
}
