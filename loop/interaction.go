package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// InteractionURI names the A2A extension for humans in the loop
// (docs/A2A_EXTENSION.md): the key of its data parts and metadata.
const InteractionURI = "https://github.com/looopy-go/looopy/blob/main/docs/A2A_EXTENSION.md#v1"

// Request types (InputRequest.InputType).
const (
	InputApproval   = "approval"
	InputClientTool = "client-tool"
	InputAuth       = "auth"
	InputText       = "text"
)

// Approval decisions (InputAnswer.Decision).
const (
	DecisionApprove = "approve"
	DecisionReject  = "reject"
)

// ReasonInput: the turn ended waiting for an answer to one of its
// requests (an approval, or an approval and client tool calls).
const ReasonInput = "input_required"

// InputRequest is one thing a paused task waits for: an approval of a tool
// call, the result of a client tool, a credential or a text. It is stored
// with the task (TaskRecord.Requests) until the task goes on.
type InputRequest struct {
	InputID     string    `json:"inputId"`
	InputType   string    `json:"inputType"`
	RequireUser bool      `json:"requireUser"`
	Prompt      string    `json:"prompt"`
	Call        *ToolCall `json:"call,omitempty"`
	// Tool says what would run an approved call (source, plugin, version,
	// sha256, grants).
	Tool         map[string]any  `json:"tool,omitempty"`
	Edits        *InputEdits     `json:"edits,omitempty"`
	ResultSchema json.RawMessage `json:"resultSchema,omitempty"`
	// Auth is what an auth request asks for (never a credential).
	Auth      *AuthNeed `json:"auth,omitempty"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
	// Route, on a request passed up from a sub-agent, says where the
	// answer goes.
	Route *InputRoute `json:"route,omitempty"`
	// Answer is the recorded response; nil while the request is open.
	Answer *InputAnswer `json:"answer,omitempty"`
}

// InputEdits says whether an approver may change a call's arguments, and
// the schema they must then match.
type InputEdits struct {
	Allowed bool            `json:"allowed"`
	Schema  json.RawMessage `json:"schema,omitempty"`
}

// InputAnswer is a response to an InputRequest. Nothing in it is secret: a
// credential never reaches it.
type InputAnswer struct {
	InputID    string          `json:"inputId"`
	Decision   string          `json:"decision,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Result     *ToolResult     `json:"result,omitempty"`
	Text       string          `json:"text,omitempty"`
	ProvidedBy string          `json:"providedBy,omitempty"` // user or agent
	UserID     string          `json:"userId,omitempty"`
	AgentID    string          `json:"agentId,omitempty"`
	At         time.Time       `json:"at,omitzero"`
}

// ClientTool is a tool a client offered with its message: its definition,
// and the JSON Schema of its result's data when it declared one.
type ClientTool struct {
	ToolDefinition
	ResultSchema json.RawMessage `json:"resultSchema,omitempty"`
}

// ApprovalGate decides whether a call needs an approval before it runs. It
// returns nil when the call may run now, or the request to pause for (the
// loop fills InputID, InputType and Call). It must be safe for concurrent
// use.
type ApprovalGate func(ctx context.Context, t *Turn, call ToolCall) *InputRequest

// OpenRequests returns the requests of rec that wait for an answer.
func (rec *TaskRecord) OpenRequests() []InputRequest {
	var out []InputRequest
	for _, r := range rec.Requests {
		if r.Answer == nil {
			out = append(out, r)
		}
	}
	return out
}

// Answer records answers on a paused task. Every answer is checked before
// any is recorded: an unknown or already answered input id, an expired
// request, a field that does not belong to the request's type, or a task
// that is not paused is refused with ErrInvalid, and rec is left as it
// was. It reports whether every request is answered now.
func (rec *TaskRecord) Answer(answers []InputAnswer, now time.Time) (complete bool, err error) {
	if !rec.Status.Interrupted() {
		return false, fmt.Errorf("%w: task %q is %s: it waits for no answer", ErrInvalid, rec.ID, rec.Status)
	}
	if len(answers) == 0 {
		return false, fmt.Errorf("%w: no responses", ErrInvalid)
	}
	idx := make(map[string]int, len(rec.Requests))
	for i, r := range rec.Requests {
		idx[r.InputID] = i
	}
	seen := make(map[string]bool, len(answers))
	for _, a := range answers {
		i, ok := idx[a.InputID]
		if !ok || rec.Requests[i].Answer != nil {
			what := "unknown"
			if ok {
				what = "already answered"
			}
			return false, fmt.Errorf("%w: inputId %q is %s; open requests: %s", ErrInvalid, a.InputID, what, openIDs(rec))
		}
		if seen[a.InputID] {
			return false, fmt.Errorf("%w: inputId %q is answered twice in one message", ErrInvalid, a.InputID)
		}
		seen[a.InputID] = true
		r := rec.Requests[i]
		if !r.ExpiresAt.IsZero() && !now.Before(r.ExpiresAt) {
			return false, fmt.Errorf("%w: request %q expired at %s", ErrInvalid, a.InputID, r.ExpiresAt.Format(time.RFC3339))
		}
		if err := checkAnswer(r, a); err != nil {
			return false, fmt.Errorf("%w: response to %q: %v", ErrInvalid, a.InputID, err)
		}
	}
	reqs := append([]InputRequest(nil), rec.Requests...)
	for _, a := range answers {
		a.At = now
		reqs[idx[a.InputID]].Answer = &a
	}
	rec.Requests = reqs
	return len(rec.OpenRequests()) == 0, nil
}

func openIDs(rec *TaskRecord) string {
	var ids []string
	for _, r := range rec.OpenRequests() {
		ids = append(ids, fmt.Sprintf("%q", r.InputID))
	}
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}

// checkAnswer checks the fields of a against the type of r (schemas are
// the host's to check).
func checkAnswer(r InputRequest, a InputAnswer) error {
	if r.RequireUser && a.ProvidedBy == "agent" {
		// requireUser: a person must answer; an answer that says an
		// agent gave it is not one.
		return fmt.Errorf("this request must be answered by a person (requireUser): an answer providedBy \"agent\" is refused")
	}
	switch r.InputType {
	case InputApproval:
		if a.Decision != DecisionApprove && a.Decision != DecisionReject {
			return fmt.Errorf("decision must be %q or %q, not %q", DecisionApprove, DecisionReject, a.Decision)
		}
		if len(a.Arguments) > 0 {
			if r.Edits == nil || !r.Edits.Allowed {
				return fmt.Errorf("this approval does not allow edited arguments")
			}
			if a.Decision != DecisionApprove {
				return fmt.Errorf("arguments go with an approval, not a rejection")
			}
			var obj map[string]any
			if err := json.Unmarshal(a.Arguments, &obj); err != nil || obj == nil {
				return fmt.Errorf("arguments must be a JSON object")
			}
		}
		if a.Result != nil || a.Text != "" {
			return fmt.Errorf("an approval takes decision, reason and arguments only")
		}
	case InputClientTool:
		if a.Result == nil {
			return fmt.Errorf("result is required")
		}
		if a.Decision != "" || a.Reason != "" || len(a.Arguments) > 0 || a.Text != "" {
			return fmt.Errorf("a client tool's response takes result only")
		}
	case InputAuth:
		// The credential itself never reaches the answer: the host keeps
		// it apart (Credentials).
		if a.Decision != "" || a.Reason != "" || a.Result != nil || len(a.Arguments) > 0 || a.Text != "" {
			return fmt.Errorf("a credential's response takes credential only")
		}
	case InputText:
		if a.Text == "" {
			return fmt.Errorf("text is required")
		}
		if a.Decision != "" || a.Result != nil || len(a.Arguments) > 0 {
			return fmt.Errorf("a text response takes text only")
		}
	default:
		return fmt.Errorf("requests of type %q cannot be answered this way", r.InputType)
	}
	return nil
}

// answeredCalls returns the calls of rec's answered requests that have no
// result in its history yet, and the answers by call id: what a turn that
// continues the task must settle before it calls the model.
func answeredCalls(rec *TaskRecord) ([]ToolCall, map[string]InputAnswer, map[string]InputRequest) {
	done := make(map[string]bool)
	for _, m := range rec.History {
		if m.Role == RoleTool {
			done[m.ToolCallID] = true
		}
	}
	var calls []ToolCall
	answers := make(map[string]InputAnswer)
	var routes map[string]InputRequest
	for _, r := range rec.Requests {
		if r.Answer == nil || r.Call == nil || done[r.Call.ID] {
			continue
		}
		calls = append(calls, *r.Call)
		answers[r.Call.ID] = *r.Answer
		if r.Route != nil {
			if routes == nil {
				routes = map[string]InputRequest{}
			}
			routes[r.Call.ID] = r
		}
	}
	return calls, answers, routes
}

// answerResult is the tool result an answer stands for, when it does not
// run the call: a rejection, or a client tool's result.
func answerResult(call ToolCall, a InputAnswer) (ToolResult, bool) {
	switch {
	case a.Result != nil:
		r := *a.Result
		r.ToolCallID = call.ID
		return r, true
	case a.Decision == DecisionReject:
		msg := fmt.Sprintf("The call to %s was rejected", call.Name)
		if a.ProvidedBy == "agent" {
			msg += " by a coordinating agent"
		}
		if a.Reason != "" {
			msg += ": " + a.Reason
		} else {
			msg += "."
		}
		return ToolResult{ToolCallID: call.ID, IsError: true, Content: msg}, true
	}
	return ToolResult{}, false
}

// clientToolDefs splits client tools into the definitions the model sees
// and their result schemas by name.
func clientToolDefs(tools []ClientTool) ([]ToolDefinition, map[string]json.RawMessage) {
	if len(tools) == 0 {
		return nil, nil
	}
	defs := make([]ToolDefinition, len(tools))
	var schemas map[string]json.RawMessage
	for i, t := range tools {
		defs[i] = t.ToolDefinition
		if len(t.ResultSchema) > 0 {
			if schemas == nil {
				schemas = map[string]json.RawMessage{}
			}
			schemas[t.Name] = t.ResultSchema
		}
	}
	return defs, schemas
}

// RequestsPrompt is the text of a pause: the prompts of its requests, one
// per line.
func RequestsPrompt(reqs []InputRequest) string {
	var sb strings.Builder
	for _, r := range reqs {
		if r.Answer != nil {
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString(r.Prompt)
	}
	return sb.String()
}

func authRequiredEvent(r InputRequest) *AuthRequired {
	e := &AuthRequired{Header: Header{Kind: KindAuthRequired}, AuthID: r.InputID, Prompt: r.Prompt}
	if r.Auth != nil {
		e.AuthType, e.Provider, e.Scopes, e.AuthURL = r.Auth.AuthType, r.Auth.Provider, r.Auth.Scopes, r.Auth.AuthURL
	}
	if e.AuthType == "" {
		e.AuthType = "custom"
	}
	return e
}

func inputRequiredEvent(r InputRequest) *InputRequired {
	e := &InputRequired{Header: Header{Kind: KindInputRequired}, InputID: r.InputID, RequireUser: r.RequireUser,
		InputType: r.InputType, Prompt: r.Prompt, Call: r.Call}
	md := map[string]any{}
	if r.Tool != nil {
		md["tool"] = r.Tool
	}
	if r.Edits != nil {
		md["edits"] = r.Edits
		if len(r.Edits.Schema) > 0 {
			e.Schema = r.Edits.Schema
		}
	}
	if len(r.ResultSchema) > 0 {
		e.Schema = r.ResultSchema
	}
	if !r.ExpiresAt.IsZero() {
		md["expiresAt"] = r.ExpiresAt.Format(time.RFC3339)
	}
	if len(md) > 0 {
		e.Metadata = md
	}
	if r.InputType == InputApproval {
		e.Options = []string{DecisionApprove, DecisionReject}
	}
	return e
}

// announceAnswers emits, for each answer the turn acts on, input-received
// and a working status saying so.
func (tr *turn) announceAnswers() {
	for _, c := range tr.t.Continue {
		a, ok := tr.t.Answers[c.ID]
		if !ok {
			continue
		}
		by := a.ProvidedBy
		if by == "" {
			by = "user"
		}
		if strings.HasPrefix(a.InputID, InputAuth+":") {
			// A credential: that it came, never what it is.
			tr.emit(&AuthCompleted{Header: Header{Kind: KindAuthCompleted}, AuthID: a.InputID, Success: true})
			tr.emit(&TaskStatusEvent{Header: Header{Kind: KindTaskStatus}, Status: TaskWorking,
				Metadata: map[string]any{"activity": string(KindAuthCompleted), "inputId": a.InputID, "providedBy": by}})
			continue
		}
		md := map[string]any{"decision": a.Decision, "callId": c.ID}
		if a.Decision == "" {
			delete(md, "decision")
		}
		tr.emit(&InputReceived{Header: Header{Kind: KindInputReceived}, InputID: a.InputID, ProvidedBy: by,
			UserID: a.UserID, AgentID: a.AgentID, Metadata: md})
		smd := map[string]any{"activity": string(KindInputReceived), "inputId": a.InputID, "providedBy": by}
		if a.Decision != "" {
			smd["decision"] = a.Decision
		}
		tr.emit(&TaskStatusEvent{Header: Header{Kind: KindTaskStatus}, Status: TaskWorking, Metadata: smd})
	}
}
