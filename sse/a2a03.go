package sse

import (
	"encoding/base64"

	a2a03 "github.com/a2aproject/a2a-go/a2a"

	"github.com/looopy-go/looopy/loop"
)

// StateToA2A03 maps a Looopy task status to an A2A 0.3 task state.
func StateToA2A03(s loop.TaskStatus) (a2a03.TaskState, bool) {
	switch s {
	case loop.TaskSubmitted:
		return a2a03.TaskStateSubmitted, true
	case loop.TaskWorking, loop.TaskWaitingSubtask:
		return a2a03.TaskStateWorking, true
	case loop.TaskWaitingInput:
		return a2a03.TaskStateInputRequired, true
	case loop.TaskWaitingAuth:
		return a2a03.TaskStateAuthRequired, true
	case loop.TaskCompleted:
		return a2a03.TaskStateCompleted, true
	case loop.TaskFailed:
		return a2a03.TaskStateFailed, true
	case loop.TaskCanceled:
		return a2a03.TaskStateCanceled, true
	case loop.TaskRejected:
		return a2a03.TaskStateRejected, true
	}
	return a2a03.TaskStateUnspecified, false
}

// final03 is A2A 0.3's "final": the status ends the interaction, because
// the task is over or waits on the client.
func final03(st a2a03.TaskState) bool {
	return st.Terminal() || st == a2a03.TaskStateInputRequired || st == a2a03.TaskStateAuthRequired
}

// FinalA2A03 reports whether ev ends an A2A 0.3 stream.
func FinalA2A03(ev a2a03.Event) bool {
	switch v := ev.(type) {
	case *a2a03.TaskStatusUpdateEvent:
		return v.Final
	case *a2a03.Task:
		return final03(v.Status.State)
	case *a2a03.Message:
		return true
	}
	return false
}

// ToA2A03 maps a Looopy event to an A2A 0.3 event, as ToA2A does for 1.0.
// The differences are 0.3's: a status update carries final (true for a
// terminal state and for input-required and auth-required), parts are
// typed (base64 file chunks are file parts with bytes; data parts hold an
// object).
func ToA2A03(e loop.Event) (a2a03.Event, bool) {
	if e == nil {
		return nil, false
	}
	h := e.Head()
	if h.Kind.Internal() {
		return nil, false
	}
	tid := a2a03.TaskID(h.TaskID)
	switch v := e.(type) {
	case *loop.TaskCreated:
		return &a2a03.Task{
			ID:        tid,
			ContextID: h.ContextID,
			Status:    a2a03.TaskStatus{State: a2a03.TaskStateSubmitted, Timestamp: stamp(h.Timestamp)},
			Metadata:  v.Metadata,
		}, true
	case *loop.TaskStatusEvent:
		st, ok := StateToA2A03(v.Status)
		if !ok {
			return nil, false
		}
		reqs, md := pauseRequests(v.Metadata)
		return &a2a03.TaskStatusUpdateEvent{
			TaskID:    tid,
			ContextID: h.ContextID,
			Final:     final03(st),
			Status: a2a03.TaskStatus{
				State:     st,
				Timestamp: stamp(h.Timestamp),
				Message:   withRequests03(agentMessage03(h, "status", v.Message), reqs),
			},
			Metadata: md,
		}, true
	case *loop.ContentDelta:
		return artifactUpdate03(h, &a2a03.Artifact{
			ID:    a2a03.ArtifactID(ContentArtifactID(h.TaskID)),
			Name:  ResponseArtifactName,
			Parts: a2a03.ContentParts{a2a03.TextPart{Text: v.Delta}},
		}, v.Index > 0, false), true
	case *loop.ContentComplete:
		if v.Content == "" {
			return nil, false
		}
		return artifactUpdate03(h, &a2a03.Artifact{
			ID:    a2a03.ArtifactID(ContentArtifactID(h.TaskID)),
			Name:  ResponseArtifactName,
			Parts: a2a03.ContentParts{a2a03.TextPart{Text: v.Content}},
		}, false, true), true
	case *loop.FileWrite:
		var p a2a03.Part
		switch v.Encoding {
		case "":
			tp := a2a03.TextPart{Text: v.Data}
			if v.MimeType != "" || v.Name != "" {
				tp.Metadata = map[string]any{}
				if v.MimeType != "" {
					tp.Metadata["mimeType"] = v.MimeType
				}
				if v.Name != "" {
					tp.Metadata["name"] = v.Name
				}
			}
			p = tp
		case "base64":
			if _, err := base64.StdEncoding.DecodeString(v.Data); err != nil {
				return nil, false
			}
			p = a2a03.FilePart{File: a2a03.FileBytes{
				FileMeta: a2a03.FileMeta{MimeType: v.MimeType, Name: v.Name},
				Bytes:    v.Data,
			}}
		default:
			return nil, false
		}
		return artifactUpdate03(h, &a2a03.Artifact{
			ID:       a2a03.ArtifactID(v.ArtifactID),
			Name:     v.Name,
			Parts:    a2a03.ContentParts{p},
			Metadata: failedMeta(v.Error, nil),
		}, v.Index > 0, v.Complete), true
	case *loop.DataWrite:
		if v.Error != "" {
			return nil, false // the last version stands (see ToA2A)
		}
		data := v.Data
		if data == nil {
			data = map[string]any{}
		}
		art := &a2a03.Artifact{
			ID:          a2a03.ArtifactID(v.ArtifactID),
			Name:        v.Name,
			Description: v.Description,
			Parts:       a2a03.ContentParts{a2a03.DataPart{Data: data}},
		}
		if v.Version > 0 {
			art.Metadata = map[string]any{"version": v.Version}
		}
		return artifactUpdate03(h, art, false, true), true
	case *loop.DatasetWrite:
		art := &a2a03.Artifact{
			ID:          a2a03.ArtifactID(v.ArtifactID),
			Name:        v.Name,
			Description: v.Description,
			Parts:       a2a03.ContentParts{a2a03.DataPart{Data: rowsData(v.Rows)}},
		}
		if v.Schema != nil {
			art.Metadata = map[string]any{"schema": v.Schema}
		}
		art.Metadata = failedMeta(v.Error, art.Metadata)
		return artifactUpdate03(h, art, v.Index > 0, v.Complete), true
	case *loop.ToolProgress:
		if v.Message == "" {
			return nil, false
		}
		return &a2a03.TaskStatusUpdateEvent{
			TaskID:    tid,
			ContextID: h.ContextID,
			Status: a2a03.TaskStatus{
				State:     a2a03.TaskStateWorking,
				Timestamp: stamp(h.Timestamp),
				Message:   agentMessage03(h, "progress-"+v.ToolCallID, v.Message),
			},
			Metadata: progressMeta(v),
		}, true
	case *loop.Warning:
		if v.Message == "" {
			return nil, false
		}
		return &a2a03.TaskStatusUpdateEvent{
			TaskID:    tid,
			ContextID: h.ContextID,
			Status: a2a03.TaskStatus{
				State:     a2a03.TaskStateWorking,
				Timestamp: stamp(h.Timestamp),
				Message:   agentMessage03(h, "warning", v.Message),
			},
			Metadata: map[string]any{"warning": v.Code},
		}, true
	case *loop.ThoughtStream:
		if v.Content == "" {
			return nil, false
		}
		return &a2a03.TaskStatusUpdateEvent{
			TaskID:    tid,
			ContextID: h.ContextID,
			Status: a2a03.TaskStatus{
				State:     a2a03.TaskStateWorking,
				Timestamp: stamp(h.Timestamp),
				Message:   agentMessage03(h, thoughtWhat(v), v.Content),
			},
			Metadata: thoughtMeta(v),
		}, true
	}
	return nil, false
}

func artifactUpdate03(h *loop.Header, art *a2a03.Artifact, appendTo, last bool) *a2a03.TaskArtifactUpdateEvent {
	return &a2a03.TaskArtifactUpdateEvent{
		TaskID:    a2a03.TaskID(h.TaskID),
		ContextID: h.ContextID,
		Artifact:  art,
		Append:    appendTo,
		LastChunk: last,
	}
}

func agentMessage03(h *loop.Header, what, text string) *a2a03.Message {
	if text == "" {
		return nil
	}
	return &a2a03.Message{
		ID:        messageID(h, what),
		Role:      a2a03.MessageRoleAgent,
		TaskID:    a2a03.TaskID(h.TaskID),
		ContextID: h.ContextID,
		Parts:     a2a03.ContentParts{a2a03.TextPart{Text: text}},
	}
}
