package sse

import (
	"encoding/base64"
	"strconv"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/loop"
)

// ResponseArtifactName is the name of the artifact that carries a task's
// text, streamed or in a task (SendMessage, GetTask): the same artifact.
const ResponseArtifactName = "response"

// ContentArtifactID names the artifact that carries a task's text in a
// task (SendMessage, GetTask): its last answer.
func ContentArtifactID(taskID string) string { return "content-" + taskID }

// ResponseArtifactID names the artifact a stream fills with one model
// response's text: content-<taskId>-<response>, one per response, so a
// later response never replaces an earlier one. Events without a
// response name (written by an earlier version) use ContentArtifactID.
func ResponseArtifactID(taskID, response string) string {
	if response == "" {
		return ContentArtifactID(taskID)
	}
	return ContentArtifactID(taskID) + "-" + response
}

// StateToA2A maps a Looopy task status to an A2A 1.0 task state.
// waiting-subtask is working to the outside.
func StateToA2A(s loop.TaskStatus) (a2a.TaskState, bool) {
	switch s {
	case loop.TaskSubmitted:
		return a2a.TaskStateSubmitted, true
	case loop.TaskWorking, loop.TaskWaitingSubtask:
		return a2a.TaskStateWorking, true
	case loop.TaskWaitingInput:
		return a2a.TaskStateInputRequired, true
	case loop.TaskWaitingAuth:
		return a2a.TaskStateAuthRequired, true
	case loop.TaskCompleted:
		return a2a.TaskStateCompleted, true
	case loop.TaskFailed:
		return a2a.TaskStateFailed, true
	case loop.TaskCanceled:
		return a2a.TaskStateCanceled, true
	case loop.TaskRejected:
		return a2a.TaskStateRejected, true
	}
	return a2a.TaskStateUnspecified, false
}

// FinalA2A reports whether ev ends an A2A 1.0 stream: a task or status in a
// terminal state or waiting on the client (input or auth required).
func FinalA2A(ev a2a.Event) bool {
	var st a2a.TaskState
	switch v := ev.(type) {
	case *a2a.TaskStatusUpdateEvent:
		st = v.Status.State
	case *a2a.Task:
		st = v.Status.State
	case *a2a.Message:
		return true
	default:
		return false
	}
	return st.Terminal() || st == a2a.TaskStateInputRequired || st == a2a.TaskStateAuthRequired
}

// ToA2A maps a Looopy event to an A2A 1.0 event, or reports false for the
// events A2A does not carry. The mapping is a function of the event alone,
// so a stream replayed from any point maps the same way:
//
//   - task-created: a Task in state submitted;
//   - task-status: a TaskStatusUpdateEvent with the state mapped, the status
//     message as an agent message;
//   - content-delta: a chunk of the response's own artifact
//     (ResponseArtifactID, named "response"), appended when its index is
//     above 0: each model response of a turn is an artifact of its own, so
//     the text of every step stays;
//   - content-complete: the last chunk of that artifact. When deltas
//     streamed the text it adds nothing (appended, one empty text part):
//     the text is sent once. A response that streamed nothing sends its
//     whole text here. Nothing for an empty response;
//   - file-write: a chunk of the file artifact (text, or raw bytes when
//     base64), appended after the first, last when complete;
//   - data-write: the whole data artifact as one data part;
//   - dataset-write: one data part {"rows": [...]} per batch, appended after
//     the first, the schema in the artifact's metadata of the first;
//   - tool-progress with a message: a working status update whose message
//     says it (long tools show life);
//   - warning: a working status update whose message says it, with
//     {"warning": code} as metadata (a model call retried, an answer cut
//     off, the iteration limit reached);
//   - thought-stream: a working status update whose message is the
//     thought's text and whose metadata "thought" holds its id, type,
//     verbosity and index (a stream carries thoughts only when its client
//     asked for them: the filter's Verbosity);
//   - tool-start, tool-complete and subtask-created: a working status
//     update whose message says what runs (or how it ended), with
//     {"activity": kind, ...} as metadata naming the call, the tool or the
//     sub-agent;
//   - everything else (input and auth requests, which the task status
//     carries, task-complete, which follows the final status) is not
//     mapped; internal events never are.
func ToA2A(e loop.Event) (a2a.Event, bool) {
	if e == nil {
		return nil, false
	}
	h := e.Head()
	if h.Kind.Internal() {
		return nil, false
	}
	tid := a2a.TaskID(h.TaskID)
	switch v := e.(type) {
	case *loop.TaskCreated:
		return &a2a.Task{
			ID:        tid,
			ContextID: h.ContextID,
			Status:    a2a.TaskStatus{State: a2a.TaskStateSubmitted, Timestamp: stamp(h.Timestamp)},
			Metadata:  v.Metadata,
		}, true
	case *loop.TaskStatusEvent:
		st, ok := StateToA2A(v.Status)
		if !ok {
			return nil, false
		}
		reqs, md := pauseRequests(v.Metadata)
		return &a2a.TaskStatusUpdateEvent{
			TaskID:    tid,
			ContextID: h.ContextID,
			Status: a2a.TaskStatus{
				State:     st,
				Timestamp: stamp(h.Timestamp),
				Message:   withRequests(agentMessage(h, "status", v.Message), reqs),
			},
			Metadata: md,
		}, true
	case *loop.ContentDelta:
		return artifactUpdate(h, &a2a.Artifact{
			ID:    a2a.ArtifactID(ResponseArtifactID(h.TaskID, v.Response)),
			Name:  ResponseArtifactName,
			Parts: a2a.ContentParts{a2a.NewTextPart(v.Delta)},
		}, v.Index > 0, false), true
	case *loop.ContentComplete:
		if v.Content == "" {
			return nil, false
		}
		text, appendTo := v.Content, false
		if v.Deltas > 0 {
			text, appendTo = "", true // the deltas carried it
		}
		return artifactUpdate(h, &a2a.Artifact{
			ID:    a2a.ArtifactID(ResponseArtifactID(h.TaskID, v.Response)),
			Name:  ResponseArtifactName,
			Parts: a2a.ContentParts{a2a.NewTextPart(text)},
		}, appendTo, true), true
	case *loop.ToolStart, *loop.ToolComplete, *loop.SubtaskCreated:
		text, md := activity(e)
		return working(h, string(h.Kind)+"-"+activityKey(e), text, md), true
	case *loop.FileWrite:
		var p *a2a.Part
		switch v.Encoding {
		case "":
			p = a2a.NewTextPart(v.Data)
		case "base64":
			raw, err := base64.StdEncoding.DecodeString(v.Data)
			if err != nil {
				return nil, false
			}
			p = a2a.NewRawPart(raw)
		default:
			return nil, false
		}
		p.MediaType, p.Filename = v.MimeType, v.Name
		return artifactUpdate(h, &a2a.Artifact{
			ID:       a2a.ArtifactID(v.ArtifactID),
			Name:     v.Name,
			Parts:    a2a.ContentParts{p},
			Metadata: failedMeta(v.Error, nil),
		}, v.Index > 0, v.Complete), true
	case *loop.DataWrite:
		if v.Error != "" {
			// A data artifact's last version stands; A2A has no way to
			// say it failed without replacing it.
			return nil, false
		}
		data := v.Data
		if data == nil {
			data = map[string]any{}
		}
		art := &a2a.Artifact{
			ID:          a2a.ArtifactID(v.ArtifactID),
			Name:        v.Name,
			Description: v.Description,
			Parts:       a2a.ContentParts{a2a.NewDataPart(data)},
		}
		if v.Version > 0 {
			art.Metadata = map[string]any{"version": v.Version}
		}
		return artifactUpdate(h, art, false, true), true
	case *loop.DatasetWrite:
		art := &a2a.Artifact{
			ID:          a2a.ArtifactID(v.ArtifactID),
			Name:        v.Name,
			Description: v.Description,
			Parts:       a2a.ContentParts{a2a.NewDataPart(rowsData(v.Rows))},
		}
		if v.Schema != nil {
			art.Metadata = map[string]any{"schema": v.Schema}
		}
		art.Metadata = failedMeta(v.Error, art.Metadata)
		return artifactUpdate(h, art, v.Index > 0, v.Complete), true
	case *loop.ToolProgress:
		if v.Message == "" {
			return nil, false
		}
		return working(h, "progress-"+v.ToolCallID, v.Message, progressMeta(v)), true
	case *loop.Warning:
		if v.Message == "" {
			return nil, false
		}
		return working(h, "warning", v.Message, map[string]any{"warning": v.Code}), true
	case *loop.ThoughtStream:
		if v.Content == "" {
			return nil, false
		}
		return working(h, thoughtWhat(v), v.Content, thoughtMeta(v)), true
	}
	return nil, false
}

// thoughtWhat names a thought's status message (its id is derived from it
// and the event's time, so chunks of one thought get ids of their own).
func thoughtWhat(v *loop.ThoughtStream) string {
	return "thought-" + v.ThoughtID + "-" + strconv.Itoa(v.Index)
}

// thoughtMeta is the metadata of a thought's status update: what the
// Looopy event says besides its text.
func thoughtMeta(v *loop.ThoughtStream) map[string]any {
	return map[string]any{"thought": map[string]any{
		"thoughtId": v.ThoughtID, "thoughtType": v.ThoughtType, "verbosity": v.Verbosity, "index": v.Index,
	}}
}

// working is a working status update carrying a message from the agent
// (what names the message, see agentMessage) and the Looopy event's
// particulars as metadata: how tool activity, progress, warnings and
// thoughts reach an A2A client.
func working(h *loop.Header, what, text string, md map[string]any) *a2a.TaskStatusUpdateEvent {
	return &a2a.TaskStatusUpdateEvent{
		TaskID:    a2a.TaskID(h.TaskID),
		ContextID: h.ContextID,
		Status: a2a.TaskStatus{
			State:     a2a.TaskStateWorking,
			Timestamp: stamp(h.Timestamp),
			Message:   agentMessage(h, what, text),
		},
		Metadata: md,
	}
}

func artifactUpdate(h *loop.Header, art *a2a.Artifact, appendTo, last bool) *a2a.TaskArtifactUpdateEvent {
	return &a2a.TaskArtifactUpdateEvent{
		TaskID:    a2a.TaskID(h.TaskID),
		ContextID: h.ContextID,
		Artifact:  art,
		Append:    appendTo,
		LastChunk: last,
	}
}

// agentMessage is a status message; its id is derived from the event so
// that a replayed stream carries the same ids.
func agentMessage(h *loop.Header, what, text string) *a2a.Message {
	if text == "" {
		return nil
	}
	return &a2a.Message{
		ID:        messageID(h, what),
		Role:      a2a.MessageRoleAgent,
		TaskID:    a2a.TaskID(h.TaskID),
		ContextID: h.ContextID,
		Parts:     a2a.ContentParts{a2a.NewTextPart(text)},
	}
}

func messageID(h *loop.Header, what string) string {
	return h.TaskID + "-" + what + "-" + strconv.FormatInt(h.Timestamp.UnixNano(), 36)
}

func progressMeta(v *loop.ToolProgress) map[string]any {
	m := map[string]any{"toolCallId": v.ToolCallID}
	if v.Progress > 0 {
		m["progress"] = v.Progress
	}
	return m
}

func rowsData(rows []map[string]any) map[string]any {
	list := make([]any, len(rows))
	for i, r := range rows {
		list[i] = r
	}
	return map[string]any{"rows": list}
}

func stamp(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// failedMeta adds the error of a failed artifact to an artifact's metadata.
func failedMeta(reason string, md map[string]any) map[string]any {
	if reason == "" {
		return md
	}
	if md == nil {
		md = map[string]any{}
	}
	md["error"], md["status"] = reason, "failed"
	return md
}

// activity says what a tool call or a sub-agent does, for a working status:
// its message and its metadata ({"activity": kind, ...}).
func activity(e loop.Event) (string, map[string]any) {
	switch v := e.(type) {
	case *loop.ToolStart:
		return "Running " + v.ToolName, map[string]any{"activity": string(v.Kind), "toolCallId": v.ToolCallID, "toolName": v.ToolName}
	case *loop.ToolComplete:
		md := map[string]any{"activity": string(v.Kind), "toolCallId": v.ToolCallID, "toolName": v.ToolName, "success": v.Success}
		if !v.Success {
			if v.Error != "" {
				md["error"] = v.Error
				return v.ToolName + " failed: " + v.Error, md
			}
			return v.ToolName + " failed", md
		}
		return v.ToolName + " done", md
	case *loop.SubtaskCreated:
		return "Asked " + v.AgentID, map[string]any{"activity": string(v.Kind), "subtaskId": v.SubtaskID, "agentId": v.AgentID}
	}
	return "", nil
}

// activityKey tells apart two activity statuses with one timestamp.
func activityKey(e loop.Event) string {
	switch v := e.(type) {
	case *loop.ToolStart:
		return v.ToolCallID
	case *loop.ToolComplete:
		return v.ToolCallID
	case *loop.SubtaskCreated:
		return v.SubtaskID
	}
	return ""
}
