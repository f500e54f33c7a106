package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// fakeModel is the in-process test double of a model: fn decides each answer.
type fakeModel struct {
	mu    sync.Mutex
	calls int
	seen  [][]loop.Message // the messages of each call, copied
	tools [][]string       // the tool names offered at each call
	fn    func(call int, req *loop.ModelRequest, onDelta func(loop.Delta)) (*loop.ModelResponse, error)
}

func (m *fakeModel) Generate(ctx context.Context, req *loop.ModelRequest, onDelta func(loop.Delta)) (*loop.ModelResponse, error) {
	m.mu.Lock()
	m.calls++
	n := m.calls
	m.seen = append(m.seen, append([]loop.Message(nil), req.Messages...))
	names := make([]string, len(req.Tools))
	for i, d := range req.Tools {
		names[i] = d.Name
	}
	m.tools = append(m.tools, names)
	m.mu.Unlock()
	return m.fn(n, req, onDelta)
}

func (m *fakeModel) Calls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls
}

func text(s string) *loop.ModelResponse {
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: s}, FinishReason: loop.FinishStop,
		Usage: loop.Usage{PromptTokens: 10, CompletionTokens: 2, TotalTokens: 12}}
}

func calls(cs ...loop.ToolCall) *loop.ModelResponse {
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, ToolCalls: cs}, FinishReason: loop.FinishToolCalls,
		Usage: loop.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15}}
}

func call(id, name, args string) loop.ToolCall {
	return loop.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(args)}
}

// toolsMap is a Toolset of Go functions.
type toolsMap map[string]func(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error)

func (t toolsMap) Tools(context.Context) ([]loop.ToolDefinition, error) {
	defs := make([]loop.ToolDefinition, 0, len(t))
	for name := range t {
		defs = append(defs, loop.ToolDefinition{Name: name, Description: "test tool " + name})
	}
	return defs, nil
}

func (t toolsMap) Call(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	return t[c.Name](ctx, c, env)
}

func echoTool(_ context.Context, c loop.ToolCall, _ *loop.ToolEnv) (loop.ToolResult, error) {
	return loop.ToolResult{Content: "echo:" + string(c.Arguments)}, nil
}

// recorder is an EventSink that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []loop.Event
}

func (r *recorder) Emit(e loop.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) kinds() []loop.EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]loop.EventKind, len(r.events))
	for i, e := range r.events {
		out[i] = e.Head().Kind
	}
	return out
}

func (r *recorder) count(k loop.EventKind) int {
	n := 0
	for _, got := range r.kinds() {
		if got == k {
			n++
		}
	}
	return n
}

func newLoop(t testing.TB, cfg loop.Config) *loop.Loop {
	t.Helper()
	l, err := loop.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func userTurn(msg string, sink loop.EventSink) loop.Turn {
	return loop.Turn{ContextID: "ctx-1", TaskID: "task-1", Sink: sink,
		Messages: []loop.Message{{Role: loop.RoleUser, Content: msg}}}
}

func TestTurnStopsWhenModelAnswers(t *testing.T) {
	m := &fakeModel{fn: func(int, *loop.ModelRequest, func(loop.Delta)) (*loop.ModelResponse, error) {
		return text("hello"), nil
	}}
	rec := &recorder{}
	// Thoughts are tested on their own (thought_test.go).
	out := newLoop(t, loop.Config{Model: m, ThoughtLevel: loop.VerbosityNone}).Run(context.Background(), userTurn("hi", rec))
	if out.Status != loop.TaskCompleted || out.Reason != loop.ReasonStop || out.Content != "hello" {
		t.Fatalf("outcome = %+v", out)
	}
	if len(out.Messages) != 1 || out.Messages[0].Role != loop.RoleAssistant {
		t.Fatalf("messages = %+v", out.Messages)
	}
	if out.Iterations != 1 || out.Usage.TotalTokens != 12 {
		t.Fatalf("iterations %d usage %+v", out.Iterations, out.Usage)
	}
	want := []loop.EventKind{loop.KindTaskCreated, loop.KindTaskStatus, loop.KindInternalLLMCall,
		loop.KindContentComplete, loop.KindTaskStatus, loop.KindTaskComplete}
	if got := rec.kinds(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	for _, e := range rec.events {
		h := e.Head()
		if h.ContextID != "ctx-1" || h.TaskID != "task-1" || h.Timestamp.IsZero() {
			t.Fatalf("header not stamped: %+v", h)
		}
	}
}

func TestSystemPromptInjectedNotStored(t *testing.T) {
	m := &fakeModel{fn: func(int, *loop.ModelRequest, func(loop.Delta)) (*loop.ModelResponse, error) { return text("ok"), nil }}
	out := newLoop(t, loop.Config{Model: m, SystemPrompt: "be brief"}).Run(context.Background(), userTurn("hi", nil))
	if first := m.seen[0][0]; first.Role != loop.RoleSystem || first.Content != "be brief" {
		t.Fatalf("model did not get the system prompt first: %+v", m.seen[0])
	}
	for _, msg := range out.Messages {
		if msg.Role == loop.RoleSystem {
			t.Fatalf("system prompt leaked into the turn's messages: %+v", out.Messages)
		}
	}
}

func TestToolsRunAndResultsFollowRequestOrder(t *testing.T) {
	// Tool "slow" finishes last although asked first; results must keep the
	// model's order.
	release := make(chan struct{})
	tools := toolsMap{
		"slow": func(ctx context.Context, c loop.ToolCall, _ *loop.ToolEnv) (loop.ToolResult, error) {
			<-release
			return loop.ToolResult{Content: "slow done"}, nil
		},
		"fast": func(ctx context.Context, c loop.ToolCall, _ *loop.ToolEnv) (loop.ToolResult, error) {
			defer func() { recover() }()
			close(release) // fast runs while slow waits: proves parallelism
			return loop.ToolResult{Content: "fast done"}, nil
		},
	}
	m := &fakeModel{fn: func(n int, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		if n == 1 {
			return calls(call("c1", "slow", `{}`), call("c2", "fast", `{}`)), nil
		}
		return text("done"), nil
	}}
	out := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{tools}}).Run(context.Background(), userTurn("go", nil))
	if out.Status != loop.TaskCompleted {
		t.Fatalf("status %s err %v", out.Status, out.Err)
	}
	// assistant(calls), tool c1, tool c2, assistant(text)
	if len(out.Messages) != 4 || out.Messages[1].ToolCallID != "c1" || out.Messages[2].ToolCallID != "c2" {
		t.Fatalf("messages = %+v", out.Messages)
	}
	if out.Messages[1].Content != "slow done" || out.Messages[2].Content != "fast done" {
		t.Fatalf("contents = %q %q", out.Messages[1].Content, out.Messages[2].Content)
	}
	// The second model call saw both results.
	if got := len(m.seen[1]); got != 4 {
		t.Fatalf("second call saw %d messages, want 4", got)
	}
	if out.Usage.TotalTokens != 15+12 {
		t.Fatalf("usage not summed: %+v", out.Usage)
	}
}

func TestToolConcurrencyIsBounded(t *testing.T) {
	for _, limit := range []int{1, 3, 5} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			var inflight, peak atomic.Int32
			tools := toolsMap{"work": func(ctx context.Context, c loop.ToolCall, _ *loop.ToolEnv) (loop.ToolResult, error) {
				n := inflight.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				time.Sleep(2 * time.Millisecond) // let others pile up if the bound is broken
				inflight.Add(-1)
				return loop.ToolResult{Content: "ok"}, nil
			}}
			var cs []loop.ToolCall
			for i := range 12 {
				cs = append(cs, call(fmt.Sprint("c", i), "work", `{}`))
			}
			m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
				if n == 1 {
					return calls(cs...), nil
				}
				return text("done"), nil
			}}
			out := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{tools}, ToolConcurrency: limit}).
				Run(context.Background(), userTurn("go", nil))
			if out.Status != loop.TaskCompleted || len(out.Messages) != 14 {
				t.Fatalf("status %s, %d messages", out.Status, len(out.Messages))
			}
			if p := peak.Load(); p > int32(limit) {
				t.Fatalf("peak concurrency %d > limit %d", p, limit)
			}
			if limit > 1 && peak.Load() < 2 {
				t.Fatalf("tools never ran in parallel (peak %d)", peak.Load())
			}
		})
	}
}

func TestToolFailuresBecomeResults(t *testing.T) {
	tools := toolsMap{
		"boom": func(context.Context, loop.ToolCall, *loop.ToolEnv) (loop.ToolResult, error) {
			return loop.ToolResult{}, errors.New("disk on fire")
		},
		"panicky": func(context.Context, loop.ToolCall, *loop.ToolEnv) (loop.ToolResult, error) {
			panic("oops")
		},
		"sleepy": func(ctx context.Context, _ loop.ToolCall, _ *loop.ToolEnv) (loop.ToolResult, error) {
			<-ctx.Done()
			return loop.ToolResult{}, ctx.Err()
		},
		"refuses": func(context.Context, loop.ToolCall, *loop.ToolEnv) (loop.ToolResult, error) {
			return loop.ToolResult{IsError: true, Content: "bad input"}, nil
		},
	}
	cases := []struct {
		tool string
		want string
	}{
		{"boom", `tool "boom" failed: disk on fire`},
		{"panicky", `tool "panicky" failed: it panicked: oops`},
		{"sleepy", `tool "sleepy" timed out after 20ms`},
		{"refuses", "bad input"},
		{"missing", `tool "missing" does not exist`},
	}
	for _, tc := range cases {
		t.Run(tc.tool, func(t *testing.T) {
			m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
				if n == 1 {
					return calls(call("c1", tc.tool, `{}`)), nil
				}
				return text("recovered"), nil
			}}
			rec := &recorder{}
			out := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{tools}, ToolTimeout: 20 * time.Millisecond}).
				Run(context.Background(), userTurn("go", rec))
			if out.Status != loop.TaskCompleted || out.Content != "recovered" {
				t.Fatalf("turn did not survive the tool: %+v", out)
			}
			res := out.Messages[1]
			if res.Role != loop.RoleTool || !strings.Contains(res.Content, tc.want) || res.Metadata["isError"] != true {
				t.Fatalf("tool result = %+v, want error containing %q", res, tc.want)
			}
			// The model saw the error result.
			if last := m.seen[1][len(m.seen[1])-1]; last.Content != res.Content {
				t.Fatalf("model saw %q", last.Content)
			}
			var done *loop.ToolComplete
			for _, e := range rec.events {
				if d, ok := e.(*loop.ToolComplete); ok {
					done = d
				}
			}
			if done == nil || done.Success || done.Error == "" {
				t.Fatalf("tool-complete = %+v", done)
			}
		})
	}
}

func TestDuplicateToolNameIsAConfigurationError(t *testing.T) {
	a := toolsMap{"echo": echoTool}
	b := toolsMap{"echo": echoTool}
	m := &fakeModel{fn: func(int, *loop.ModelRequest, func(loop.Delta)) (*loop.ModelResponse, error) { return text("x"), nil }}
	out := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{a, b}}).Run(context.Background(), userTurn("hi", nil))
	if out.Status != loop.TaskFailed || !errors.Is(out.Err, loop.ErrToolConflict) {
		t.Fatalf("outcome = %+v", out)
	}
	if m.Calls() != 0 {
		t.Fatalf("model was called despite the conflict")
	}
	// A client tool shadowing a server tool is refused too.
	turn := userTurn("hi", nil)
	turn.ClientTools = []loop.ToolDefinition{{Name: "echo"}}
	out = newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{a}}).Run(context.Background(), turn)
	if !errors.Is(out.Err, loop.ErrToolConflict) {
		t.Fatalf("client shadowing: %+v", out)
	}
}

func TestMaxIterationsKeepsWhatWasProduced(t *testing.T) {
	m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		r := calls(call(fmt.Sprint("c", n), "echo", `{}`))
		r.Message.Content = fmt.Sprint("step ", n)
		return r, nil
	}}
	rec := &recorder{}
	out := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{toolsMap{"echo": echoTool}}, MaxIterations: 3}).
		Run(context.Background(), userTurn("loop forever", rec))
	if out.Status != loop.TaskCompleted || out.Reason != loop.ReasonMaxIterations {
		t.Fatalf("outcome = %+v", out)
	}
	if m.Calls() != 3 || out.Iterations != 3 || len(out.Messages) != 6 || out.Content != "step 3" {
		t.Fatalf("calls %d iterations %d messages %d content %q", m.Calls(), out.Iterations, len(out.Messages), out.Content)
	}
	if rec.count(loop.KindWarning) != 1 {
		t.Fatalf("want one warning event, got kinds %v", rec.kinds())
	}
	if out.Usage.TotalTokens != 45 {
		t.Fatalf("usage %+v", out.Usage)
	}
}

type transientErr struct{}

func (transientErr) Error() string   { return "503 upstream overloaded" }
func (transientErr) Transient() bool { return true }

func TestModelErrorsRetriedOrFatal(t *testing.T) {
	fast := loop.RetryPolicy{Attempts: 3, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}
	cases := []struct {
		name       string
		failures   int
		err        error
		wantStatus loop.TaskStatus
		wantCalls  int
		wantRetry  int
	}{
		{"transient then success", 2, &loop.ModelError{Code: "rate_limit", Message: "slow down", Transient: true}, loop.TaskCompleted, 3, 2},
		{"transient exhausted", 5, &loop.ModelError{Code: "server_error", Message: "500", Transient: true}, loop.TaskFailed, 3, 2},
		{"transient by method", 1, transientErr{}, loop.TaskCompleted, 2, 1},
		{"permanent", 5, &loop.ModelError{Code: "invalid_request", Message: "bad schema"}, loop.TaskFailed, 1, 0},
		{"plain error is permanent", 5, errors.New("boom"), loop.TaskFailed, 1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := &fakeModel{fn: func(n int, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
				if a, _ := req.Metadata["attempt"].(int); (n == 1 && a != 0) || (n > 1 && a != n) {
					t.Errorf("call %d says attempt %v", n, req.Metadata["attempt"])
				}
				if n <= tc.failures {
					return nil, tc.err
				}
				return text("fine"), nil
			}}
			rec := &recorder{}
			out := newLoop(t, loop.Config{Model: m, Retry: fast}).Run(context.Background(), userTurn("hi", rec))
			if out.Status != tc.wantStatus || m.Calls() != tc.wantCalls || rec.count(loop.KindInternalLLMRetry) != tc.wantRetry {
				t.Fatalf("status %s calls %d retries %d (err %v)", out.Status, m.Calls(), rec.count(loop.KindInternalLLMRetry), out.Err)
			}
			if tc.wantStatus == loop.TaskFailed {
				if out.Err == nil || !strings.Contains(out.Err.Error(), tc.err.Error()) {
					t.Fatalf("error %v does not explain %v", out.Err, tc.err)
				}
				var final *loop.TaskStatusEvent
				for _, e := range rec.events {
					if s, ok := e.(*loop.TaskStatusEvent); ok {
						final = s
					}
				}
				if final.Status != loop.TaskFailed || final.Message == "" {
					t.Fatalf("final status event %+v", final)
				}
			}
		})
	}
}

func TestCancellationStopsModelAndTools(t *testing.T) {
	t.Run("during model call", func(t *testing.T) {
		started := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-started; cancel() }()
		out := newLoop(t, loop.Config{Model: &ctxModel{started: started}}).Run(ctx, userTurn("hi", nil))
		if out.Status != loop.TaskCanceled || !errors.Is(out.Err, context.Canceled) {
			t.Fatalf("outcome = %+v", out)
		}
	})
	t.Run("during tools", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var started sync.WaitGroup
		started.Add(2)
		tools := toolsMap{"wait": func(ctx context.Context, _ loop.ToolCall, _ *loop.ToolEnv) (loop.ToolResult, error) {
			started.Done()
			<-ctx.Done()
			return loop.ToolResult{}, ctx.Err()
		}}
		m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
			return calls(call("a", "wait", `{}`), call("b", "wait", `{}`)), nil
		}}
		go func() { started.Wait(); cancel() }()
		out := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{tools}}).Run(ctx, userTurn("hi", nil))
		if out.Status != loop.TaskCanceled || m.Calls() != 1 {
			t.Fatalf("outcome %+v after %d model calls", out, m.Calls())
		}
		// Every call still has a result: the history stays valid.
		if len(out.Messages) != 3 || !strings.Contains(out.Messages[1].Content, "canceled") {
			t.Fatalf("messages = %+v", out.Messages)
		}
	})
}

// The host stopping a turn (a StopError as its context's cause: its time
// limit, a shutdown) or a deadline ends the turn failed, saying why; only a
// cancel ends it canceled.
func TestHostStopsEndTheTurnFailed(t *testing.T) {
	stop := &loop.StopError{Reason: loop.ReasonTimeout, Message: "the turn ran past the host's turn timeout"}
	for _, c := range []struct {
		name   string
		ctx    func() (context.Context, func())
		status loop.TaskStatus
		reason string
		err    error
	}{
		{"time limit", func() (context.Context, func()) {
			return context.WithTimeoutCause(context.Background(), 50*time.Millisecond, stop)
		}, loop.TaskFailed, loop.ReasonTimeout, stop},
		{"deadline", func() (context.Context, func()) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, loop.TaskFailed, loop.ReasonTimeout, context.DeadlineExceeded},
		{"shutdown", func() (context.Context, func()) {
			ctx, cancel := context.WithCancelCause(context.Background())
			time.AfterFunc(50*time.Millisecond, func() { cancel(&loop.StopError{Reason: loop.ReasonShutdown, Message: "shut down"}) })
			return ctx, func() { cancel(nil) }
		}, loop.TaskFailed, loop.ReasonShutdown, nil},
		{"client cancel", func() (context.Context, func()) {
			ctx, cancel := context.WithCancelCause(context.Background())
			time.AfterFunc(50*time.Millisecond, func() { cancel(context.Canceled) })
			return ctx, func() { cancel(nil) }
		}, loop.TaskCanceled, loop.ReasonCanceled, context.Canceled},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, done := c.ctx()
			defer done()
			out := newLoop(t, loop.Config{Model: &ctxModel{started: make(chan struct{})}}).Run(ctx, userTurn("hi", nil))
			if out.Status != c.status || out.Reason != c.reason || (c.err != nil && !errors.Is(out.Err, c.err)) {
				t.Fatalf("outcome %s %s %v; want %s %s", out.Status, out.Reason, out.Err, c.status, c.reason)
			}
		})
	}
}

// ctxModel blocks until its context is done, like a model waiting on HTTP.
type ctxModel struct{ started chan struct{} }

func (m *ctxModel) Generate(ctx context.Context, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
	close(m.started)
	<-ctx.Done()
	return nil, fmt.Errorf("generate: %w", ctx.Err())
}

func TestClientToolEndsTurnWaitingForInput(t *testing.T) {
	m := &fakeModel{fn: func(n int, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		last := req.Messages[len(req.Messages)-1]
		if last.Role == loop.RoleTool {
			return text("the user picked " + last.Content), nil
		}
		return calls(call("s1", "echo", `{"x":1}`), call("u1", "ask_user", `{"q":"color?"}`)), nil
	}}
	l := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{toolsMap{"echo": echoTool}}})
	turn := userTurn("pick a color", nil)
	turn.ClientTools = []loop.ToolDefinition{{Name: "ask_user", Description: "ask the user"}}
	out := l.Run(context.Background(), turn)
	if out.Status != loop.TaskWaitingInput || out.Reason != loop.ReasonClientTool {
		t.Fatalf("outcome = %+v", out)
	}
	if len(out.PendingCalls) != 1 || out.PendingCalls[0].ID != "u1" {
		t.Fatalf("pending = %+v", out.PendingCalls)
	}
	// The server tool ran; the client one did not.
	if len(out.Messages) != 2 || out.Messages[1].ToolCallID != "s1" {
		t.Fatalf("messages = %+v", out.Messages)
	}
	if !m.seenTool("ask_user", 0) {
		t.Fatalf("client tool not offered to the model: %v", m.tools[0])
	}
	// Next turn: the client answers; the loop resumes.
	next := turn
	next.Messages = append(append(append([]loop.Message(nil), turn.Messages...), out.Messages...),
		loop.Message{Role: loop.RoleTool, ToolCallID: "u1", Name: "ask_user", Content: "blue"})
	out2 := l.Run(context.Background(), next)
	if out2.Status != loop.TaskCompleted || out2.Content != "the user picked blue" {
		t.Fatalf("resumed outcome = %+v", out2)
	}
}

func (m *fakeModel) seenTool(name string, call int) bool {
	for _, n := range m.tools[call] {
		if n == name {
			return true
		}
	}
	return false
}

func TestStreamingDeltasBecomeEvents(t *testing.T) {
	m := &fakeModel{fn: func(_ int, _ *loop.ModelRequest, onDelta func(loop.Delta)) (*loop.ModelResponse, error) {
		for _, p := range []string{"Hel", "lo ", "world"} {
			onDelta(loop.Delta{Content: p})
		}
		return text("Hello world"), nil
	}}
	rec := &recorder{}
	newLoop(t, loop.Config{Model: m, ThoughtLevel: loop.VerbosityNone}).Run(context.Background(), userTurn("hi", rec))
	var got strings.Builder
	idx := 0
	for _, e := range rec.events {
		if d, ok := e.(*loop.ContentDelta); ok {
			if d.Index != idx {
				t.Fatalf("delta index %d, want %d", d.Index, idx)
			}
			idx++
			got.WriteString(d.Delta)
		}
	}
	if got.String() != "Hello world" || rec.count(loop.KindContentComplete) != 1 {
		t.Fatalf("deltas %q, kinds %v", got.String(), rec.kinds())
	}
	// deltas come before content-complete
	kinds := rec.kinds()
	if kinds[3] != loop.KindContentDelta || kinds[6] != loop.KindContentComplete {
		t.Fatalf("order %v", kinds)
	}
}

func TestToolEventsAndProgress(t *testing.T) {
	tools := toolsMap{"prog": func(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
		env.Emit(&loop.ToolProgress{Header: loop.Header{Kind: loop.KindToolProgress}, ToolCallID: c.ID, Progress: 0.5, Message: "half"})
		if env.TaskID != "task-1" || env.ContextID != "ctx-1" || env.Iteration != 1 || env.Model == nil || env.Tools == nil {
			return loop.ToolResult{IsError: true, Content: fmt.Sprintf("bad env %+v", env)}, nil
		}
		return loop.ToolResult{Content: "done"}, nil
	}}
	m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		if n == 1 {
			return calls(call("p1", "prog", `{"a":1}`)), nil
		}
		return text("ok"), nil
	}}
	rec := &recorder{}
	out := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{tools}, ThoughtLevel: loop.VerbosityNone}).Run(context.Background(), userTurn("go", rec))
	if out.Messages[1].Content != "done" {
		t.Fatalf("tool result %q", out.Messages[1].Content)
	}
	want := []loop.EventKind{loop.KindTaskCreated, loop.KindTaskStatus, loop.KindInternalLLMCall,
		loop.KindToolStart, loop.KindToolProgress, loop.KindToolComplete,
		loop.KindInternalLLMCall, loop.KindContentComplete, loop.KindTaskStatus, loop.KindTaskComplete}
	if got := rec.kinds(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events\n got %v\nwant %v", got, want)
	}
	start := rec.events[3].(*loop.ToolStart)
	if start.ToolName != "prog" || string(start.Arguments) != `{"a":1}` {
		t.Fatalf("tool-start %+v", start)
	}
	if p := rec.events[4].(*loop.ToolProgress); p.TaskID != "task-1" || p.Timestamp.IsZero() {
		t.Fatalf("progress header not stamped: %+v", p.Header)
	}
}

func TestOnFinishRunsBeforeFinalEvents(t *testing.T) {
	m := &fakeModel{fn: func(int, *loop.ModelRequest, func(loop.Delta)) (*loop.ModelResponse, error) { return text("x"), nil }}
	rec := &recorder{}
	turn := userTurn("hi", rec)
	var seenAtFinish int
	turn.OnFinish = func(ctx context.Context, o *loop.Outcome) error {
		seenAtFinish = len(rec.kinds())
		return nil
	}
	newLoop(t, loop.Config{Model: m}).Run(context.Background(), turn)
	if total := len(rec.kinds()); seenAtFinish != total-2 {
		t.Fatalf("OnFinish ran after %d of %d events; want before the last two", seenAtFinish, total)
	}
	turn.OnFinish = func(context.Context, *loop.Outcome) error { return errors.New("disk full") }
	out := newLoop(t, loop.Config{Model: m}).Run(context.Background(), turn)
	if out.Status != loop.TaskFailed || !strings.Contains(out.Err.Error(), "disk full") {
		t.Fatalf("a failed OnFinish must fail the turn: %+v", out)
	}
}

func TestModelPanicAndNilResponseAreErrors(t *testing.T) {
	for name, fn := range map[string]func(int, *loop.ModelRequest, func(loop.Delta)) (*loop.ModelResponse, error){
		"panic": func(int, *loop.ModelRequest, func(loop.Delta)) (*loop.ModelResponse, error) { panic("model bug") },
		"nil":   func(int, *loop.ModelRequest, func(loop.Delta)) (*loop.ModelResponse, error) { return nil, nil },
	} {
		t.Run(name, func(t *testing.T) {
			out := newLoop(t, loop.Config{Model: &fakeModel{fn: fn}}).Run(context.Background(), userTurn("hi", nil))
			if out.Status != loop.TaskFailed || out.Err == nil {
				t.Fatalf("outcome %+v", out)
			}
		})
	}
}

func TestNewRequiresModel(t *testing.T) {
	if _, err := loop.New(loop.Config{}); !errors.Is(err, loop.ErrInvalid) {
		t.Fatalf("err = %v", err)
	}
}

// selfTimed is a toolset whose calls bound their own time (loop.SelfTimed).
type selfTimed struct{ toolsMap }

func (selfTimed) TimesCalls(string) bool { return true }

// A toolset that times its own calls (a plugin's call timeout counts the
// run, not the wait for a free instance) is not cut by the loop's
// ToolTimeout: a call that takes longer than it completes. Any other
// toolset's call still is (TestToolFailuresBecomeResults, "sleepy").
func TestSelfTimedToolsetIsNotCutByToolTimeout(t *testing.T) {
	const toolTimeout = 20 * time.Millisecond
	tools := selfTimed{toolsMap{
		"queued": func(ctx context.Context, _ loop.ToolCall, _ *loop.ToolEnv) (loop.ToolResult, error) {
			// as a call waiting for a free instance: not a measurement,
			// it takes at least this long
			time.Sleep(10 * toolTimeout)
			if err := ctx.Err(); err != nil {
				return loop.ToolResult{}, err
			}
			return loop.ToolResult{Content: "ran"}, nil
		},
	}}
	m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		if n == 1 {
			return calls(call("c1", "queued", `{}`)), nil
		}
		return text("done"), nil
	}}
	out := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{tools}, ToolTimeout: toolTimeout}).
		Run(context.Background(), userTurn("go", nil))
	if out.Status != loop.TaskCompleted {
		t.Fatalf("turn: %+v", out)
	}
	if res := out.Messages[1]; res.Role != loop.RoleTool || res.Content != "ran" || res.Metadata["isError"] == true {
		t.Fatalf("tool result = %+v, want the call's own answer", res)
	}
}
