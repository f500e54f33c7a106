package loop

import (
	"context"
	"encoding/json"
	"time"
)

// Stage says where a checkpointed turn resumes.
type Stage string

// Resume points.
const (
	// StageModel: the next step is a model call.
	StageModel Stage = "model-call"
	// StageTools: the model asked for Pending tool calls; some may have run.
	StageTools Stage = "tool-execution"
)

// Checkpoint is the durable state of a running turn, saved after each model
// response and after each round of tool results, before the events that
// announce them. With the turn's input (kept on the task record) and the
// history before it (kept in the message store) it is all a turn needs to
// resume after the process died.
type Checkpoint struct {
	TaskID       string           `json:"taskId"`
	ContextID    string           `json:"contextId"`
	AgentID      string           `json:"agentId,omitempty"`
	ParentTaskID string           `json:"parentTaskId,omitempty"`
	Iteration    int              `json:"iteration"` // the iteration in progress
	Stage        Stage            `json:"stage"`
	Produced     []Message        `json:"produced,omitempty"` // messages the turn produced so far
	Pending      []ToolCall       `json:"pending,omitempty"`  // StageTools: the calls of the last model response
	Usage        Usage            `json:"usage"`
	ClientTools  []ToolDefinition `json:"clientTools,omitempty"`
	UpdatedAt    time.Time        `json:"updatedAt"`
}

// CheckpointStore keeps one checkpoint per task. Saves are durable when they
// return.
type CheckpointStore interface {
	SaveCheckpoint(ctx context.Context, cp Checkpoint) error
	// LoadCheckpoint returns ErrNotFound (wrapped) when the task has none.
	LoadCheckpoint(ctx context.Context, taskID string) (Checkpoint, error)
	DeleteCheckpoint(ctx context.Context, taskID string) error
}

// CallState is the state of a journaled tool call.
type CallState string

// Tool call states.
const (
	CallStarted   CallState = "started"
	CallCompleted CallState = "completed"
)

// JournalEntry records one tool call: written before the call starts, and
// again with its result when it ends.
type JournalEntry struct {
	TaskID    string          `json:"taskId"`
	CallID    string          `json:"callId"`
	Key       string          `json:"key"` // idempotency key: taskId/callId
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	State     CallState       `json:"state"`
	Result    *ToolResult     `json:"result,omitempty"`
	Attempts  int             `json:"attempts"`
	StartedAt time.Time       `json:"startedAt"`
	EndedAt   time.Time       `json:"endedAt,omitzero"`
}

// Journal is the tool-call journal. Writes are durable when they return.
type Journal interface {
	// BeginCall records a call about to start (State started).
	BeginCall(ctx context.Context, e JournalEntry) error
	// EndCall records the call's result (State completed).
	EndCall(ctx context.Context, taskID, callID string, res ToolResult) error
	// Calls returns the task's journal, in the order calls began.
	Calls(ctx context.Context, taskID string) ([]JournalEntry, error)
	// DeleteCalls removes the task's journal.
	DeleteCalls(ctx context.Context, taskID string) error
}

// IdempotencyKey is the key of a tool call in the journal: stable across
// restarts, unique per task.
func IdempotencyKey(taskID, callID string) string { return taskID + "/" + callID }

// InterruptedResult is what the model is told of a call that was running
// when the process died, of a tool that did not declare itself idempotent.
func InterruptedResult(call ToolCall) ToolResult {
	return ToolResult{ToolCallID: call.ID, IsError: true,
		Content: "tool \"" + call.Name + "\" was interrupted by a restart of the host while it ran; " +
			"its outcome is unknown and it was not run again because it is not idempotent"}
}

// DurableLister lists the tasks that have a checkpoint or a journal, so
// that a cleanup can remove what finished tasks leave behind (journals
// have no expiry of their own).
type DurableLister interface {
	DurableTaskIDs(ctx context.Context) ([]string, error)
}
