package loop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// InputRoute says where a request a task passes up came from: the
// sub-agent's task that asked (SubtaskID, AgentID), the id the sub-agent
// gave its request (InputID), the remote task when the sub-agent is a
// remote A2A agent, and the sub-agent's call the request is about. It is
// stored with the parent's request, so a parent restarted while it waits
// still knows where the answer goes. Inner is the route the sub-agent's
// call received the request by, when the sub-agent only relays it: one of
// its own sub-agents asked (a remote agent it called, an agent plugin), so
// the answer goes on down, level by level, to the task that asked.
type InputRoute struct {
	SubtaskID    string      `json:"subtaskId"`
	AgentID      string      `json:"agentId"`
	InputID      string      `json:"inputId,omitempty"`
	RemoteTaskID string      `json:"remoteTaskId,omitempty"`
	Call         *ToolCall   `json:"call,omitempty"`
	Inner        *InputRoute `json:"inner,omitempty"`
}

// Remote returns the level of the route that names a remote task (the
// request was asked by a remote agent's task, possibly below local
// sub-agents that relayed it), or nil.
func (rt *InputRoute) Remote() *InputRoute {
	for ; rt != nil; rt = rt.Inner {
		if rt.RemoteTaskID != "" {
			return rt
		}
	}
	return nil
}

// inner is the request and answer routed to the sub-agent's call below
// sub, when the routed request r was relayed by sub from one of its calls
// (Route.Inner): the request as that call passed it up (its id
// Route.InputID), and the answer under that id.
func (r *RoutedInput) inner() *RoutedInput {
	rt := r.Request.Route
	if rt == nil || rt.Inner == nil {
		return nil
	}
	req := r.Request
	req.InputID, req.Call, req.Route = rt.InputID, rt.Call, rt.Inner
	a := r.Answer
	a.InputID = rt.InputID
	return &RoutedInput{Request: req, Answer: a, taken: new(atomic.Bool)}
}

// InputRequiredError is what a tool returns (from Toolset.Call) when its
// call waits for input it passes up: a sub-agent's request that a person
// must answer (Request.RequireUser, or a credential). The call ends
// without a result, the turn pauses with Request (waiting-auth for a
// credential, else waiting-input), and once the client has answered on the
// parent task the call runs again with the answer (ToolEnv.Routed).
type InputRequiredError struct {
	Request InputRequest
}

func (e *InputRequiredError) Error() string {
	return fmt.Sprintf("input %q (%s) is required: %s", e.Request.InputID, e.Request.InputType, e.Request.Prompt)
}

// RoutedInput is a request a call passed up and the client's answer to
// it, handed to the call when it runs again.
type RoutedInput struct {
	Request InputRequest
	Answer  InputAnswer

	// taken is set once the answer went on down to the call of the
	// sub-agent the relayed request was about (nil: not followed).
	taken *atomic.Bool
}

// routePauseKey marks, in the journal, the result of a call that stopped
// to pass a request up: it has not finished, and runs again once the
// request is answered (after a restart too).
const routePauseKey = "looopy.inputRequired"

func routePauseResult(call ToolCall, req InputRequest) ToolResult {
	data, _ := json.Marshal(map[string]any{routePauseKey: req.InputID})
	return ToolResult{ToolCallID: call.ID, IsError: true, Data: data,
		Content: fmt.Sprintf("tool %q waits for input %q", call.Name, req.InputID)}
}

// PassUp pauses the sub-task for its sub-agent's request child (the
// sub-agent's own request, with its own id) and returns the error the
// sub-agent's tool returns so that the parent's turn pauses with it: the
// request namespaced with the sub-task's id (InputID
// "<subtaskId>:<child's inputId>"), its route, and, for a credential, the
// holder the client's credential is kept for (holder; empty: the child's).
// remoteTaskID names the remote task of a remote sub-agent. A child with
// a Route is a request one of the sub-agent's own calls passed up, which
// the sub-agent relays: its route becomes the new route's Inner (it must
// be this host's own, never one read off a remote agent's wire).
func (s *Subtask) PassUp(ctx context.Context, child InputRequest, remoteTaskID, holder string) error {
	s.suspend(ctx, child)
	r := child
	r.Answer = nil
	r.InputID = s.ID + ":" + child.InputID
	// child.Route: the route of a request one of the sub-agent's calls
	// passed up (set by this host's own PassUp, never read off a wire),
	// relayed further up.
	r.Route = &InputRoute{SubtaskID: s.ID, AgentID: s.AgentID, InputID: child.InputID, RemoteTaskID: remoteTaskID, Call: child.Call,
		Inner: child.Route}
	r.Call = nil // the parent's call: the loop sets it
	r.RequireUser = true
	r.Prompt = fmt.Sprintf("The sub-agent %s (task %s) asks: %s", s.AgentID, s.ID, child.Prompt)
	if child.Auth != nil {
		n := *child.Auth
		if holder != "" {
			n.Holder = holder
		}
		r.Auth = &n
	}
	return &InputRequiredError{Request: r}
}

// suspend records the sub-task as paused for child and announces it on the
// sub-task's stream (its input-required or auth-required, and its status);
// the parent's status goes back to working when none of its sub-tasks runs.
func (s *Subtask) suspend(ctx context.Context, child InputRequest) {
	if Suspended(ctx) {
		return // handed on: nothing more is written (see Finish)
	}
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return
	}
	s.done = true
	usage := s.usage
	rec := s.rec
	s.mu.Unlock()
	status := TaskWaitingInput
	if child.InputType == InputAuth {
		status = TaskWaitingAuth
	}
	if tr := s.tr; tr != nil && tr.l.subtasks != nil {
		rec.Status, rec.Reason, rec.Usage, rec.UpdatedAt = status, ReasonInput, usage, time.Now().UTC()
		rec.Message = child.Prompt
		rec.Requests = []InputRequest{child}
		if err := tr.l.subtasks.SaveTask(context.WithoutCancel(ctx), rec); err != nil {
			tr.l.log.Error("sub-task not recorded", "task_id", s.ID, "error", err.Error())
		}
	}
	if child.InputType == InputAuth {
		s.Emit(authRequiredEvent(child))
	} else {
		s.Emit(inputRequiredEvent(child))
	}
	s.Emit(&TaskStatusEvent{Header: Header{Kind: KindTaskStatus}, Status: status, Message: child.Prompt,
		Metadata: map[string]any{"reason": ReasonInput, "inputId": child.InputID, "passedUp": true}})
	s.leave(status)
}

// leave takes the sub-task off the parent's running sub-tasks.
func (s *Subtask) leave(status TaskStatus) {
	tr := s.tr
	if tr == nil {
		return
	}
	tr.subMu.Lock()
	tr.activeSubs--
	last := tr.activeSubs == 0
	tr.subMu.Unlock()
	if last {
		s.parent(&TaskStatusEvent{Header: Header{Kind: KindTaskStatus, ContextID: s.ContextID, TaskID: s.ParentTaskID},
			Status: TaskWorking, Metadata: map[string]any{"subtaskId": s.ID, "subtaskStatus": string(status)}})
	}
}

// OnPause sets what stops the sub-agent when one of its calls must wait
// for a person (a local sub-agent's run is cancelled, and runs again once
// the parent's client answered).
func (s *Subtask) OnPause(stop func()) {
	s.mu.Lock()
	s.stop = stop
	s.mu.Unlock()
}

// Paused returns the request one of the sub-agent's calls stopped for.
func (s *Subtask) Paused() (InputRequest, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pause == nil {
		return InputRequest{}, false
	}
	return *s.pause, true
}

func (s *Subtask) pauseFor(req InputRequest) {
	s.mu.Lock()
	if s.pause == nil {
		s.pause = &req
	}
	stop := s.stop
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// CoordinatorPrompt is the system message of the request that asks the
// parent's model to answer its sub-agent's request in the user's place.
const CoordinatorPrompt = "You coordinate a sub-agent. It paused to ask for input that you may give in the user's place. " +
	"Reply with the input only. For an approval, reply \"approve\" to let the call run, or \"reject: <reason>\". " +
	"For a text, reply with the text. For a client tool, reply with the tool's result."

// AnswerByModel has the parent's model answer the sub-agent's request req
// (one whose RequireUser is false): the model gets CoordinatorPrompt and
// one user message naming the sub-agent, what it was asked and its
// request; its reply is the answer (an approval: "approve"/"approved"/
// "yes" as the first word approves, anything else rejects with the reply
// as the reason; a text or a client tool's result: the reply). The request
// and the answer are announced on the sub-task's stream (input-required
// with requireUser false, then input-received by the agent) and the
// model's usage counts into the parent's turn. Credentials are never
// answered this way.
func (s *Subtask) AnswerByModel(ctx context.Context, req InputRequest) (InputAnswer, error) {
	if req.InputType == InputAuth {
		return InputAnswer{}, fmt.Errorf("%w: a credential is asked of a person, never of an agent", ErrInvalid)
	}
	if req.InputType == InputApproval || req.InputType == InputClientTool || req.InputType == InputText {
	} else {
		return InputAnswer{}, fmt.Errorf("%w: requests of type %q cannot be answered by an agent", ErrInvalid, req.InputType)
	}
	m := s.parentModel
	if m == nil {
		return InputAnswer{}, fmt.Errorf("no model to answer the sub-agent's request")
	}
	s.Emit(inputRequiredEvent(req))
	var sb strings.Builder
	fmt.Fprintf(&sb, "The sub-agent %s was asked: %s\n\nIt asks for input (%s): %s", s.AgentID, s.prompt, req.InputType, req.Prompt)
	if req.Call != nil {
		fmt.Fprintf(&sb, "\nThe call: %s %s", req.Call.Name, compactJSON(req.Call.Arguments))
	}
	mreq := &ModelRequest{Messages: []Message{
		{Role: RoleSystem, Content: CoordinatorPrompt}, {Role: RoleUser, Content: sb.String()}}}
	tr := s.tr
	if tm, ok := m.(*turnModel); ok && tm.tr == tr {
		m = tm.tr.model // held and counted here
	}
	if in, ok := m.(*subtaskModel); ok && in.s.tr == tr {
		tr = nil // a sub-agent's model: the call is held and counted there
	}
	call := ""
	if tr != nil {
		mreq.MaxTokens = tr.l.params.MaxTokens
		if tr.l.budget != nil {
			// Reserved with the check like every model call of the turn,
			// settled when it ends.
			call = s.ID + "#answer-" + req.InputID
			if err := tr.chargeSubtask(ctx, Usage{}, call, tr.tokenEstimate(mreq)); err != nil {
				return InputAnswer{}, fmt.Errorf("the coordinating model could not answer: %w: %w", ErrBudget, err)
			}
		}
	}
	resp, err := safeGenerate(ctx, m, mreq, nil)
	if err == nil && resp == nil {
		err = errors.New("it returned no response")
	}
	if tr != nil {
		var used Usage
		if err == nil {
			used = resp.Usage
		}
		_ = tr.chargeSubtask(context.WithoutCancel(ctx), used, call, 0)
	}
	if err != nil {
		return InputAnswer{}, fmt.Errorf("the coordinating model could not answer: %w", err)
	}
	reply := strings.TrimSpace(resp.Message.Content)
	a := InputAnswer{InputID: req.InputID, ProvidedBy: "agent", AgentID: s.coordinator, At: time.Now().UTC()}
	switch req.InputType {
	case InputApproval:
		word := strings.ToLower(strings.Trim(strings.SplitN(reply+" ", " ", 2)[0], ".,:;!"))
		if word == "approve" || word == "approved" || word == "yes" {
			a.Decision = DecisionApprove
		} else {
			a.Decision, a.Reason = DecisionReject, strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(reply, "reject"), ":"))
		}
	case InputText:
		if reply == "" {
			return InputAnswer{}, fmt.Errorf("the coordinating model answered nothing")
		}
		a.Text = reply
	case InputClientTool:
		a.Result = &ToolResult{Content: reply}
	}
	md := map[string]any{}
	if a.Decision != "" {
		md["decision"] = a.Decision
	}
	s.Emit(&InputReceived{Header: Header{Kind: KindInputReceived}, InputID: req.InputID, ProvidedBy: "agent",
		AgentID: a.AgentID, Metadata: md})
	return a, nil
}

func compactJSON(b json.RawMessage) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}

// routedFor returns the answer routed to a sub-agent's call that waits
// for it: the same tool with the same arguments as the call the request
// was about.
func routedFor(env *ToolEnv, call ToolCall) (InputAnswer, bool) {
	if env == nil || env.Routed == nil || env.Routed.Request.Route == nil || env.Routed.Request.Route.Call == nil {
		return InputAnswer{}, false
	}
	rc := env.Routed.Request.Route.Call
	if rc.Name != call.Name || compactJSON(rc.Arguments) != compactJSON(call.Arguments) {
		return InputAnswer{}, false
	}
	return env.Routed.Answer, true
}
