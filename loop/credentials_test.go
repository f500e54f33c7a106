package loop_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// profileTool needs a credential of "svc": it answers with the token's
// length once it has it, and asks for it otherwise.
func profileTool(runs *atomic.Int64) toolsMap {
	return toolsMap{"profile": func(_ context.Context, _ loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
		runs.Add(1)
		tok, ok := env.Credentials.Get(env.TaskID, "tool:profile", "svc")
		if !ok {
			return loop.ToolResult{}, &loop.AuthRequiredError{Need: loop.AuthNeed{Provider: "svc", Scopes: []string{"read"},
				AuthURL: "https://svc.example.test/auth"}}
		}
		return loop.ToolResult{Content: "profile with a token of " + strings.Repeat("x", len(tok))}, nil
	}}
}

// A tool that lacks a credential pauses the turn in waiting-auth with an
// auth request (announced as auth-required, never input-required); the
// journal says the call did not act, so a turn resumed without the
// credential (a restart lost it) runs the call again and asks again instead
// of replaying or skipping it; with the credential, the call runs and
// auth-completed is announced. No event carries the token, and another
// task never gets it.
func TestAuthRequiredPausesAndAsksAgainAfterRestart(t *testing.T) {
	const token = "tok-9f8e7d6c5b4a-secret"
	var runs atomic.Int64
	j := store.NewMemory(store.MemoryOptions{})
	t.Cleanup(func() { j.Close() })
	m := &fakeModel{fn: func(n int, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		last := req.Messages[len(req.Messages)-1]
		if last.Role == loop.RoleTool {
			return text("done: " + last.Content), nil
		}
		return calls(call("c1", "profile", `{}`)), nil
	}}
	newL := func(creds *loop.Credentials) *loop.Loop {
		return newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{profileTool(&runs)}, Journal: j, Credentials: creds})
	}
	ctx := context.Background()

	rec := &recorder{}
	out := newL(loop.NewCredentials()).Run(ctx, userTurn("go", rec))
	if out.Status != loop.TaskWaitingAuth || out.Reason != loop.ReasonAuth || len(out.Requests) != 1 {
		t.Fatalf("outcome %s/%s with %d requests, want waiting-auth with one", out.Status, out.Reason, len(out.Requests))
	}
	r := out.Requests[0]
	if r.InputID != "auth:c1" || r.InputType != loop.InputAuth || r.Auth == nil || r.Auth.Provider != "svc" ||
		r.Auth.Holder != "tool:profile" || r.Auth.AuthURL == "" || r.Call == nil || r.Call.Name != "profile" {
		t.Fatalf("request = %+v (auth %+v)", r, r.Auth)
	}
	if rec.count(loop.KindAuthRequired) != 1 || rec.count(loop.KindInputRequired) != 0 {
		t.Fatalf("events %v: want one auth-required and no input-required", rec.kinds())
	}
	entries, err := j.Calls(ctx, "task-1")
	if err != nil || len(entries) != 1 || entries[0].State != loop.CallCompleted {
		t.Fatalf("journal = %+v, %v", entries, err)
	}

	// The client answered; the host died before the call had its
	// credential: the resumed turn (no checkpoint, the journal read) runs
	// the call again and asks again.
	answered := func(creds *loop.Credentials, sink loop.EventSink, taskID string) loop.Outcome {
		c1 := call("c1", "profile", `{}`)
		return newL(creds).Run(ctx, loop.Turn{ContextID: "ctx-1", TaskID: taskID, Sink: sink,
			Messages: []loop.Message{{Role: loop.RoleUser, Content: "go"}, {Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{c1}}},
			Resume:   &loop.Checkpoint{TaskID: taskID, ContextID: "ctx-1", Iteration: 1, Stage: loop.StageModel},
			Continue: []loop.ToolCall{c1},
			Answers:  map[string]loop.InputAnswer{"c1": {InputID: "auth:c1", ProvidedBy: "user"}}})
	}
	before := runs.Load()
	out = answered(loop.NewCredentials(), &recorder{}, "task-1")
	if out.Status != loop.TaskWaitingAuth || runs.Load() != before+1 {
		t.Fatalf("resumed without the credential: %s after %d runs, want waiting-auth after one more run", out.Status, runs.Load()-before)
	}

	// Another task's credential is not this one's.
	other := loop.NewCredentials()
	other.Put("task-2", "tool:profile", "svc", token, time.Minute)
	if out = answered(other, &recorder{}, "task-1"); out.Status != loop.TaskWaitingAuth {
		t.Fatalf("task-1 ran with task-2's credential: %s", out.Status)
	}
	// Nor another holder's.
	other.Put("task-1", "plugin:someone-else", "svc", token, time.Minute)
	if out = answered(other, &recorder{}, "task-1"); out.Status != loop.TaskWaitingAuth {
		t.Fatalf("the tool got another holder's credential: %s", out.Status)
	}

	// With the credential: the call runs, the turn completes.
	creds := loop.NewCredentials()
	creds.Put("task-1", "tool:profile", "svc", token, time.Minute)
	rec = &recorder{}
	out = answered(creds, rec, "task-1")
	if out.Status != loop.TaskCompleted || !strings.Contains(out.Content, "profile with a token of "+strings.Repeat("x", len(token))) {
		t.Fatalf("with the credential: %s %q %v", out.Status, out.Content, out.Err)
	}
	if rec.count(loop.KindAuthCompleted) != 1 {
		t.Fatalf("events %v: want auth-completed", rec.kinds())
	}
	for _, e := range rec.events {
		b, _ := json.Marshal(e)
		if strings.Contains(string(b), token) {
			t.Fatalf("event %s carries the token: %s", e.Head().Kind, b)
		}
	}
	creds.Forget("task-1")
	if _, ok := creds.Get("task-1", "tool:profile", "svc"); ok || creds.Len() != 0 {
		t.Fatal("Forget left the task's credential")
	}
}

// An auth answer takes nothing but its input id: the credential never
// reaches the recorded answer.
func TestAuthAnswerTakesNoOtherField(t *testing.T) {
	rec := loop.TaskRecord{ID: "t", Status: loop.TaskWaitingAuth, Requests: []loop.InputRequest{
		{InputID: "auth:c1", InputType: loop.InputAuth, Auth: &loop.AuthNeed{Provider: "svc"}}}}
	if _, err := rec.Answer([]loop.InputAnswer{{InputID: "auth:c1", Text: "tok"}}, time.Now()); err == nil {
		t.Fatal("an auth answer with a text was accepted")
	}
	complete, err := rec.Answer([]loop.InputAnswer{{InputID: "auth:c1"}}, time.Now())
	if err != nil || !complete {
		t.Fatalf("a bare auth answer: complete %v, %v", complete, err)
	}
}
