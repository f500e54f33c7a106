package loop_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

// What a request asks for cannot make its reservation wrap around: a
// plugin's maxTokens of 2^31 or 2^63-1 is reckoned at MaxEstimateTokens
// (before, 2^63-1 plus the prompt wrapped to a negative reservation, which
// holds nothing), a negative one at the default, a huge prompt at 4 bytes
// a token up to the bound.
func TestEstimateTokensBounded(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 40<<20) // 40 MiB of prompt
	for _, tc := range []struct {
		name      string
		maxTokens int
		prompt    string
		want      int
	}{
		{"unset", 0, "abcd", 4096 + 1 + 1},
		{"negative", -5, "abcd", 4096 + 1 + 1},
		{"most negative", math.MinInt64, "", 4096 + 1},
		{"2^31", 1 << 31, "abcd", loop.MaxEstimateTokens},
		{"2^63-1", math.MaxInt64, "abcd", loop.MaxEstimateTokens},
		{"huge prompt", 100, big, 100 + len(big)/4 + 1},
	} {
		req := &loop.ModelRequest{MaxTokens: tc.maxTokens, Messages: []loop.Message{{Role: loop.RoleUser, Content: tc.prompt}}}
		if got := loop.EstimateTokens(req, loop.DefaultReserveTokens); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A sub-agent's model calls are reserved like the turn's own: before each,
// a report names the call (TurnUsage.Call) and holds what it may use
// (PendingTokens, with the sub-agent's own maxTokens: here 2^63-1, held at
// the bound, not wrapped around), and after it a report naming the same
// call settles it with what it used. Before, a sub-agent's call reserved
// nothing: its check and its count were apart.
func TestSubAgentModelCallsAreReserved(t *testing.T) {
	t.Parallel()
	m := subModel()
	var mu sync.Mutex
	var seen []loop.TurnUsage
	agent := func(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
		st, err := env.StartSubtask(ctx, loop.SubtaskSpec{AgentID: "helper", Prompt: "p"})
		if err != nil {
			return loop.ToolResult{IsError: true, Content: err.Error()}, nil
		}
		resp, err := st.Env().Model.Generate(ctx, &loop.ModelRequest{MaxTokens: math.MaxInt64,
			Messages: []loop.Message{{Role: loop.RoleUser, Content: "sub round 0"}}}, nil)
		if err != nil {
			st.Finish(ctx, loop.TaskFailed, "", err)
			return loop.ToolResult{IsError: true, Content: err.Error()}, nil
		}
		st.Finish(ctx, loop.TaskCompleted, resp.Message.Content, nil)
		return loop.ToolResult{Content: resp.Message.Content}, nil
	}
	l := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{toolsMap{"helper": agent}},
		Budget: func(_ context.Context, _ *loop.Turn, u loop.TurnUsage) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, u)
			return nil
		}})
	out := l.Run(context.Background(), userTurn("go", &recorder{}))
	if out.Status != loop.TaskCompleted {
		t.Fatalf("outcome %s (%v)", out.Status, out.Err)
	}
	mu.Lock()
	defer mu.Unlock()
	var hold, settle *loop.TurnUsage
	for i, u := range seen {
		if u.Call == "" {
			continue
		}
		switch {
		case hold == nil:
			hold = &seen[i]
		case settle == nil:
			settle = &seen[i]
		default:
			t.Fatalf("a third report names a sub-agent's call: %+v", seen)
		}
	}
	if hold == nil || settle == nil || hold.Call != settle.Call || !strings.HasPrefix(hold.Call, loop.SubtaskID("task-1", "c1")+"#") {
		t.Fatalf("reports %+v: want one reserving the sub-agent's call and one settling it, both naming it", seen)
	}
	if hold.PendingTokens != loop.MaxEstimateTokens || settle.PendingTokens != 0 || settle.TotalTokens-hold.TotalTokens != 150 {
		t.Fatalf("reserved %+v, settled %+v: want the bound held, then the call's 150 tokens counted", *hold, *settle)
	}
}

// A sub-agent run by a sub-agent calls the model through its parent's
// sub-agent: the call is reserved once and its tokens count into the turn
// once, and into both sub-tasks. Before, each level checked and counted
// it: the turn counted a nested call's tokens twice.
func TestNestedSubAgentCallCountedOnce(t *testing.T) {
	t.Parallel()
	m := subModel()
	var mu sync.Mutex
	holds := 0
	var subs []*loop.Subtask
	var tools toolsMap
	agent := func(name, next string) func(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
		return func(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
			st, err := env.StartSubtask(ctx, loop.SubtaskSpec{AgentID: name, Prompt: "p", CallID: name})
			if err != nil {
				return loop.ToolResult{IsError: true, Content: err.Error()}, nil
			}
			mu.Lock()
			subs = append(subs, st)
			mu.Unlock()
			sub := st.Env()
			var content string
			if next != "" {
				res, err := sub.Tools.Call(ctx, loop.ToolCall{ID: next, Name: next}, sub)
				if err != nil {
					return loop.ToolResult{}, err
				}
				content = res.Content
			} else {
				resp, err := sub.Model.Generate(ctx, &loop.ModelRequest{MaxTokens: 10,
					Messages: []loop.Message{{Role: loop.RoleUser, Content: "sub round 0"}}}, nil)
				if err != nil {
					st.Finish(ctx, loop.TaskFailed, "", err)
					return loop.ToolResult{IsError: true, Content: err.Error()}, nil
				}
				content = resp.Message.Content
			}
			st.Finish(ctx, loop.TaskCompleted, content, nil)
			return loop.ToolResult{Content: content}, nil
		}
	}
	tools = toolsMap{"helper": agent("helper", "inner"), "inner": agent("inner", "")}
	l := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{tools},
		Budget: func(_ context.Context, _ *loop.Turn, u loop.TurnUsage) error {
			mu.Lock()
			defer mu.Unlock()
			if u.PendingTokens > 0 && u.Call != "" {
				holds++
			}
			return nil
		}})
	out := l.Run(context.Background(), userTurn("go", &recorder{}))
	if out.Status != loop.TaskCompleted {
		t.Fatalf("outcome %s (%v)", out.Status, out.Err)
	}
	mu.Lock()
	defer mu.Unlock()
	// The parent's two calls (15 + 12) and the nested call (150), once.
	if out.Usage.TotalTokens != 15+12+150 || holds != 1 {
		t.Fatalf("turn usage %d, %d reservations of sub-agents' calls; want %d and 1", out.Usage.TotalTokens, holds, 15+12+150)
	}
	for _, st := range subs {
		if st.Usage().TotalTokens != 150 {
			t.Fatalf("sub-task %s used %d, want the nested call's 150", st.ID, st.Usage().TotalTokens)
		}
	}
}

// The parent's model answering a sub-agent's request in the user's place
// (AnswerByModel: an approval a person need not give) is a model call of
// the turn like any: reserved before it runs under a name of its own and
// settled with what it used. Before, it was neither checked nor held, and
// counted after.
func TestCoordinatorAnswerIsReserved(t *testing.T) {
	t.Parallel()
	m := &fakeModel{fn: func(_ int, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case req.Messages[0].Content == loop.CoordinatorPrompt:
			r := text("approve")
			r.Usage = loop.Usage{TotalTokens: 7}
			return r, nil
		case strings.HasPrefix(last.Content, "sub round"):
			return text("answer"), nil
		case last.Role == loop.RoleTool:
			return text("done"), nil
		}
		return calls(call("c1", "helper", `"x"`)), nil
	}}
	var mu sync.Mutex
	var seen []loop.TurnUsage
	l := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{toolsMap{"helper": goAgent(1), "echo": echoTool}},
		Approval: func(_ context.Context, _ *loop.Turn, c loop.ToolCall) *loop.InputRequest {
			if c.Name == "echo" {
				return &loop.InputRequest{}
			}
			return nil
		},
		Budget: func(_ context.Context, _ *loop.Turn, u loop.TurnUsage) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, u)
			return nil
		}})
	out := l.Run(context.Background(), userTurn("go", &recorder{}))
	if out.Status != loop.TaskCompleted {
		t.Fatalf("outcome %s (%v)", out.Status, out.Err)
	}
	mu.Lock()
	defer mu.Unlock()
	var hold, settle *loop.TurnUsage
	for i, u := range seen {
		if !strings.Contains(u.Call, "#answer-") {
			continue
		}
		if hold == nil {
			hold = &seen[i]
		} else if settle == nil {
			settle = &seen[i]
		}
	}
	if hold == nil || settle == nil || hold.Call != settle.Call || hold.PendingTokens <= 0 || settle.PendingTokens != 0 ||
		settle.TotalTokens-hold.TotalTokens != 7 {
		t.Fatalf("reports %+v: want the coordinating call reserved, then settled with its 7 tokens", seen)
	}
}

// A tool that calls the model lent to it (ToolEnv.Model: a tool plugin
// granted model_call) makes a model call of the turn: reserved with the
// budget's check before it runs, refused past the limit, settled with what
// it used, and counted into the turn's usage. Before, the tool got the
// turn's model itself: its calls were neither checked nor counted, and a
// tool could call the model any number of times past every token limit.
func TestToolsModelCallsAreTheTurns(t *testing.T) {
	t.Parallel()
	m := &fakeModel{fn: func(_ int, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case last.Content == "from the tool":
			r := text("ok")
			r.Usage = loop.Usage{TotalTokens: 100}
			return r, nil
		case last.Role == loop.RoleTool:
			return text("done: " + last.Content), nil
		}
		return calls(call("c1", "asker", `{}`)), nil
	}}
	asker := func(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
		n := 0
		for range 5 {
			if _, err := env.Model.Generate(ctx, &loop.ModelRequest{MaxTokens: 50,
				Messages: []loop.Message{{Role: loop.RoleUser, Content: "from the tool"}}}, nil); err != nil {
				return loop.ToolResult{Content: fmt.Sprintf("%d calls, then: %v", n, err)}, nil
			}
			n++
		}
		return loop.ToolResult{Content: fmt.Sprintf("%d calls", n)}, nil
	}
	const limit = 250
	var mu sync.Mutex
	var used int
	var holds int
	l := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{toolsMap{"asker": asker}},
		Budget: func(_ context.Context, _ *loop.Turn, u loop.TurnUsage) error {
			mu.Lock()
			defer mu.Unlock()
			used = u.TotalTokens
			if !u.Final && u.TotalTokens >= limit {
				return fmt.Errorf("token limit of %d reached", limit)
			}
			if u.Call != "" && u.PendingTokens > 0 {
				holds++
			}
			return nil
		}})
	out := l.Run(context.Background(), userTurn("go", &recorder{}))
	mu.Lock()
	defer mu.Unlock()
	// The parent's first call (15), then the tool's: checked at 15, 115
	// and 215, each using 100; the fourth is refused at 315, before it
	// runs, and so is the parent's next call.
	if out.Usage.TotalTokens != 15+300 || used != 15+300 || holds != 3 {
		t.Fatalf("turn usage %d (budget saw %d, %d holds), want the tool's three calls counted: %d", out.Usage.TotalTokens, used, holds, 15+300)
	}
}
