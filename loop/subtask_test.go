package loop_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// goAgent is a sub-agent written in Go: it opens its sub-task, asks the
// lent model (rounds times, each answer then a call of the lent tool
// "echo"), and answers with the model's last text.
func goAgent(rounds int) func(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	return func(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
		st, err := env.StartSubtask(ctx, loop.SubtaskSpec{AgentID: "helper", Prompt: string(c.Arguments)})
		if err != nil {
			return loop.ToolResult{IsError: true, Content: err.Error()}, nil
		}
		sub := st.Env()
		last := ""
		for i := range rounds {
			resp, err := sub.Model.Generate(ctx, &loop.ModelRequest{Messages: []loop.Message{
				{Role: loop.RoleUser, Content: fmt.Sprintf("sub round %d", i)}}}, nil)
			if err != nil {
				st.Finish(ctx, loop.TaskFailed, "", err)
				return loop.ToolResult{IsError: true, Content: "helper: " + err.Error()}, nil
			}
			last = resp.Message.Content
			if _, err := sub.Tools.Call(ctx, loop.ToolCall{ID: fmt.Sprintf("h%d", i), Name: "echo",
				Arguments: []byte(`{"n":1}`)}, sub); err != nil {
				st.Finish(ctx, loop.TaskFailed, "", err)
				return loop.ToolResult{}, err
			}
		}
		st.Finish(ctx, loop.TaskCompleted, last, nil)
		return loop.ToolResult{Content: "helper says " + last}, nil
	}
}

// subModel answers the parent (first call: a call of "helper"; after the
// tool result: a final text) and the sub-agent (its rounds, with text
// streamed and a thought), each with its own usage.
func subModel() *fakeModel {
	return &fakeModel{fn: func(n int, req *loop.ModelRequest, onDelta func(loop.Delta)) (*loop.ModelResponse, error) {
		first := req.Messages[len(req.Messages)-1]
		switch {
		case strings.HasPrefix(first.Content, "sub round"):
			if onDelta != nil {
				onDelta(loop.Delta{Thought: "thinking about " + first.Content})
				onDelta(loop.Delta{Content: "part of " + first.Content})
			}
			return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "answer to " + first.Content},
				FinishReason: loop.FinishStop, Usage: loop.Usage{PromptTokens: 100, CompletionTokens: 50, TotalTokens: 150}}, nil
		case first.Role == loop.RoleTool:
			return text("done: " + first.Content), nil
		}
		return calls(call("c1", "helper", `"look it up"`)), nil
	}}
}

func TestSubtaskLifecycle(t *testing.T) {
	mem := store.NewMemory(store.MemoryOptions{})
	t.Cleanup(func() { mem.Close() })
	m := subModel()
	l := newLoop(t, loop.Config{Model: m, Subtasks: mem,
		Toolsets: []loop.Toolset{toolsMap{"helper": goAgent(2), "echo": echoTool}}})
	rec := &recorder{}
	turn := userTurn("go", rec)
	turn.Owner = "alice"
	out := l.Run(context.Background(), turn)
	if out.Status != loop.TaskCompleted || out.Content != "done: helper says answer to sub round 1" {
		t.Fatalf("outcome %+v (err %v)", out, out.Err)
	}
	child := loop.SubtaskID("task-1", "c1")
	// Usage: the parent's two calls (15 + 12) and the child's two (150 each).
	if out.Usage.TotalTokens != 15+12+300 || out.Usage.PromptTokens != 10+10+200 {
		t.Errorf("turn usage %+v: want the child's 300 tokens counted in", out.Usage)
	}
	if len(out.Subtasks) != 1 || out.Subtasks[0] != child {
		t.Errorf("outcome sub-tasks %v, want [%s]", out.Subtasks, child)
	}

	// The events, in order, with the task each belongs to.
	var got []string
	for _, e := range rec.events {
		h := e.Head()
		if h.Kind.Internal() {
			continue
		}
		if th, ok := e.(*loop.ThoughtStream); ok && th.Metadata["source"] == "loop" {
			continue // the loop's own thoughts are tested in thought_test.go
		}
		who := "parent"
		switch {
		case h.TaskID == child && h.ParentTaskID == "task-1":
			who = "child"
		case h.TaskID != "task-1" || h.ParentTaskID != "":
			t.Errorf("%s event with task %q, parent %q", h.Kind, h.TaskID, h.ParentTaskID)
		}
		s := who + " " + string(h.Kind)
		switch v := e.(type) {
		case *loop.TaskStatusEvent:
			s += " " + string(v.Status)
		case *loop.TaskCreated:
			s += " " + v.Initiator + " " + v.AgentID
		case *loop.SubtaskCreated:
			s += " " + v.SubtaskID + " " + v.AgentID
		case *loop.ToolStart:
			s += " " + v.ToolName + " " + v.ToolCallID
		case *loop.TaskComplete:
			s += fmt.Sprintf(" %s %d", v.Status, v.Usage.TotalTokens)
		}
		got = append(got, s)
	}
	var round []string
	for i := range 2 {
		round = append(round, "child thought-stream", "child content-delta", "child content-complete",
			fmt.Sprintf("child tool-start echo c1>h%d", i), "child tool-complete")
	}
	want := append([]string{
		"parent task-created user ", "parent task-status working",
		"parent tool-start helper c1",
		"parent subtask-created " + child + " helper",
		"parent task-status waiting-subtask",
		"child task-created agent helper",
		"child task-status working",
	}, round...)
	want = append(want,
		"child task-status completed",
		"child task-complete completed 300",
		"parent task-status working",
		"parent tool-complete",
		"parent content-complete",
		"parent task-status completed",
		fmt.Sprintf("parent task-complete completed %d", 15+12+300),
	)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The child's text: each of its model calls a response of its own,
	// named in the child's task, its deltas and its complete text sharing
	// the name, the complete text counting the deltas.
	var names []string
	for _, e := range rec.events {
		switch v := e.(type) {
		case *loop.ContentDelta:
			if v.TaskID == child {
				names = append(names, "delta "+v.Response)
			}
		case *loop.ContentComplete:
			if v.TaskID == child {
				names = append(names, fmt.Sprintf("complete %s %d", v.Response, v.Deltas))
			}
		}
	}
	if strings.Join(names, ", ") != "delta 1, complete 1 1, delta 2, complete 2 1" {
		t.Errorf("the child's responses: %v", names)
	}

	// The sub-task's record: the parent's owner, its parent, its outcome.
	r, err := mem.LoadTaskOf(context.Background(), child, "alice")
	if err != nil {
		t.Fatalf("sub-task record for its owner: %v", err)
	}
	if r.ParentTaskID != "task-1" || r.Status != loop.TaskCompleted || r.Content != "answer to sub round 1" ||
		r.Usage.TotalTokens != 300 || r.AgentID != "helper" || r.Iterations != 2 {
		t.Errorf("sub-task record %+v", r)
	}
	if _, err := mem.LoadTaskOf(context.Background(), child, "mallory"); !errors.Is(err, loop.ErrNotFound) {
		t.Errorf("sub-task for another principal: %v, want not found", err)
	}
}

// A sub-agent that burns tokens trips its parent's budget: its next model
// call is refused, and the parent's turn ends failed with reason budget.
func TestSubtaskUsageTripsParentBudget(t *testing.T) {
	mem := store.NewMemory(store.MemoryOptions{})
	t.Cleanup(func() { mem.Close() })
	m := subModel()
	const limit = 200 // the parent's first call (15) and one child call (150) pass; the second child call does not
	var reports []int
	l := newLoop(t, loop.Config{Model: m, Subtasks: mem,
		Toolsets: []loop.Toolset{toolsMap{"helper": goAgent(5), "echo": echoTool}},
		Budget: func(_ context.Context, _ *loop.Turn, u loop.TurnUsage) error {
			reports = append(reports, u.TotalTokens)
			if !u.Final && u.TotalTokens >= limit {
				return fmt.Errorf("token limit of %d reached", limit)
			}
			return nil
		}})
	rec := &recorder{}
	out := l.Run(context.Background(), userTurn("go", rec))
	if out.Status != loop.TaskFailed || out.Reason != loop.ReasonBudget {
		t.Fatalf("outcome %s/%s (%v), want failed by budget", out.Status, out.Reason, out.Err)
	}
	// Model calls: the parent's first, the child's first and second (whose
	// answer crosses the limit); the child's third is refused before the
	// model is called, and so is the parent's next.
	if m.Calls() != 3 {
		t.Errorf("model called %d times, want 3 (budget reports %v)", m.Calls(), reports)
	}
	if out.Usage.TotalTokens != 15+300 {
		t.Errorf("turn usage %d, want %d", out.Usage.TotalTokens, 15+300)
	}
	r, err := mem.LoadTask(context.Background(), loop.SubtaskID("task-1", "c1"))
	if err != nil || r.Status != loop.TaskFailed || r.Reason != loop.ReasonBudget || !strings.Contains(r.Message, "token limit") {
		t.Errorf("sub-task record %+v (%v): want failed by the parent's budget", r, err)
	}
}
