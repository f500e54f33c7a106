package taskrt

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

// abandonTools: the local sub-agent outer calls the local sub-agent mid,
// whose call of the remote agent peer (remote task remote-1) passes an
// approval up. Run again with the client's answer, outer calls mid again
// under the same call id with other arguments ({"v":2}), and mid then
// answers without calling peer, noting the state of its old call's
// sub-task as it starts.
type abandonTools struct {
	tasks loop.TaskStore

	mu       sync.Mutex
	canceled []string
	seen     loop.TaskStatus
}

func (*abandonTools) Tools(context.Context) ([]loop.ToolDefinition, error) {
	return []loop.ToolDefinition{{Name: "outer"}, {Name: "mid"}, {Name: "peer"}}, nil
}

func (a *abandonTools) Call(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	st, err := env.StartSubtask(ctx, loop.SubtaskSpec{AgentID: c.Name, Prompt: string(c.Arguments), CallID: c.ID})
	if err != nil {
		return loop.ToolResult{}, err
	}
	sub := st.Env()
	var next *loop.ToolCall
	switch {
	case c.Name == "outer" && env.Routed == nil:
		next = &loop.ToolCall{ID: "m1", Name: "mid", Arguments: json.RawMessage(`{"v":1}`)}
	case c.Name == "outer":
		next = &loop.ToolCall{ID: "m1", Name: "mid", Arguments: json.RawMessage(`{"v":2}`)}
	case c.Name == "mid" && string(c.Arguments) == `{"v":1}`:
		next = &loop.ToolCall{ID: "p1", Name: "peer", Arguments: json.RawMessage(`{}`)}
	case c.Name == "mid":
		rec, err := a.tasks.LoadTask(ctx, loop.SubtaskID(st.ID, c.ID+">p1"))
		if err != nil {
			return loop.ToolResult{}, err
		}
		a.mu.Lock()
		a.seen = rec.Status
		a.mu.Unlock()
		st.Finish(ctx, loop.TaskCompleted, "mid did not ask peer", nil)
		return loop.ToolResult{Content: "mid did not ask peer"}, nil
	default: // peer
		if err := st.Note(ctx, map[string]any{loop.RemoteTaskKey: "remote-1"}); err != nil {
			return loop.ToolResult{}, err
		}
		return loop.ToolResult{}, st.PassUp(ctx, loop.InputRequest{InputID: "approval:p", InputType: loop.InputApproval,
			Prompt: "approve", RequireUser: true}, "remote-1", "")
	}
	res, err := sub.Tools.Call(ctx, *next, sub)
	if req, paused := st.Paused(); paused && ctx.Err() == nil {
		return loop.ToolResult{}, st.PassUp(ctx, req, "", "")
	}
	if err != nil {
		st.Finish(ctx, loop.TaskFailed, "", err)
		return loop.ToolResult{}, err
	}
	st.Finish(ctx, loop.TaskCompleted, res.Content, nil)
	return loop.ToolResult{Content: res.Content}, nil
}

func (a *abandonTools) CancelRemoteTask(_ context.Context, agentID, remoteTaskID string) (bool, error) {
	if agentID != "peer" {
		return false, nil
	}
	a.mu.Lock()
	a.canceled = append(a.canceled, remoteTaskID)
	a.mu.Unlock()
	return true, nil
}

// outerModel calls outer once, then answers with what it said.
type outerModel struct{}

func (outerModel) Generate(_ context.Context, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
	if last := req.Messages[len(req.Messages)-1]; last.Role == loop.RoleTool {
		return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "outer said: " + last.Content},
			FinishReason: loop.FinishStop}, nil
	}
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant,
		ToolCalls: []loop.ToolCall{{ID: "c1", Name: "outer", Arguments: json.RawMessage(`{}`)}}}, FinishReason: loop.FinishToolCalls}, nil
}

// A local sub-agent run again with the answer to a request relayed from
// two levels down calls its own sub-agent again under the same call id
// with other arguments: when that call starts over, what waited below
// the old call (the sub-task of its call of the remote agent, and the
// remote task) has already ended canceled, before the new call runs and
// whatever it does. Fails without: that sub-task is still waiting-input
// when the call starts (only the turn's end would end it).
func TestCallAgainWithOtherArgumentsEndsWhatWaitedBelow(t *testing.T) {
	t.Parallel()
	tools := &abandonTools{}
	h := newHarness(t, t.TempDir(), outerModel{}, func(c *Config) {
		l, err := loop.New(loop.Config{Model: outerModel{}, Toolsets: []loop.Toolset{tools},
			Checkpoints: c.Stores.Checkpoints, Journal: c.Stores.Journal, Subtasks: c.Stores.Tasks})
		if err != nil {
			t.Fatal(err)
		}
		c.Loop = l
		tools.tasks = c.Stores.Tasks
	})
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	st, err := h.rt.Start(ctx, StartRequest{Auth: alice(), Message: user("go")})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.rt.Wait(ctx, st.Run); err != nil {
		t.Fatal(err)
	}
	rec, err := h.db.LoadTask(ctx, st.Task.ID)
	if err != nil || rec.Status != loop.TaskWaitingInput || len(rec.OpenRequests()) != 1 {
		t.Fatalf("task after its first turn: %s %+v (%v), want waiting-input on the relayed request", rec.Status, rec.Requests, err)
	}
	mid := loop.SubtaskID(loop.SubtaskID(rec.ID, "c1"), "c1>m1")
	low := loop.SubtaskID(mid, "c1>m1>p1")
	if sub, err := h.db.LoadTask(ctx, low); err != nil || sub.Status != loop.TaskWaitingInput {
		t.Fatalf("the remote call's sub-task: %s (%v), want waiting-input", sub.Status, err)
	}
	st, err = h.rt.Start(ctx, StartRequest{Auth: alice(), TaskID: rec.ID,
		Answers: []loop.InputAnswer{{InputID: rec.OpenRequests()[0].InputID, Decision: loop.DecisionApprove}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.rt.Wait(ctx, st.Run); err != nil {
		t.Fatal(err)
	}
	done, err := h.db.LoadTask(ctx, rec.ID)
	if err != nil || done.Status != loop.TaskCompleted {
		t.Fatalf("task after the answer: %s (%v), want completed", done.Status, err)
	}
	tools.mu.Lock()
	seen, canceled := tools.seen, append([]string(nil), tools.canceled...)
	tools.mu.Unlock()
	if seen != loop.TaskCanceled || len(canceled) != 1 || canceled[0] != "remote-1" {
		t.Fatalf("when mid's call started over: its old call's sub-task was %q, remote tasks canceled %q; want canceled, [remote-1]",
			seen, canceled)
	}
	if rec, err := h.db.LoadTask(ctx, low); err != nil || rec.Status != loop.TaskCanceled {
		t.Fatalf("the remote call's sub-task at the end: %s (%v), want canceled", rec.Status, err)
	}
}
