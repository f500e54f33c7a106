package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// gateOn needs an approval for the named tools.
func gateOn(names ...string) loop.ApprovalGate {
	return func(_ context.Context, _ *loop.Turn, c loop.ToolCall) *loop.InputRequest {
		for _, n := range names {
			if c.Name == n {
				return &loop.InputRequest{RequireUser: true}
			}
		}
		return nil
	}
}

// A call that needs an approval never runs in the turn that asks for it;
// the other calls of the same response do; the turn ends waiting for input
// with the request, announced before the status.
func TestApprovalGateHoldsTheCall(t *testing.T) {
	var ran atomic.Int64
	tools := toolsMap{"danger": func(context.Context, loop.ToolCall, *loop.ToolEnv) (loop.ToolResult, error) {
		ran.Add(1)
		return loop.ToolResult{Content: "done"}, nil
	}, "echo": echoTool}
	m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		return calls(call("c1", "danger", `{"x":1}`), call("c2", "echo", `{"text":"hi"}`)), nil
	}}
	l := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{tools}, Approval: gateOn("danger")})
	rec := &recorder{}
	out := l.Run(context.Background(), userTurn("go", rec))
	if out.Status != loop.TaskWaitingInput || out.Reason != loop.ReasonInput || ran.Load() != 0 {
		t.Fatalf("outcome %s/%s, danger ran %d times", out.Status, out.Reason, ran.Load())
	}
	if len(out.Requests) != 1 || out.Requests[0].InputID != "approval:c1" || out.Requests[0].InputType != loop.InputApproval ||
		out.Requests[0].Call == nil || out.Requests[0].Call.Name != "danger" {
		t.Fatalf("requests = %+v", out.Requests)
	}
	if len(out.PendingCalls) != 1 || out.PendingCalls[0].ID != "c1" {
		t.Fatalf("pending = %+v", out.PendingCalls)
	}
	kinds := rec.kinds()
	ir, st := -1, -1
	for i, k := range kinds {
		if k == loop.KindInputRequired && ir < 0 {
			ir = i
		}
		if k == loop.KindTaskStatus {
			st = i
		}
	}
	if ir < 0 || ir > st || rec.count(loop.KindToolComplete) != 1 {
		t.Fatalf("events %v: want the echo's tool-complete and input-required before the final status", kinds)
	}
}

// The next turn settles the answered calls before the model: an approved
// call runs once, with edited arguments when given, without asking again;
// a rejected one never runs and the model reads the reason.
func TestContinueSettlesAnsweredCalls(t *testing.T) {
	var got []string
	tools := toolsMap{"danger": func(_ context.Context, c loop.ToolCall, _ *loop.ToolEnv) (loop.ToolResult, error) {
		got = append(got, string(c.Arguments))
		return loop.ToolResult{Content: "ran " + string(c.Arguments)}, nil
	}}
	m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		return text("ok"), nil
	}}
	l := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{tools}, Approval: gateOn("danger")})
	c1, c2 := call("c1", "danger", `{"x":1}`), call("c2", "danger", `{"x":2}`)
	turn := loop.Turn{ContextID: "ctx-1", TaskID: "task-1", Sink: &recorder{},
		Messages: []loop.Message{{Role: loop.RoleUser, Content: "go"}, {Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{c1, c2}}},
		Continue: []loop.ToolCall{c1, c2},
		Answers: map[string]loop.InputAnswer{
			"c1": {InputID: "approval:c1", Decision: loop.DecisionApprove, Arguments: json.RawMessage(`{"x":0}`)},
			"c2": {InputID: "approval:c2", Decision: loop.DecisionReject, Reason: "not today"}}}
	out := l.Run(context.Background(), turn)
	if out.Status != loop.TaskCompleted {
		t.Fatalf("outcome %s: %v", out.Status, out.Err)
	}
	if len(got) != 1 || got[0] != `{"x":0}` {
		t.Fatalf("danger ran with %q, want once with the edited arguments", got)
	}
	seen := m.seen[0]
	var results []string
	for _, msg := range seen {
		if msg.Role == loop.RoleTool {
			results = append(results, msg.ToolCallID+"="+msg.Content)
		}
	}
	if len(results) != 2 || !strings.HasPrefix(results[0], "c1=ran") || !strings.Contains(results[1], "not today") {
		t.Fatalf("the model saw %q", results)
	}
}

// A sub-agent (a tool calling the turn's tools) cannot run a call that
// needs an approval: it is refused, never run.
func TestSubAgentCannotBypassApproval(t *testing.T) {
	var ran atomic.Int64
	var sub loop.ToolResult
	tools := toolsMap{
		"danger": func(context.Context, loop.ToolCall, *loop.ToolEnv) (loop.ToolResult, error) {
			ran.Add(1)
			return loop.ToolResult{Content: "done"}, nil
		},
		"delegate": func(ctx context.Context, _ loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
			r, err := env.Tools.Call(ctx, call("inner", "danger", `{}`), env)
			sub = r
			return r, err
		}}
	m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		if n == 1 {
			return calls(call("c1", "delegate", `{}`)), nil
		}
		return text("ok"), nil
	}}
	l := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{tools}, Approval: gateOn("danger")})
	out := l.Run(context.Background(), userTurn("go", &recorder{}))
	if out.Status != loop.TaskCompleted || ran.Load() != 0 || !sub.IsError || !strings.Contains(sub.Content, "approval") {
		t.Fatalf("outcome %s, danger ran %d times, sub-agent got %+v", out.Status, ran.Load(), sub)
	}
}

// Answers are checked whole before anything is recorded.
func TestAnswerChecksBeforeRecording(t *testing.T) {
	now := time.Now()
	base := loop.TaskRecord{ID: "t", Status: loop.TaskWaitingInput, Requests: []loop.InputRequest{
		{InputID: "approval:a", InputType: loop.InputApproval, Call: &loop.ToolCall{ID: "a", Name: "x"}},
		{InputID: "approval:b", InputType: loop.InputApproval, Call: &loop.ToolCall{ID: "b", Name: "x"},
			ExpiresAt: now.Add(-time.Second)},
		{InputID: "client-tool:c", InputType: loop.InputClientTool, Call: &loop.ToolCall{ID: "c", Name: "y"}},
	}}
	for name, answers := range map[string][]loop.InputAnswer{
		"unknown":        {{InputID: "approval:zz", Decision: loop.DecisionApprove}},
		"expired":        {{InputID: "approval:b", Decision: loop.DecisionApprove}},
		"twice":          {{InputID: "approval:a", Decision: loop.DecisionApprove}, {InputID: "approval:a", Decision: loop.DecisionReject}},
		"bad decision":   {{InputID: "approval:a", Decision: "sure"}},
		"edits refused":  {{InputID: "approval:a", Decision: loop.DecisionApprove, Arguments: json.RawMessage(`{"x":1}`)}},
		"no result":      {{InputID: "client-tool:c"}},
		"one bad of two": {{InputID: "client-tool:c", Result: &loop.ToolResult{Content: "r"}}, {InputID: "approval:zz"}},
	} {
		rec := base
		if _, err := rec.Answer(answers, now); !errors.Is(err, loop.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
		if len(rec.OpenRequests()) != 3 {
			t.Errorf("%s: a refused answer was recorded", name)
		}
	}
	rec := base
	complete, err := rec.Answer([]loop.InputAnswer{{InputID: "approval:a", Decision: loop.DecisionApprove}}, now)
	if err != nil || complete || len(rec.OpenRequests()) != 2 || len(base.OpenRequests()) != 3 {
		t.Fatalf("partial answer: %v, complete %v, open %d (original %d)", err, complete, len(rec.OpenRequests()), len(base.OpenRequests()))
	}
	if _, err := rec.Answer([]loop.InputAnswer{{InputID: "approval:a", Decision: loop.DecisionReject}}, now); !errors.Is(err, loop.ErrInvalid) {
		t.Fatalf("a decision was changed: %v", err)
	}
	done := base
	done.Status = loop.TaskCompleted
	if _, err := done.Answer([]loop.InputAnswer{{InputID: "approval:a", Decision: loop.DecisionApprove}}, now); !errors.Is(err, loop.ErrInvalid) {
		t.Fatalf("an answer to a finished task: %v", err)
	}
}

// A request a person must answer (requireUser) refuses an answer that says
// an agent gave it; one an agent may answer takes it.
func TestAnswerProvidedByAgentWhereAPersonMustAnswer(t *testing.T) {
	now := time.Now()
	base := loop.TaskRecord{ID: "t", Status: loop.TaskWaitingInput, Requests: []loop.InputRequest{
		{InputID: "approval:a", InputType: loop.InputApproval, RequireUser: true, Call: &loop.ToolCall{ID: "a", Name: "x"}},
		{InputID: "approval:b", InputType: loop.InputApproval, Call: &loop.ToolCall{ID: "b", Name: "x"}},
	}}
	rec := base
	_, err := rec.Answer([]loop.InputAnswer{{InputID: "approval:a", Decision: loop.DecisionApprove, ProvidedBy: "agent", AgentID: "bot"}}, now)
	if !errors.Is(err, loop.ErrInvalid) || !strings.Contains(err.Error(), "requireUser") || len(rec.OpenRequests()) != 2 {
		t.Fatalf("an agent's answer to a requireUser request: %v, open %d", err, len(rec.OpenRequests()))
	}
	if _, err := rec.Answer([]loop.InputAnswer{{InputID: "approval:b", Decision: loop.DecisionApprove, ProvidedBy: "agent"},
		{InputID: "approval:a", Decision: loop.DecisionApprove, ProvidedBy: "user", UserID: "alice"}}, now); err != nil {
		t.Fatalf("a person's answer, and an agent's where one may answer: %v", err)
	}
}
