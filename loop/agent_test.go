package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// stores is what an Agent needs, from a real store implementation.
type stores interface {
	loop.MessageStore
	loop.AgentStore
	loop.TaskStore
}

// backends runs f against the in-memory store and Badger on disk; reopen
// gives a fresh handle on the same data (a restart) where the backend has one.
func backends(t *testing.T, f func(t *testing.T, open func() stores)) {
	t.Run("memory", func(t *testing.T) {
		m := store.NewMemory(store.MemoryOptions{})
		t.Cleanup(func() { m.Close() })
		f(t, func() stores { return m })
	})
	t.Run("badger", func(t *testing.T) {
		dir := t.TempDir()
		var cur *store.Badger
		t.Cleanup(func() {
			if cur != nil {
				cur.Close()
			}
		})
		f(t, func() stores {
			if cur != nil {
				if err := cur.Close(); err != nil {
					t.Fatal(err)
				}
			}
			b, err := store.Open(store.Options{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			cur = b
			return b
		})
	})
}

// echoModel answers with every user message of the conversation so far.
func echoModel() *fakeModel {
	return &fakeModel{fn: func(_ int, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		var said []string
		for _, m := range req.Messages {
			if m.Role == loop.RoleUser {
				said = append(said, m.Content)
			}
		}
		return text("you said: " + strings.Join(said, " | ")), nil
	}}
}

func newAgent(t *testing.T, s stores, l *loop.Loop, mod func(*loop.AgentConfig)) *loop.Agent {
	t.Helper()
	cfg := loop.AgentConfig{ContextID: "ctx-a", AgentID: "demo", Owner: "alice", Loop: l, Messages: s, Agents: s, Tasks: s}
	if tc, ok := s.(loop.TurnCommitter); ok {
		cfg.Commit = tc
	}
	if mod != nil {
		mod(&cfg)
	}
	a, err := loop.NewAgent(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return a
}

func say(t *testing.T, a *loop.Agent, task, msg string) loop.Outcome {
	t.Helper()
	out, err := a.Turn(context.Background(), loop.TurnInput{TaskID: task, Messages: []loop.Message{{Role: loop.RoleUser, Content: msg}}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAgentRemembersAcrossTurnsAndRestarts(t *testing.T) {
	backends(t, func(t *testing.T, open func() stores) {
		l := newLoop(t, loop.Config{Model: echoModel()})
		s := open()
		a := newAgent(t, s, l, nil)
		if a.Status() != loop.AgentReady {
			t.Fatalf("status %s", a.Status())
		}
		say(t, a, "t1", "one")
		out := say(t, a, "t2", "two")
		if out.Content != "you said: one | two" {
			t.Fatalf("second turn = %q", out.Content)
		}
		meta := a.Metadata()
		if meta.TurnCount != 2 || meta.Usage.TotalTokens != 24 || meta.Owner != "alice" {
			t.Fatalf("metadata %+v", meta)
		}

		// A restart: new stores handle, new agent, same context.
		s = open()
		b := newAgent(t, s, l, nil)
		hist, err := b.History(context.Background(), 0)
		if err != nil || len(hist) != 4 {
			t.Fatalf("history after restart: %d messages, %v", len(hist), err)
		}
		if got := b.Metadata(); got.TurnCount != 2 || got.Usage.TotalTokens != 24 {
			t.Fatalf("metadata after restart %+v", got)
		}
		out = say(t, b, "t3", "three")
		if out.Content != "you said: one | two | three" {
			t.Fatalf("after restart = %q", out.Content)
		}
		rec, err := s.LoadTask(context.Background(), "t3")
		if err != nil || rec.Status != loop.TaskCompleted || len(rec.History) != 2 || rec.Content != out.Content {
			t.Fatalf("task record %+v, %v", rec, err)
		}
	})
}

func TestAgentRefusesConcurrentTurn(t *testing.T) {
	backends(t, func(t *testing.T, open func() stores) {
		entered, release := make(chan struct{}), make(chan struct{})
		m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
			if n == 1 {
				close(entered)
				<-release
			}
			return text("ok"), nil
		}}
		a := newAgent(t, open(), newLoop(t, loop.Config{Model: m}), nil)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); say(t, a, "t1", "first") }()
		<-entered
		if a.Status() != loop.AgentBusy {
			t.Errorf("status during turn %s", a.Status())
		}
		_, err := a.Turn(context.Background(), loop.TurnInput{TaskID: "t2", Messages: []loop.Message{{Role: loop.RoleUser, Content: "second"}}})
		if !errors.Is(err, loop.ErrBusy) {
			t.Errorf("concurrent turn err = %v, want ErrBusy", err)
		}
		close(release)
		wg.Wait()
		if a.Status() != loop.AgentReady || m.Calls() != 1 {
			t.Fatalf("status %s after %d calls", a.Status(), m.Calls())
		}
	})
}

func TestAgentLifecycle(t *testing.T) {
	backends(t, func(t *testing.T, open func() stores) {
		ctx := context.Background()
		s := open()
		l := newLoop(t, loop.Config{Model: echoModel()})
		a, err := loop.NewAgent(loop.AgentConfig{ContextID: "ctx-l", Loop: l, Messages: s, Agents: s})
		if err != nil {
			t.Fatal(err)
		}
		if a.Status() != loop.AgentCreated {
			t.Fatalf("new agent is %s", a.Status())
		}
		if _, err := a.Turn(ctx, loop.TurnInput{TaskID: "x"}); !errors.Is(err, loop.ErrNotReady) {
			t.Fatalf("turn before start: %v", err)
		}
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
		say(t, a, "t1", "hello")
		if err := a.Pause(ctx); err != nil || a.Status() != loop.AgentPaused {
			t.Fatalf("pause: %v, %s", err, a.Status())
		}
		if stored, _ := s.LoadAgent(ctx, "ctx-l"); stored.Status != loop.AgentPaused {
			t.Fatalf("stored status %s", stored.Status)
		}
		if _, err := a.Turn(ctx, loop.TurnInput{TaskID: "t2", Messages: []loop.Message{{Role: loop.RoleUser, Content: "x"}}}); !errors.Is(err, loop.ErrNotReady) {
			t.Fatalf("turn while paused: %v", err)
		}
		if err := a.Resume(ctx); err != nil || a.Status() != loop.AgentReady {
			t.Fatalf("resume: %v %s", err, a.Status())
		}
		if err := a.Shutdown(ctx); err != nil || a.Status() != loop.AgentShutdown {
			t.Fatalf("shutdown: %v %s", err, a.Status())
		}
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if out := say(t, a, "t3", "again"); out.Content != "you said: hello | again" {
			t.Fatalf("after shutdown+start: %q", out.Content)
		}
		if err := a.Clear(ctx); err != nil {
			t.Fatal(err)
		}
		if n, _ := s.Count(ctx, "ctx-l"); n != 0 || a.Metadata().TurnCount != 0 {
			t.Fatalf("after clear: %d messages, %d turns", n, a.Metadata().TurnCount)
		}
		if out := say(t, a, "t4", "fresh"); out.Content != "you said: fresh" {
			t.Fatalf("after clear: %q", out.Content)
		}
	})
}

func TestAgentFailedTurnKeepsMessagesUpToFailure(t *testing.T) {
	backends(t, func(t *testing.T, open func() stores) {
		ctx := context.Background()
		m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
			if n == 1 {
				return calls(call("c1", "echo", `{"v":1}`)), nil
			}
			return nil, &loop.ModelError{Code: "invalid_request", Message: "context too long"}
		}}
		s := open()
		a := newAgent(t, s, newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{toolsMap{"echo": echoTool}}}), nil)
		out := say(t, a, "t1", "do it")
		if out.Status != loop.TaskFailed {
			t.Fatalf("status %s", out.Status)
		}
		hist, _ := s.Recent(ctx, "ctx-a", 0)
		if len(hist) != 3 || hist[0].Role != loop.RoleUser || hist[1].ToolCalls[0].ID != "c1" || hist[2].ToolCallID != "c1" {
			t.Fatalf("saved history %+v", hist)
		}
		if meta, _ := s.LoadAgent(ctx, "ctx-a"); meta.ToolCalls != 1 {
			t.Fatalf("tool calls counted for the conversation: %d, want 1", meta.ToolCalls)
		}
		rec, _ := s.LoadTask(ctx, "t1")
		if rec.Status != loop.TaskFailed || !strings.Contains(rec.Message, "context too long") {
			t.Fatalf("task record %+v", rec)
		}
		if a.Status() != loop.AgentReady {
			t.Fatalf("a failed turn must leave the agent ready, got %s", a.Status())
		}
	})
}

func TestAuthIsPerTurnAndNeverStored(t *testing.T) {
	backends(t, func(t *testing.T, open func() stores) {
		ctx := context.Background()
		const secret = "tok-SECRET-123"
		var seen *loop.AuthContext
		tools := toolsMap{"whoami": func(_ context.Context, _ loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
			seen = env.Auth
			return loop.ToolResult{Content: "you are " + env.Auth.Principal}, nil
		}}
		m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
			if n == 1 {
				return calls(call("c1", "whoami", `{}`)), nil
			}
			return text("done"), nil
		}}
		s := open()
		a := newAgent(t, s, newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{tools}}), nil)
		out, err := a.Turn(ctx, loop.TurnInput{TaskID: "t1", Auth: &loop.AuthContext{Principal: "alice", Token: secret},
			Messages: []loop.Message{{Role: loop.RoleUser, Content: "who am I"}}})
		if err != nil || out.Status != loop.TaskCompleted {
			t.Fatalf("%v %+v", err, out)
		}
		if seen == nil || seen.Token != secret {
			t.Fatalf("tool did not get the turn's auth: %+v", seen)
		}
		rec, _ := s.LoadTask(ctx, "t1")
		hist, _ := s.Recent(ctx, "ctx-a", 0)
		meta, _ := s.LoadAgent(ctx, "ctx-a")
		for name, v := range map[string]any{"task": rec, "history": hist, "agent": meta} {
			data, _ := json.Marshal(v)
			if strings.Contains(string(data), secret) {
				t.Fatalf("the token was stored in the %s: %s", name, data)
			}
		}
	})
}

func TestAgentSavesBeforeAnnouncingTheEnd(t *testing.T) {
	backends(t, func(t *testing.T, open func() stores) {
		s := open()
		a := newAgent(t, s, newLoop(t, loop.Config{Model: echoModel()}), nil)
		var checked bool
		sink := loop.SinkFunc(func(e loop.Event) {
			st, ok := e.(*loop.TaskStatusEvent)
			if !ok || st.Status != loop.TaskCompleted {
				return
			}
			checked = true
			n, _ := s.Count(context.Background(), "ctx-a")
			rec, _ := s.LoadTask(context.Background(), st.TaskID)
			if n != 2 || rec.Status != loop.TaskCompleted {
				t.Errorf("at task-status completed: %d messages stored, task %s", n, rec.Status)
			}
		})
		if _, err := a.Turn(context.Background(), loop.TurnInput{TaskID: "t1", Sink: sink,
			Messages: []loop.Message{{Role: loop.RoleUser, Content: "hi"}}}); err != nil {
			t.Fatal(err)
		}
		if !checked {
			t.Fatal("no completed status event")
		}
	})
}

func TestAgentClientToolContinuesSameTask(t *testing.T) {
	backends(t, func(t *testing.T, open func() stores) {
		ctx := context.Background()
		m := &fakeModel{fn: func(_ int, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
			if last := req.Messages[len(req.Messages)-1]; last.Role == loop.RoleTool {
				return text("confirmed: " + last.Content), nil
			}
			return calls(call("u1", "confirm", `{}`)), nil
		}}
		s := open()
		a := newAgent(t, s, newLoop(t, loop.Config{Model: m}), nil)
		client := []loop.ToolDefinition{{Name: "confirm"}}
		out, _ := a.Turn(ctx, loop.TurnInput{TaskID: "t1", ClientTools: client, Messages: []loop.Message{{Role: loop.RoleUser, Content: "delete it"}}})
		if out.Status != loop.TaskWaitingInput {
			t.Fatalf("status %s", out.Status)
		}
		rec, _ := s.LoadTask(ctx, "t1")
		if rec.Status != loop.TaskWaitingInput || len(rec.PendingCalls) != 1 {
			t.Fatalf("record %+v", rec)
		}
		out, _ = a.Turn(ctx, loop.TurnInput{TaskID: "t1", ClientTools: client,
			Messages: []loop.Message{{Role: loop.RoleTool, ToolCallID: "u1", Name: "confirm", Content: "yes"}}})
		if out.Status != loop.TaskCompleted || out.Content != "confirmed: yes" {
			t.Fatalf("continued: %+v", out)
		}
		rec, _ = s.LoadTask(ctx, "t1")
		// user, assistant(call), tool(yes), assistant(text)
		if rec.Status != loop.TaskCompleted || len(rec.History) != 4 {
			t.Fatalf("record after continuation: %s, %d messages", rec.Status, len(rec.History))
		}
	})
}

func TestAgentCompactsHistory(t *testing.T) {
	backends(t, func(t *testing.T, open func() stores) {
		ctx := context.Background()
		s := open()
		m := &fakeModel{fn: func(n int, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
			if last := req.Messages[len(req.Messages)-1]; last.Role == loop.RoleUser {
				return calls(call(fmt.Sprint("c", n), "echo", `{}`)), nil
			}
			return text(fmt.Sprint("answer ", n)), nil
		}}
		a := newAgent(t, s, newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{toolsMap{"echo": echoTool}}}),
			func(c *loop.AgentConfig) { c.MaxMessages = 6 })
		for i := range 5 {
			say(t, a, fmt.Sprint("t", i), fmt.Sprint("q", i))
		}
		hist, _ := s.Recent(ctx, "ctx-a", 0)
		if len(hist) > 6+4 || len(hist) < 4 {
			t.Fatalf("history has %d messages after compaction at 6", len(hist))
		}
		if hist[0].Role == loop.RoleTool {
			t.Fatalf("compacted history starts with a tool result: %+v", hist[0])
		}
		mem, _ := a.History(ctx, 0)
		if len(mem) != len(hist) {
			t.Fatalf("agent holds %d messages, store %d", len(mem), len(hist))
		}
		last := hist[len(hist)-1]
		if last.Content != "answer 10" {
			t.Fatalf("last message %+v", last)
		}
	})
}

func TestAgentHistoryWindowBoundsMemoryNotStore(t *testing.T) {
	backends(t, func(t *testing.T, open func() stores) {
		ctx := context.Background()
		s := open()
		m := echoModel()
		a := newAgent(t, s, newLoop(t, loop.Config{Model: m}), func(c *loop.AgentConfig) { c.HistoryLimit = 4 })
		for i := range 12 {
			say(t, a, fmt.Sprint("t", i), fmt.Sprint("m", i))
		}
		// The model saw only the window (4 messages of history + the input).
		if got := len(m.seen[len(m.seen)-1]); got != 5 {
			t.Fatalf("last call saw %d messages, want 5", got)
		}
		// The store and History keep everything.
		if n, _ := s.Count(ctx, "ctx-a"); n != 24 {
			t.Fatalf("store holds %d messages", n)
		}
		if h, _ := a.History(ctx, 0); len(h) != 24 || h[0].Content != "m0" {
			t.Fatalf("History(0) = %d messages", len(h))
		}
		if h, _ := a.History(ctx, 3); len(h) != 3 || h[2].Content != "you said: m9 | m10 | m11" {
			t.Fatalf("History(3) = %+v", h)
		}
	})
}

// TestAgentHistoryBytesBoundsModelAndMemory: large messages are bounded by
// size, not only by count. The model sees at most HistoryBytes of history
// (plus the input, whole), the agent keeps at most about twice that in
// memory, and the store and History still hold every message.
func TestAgentHistoryBytesBoundsModelAndMemory(t *testing.T) {
	backends(t, func(t *testing.T, open func() stores) {
		ctx := context.Background()
		s := open()
		m := &fakeModel{fn: func(int, *loop.ModelRequest, func(loop.Delta)) (*loop.ModelResponse, error) {
			return text("ok"), nil
		}}
		const size, window = 10 << 10, 32 << 10
		a := newAgent(t, s, newLoop(t, loop.Config{Model: m}), func(c *loop.AgentConfig) { c.HistoryBytes = window })
		for i := range 20 {
			say(t, a, fmt.Sprint("t", i), fmt.Sprintf("m%d %s", i, strings.Repeat("x", size)))
			if got := int(a.CachedBytes()); got > 2*window+loop.MessageSize(loop.Message{Content: strings.Repeat("x", size+8)})+200 {
				t.Fatalf("after turn %d the agent holds %d bytes of history, window %d", i, got, window)
			}
		}
		last := m.seen[len(m.seen)-1]
		if got := loop.MessagesSize(last[:len(last)-1]); got > window {
			t.Fatalf("the model saw %d bytes of history, window %d", got, window)
		}
		if len(last) < 3 || !strings.HasPrefix(last[len(last)-1].Content, "m19 ") || !strings.HasPrefix(last[len(last)-3].Content, "m18 ") {
			t.Fatalf("the model did not see the input and the latest history: %d messages", len(last))
		}
		if n, _ := s.Count(ctx, "ctx-a"); n != 40 {
			t.Fatalf("store holds %d messages", n)
		}
		if h, _ := a.History(ctx, 0); len(h) != 40 || !strings.HasPrefix(h[0].Content, "m0 ") {
			t.Fatalf("History(0) = %d messages", len(h))
		}
		// A restarted agent loads only the window.
		b := newAgent(t, s, newLoop(t, loop.Config{Model: m}), func(c *loop.AgentConfig) { c.HistoryBytes = window })
		if got := int(b.CachedBytes()); got > window || got == 0 {
			t.Fatalf("a restarted agent holds %d bytes, window %d", got, window)
		}
	})
}
