package sse

import (
	"maps"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"

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

// ToA2A03 maps a Looopy event to an A2A 0.3 event: the 1.0 event ToA2A
// maps it to, converted by the SDK's 0.3 compatibility layer
// (a2av0.FromV1Event), so the two versions cannot say different things.
// Two things 0.3 says its own way are set after the conversion: a status
// update's final is true for auth-required too (the stream waits on the
// client), and a text part's media type and file name, which 0.3 text
// parts lack, go into its metadata as mimeType and name.
func ToA2A03(e loop.Event) (a2a03.Event, bool) {
	v1, ok := ToA2A(e)
	if !ok {
		return nil, false
	}
	ev, err := a2av0.FromV1Event(v1)
	if err != nil || ev == nil {
		return nil, false
	}
	switch v := ev.(type) {
	case *a2a03.TaskStatusUpdateEvent:
		v.Final = final03(v.Status.State)
	case *a2a03.TaskArtifactUpdateEvent:
		textPartMeta03(v1.(*a2a.TaskArtifactUpdateEvent).Artifact.Parts, v.Artifact.Parts)
	}
	return ev, true
}

// textPartMeta03 copies the media type and file name of 1.0 text parts
// into the metadata of the 0.3 parts converted from them.
func textPartMeta03(v1 a2a.ContentParts, parts a2a03.ContentParts) {
	for i, p := range v1 {
		if _, isText := p.Content.(a2a.Text); !isText || i >= len(parts) || (p.MediaType == "" && p.Filename == "") {
			continue
		}
		tp, ok := parts[i].(a2a03.TextPart)
		if !ok {
			continue
		}
		md := maps.Clone(tp.Metadata)
		if md == nil {
			md = map[string]any{}
		}
		if p.MediaType != "" {
			md["mimeType"] = p.MediaType
		}
		if p.Filename != "" {
			md["name"] = p.Filename
		}
		tp.Metadata = md
		parts[i] = tp
	}
}
