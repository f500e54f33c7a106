package loop_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// durableBackend is a store with everything a durable agent needs.
type durableBackend interface {
	stores
	loop.CheckpointStore
	loop.Journal
}

func durableBackends(t *testing.T, f func(t *testing.T, db durableBackend)) {
	t.Run("memory", func(t *testing.T) {
		m := store.NewMemory(store.MemoryOptions{})
		t.Cleanup(func() { m.Close() })
		f(t, m)
	})
	t.Run("badger", func(t *testing.T) {
		b, err := store.Open(store.Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		f(t, b)
	})
}

// crashPoint is a channel a model or tool blocks on forever: the goroutine
// running the turn is abandoned there, as if the process had died, and the
// test resumes the task from what the store holds.
type crashPoint struct {
	reached chan struct{}
	once    sync.Once
}

func newCrashPoint() *crashPoint { return &crashPoint{reached: make(chan struct{})} }

func (c *crashPoint) hit() {
	c.once.Do(func() { close(c.reached) })
	select {} // never returns: the "process" is gone
}

// startAndCrash runs a turn on a first agent until it blocks at cp, then
// returns; the first agent is abandoned.
func startAndCrash(t *testing.T, db durableBackend, l *loop.Loop, cp *crashPoint, input string) {
	t.Helper()
	a := newAgent(t, db, l, func(c *loop.AgentConfig) { c.ContextID = "ctx-d" })
	go a.Turn(context.Background(), loop.TurnInput{TaskID: "task-d", Messages: []loop.Message{{Role: loop.RoleUser, Content: input}}})
	<-cp.reached
	rec, err := db.LoadTask(context.Background(), "task-d")
	if err != nil || rec.Status != loop.TaskWorking {
		t.Fatalf("before the crash the task is %+v, %v", rec, err)
	}
}

func resume(t *testing.T, db durableBackend, l *loop.Loop, rec *recorder) loop.Outcome {
	t.Helper()
	a := newAgent(t, db, l, func(c *loop.AgentConfig) { c.ContextID = "ctx-d" })
	out, err := a.ResumeTask(context.Background(), "task-d", rec)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func durableLoop(t *testing.T, db durableBackend, m loop.Model, tools ...loop.Toolset) *loop.Loop {
	return newLoop(t, loop.Config{Model: m, Toolsets: tools, Checkpoints: db, Journal: db})
}

// countingTools counts executions per tool and can crash or be idempotent.
type countingTools struct {
	runs       sync.Map // name → *atomic.Int32
	crashOn    map[string]*crashPoint
	idempotent map[string]bool
	names      []string
}

func (c *countingTools) Tools(context.Context) ([]loop.ToolDefinition, error) {
	defs := make([]loop.ToolDefinition, len(c.names))
	for i, n := range c.names {
		defs[i] = loop.ToolDefinition{Name: n, Idempotent: c.idempotent[n]}
	}
	return defs, nil
}

func (c *countingTools) Call(ctx context.Context, call loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	v, _ := c.runs.LoadOrStore(call.Name, new(atomic.Int32))
	n := v.(*atomic.Int32).Add(1)
	if cp := c.crashOn[call.Name]; cp != nil && n == 1 {
		cp.hit()
	}
	return loop.ToolResult{Content: call.Name + " ran"}, nil
}

func (c *countingTools) count(name string) int32 {
	v, ok := c.runs.Load(name)
	if !ok {
		return 0
	}
	return v.(*atomic.Int32).Load()
}

// toolThenAnswer asks for the given calls once, then answers with what the
// tools returned.
func toolThenAnswer(cp *crashPoint, cs ...loop.ToolCall) *fakeModel {
	return &fakeModel{fn: func(_ int, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		last := req.Messages[len(req.Messages)-1]
		if last.Role != loop.RoleTool {
			return calls(cs...), nil
		}
		if cp != nil {
			cp.hit()
		}
		var got []string
		for _, m := range req.Messages {
			if m.Role == loop.RoleTool {
				got = append(got, m.Content)
			}
		}
		return text(strings.Join(got, "; ")), nil
	}}
}

func checkDone(t *testing.T, db durableBackend, out loop.Outcome, want string) {
	t.Helper()
	ctx := context.Background()
	if out.Status != loop.TaskCompleted || out.Content != want {
		t.Fatalf("resumed outcome %s %q (%v), want %q", out.Status, out.Content, out.Err, want)
	}
	rec, _ := db.LoadTask(ctx, "task-d")
	if rec.Status != loop.TaskCompleted {
		t.Fatalf("task record %s", rec.Status)
	}
	if _, err := db.LoadCheckpoint(ctx, "task-d"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("checkpoint left after completion: %v", err)
	}
	// The history is whole: user, assistant(calls), results…, assistant.
	hist, _ := db.Recent(ctx, "ctx-d", 0)
	if len(hist) < 4 || hist[0].Role != loop.RoleUser || hist[len(hist)-1].Content != want {
		t.Fatalf("history %+v", hist)
	}
	for _, m := range hist[2 : len(hist)-1] {
		if m.Role != loop.RoleTool {
			t.Fatalf("history %+v", hist)
		}
	}
}

func TestResumeAtModelCall(t *testing.T) {
	durableBackends(t, func(t *testing.T, db durableBackend) {
		tools := &countingTools{names: []string{"fetch"}}
		cp := newCrashPoint()
		startAndCrash(t, db, durableLoop(t, db, toolThenAnswer(cp, call("c1", "fetch", `{}`)), tools), cp, "go")
		rec := &recorder{}
		out := resume(t, db, durableLoop(t, db, toolThenAnswer(nil, call("c1", "fetch", `{}`)), tools), rec)
		checkDone(t, db, out, "fetch ran")
		if n := tools.count("fetch"); n != 1 {
			t.Fatalf("fetch ran %d times, want once", n)
		}
		if rec.count(loop.KindTaskCreated) != 0 || rec.count(loop.KindTaskStatus) != 2 {
			t.Fatalf("resumed events %v", rec.kinds())
		}
	})
}

func TestResumeBeforeFirstCheckpoint(t *testing.T) {
	durableBackends(t, func(t *testing.T, db durableBackend) {
		cp := newCrashPoint()
		m := &fakeModel{fn: func(int, *loop.ModelRequest, func(loop.Delta)) (*loop.ModelResponse, error) {
			cp.hit()
			return nil, nil
		}}
		startAndCrash(t, db, durableLoop(t, db, m), cp, "hello")
		out := resume(t, db, durableLoop(t, db, echoModel()), &recorder{})
		if out.Status != loop.TaskCompleted || out.Content != "you said: hello" {
			t.Fatalf("outcome %+v", out)
		}
	})
}

func TestResumeDuringToolExecution(t *testing.T) {
	cases := []struct {
		name       string
		idempotent bool
		wantRuns   int32
		want       string
	}{
		{"not idempotent: reported, not re-run", false, 1, `tool "charge" was interrupted by a restart`},
		{"idempotent: run again", true, 2, "charge ran"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			durableBackends(t, func(t *testing.T, db durableBackend) {
				cp := newCrashPoint()
				tools := &countingTools{names: []string{"charge", "lookup"}, crashOn: map[string]*crashPoint{"charge": cp},
					idempotent: map[string]bool{"charge": tc.idempotent}}
				// Two parallel calls: lookup completes, charge is cut off.
				cs := []loop.ToolCall{call("a", "lookup", `{}`), call("b", "charge", `{"amount":5}`)}
				l := durableLoop(t, db, toolThenAnswer(nil, cs...), tools)
				startAndCrash(t, db, l, cp, "pay")
				waitJournal(t, db, "a", loop.CallCompleted)
				out := resume(t, db, l, &recorder{})
				if out.Status != loop.TaskCompleted || !strings.Contains(out.Content, tc.want) || !strings.HasPrefix(out.Content, "lookup ran") {
					t.Fatalf("outcome %s %q", out.Status, out.Content)
				}
				if n := tools.count("lookup"); n != 1 {
					t.Fatalf("the completed call ran %d times", n)
				}
				if n := tools.count("charge"); n != tc.wantRuns {
					t.Fatalf("charge ran %d times, want %d", n, tc.wantRuns)
				}
				entries, _ := db.Calls(context.Background(), "task-d")
				for _, e := range entries {
					if e.State != loop.CallCompleted || e.Result == nil || e.Key != "task-d/"+e.CallID {
						t.Fatalf("journal entry %+v", e)
					}
				}
			})
		})
	}
}

// waitJournal waits until the journal shows call id in state st (the other,
// parallel call may still be finishing when the crash point is reached).
func waitJournal(t *testing.T, db loop.Journal, id string, st loop.CallState) {
	t.Helper()
	for range 2000 {
		entries, _ := db.Calls(context.Background(), "task-d")
		for _, e := range entries {
			if e.CallID == id && e.State == st {
				return
			}
		}
		yield()
	}
	t.Fatalf("call %s never reached %s", id, st)
}

func TestResumeSubAgentCall(t *testing.T) {
	durableBackends(t, func(t *testing.T, db durableBackend) {
		cp := newCrashPoint()
		inner := &countingTools{names: []string{"search"}}
		var subRuns atomic.Int32
		// "research" is a sub-agent: it calls the turn's tools through the
		// env, then is cut off by the crash on its first run.
		sub := toolsMap{"research": func(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
			res, err := env.Tools.Call(ctx, call("s1", "search", `{}`), env)
			if err != nil {
				return loop.ToolResult{}, err
			}
			if subRuns.Add(1) == 1 {
				cp.hit()
			}
			return loop.ToolResult{Content: "summary of " + res.Content}, nil
		}}
		l := durableLoop(t, db, toolThenAnswer(nil, call("r1", "research", `{}`)), inner, sub)
		startAndCrash(t, db, l, cp, "research it")
		out := resume(t, db, l, &recorder{})
		// research is not idempotent: its outcome is unknown and reported.
		if out.Status != loop.TaskCompleted || !strings.Contains(out.Content, `tool "research" was interrupted`) {
			t.Fatalf("outcome %s %q", out.Status, out.Content)
		}
		if subRuns.Load() != 1 || inner.count("search") != 1 {
			t.Fatalf("sub-agent ran %d times, its search %d times", subRuns.Load(), inner.count("search"))
		}
		// The sub-agent's own call is journaled under its parent call.
		entries, _ := db.Calls(context.Background(), "task-d")
		found := false
		for _, e := range entries {
			found = found || e.CallID == "r1>s1"
		}
		if !found {
			t.Fatalf("nested call not journaled under its parent: %+v", entries)
		}
	})
}

// corruptCheckpoints answers every load with a corrupt-record error.
type corruptCheckpoints struct{ loop.CheckpointStore }

func (corruptCheckpoints) LoadCheckpoint(context.Context, string) (loop.Checkpoint, error) {
	return loop.Checkpoint{}, &loop.CorruptError{Key: "ckpt/task-d", Err: errors.New("unexpected end of JSON input")}
}

func TestUnresumableTaskFailsWithReason(t *testing.T) {
	durableBackends(t, func(t *testing.T, db durableBackend) {
		tools := &countingTools{names: []string{"fetch"}}
		cp := newCrashPoint()
		startAndCrash(t, db, durableLoop(t, db, toolThenAnswer(cp, call("c1", "fetch", `{}`)), tools), cp, "go")
		l := newLoop(t, loop.Config{Model: echoModel(), Checkpoints: corruptCheckpoints{db}, Journal: db})
		rec := &recorder{}
		out := resume(t, db, l, rec)
		if out.Status != loop.TaskFailed || !strings.Contains(out.Err.Error(), "cannot be resumed") || !strings.Contains(out.Err.Error(), "ckpt/task-d") {
			t.Fatalf("outcome %+v", out)
		}
		stored, _ := db.LoadTask(context.Background(), "task-d")
		if stored.Status != loop.TaskFailed || !strings.Contains(stored.Message, "cannot be resumed") {
			t.Fatalf("task record %s %q", stored.Status, stored.Message)
		}
		if kinds := rec.kinds(); len(kinds) != 2 || kinds[0] != loop.KindTaskStatus || kinds[1] != loop.KindTaskComplete {
			t.Fatalf("events %v", kinds)
		}
	})
}

func TestResumeRefusesFinishedTask(t *testing.T) {
	durableBackends(t, func(t *testing.T, db durableBackend) {
		l := durableLoop(t, db, echoModel())
		a := newAgent(t, db, l, func(c *loop.AgentConfig) { c.ContextID = "ctx-d" })
		say(t, a, "task-d", "hi")
		if _, err := a.ResumeTask(context.Background(), "task-d", nil); !errors.Is(err, loop.ErrInvalid) {
			t.Fatalf("resume of a completed task: %v", err)
		}
		if _, err := a.ResumeTask(context.Background(), "nope", nil); !errors.Is(err, loop.ErrNotFound) {
			t.Fatalf("resume of an unknown task: %v", err)
		}
	})
}

func yield() { time.Sleep(time.Millisecond) }

// resumerTools is a toolset whose calls survive a restart (CallResumer).
type resumerTools struct{ toolsMap }

func (resumerTools) ResumesCalls(tool string) bool { return tool == "delegate" }

// A call of a CallResumer's tool cut off by a crash runs again with
// ToolEnv.Resumed set and finds what its first run noted on its sub-task
// (Subtask.Note, durable); it takes that up instead of being reported
// interrupted. Its first run acted once, its second did not act again.
func TestResumeCallResumer(t *testing.T) {
	durableBackends(t, func(t *testing.T, db durableBackend) {
		cp := newCrashPoint()
		var sent, tookUp atomic.Int32
		var notedBefore atomic.Bool
		tools := resumerTools{toolsMap{"delegate": func(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
			st, err := env.StartSubtask(ctx, loop.SubtaskSpec{AgentID: "remote", Prompt: "do it"})
			if err != nil {
				return loop.ToolResult{}, err
			}
			if env.Resumed {
				if st.Previous == nil {
					return loop.ToolResult{IsError: true, Content: "resumed without the previous record"}, nil
				}
				ticket, _ := st.Previous.Metadata["ticket"].(string)
				notedBefore.Store(ticket == "T-1")
				tookUp.Add(1)
				st.Finish(ctx, loop.TaskCompleted, "done "+ticket, nil)
				return loop.ToolResult{Content: "took up " + ticket}, nil
			}
			if st.Previous != nil {
				return loop.ToolResult{IsError: true, Content: "a fresh call has a previous record"}, nil
			}
			sent.Add(1)
			if err := st.Note(ctx, map[string]any{"ticket": "T-1"}); err != nil {
				return loop.ToolResult{}, err
			}
			cp.hit()
			return loop.ToolResult{}, nil
		}}}
		l := newLoop(t, loop.Config{Model: toolThenAnswer(nil, call("d1", "delegate", `{}`)), Toolsets: []loop.Toolset{tools},
			Checkpoints: db, Journal: db, Subtasks: db})
		startAndCrash(t, db, l, cp, "delegate it")
		rec, err := db.LoadTask(context.Background(), loop.SubtaskID("task-d", "d1"))
		if err != nil || rec.Metadata["ticket"] != "T-1" {
			t.Fatalf("the sub-task's note before the crash: %+v, %v", rec.Metadata, err)
		}
		out := resume(t, db, l, &recorder{})
		if out.Status != loop.TaskCompleted || out.Content != "took up T-1" {
			t.Fatalf("outcome %s %q, want the call taken up", out.Status, out.Content)
		}
		if sent.Load() != 1 || tookUp.Load() != 1 || !notedBefore.Load() {
			t.Fatalf("sent %d, taken up %d (noted ticket found: %v)", sent.Load(), tookUp.Load(), notedBefore.Load())
		}
		rec, _ = db.LoadTask(context.Background(), loop.SubtaskID("task-d", "d1"))
		if rec.Status != loop.TaskCompleted || rec.Content != "done T-1" {
			t.Fatalf("sub-task after the resume: %s %q", rec.Status, rec.Content)
		}
	})
}

// A turn the host suspends (a StopError with Suspend: its shutdown) is left
// exactly as a crash at that moment leaves it: the task working, the cut
// call "started" in the journal (no "stopped" result), no end saved or
// announced; resumed, it goes on from its checkpoint as after a crash. A
// StopError without Suspend (a time limit) ends it failed instead.
func TestSuspendedTurnIsLeftAsACrashLeavesIt(t *testing.T) {
	durableBackends(t, func(t *testing.T, db durableBackend) {
		reached := make(chan struct{})
		var once sync.Once
		tools := toolsMap{"charge": func(ctx context.Context, c loop.ToolCall, _ *loop.ToolEnv) (loop.ToolResult, error) {
			once.Do(func() { close(reached) })
			<-ctx.Done()
			return loop.ToolResult{}, ctx.Err()
		}}
		l := durableLoop(t, db, toolThenAnswer(nil, call("b", "charge", `{}`)), tools)
		a := newAgent(t, db, l, func(c *loop.AgentConfig) { c.ContextID = "ctx-d" })
		ctx, stop := context.WithCancelCause(context.Background())
		defer stop(nil)
		go func() {
			<-reached
			stop(&loop.StopError{Reason: loop.ReasonShutdown, Message: "shut down", Suspend: true})
		}()
		rec := &recorder{}
		out, err := a.Turn(ctx, loop.TurnInput{TaskID: "task-d", Sink: rec, Messages: []loop.Message{{Role: loop.RoleUser, Content: "pay"}}})
		var se *loop.StopError
		if err != nil || out.Status != loop.TaskWorking || out.Reason != loop.ReasonShutdown || !errors.As(out.Err, &se) || !se.Suspend {
			t.Fatalf("suspended turn: %+v, %v", out, err)
		}
		for _, k := range []loop.EventKind{loop.KindTaskComplete, loop.KindToolComplete} {
			if n := rec.count(k); n != 0 {
				t.Fatalf("the suspended turn announced %d %s events", n, k)
			}
		}
		task, err := db.LoadTask(context.Background(), "task-d")
		if err != nil || task.Status != loop.TaskWorking {
			t.Fatalf("after the suspension the task is %+v, %v", task, err)
		}
		entries, _ := db.Calls(context.Background(), "task-d")
		if len(entries) != 1 || entries[0].State != loop.CallStarted || entries[0].Result != nil {
			t.Fatalf("the cut call's journal entry is %+v, want started without a result", entries)
		}
		cp, err := db.LoadCheckpoint(context.Background(), "task-d")
		if err != nil || cp.Stage != loop.StageTools {
			t.Fatalf("checkpoint %+v, %v; want the one before the tools ran", cp, err)
		}
		res := resume(t, db, l, &recorder{})
		if res.Status != loop.TaskCompleted || !strings.Contains(res.Content, `tool "charge" was interrupted by a restart`) {
			t.Fatalf("resumed: %s %q", res.Status, res.Content)
		}
	})
}

// fullJournal refuses tool results for want of space while full is set.
type fullJournal struct {
	durableBackend
	full *atomic.Bool
}

func (f fullJournal) EndCall(ctx context.Context, taskID, callID string, res loop.ToolResult) error {
	if f.full.Load() {
		return fmt.Errorf("end call: %w", loop.ErrStorageFull)
	}
	return f.durableBackend.EndCall(ctx, taskID, callID, res)
}

// A write of the turn refused for want of space (loop.ErrStorageFull, here
// a tool's result) suspends the turn at once, as a graceful stop does: it
// does not run on with effects it cannot record. Nothing more of it is
// written or announced (no end, no checkpoint past the last), its task
// stays working, the call stays started in the journal; resumed once
// writes are taken, it goes on from its checkpoint and the call is not
// run twice.
func TestRefusedWriteSuspendsTheTurn(t *testing.T) {
	durableBackends(t, func(t *testing.T, db durableBackend) {
		var full atomic.Bool
		var runs atomic.Int32
		tools := toolsMap{"charge": func(ctx context.Context, c loop.ToolCall, _ *loop.ToolEnv) (loop.ToolResult, error) {
			runs.Add(1)
			full.Store(true) // the disk fills while the tool runs
			return loop.ToolResult{Content: "charged"}, nil
		}}
		fj := fullJournal{durableBackend: db, full: &full}
		l := durableLoop(t, fj, toolThenAnswer(nil, call("b", "charge", `{}`)), tools)
		a := newAgent(t, db, l, func(c *loop.AgentConfig) { c.ContextID = "ctx-d" })
		rec := &recorder{}
		out, err := a.Turn(context.Background(), loop.TurnInput{TaskID: "task-d", Sink: rec, Messages: []loop.Message{{Role: loop.RoleUser, Content: "pay"}}})
		var se *loop.StopError
		if err != nil || out.Status != loop.TaskWorking || out.Reason != loop.ReasonStorageFull || !errors.As(out.Err, &se) || !se.Suspend {
			t.Fatalf("turn whose tool result was refused: %+v, %v; want suspended (working, storage_full)", out, err)
		}
		for _, k := range []loop.EventKind{loop.KindTaskComplete, loop.KindToolComplete} {
			if n := rec.count(k); n != 0 {
				t.Fatalf("the suspended turn announced %d %s events", n, k)
			}
		}
		task, err := db.LoadTask(context.Background(), "task-d")
		if err != nil || task.Status != loop.TaskWorking {
			t.Fatalf("after the suspension the task is %+v, %v", task, err)
		}
		entries, _ := db.Calls(context.Background(), "task-d")
		if len(entries) != 1 || entries[0].State != loop.CallStarted || entries[0].Result != nil {
			t.Fatalf("the call's journal entry is %+v, want started without a result", entries)
		}
		cp, err := db.LoadCheckpoint(context.Background(), "task-d")
		if err != nil || cp.Stage != loop.StageTools {
			t.Fatalf("checkpoint %+v, %v; want the one before the tools ran", cp, err)
		}
		full.Store(false)
		res := resume(t, db, l, &recorder{})
		if res.Status != loop.TaskCompleted {
			t.Fatalf("resumed: %s %q", res.Status, res.Content)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("the tool ran %d times, want once", n)
		}
	})
}

// A sub-agent's call cut by the host's suspension of its parent's turn
// (StopError.Suspend) ends its sub-task with nothing written: its record
// stays working and no end of it is announced, as a crash leaves it; the
// resumed turn reports the call interrupted, which ends the sub-task
// failed, with its final events. Before, the cut call's Finish wrote the
// sub-task canceled with its end events dropped by the suspension, and the
// resumed turn, finding the record final, announced nothing: a sub-task
// final with a stream that never said so.
func TestSuspendedSubtaskWritesNoEnd(t *testing.T) {
	durableBackends(t, func(t *testing.T, db durableBackend) {
		reached := make(chan struct{})
		var once sync.Once
		tools := toolsMap{"delegate": func(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
			st, err := env.StartSubtask(ctx, loop.SubtaskSpec{AgentID: "helper", Prompt: "do it", CallID: c.ID})
			if err != nil {
				return loop.ToolResult{}, err
			}
			once.Do(func() { close(reached) })
			<-ctx.Done()
			st.Finish(ctx, loop.TaskCanceled, "", ctx.Err()) // as a cut sub-agent's call does
			return loop.ToolResult{}, ctx.Err()
		}}
		l := newLoop(t, loop.Config{Model: toolThenAnswer(nil, call("s1", "delegate", `{}`)), Toolsets: []loop.Toolset{tools},
			Checkpoints: db, Journal: db, Subtasks: db})
		a := newAgent(t, db, l, func(c *loop.AgentConfig) { c.ContextID = "ctx-d" })
		ctx, stop := context.WithCancelCause(context.Background())
		defer stop(nil)
		go func() {
			<-reached
			stop(&loop.StopError{Reason: loop.ReasonShutdown, Message: "shut down", Suspend: true})
		}()
		rec := &recorder{}
		out, err := a.Turn(ctx, loop.TurnInput{TaskID: "task-d", Sink: rec, Messages: []loop.Message{{Role: loop.RoleUser, Content: "go"}}})
		if err != nil || out.Status != loop.TaskWorking {
			t.Fatalf("suspended turn: %+v, %v", out, err)
		}
		subID := loop.SubtaskID("task-d", "s1")
		sub, err := db.LoadTask(context.Background(), subID)
		if err != nil || sub.Status != loop.TaskWorking {
			t.Fatalf("after the suspension the sub-task is %s (%v), want working: nothing of its end written", sub.Status, err)
		}
		if n := rec.count(loop.KindTaskComplete); n != 0 {
			t.Fatalf("the suspended turn announced %d task-complete events", n)
		}
		again := &recorder{}
		if res := resume(t, db, l, again); res.Status != loop.TaskCompleted {
			t.Fatalf("resumed: %s %q", res.Status, res.Content)
		}
		sub, _ = db.LoadTask(context.Background(), subID)
		ended := false
		for _, e := range again.events {
			if tc, ok := e.(*loop.TaskComplete); ok && tc.TaskID == subID && tc.Status == sub.Status {
				ended = true
			}
		}
		if !sub.Status.Terminal() || !ended {
			t.Fatalf("after the resume the sub-task is %s, its end announced: %v; want it ended with its final events", sub.Status, ended)
		}
	})
}
