package host

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
)

// a2aState maps a Looopy task status to the A2A task state.
func a2aState(s loop.TaskStatus) a2a.TaskState {
	st, _ := sse.StateToA2A(s)
	return st
}

// loopStatus maps an A2A task state (a ListTasks filter) to Looopy's.
func loopStatus(s a2a.TaskState) (loop.TaskStatus, bool) {
	for _, st := range []loop.TaskStatus{loop.TaskSubmitted, loop.TaskWorking, loop.TaskWaitingInput,
		loop.TaskWaitingAuth, loop.TaskCompleted, loop.TaskFailed, loop.TaskCanceled, loop.TaskRejected} {
		if a2aState(st) == s {
			return st, true
		}
	}
	return "", false
}

// responseArtifactID names the artifact that carries the agent's text, the
// same one the streams fill in.
func responseArtifactID(taskID string) a2a.ArtifactID {
	return a2a.ArtifactID(sse.ContentArtifactID(taskID))
}

// toLoopMessage converts a client's message. Text parts become the content;
// data parts are added as JSON; URL and raw parts are refused (the host has
// no place for them in a conversation yet).
func toLoopMessage(m *a2a.Message) (loop.Message, error) {
	if m == nil {
		return loop.Message{}, fmt.Errorf("%w: message is required", a2a.ErrInvalidParams)
	}
	if m.ID == "" {
		return loop.Message{}, fmt.Errorf("%w: message.messageId is required", a2a.ErrInvalidParams)
	}
	if m.Role != a2a.MessageRoleUser {
		return loop.Message{}, fmt.Errorf("%w: message.role must be user", a2a.ErrInvalidParams)
	}
	if len(m.Parts) == 0 {
		return loop.Message{}, fmt.Errorf("%w: message.parts is empty", a2a.ErrInvalidParams)
	}
	var sb strings.Builder
	for i, p := range m.Parts {
		if p == nil {
			return loop.Message{}, fmt.Errorf("%w: message.parts[%d] is null", a2a.ErrInvalidParams, i)
		}
		switch c := p.Content.(type) {
		case a2a.Text:
			if sb.Len() > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(string(c))
		case a2a.Data:
			b, err := json.Marshal(c.Value)
			if err != nil {
				return loop.Message{}, fmt.Errorf("%w: message.parts[%d]: %v", a2a.ErrInvalidParams, i, err)
			}
			if sb.Len() > 0 {
				sb.WriteByte('\n')
			}
			sb.Write(b)
		default:
			return loop.Message{}, fmt.Errorf("%w: message.parts[%d]: only text and data parts are accepted", a2a.ErrUnsupportedContentType, i)
		}
	}
	return loop.Message{Role: loop.RoleUser, Content: sb.String(),
		Metadata: map[string]any{"messageId": m.ID}}, nil
}

// toA2AMessages converts a task's history. Tool traffic stays inside: the
// client sees the user's messages and the agent's text.
func toA2AMessages(taskID, contextID string, hist []loop.Message) []*a2a.Message {
	out := make([]*a2a.Message, 0, len(hist))
	for i, m := range hist {
		var role a2a.MessageRole
		switch m.Role {
		case loop.RoleUser:
			role = a2a.MessageRoleUser
		case loop.RoleAssistant:
			role = a2a.MessageRoleAgent
		default:
			continue
		}
		if m.Content == "" {
			continue
		}
		id, _ := m.Metadata["messageId"].(string)
		if id == "" {
			id = taskID + "-msg-" + strconv.Itoa(i)
		}
		out = append(out, &a2a.Message{ID: id, ContextID: contextID, TaskID: a2a.TaskID(taskID),
			Role: role, Parts: a2a.ContentParts{a2a.NewTextPart(m.Content)}})
	}
	return out
}

// toA2ATask converts a task record. historyLength < 0 means all of it, 0
// none, n the last n messages.
func toA2ATask(rec loop.TaskRecord, historyLength int) *a2a.Task {
	rec.ContextID = loop.ClientContextID(rec.ContextID)
	ts := rec.UpdatedAt
	t := &a2a.Task{ID: a2a.TaskID(rec.ID), ContextID: rec.ContextID,
		Status: a2a.TaskStatus{State: a2aState(rec.Status), Timestamp: &ts}}
	if rec.Status.Interrupted() && len(rec.OpenRequests()) > 0 {
		t.Status.Message = requestsMessage(rec.ID, rec.ContextID, rec.Requests, rec.UpdatedAt)
	} else if rec.Message != "" {
		t.Status.Message = agentText(rec.ID, rec.ContextID, rec.Message, rec.UpdatedAt)
	}
	if historyLength != 0 {
		h := toA2AMessages(rec.ID, rec.ContextID, rec.History)
		if historyLength > 0 && len(h) > historyLength {
			h = h[len(h)-historyLength:]
		}
		if len(h) > 0 {
			t.History = h
		}
	}
	if rec.Content != "" {
		t.Artifacts = []*a2a.Artifact{{ID: responseArtifactID(rec.ID), Name: sse.ResponseArtifactName,
			Parts: a2a.ContentParts{a2a.NewTextPart(rec.Content)}}}
	}
	if u := taskUsage(rec); u != nil {
		t.Metadata = map[string]any{"usage": u}
	}
	if rec.ParentTaskID != "" || len(rec.Subtasks) > 0 {
		// Sub-agents: the parent of a sub-task, the sub-tasks of a task.
		if t.Metadata == nil {
			t.Metadata = map[string]any{}
		}
		if rec.ParentTaskID != "" {
			t.Metadata["parentTaskId"] = rec.ParentTaskID
		}
		if len(rec.Subtasks) > 0 {
			t.Metadata["subtasks"] = rec.Subtasks
		}
	}
	if rec.Reason != "" {
		// How the last turn ended: its reason (stop, max_iterations,
		// length, content_filter, ...), the model's finish reason and the
		// model calls made again.
		if t.Metadata == nil {
			t.Metadata = map[string]any{}
		}
		t.Metadata["reason"] = rec.Reason
		if rec.FinishReason != "" {
			t.Metadata["finishReason"] = rec.FinishReason
		}
		if rec.Retries > 0 {
			t.Metadata["retries"] = rec.Retries
		}
	}
	return t
}

// taskUsage is what a task's turns used: tokens, iterations and tool calls
// (the tool results in its history), as the task's metadata shows it.
func taskUsage(rec loop.TaskRecord) map[string]any {
	tools := 0
	for _, m := range rec.History {
		if m.Role == loop.RoleTool {
			tools++
		}
	}
	if rec.Usage == (loop.Usage{}) && rec.Iterations == 0 && tools == 0 {
		return nil
	}
	return map[string]any{"promptTokens": rec.Usage.PromptTokens, "completionTokens": rec.Usage.CompletionTokens,
		"totalTokens": rec.Usage.TotalTokens, "iterations": rec.Iterations, "toolCalls": tools}
}

// agentText is a task's status message: its id names the task and the
// status's time (the record's UpdatedAt), so every read of one stored
// status (the blocking answer, GetTask, a stream's final status) gives the
// message the same id, and a new status a new one.
func agentText(taskID, contextID, text string, at time.Time) *a2a.Message {
	return &a2a.Message{ID: taskID + "-status-" + strconv.FormatInt(at.UnixNano(), 36), ContextID: contextID,
		TaskID: a2a.TaskID(taskID), Role: a2a.MessageRoleAgent, Parts: a2a.ContentParts{a2a.NewTextPart(text)}}
}
