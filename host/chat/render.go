package chat

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// render shows one A2A event.
func (s *session) render(st *turnState, ev a2a.Event) {
	switch v := ev.(type) {
	case *a2a.Task:
		s.noteTask(st, v.ID, v.ContextID)
		for _, a := range v.Artifacts {
			s.artifact(st, &a2a.TaskArtifactUpdateEvent{TaskID: v.ID, ContextID: v.ContextID, Artifact: a, LastChunk: true})
		}
		s.status(st, v.Status, v.Metadata)
	case *a2a.Message:
		s.noteTask(st, v.TaskID, v.ContextID)
		s.message(st, v)
		st.ended = true
	case *a2a.TaskStatusUpdateEvent:
		s.noteTask(st, v.TaskID, v.ContextID)
		s.status(st, v.Status, v.Metadata)
	case *a2a.TaskArtifactUpdateEvent:
		s.noteTask(st, v.TaskID, v.ContextID)
		s.artifact(st, v)
	}
}

func (s *session) noteTask(st *turnState, id a2a.TaskID, contextID string) {
	if id != "" && st.taskID == "" {
		st.taskID = id
	}
	if contextID != "" && contextID != s.contextID {
		if s.contextID == "" {
			s.p.line(styleDim, "context %s", contextID)
		} else {
			s.p.line(styleDim, "the agent moved the conversation to context %s", contextID)
		}
		s.contextID, s.lastEvent = contextID, 0
	}
}

// message shows an agent's message: its text, and its other parts as
// artifacts of their own.
func (s *session) message(st *turnState, m *a2a.Message) {
	var text strings.Builder
	for i, p := range m.Parts {
		if t, ok := p.Content.(a2a.Text); ok {
			text.WriteString(string(t))
			continue
		}
		if isExtensionPart(p) {
			continue
		}
		s.artifact(st, &a2a.TaskArtifactUpdateEvent{TaskID: m.TaskID, LastChunk: true, Artifact: &a2a.Artifact{
			ID: a2a.ArtifactID(fmt.Sprintf("%s-part-%d", m.ID, i)), Name: p.Filename, Parts: a2a.ContentParts{p}}})
	}
	if t := text.String(); t != "" {
		s.p.text(sanitize(t))
		st.textShown = true
	}
}

// status shows a task's status: progress while it works, the requests of
// a pause, how it ended.
func (s *session) status(st *turnState, ts a2a.TaskStatus, md map[string]any) {
	st.state = ts.State
	text, reqs, hasReqs := statusParts(ts.Message)
	switch ts.State {
	case a2a.TaskStateSubmitted, a2a.TaskStateUnspecified:
	case a2a.TaskStateWorking:
		switch act, _ := md["activity"].(string); act {
		case "":
		case "tool-start", "tool-complete", "subtask-created":
			// A tool call or a sub-agent's run: its message says it (a
			// Looopy host's turn is drawn from /events, which shows it in
			// full; these statuses are drawn only when that stream is not
			// there).
		default:
			s.p.line(styleDim, "✓ %s %s%s", act, str(md["inputId"]), suffix(" (", str(md["decision"]), ")"))
		}
		if text != "" {
			s.p.line(styleDim, "… %s", sanitize(text))
		}
	case a2a.TaskStateInputRequired, a2a.TaskStateAuthRequired:
		st.ended = true
		s.p.endLine()
		p := &pause{taskID: st.taskID}
		if hasReqs {
			p.reqs = reqs
		}
		if len(p.reqs) == 0 {
			// A pause the extension does not describe: the next line
			// answers it as text.
			s.p.line(styleAsk, "? the agent needs %s: %s", stateName(ts.State), orDash(sanitize(text)))
			s.p.line(styleDim, "  (your next line answers it on the same task; /cancel cancels the task)")
		} else {
			for _, r := range p.reqs {
				s.showRequest(r)
			}
		}
		s.pause = p
	case a2a.TaskStateCompleted:
		st.ended = true
		if text != "" && !st.textShown {
			s.p.text(sanitize(text))
		}
		s.p.endLine()
	case a2a.TaskStateCanceled:
		st.ended = true
		s.p.line(styleAsk, "⊘ canceled%s", suffix(": ", sanitize(text), ""))
	case a2a.TaskStateFailed, a2a.TaskStateRejected:
		st.ended = true
		s.p.line(styleErr, "✗ %s%s", stateName(ts.State), suffix(": ", sanitize(text), ""))
	default:
		if text != "" {
			s.p.line(styleDim, "[%s] %s", stateName(ts.State), sanitize(text))
		}
	}
}

// statusParts splits a status message into its text and the extension's
// requests.
func statusParts(m *a2a.Message) (string, []request, bool) {
	if m == nil {
		return "", nil, false
	}
	var text strings.Builder
	var reqs []request
	found := false
	for _, p := range m.Parts {
		switch c := p.Content.(type) {
		case a2a.Text:
			text.WriteString(string(c))
		case a2a.Data:
			if p.Metadata[ExtensionURI] != "requests" {
				continue
			}
			b, err := json.Marshal(c.Value)
			if err != nil {
				continue
			}
			var d struct {
				Requests []request `json:"requests"`
			}
			if json.Unmarshal(b, &d) == nil {
				reqs, found = append(reqs, d.Requests...), true
			}
		}
	}
	return text.String(), reqs, found
}

func isExtensionPart(p *a2a.Part) bool {
	_, ok := p.Metadata[ExtensionURI]
	return ok
}

func str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}

func suffix(pre, s, post string) string {
	if s == "" {
		return ""
	}
	return pre + s + post
}

// compactJSON shows a JSON value on one line.
func compactJSON(v any) string {
	if raw, ok := v.(json.RawMessage); ok {
		var x any
		if json.Unmarshal(raw, &x) == nil {
			v = x
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
