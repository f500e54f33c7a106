package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// request is one open request of a pause (docs/A2A_EXTENSION.md section
// 2); fields the chat does not know are ignored.
type request struct {
	InputID     string          `json:"inputId"`
	InputType   string          `json:"inputType"`
	RequireUser bool            `json:"requireUser"`
	Prompt      string          `json:"prompt"`
	Call        *requestCall    `json:"call,omitempty"`
	Tool        json.RawMessage `json:"tool,omitempty"`
	Edits       *struct {
		Allowed bool            `json:"allowed"`
		Schema  json.RawMessage `json:"schema,omitempty"`
	} `json:"edits,omitempty"`
	Auth *struct {
		Provider string   `json:"provider"`
		Scopes   []string `json:"scopes,omitempty"`
		AuthURL  string   `json:"authUrl,omitempty"`
	} `json:"auth,omitempty"`
	From      []string `json:"from,omitempty"`
	ExpiresAt string   `json:"expiresAt,omitempty"`
}

type requestCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// pause is a task that waits for answers: the open requests, answered one
// line at a time, then sent together on the same task.
type pause struct {
	taskID a2a.TaskID
	reqs   []request
	resps  []map[string]any
}

func (p *pause) current() *request {
	if len(p.resps) < len(p.reqs) {
		return &p.reqs[len(p.resps)]
	}
	return nil
}

// secret reports whether the line asked for next is a credential.
func (p *pause) secret() bool {
	r := p.current()
	return r != nil && r.InputType == "auth"
}

func (p *pause) promptText() string {
	r := p.current()
	if r == nil {
		return "answer> "
	}
	switch r.InputType {
	case "approval":
		if r.Edits != nil && r.Edits.Allowed {
			return "approve? [y/n reason/e {json}]> "
		}
		return "approve? [y/n reason]> "
	case "auth":
		return "credential> "
	}
	return "answer> "
}

func (s *session) showRequest(r request) {
	kind := r.InputType
	if kind == "" {
		kind = "request"
	}
	s.p.line(styleAsk, "? [%s] %s", kind, sanitize(oneLine(r.Prompt)))
	if r.Call != nil {
		s.p.line(styleAsk, "  call: %s %s", sanitize(r.Call.Name), sanitize(clip(compactJSON(r.Call.Arguments), maxShownArg)))
	}
	if len(r.Tool) > 0 {
		var t struct {
			Source  string         `json:"source"`
			Plugin  string         `json:"plugin"`
			Version string         `json:"version"`
			SHA256  string         `json:"sha256"`
			Grants  map[string]any `json:"grants"`
		}
		if json.Unmarshal(r.Tool, &t) == nil {
			who := t.Source
			if t.Plugin != "" {
				who = fmt.Sprintf("plugin %s %s", t.Plugin, t.Version)
				if len(t.SHA256) >= 12 {
					who += " (sha256 " + t.SHA256[:12] + "…)"
				}
			}
			s.p.line(styleAsk, "  runs in: %s", sanitize(who))
			if len(t.Grants) > 0 {
				s.p.line(styleAsk, "  grants: %s", sanitize(clip(compactJSON(t.Grants), maxShownArg)))
			}
		}
	}
	if r.Edits != nil && r.Edits.Allowed {
		s.p.line(styleDim, "  edits allowed; schema %s", sanitize(clip(compactJSON(r.Edits.Schema), maxShownArg)))
	}
	if r.Auth != nil && r.Auth.AuthURL != "" {
		s.p.line(styleAsk, "  get it at %s", sanitize(r.Auth.AuthURL))
	}
	if len(r.From) > 0 {
		s.p.line(styleDim, "  from sub-agent %s", sanitize(strings.Join(r.From, " → ")))
	}
	if r.ExpiresAt != "" {
		s.p.line(styleDim, "  expires %s", sanitize(r.ExpiresAt))
	}
}

// answer takes a line as the answer to the pause's current request; once
// every request has its answer they go to the agent together.
func (s *session) answer(ctx context.Context, line string) bool {
	p := s.pause
	if len(p.reqs) == 0 {
		if line == "" {
			return false
		}
		// A plain pause: the line is the answer, as text, on the task.
		s.pause = nil
		msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(line))
		msg.TaskID = p.taskID
		return s.turn(ctx, msg)
	}
	r := p.current()
	resp, err := responseFor(r, line)
	if err != nil {
		s.p.line(styleErr, "%s", err.Error())
		return false
	}
	p.resps = append(p.resps, resp)
	if p.current() != nil {
		return false
	}
	s.pause = nil
	part := a2a.NewDataPart(map[string]any{"responses": p.resps})
	part.Metadata = map[string]any{ExtensionURI: "responses"}
	msg := a2a.NewMessage(a2a.MessageRoleUser, part)
	msg.TaskID = p.taskID
	msg.Extensions = []string{ExtensionURI}
	// A refused answer leaves the task paused: the turn's end finds it so
	// and asks again.
	return s.turn(ctx, msg)
}

// responseFor reads a line as the response to r.
func responseFor(r *request, line string) (map[string]any, error) {
	resp := map[string]any{"inputId": r.InputID}
	switch r.InputType {
	case "approval":
		word, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToLower(word) {
		case "y", "yes", "approve":
			resp["decision"] = "approve"
		case "n", "no", "reject":
			resp["decision"] = "reject"
			if rest != "" {
				resp["reason"] = rest
			}
		case "e", "edit":
			if r.Edits == nil || !r.Edits.Allowed {
				return nil, fmt.Errorf("this request allows no edits: answer y or n [reason]")
			}
			var args map[string]any
			if err := json.Unmarshal([]byte(rest), &args); err != nil {
				return nil, fmt.Errorf("edited arguments must be a JSON object: %v", err)
			}
			resp["decision"], resp["arguments"] = "approve", args
		default:
			return nil, fmt.Errorf("answer y (approve), n [reason] (reject)%s", map[bool]string{true: " or e {json} (edit)"}[r.Edits != nil && r.Edits.Allowed])
		}
	case "auth":
		if r.Auth != nil && r.Auth.Provider == "caller" {
			break // the request's own credentials answer it
		}
		if line == "" {
			return nil, fmt.Errorf("paste the credential (or /cancel)")
		}
		resp["credential"] = map[string]any{"token": line, "tokenType": "Bearer"}
	case "client-tool":
		// The chat offers no tools of its own: say so to the model.
		resp["result"] = map[string]any{"content": "the terminal chat runs no client tools", "isError": true}
	default:
		if line == "" {
			return nil, fmt.Errorf("type the answer (or /cancel)")
		}
		resp["text"] = line
	}
	return resp, nil
}

// resume looks at a resumed context: how many tasks it holds, and a task
// that waits for an answer, which is shown so that it can be answered.
// Servers that do not list tasks are resumed all the same.
func (s *session) resume(ctx context.Context) {
	s.p.line(styleDim, "resuming context %s", s.contextID)
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := s.client.ListTasks(lctx, &a2a.ListTasksRequest{ContextID: s.contextID})
	if err != nil || res == nil {
		return
	}
	s.p.line(styleDim, "%d earlier task(s) in this conversation", len(res.Tasks))
	// The next turn's event stream starts after the events of the past:
	// read from the start, a paused task's earlier legs were drawn again
	// and their task-complete (the pause) ended the wait for the answer's
	// own, so that the prompt could come back before the answer.
	if s.looopy {
		s.skipPast(ctx)
	}
	for _, t := range res.Tasks {
		if t.Status.State == a2a.TaskStateInputRequired || t.Status.State == a2a.TaskStateAuthRequired {
			s.p.line(styleAsk, "task %s waits for an answer:", t.ID)
			s.status(&turnState{taskID: t.ID}, t.Status, nil)
			return
		}
	}
}
