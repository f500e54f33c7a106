package taskrt

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// relayTools is a two-level chain of sub-agents as a host runs it: the
// tool "helper" is a local sub-agent (an agent plugin's shape: a sub-task
// whose run calls the turn's tools as that sub-task and passes a request
// of its call up), and the tool "peer" a remote agent (a sub-task whose
// remote task remote-1 asks for an approval, passed up with its remote
// task's id; CancelRemoteTask records the remote tasks it was asked to
// cancel). Run again with the client's answer, peer calls onAnswer first
// (a hook inside the answer's resume: the local sub-agent's record has
// started over, the remote call's has not yet).
type relayTools struct {
	onAnswer func(ctx context.Context, env *loop.ToolEnv) error

	mu       sync.Mutex
	canceled []string
}

func (*relayTools) Tools(context.Context) ([]loop.ToolDefinition, error) {
	return []loop.ToolDefinition{{Name: "helper"}, {Name: "peer"}}, nil
}

func (r *relayTools) Call(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	if c.Name == "helper" {
		return r.helper(ctx, c, env)
	}
	if env.Routed != nil && r.onAnswer != nil {
		if err := r.onAnswer(ctx, env); err != nil {
			return loop.ToolResult{}, err // as a remote agent's call cut before it started its sub-task
		}
	}
	st, err := env.StartSubtask(ctx, loop.SubtaskSpec{AgentID: "peer", Prompt: "ledger"})
	if err != nil {
		return loop.ToolResult{}, err
	}
	if env.Routed != nil {
		st.Finish(ctx, loop.TaskCompleted, "approved and done", nil)
		return loop.ToolResult{Content: "approved and done"}, nil
	}
	if err := st.Note(ctx, map[string]any{loop.RemoteTaskKey: "remote-1"}); err != nil {
		return loop.ToolResult{}, err
	}
	return loop.ToolResult{}, st.PassUp(ctx, loop.InputRequest{InputID: "approval:echo", InputType: loop.InputApproval,
		Prompt: "approve echo", RequireUser: true}, "remote-1", "")
}

// helper runs the local sub-agent: one call of peer as its sub-task.
func (r *relayTools) helper(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	st, err := env.StartSubtask(ctx, loop.SubtaskSpec{AgentID: "helper", Prompt: "dig", CallID: c.ID})
	if err != nil {
		return loop.ToolResult{}, err
	}
	sub := st.Env()
	res, err := sub.Tools.Call(ctx, loop.ToolCall{ID: "c2", Name: "peer", Arguments: json.RawMessage(`{"prompt":"ledger"}`)}, sub)
	if req, paused := st.Paused(); paused && ctx.Err() == nil {
		return loop.ToolResult{}, st.PassUp(ctx, req, "", "")
	}
	switch {
	case ctx.Err() != nil:
		st.Finish(ctx, loop.TaskCanceled, "", ctx.Err())
		return loop.ToolResult{}, ctx.Err()
	case err != nil:
		st.Finish(ctx, loop.TaskFailed, "", err)
		return loop.ToolResult{}, err
	}
	st.Finish(ctx, loop.TaskCompleted, res.Content, nil)
	return loop.ToolResult{Content: res.Content}, nil
}

func (r *relayTools) CancelRemoteTask(_ context.Context, agentID, remoteTaskID string) (bool, error) {
	if agentID != "peer" {
		return false, nil
	}
	r.mu.Lock()
	r.canceled = append(r.canceled, remoteTaskID)
	r.mu.Unlock()
	return true, nil
}

func (r *relayTools) remoteCanceled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.canceled) > 0
}

// helperModel calls helper once, then answers with what it said.
type helperModel struct{}

func (helperModel) Generate(_ context.Context, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
	if last := req.Messages[len(req.Messages)-1]; last.Role == loop.RoleTool {
		return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "helper said: " + last.Content},
			FinishReason: loop.FinishStop}, nil
	}
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant,
		ToolCalls: []loop.ToolCall{{ID: "c1", Name: "helper", Arguments: json.RawMessage(`{}`)}}}, FinishReason: loop.FinishToolCalls}, nil
}

func relayHarness(t *testing.T, tools *relayTools) *harness {
	t.Helper()
	return newHarness(t, t.TempDir(), helperModel{}, func(c *Config) {
		l, err := loop.New(loop.Config{Model: helperModel{}, Toolsets: []loop.Toolset{tools},
			Checkpoints: c.Stores.Checkpoints, Journal: c.Stores.Journal, Subtasks: c.Stores.Tasks})
		if err != nil {
			t.Fatal(err)
		}
		c.Loop = l
	})
}

// pausedOnRelay starts a task and returns it paused on the request peer's
// remote task asked, relayed up by helper.
func pausedOnRelay(t *testing.T, h *harness) loop.TaskRecord {
	t.Helper()
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
	low := loop.SubtaskID(loop.SubtaskID(rec.ID, "c1"), "c1>c2")
	if sub, err := h.db.LoadTask(ctx, low); err != nil || sub.Status != loop.TaskWaitingInput {
		t.Fatalf("the remote call's sub-task %s: %s (%v), want waiting-input", low, sub.Status, err)
	}
	return rec
}

// wantChainEnded checks that no sub-task of the task p is unfinished and
// that the remote task was canceled.
func wantChainEnded(t *testing.T, h *harness, tools *relayTools, p string) {
	t.Helper()
	ctx := context.Background()
	mid := loop.SubtaskID(p, "c1")
	for _, id := range []string{mid, loop.SubtaskID(mid, "c1>c2")} {
		rec, err := h.db.LoadTask(ctx, id)
		if err != nil || !rec.Status.Terminal() {
			t.Errorf("sub-task %s of the ended task: %s (%v), want it ended", id, rec.Status, err)
		}
	}
	if !tools.remoteCanceled() {
		t.Error("the remote task remote-1 was not canceled")
	}
}

// The answer and the cancel of a task paused on a request relayed from a
// remote agent's sub-task below a local sub-agent: the answer resumes the
// chain level by level (the local sub-agent's sub-task starts over,
// without the request that named the level below), and the cancel lands
// right then, before the remote call's sub-task is taken up again. When
// the cancel returns, the task is canceled, no sub-task under it is left
// unfinished, and the remote task is canceled. Before, the remote call's
// sub-task stayed waiting-input (its parent's record no longer named it,
// and it is not its top task's own sub-task), and so did the remote task,
// until the periodic sweep or the next start.
func TestCancelInsideAnAnswersResumeEndsTheChain(t *testing.T) {
	t.Parallel()
	reached := make(chan struct{})
	tools := &relayTools{onAnswer: func(ctx context.Context, _ *loop.ToolEnv) error {
		close(reached)
		<-ctx.Done() // held until the cancel
		return ctx.Err()
	}}
	h := relayHarness(t, tools)
	rec := pausedOnRelay(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	st, err := h.rt.Start(ctx, StartRequest{Auth: alice(), TaskID: rec.ID,
		Answers: []loop.InputAnswer{{InputID: rec.OpenRequests()[0].InputID, Decision: loop.DecisionApprove}}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatal("the answer never reached the remote call")
	}
	if mid, err := h.db.LoadTask(ctx, loop.SubtaskID(rec.ID, "c1")); err != nil || mid.Status != loop.TaskWorking || len(mid.Requests) != 0 {
		t.Fatalf("the local sub-agent's sub-task inside the resume: %s %+v (%v), want working, started over", mid.Status, mid.Requests, err)
	}
	got, err := h.rt.Cancel(ctx, "alice", rec.ID)
	if err != nil || got.Status != loop.TaskCanceled {
		t.Fatalf("cancel inside the answer's resume: %s (%v), want canceled", got.Status, err)
	}
	wantChainEnded(t, h, tools, rec.ID)
	if err := h.rt.Wait(ctx, st.Run); err != nil {
		t.Fatal(err)
	}
}

// A remote call's sub-task that the answer took up again (working, its
// remote task named in its record only: its parent's record started over)
// and that its call leaves unfinished (the call panics) is found when the
// task ends, though no request routes to it and its own parent's record
// does not list it: it ends canceled and its remote task is canceled.
func TestWorkingNestedSubtaskEndsWithTheTask(t *testing.T) {
	t.Parallel()
	tools := &relayTools{}
	tools.onAnswer = func(ctx context.Context, env *loop.ToolEnv) error {
		if _, err := env.StartSubtask(ctx, loop.SubtaskSpec{AgentID: "peer", Prompt: "ledger"}); err != nil {
			return err
		}
		panic("the remote call broke after it took its sub-task up again")
	}
	h := relayHarness(t, tools)
	rec := pausedOnRelay(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	st, err := h.rt.Start(ctx, StartRequest{Auth: alice(), TaskID: rec.ID,
		Answers: []loop.InputAnswer{{InputID: rec.OpenRequests()[0].InputID, Decision: loop.DecisionApprove}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.rt.Wait(ctx, st.Run); err != nil {
		t.Fatal(err)
	}
	if top, err := h.db.LoadTask(ctx, rec.ID); err != nil || top.Status != loop.TaskCompleted {
		t.Fatalf("task: %s (%v), want completed (its model read the broken call's error)", top.Status, err)
	}
	wantChainEnded(t, h, tools, rec.ID)
}

// An answer that loses to a cancel of its paused task is refused saying
// the task was canceled (ErrTaskEnded), never "busy with another turn":
// the answer read the task paused and had its answers accepted, then the
// cancel wrote the task's end before the answer could store the task
// working again. Before, the refused write answered busy.
func TestAnswerThatLosesToACancelSaysCanceled(t *testing.T) {
	t.Parallel()
	tools := &relayTools{}
	h := relayHarness(t, tools)
	rec := pausedOnRelay(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	read, canceled := make(chan struct{}), make(chan struct{})
	answered := make(chan error, 1)
	go func() {
		_, err := h.rt.Start(ctx, StartRequest{Auth: alice(), TaskID: rec.ID,
			Answers: []loop.InputAnswer{{InputID: rec.OpenRequests()[0].InputID, Decision: loop.DecisionApprove}},
			OnAnswered: func(loop.TaskRecord) func() {
				close(read) // the answer has read the task paused
				<-canceled
				return nil
			}})
		answered <- err
	}()
	<-read
	got, err := h.rt.Cancel(ctx, "alice", rec.ID)
	if err != nil || got.Status != loop.TaskCanceled {
		t.Fatalf("cancel: %s (%v), want canceled", got.Status, err)
	}
	close(canceled)
	err = <-answered
	if !errors.Is(err, ErrTaskEnded) || errors.Is(err, loop.ErrBusy) {
		t.Fatalf("answer after the cancel: %v, want ErrTaskEnded (canceled), not busy", err)
	}
	wantChainEnded(t, h, tools, rec.ID)
}

// On stores shared by two hosts, the periodic sweep of host A leaves a
// sub-task whose parent has ended while a turn of its top task runs on
// host B (that turn may take the sub-task up again: a call resumed after
// a crash, or run again with an answer, starts its sub-task over): the
// top task's lease, which B's turn holds, fences the sweep. Once the
// turn is over, the next sweep ends it and cancels its remote task.
// Before, A's sweep canceled it, and its remote task, under B's turn.
func TestSweepLeavesOrphansUnderATurnOnAnotherHost(t *testing.T) {
	t.Parallel()
	m := &scriptModel{gate: make(chan struct{})}
	tools := &relayTools{}
	hs := newCluster(t, 2, m, func(c *Config) {
		l, err := loop.New(loop.Config{Model: m, Toolsets: []loop.Toolset{tools},
			Checkpoints: c.Stores.Checkpoints, Journal: c.Stores.Journal, Subtasks: c.Stores.Tasks})
		if err != nil {
			t.Fatal(err)
		}
		c.Loop, c.LeaseTTL = l, 10*time.Minute
	})
	a, b := hs[0], hs[1]
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	st, err := b.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-fence", Message: user("wait"),
		NewID: func() string { return "t-fence" }})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	mid, low := loop.SubtaskID("t-fence", "c1"), loop.SubtaskID(loop.SubtaskID("t-fence", "c1"), "c1>c2")
	for _, rec := range []loop.TaskRecord{
		{ID: mid, ContextID: "c-fence", Owner: "alice", ParentTaskID: "t-fence", AgentID: "helper", Status: loop.TaskCanceled,
			CreatedAt: now, UpdatedAt: now},
		{ID: low, ContextID: "c-fence", Owner: "alice", ParentTaskID: mid, AgentID: "peer", Status: loop.TaskWaitingInput,
			Metadata: map[string]any{loop.RemoteTaskKey: "remote-1"}, CreatedAt: now, UpdatedAt: now,
			Requests: []loop.InputRequest{{InputID: "approval:echo", InputType: loop.InputApproval, Prompt: "approve echo"}}},
	} {
		if err := a.st.SaveTask(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.rt.SweepOrphans(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, err := a.st.LoadTask(ctx, low); err != nil || rec.Status != loop.TaskWaitingInput || tools.remoteCanceled() {
		t.Fatalf("sub-task under a turn of its top task on host B, after host A's sweep: %s (%v), remote canceled %v; want it left",
			rec.Status, err, tools.remoteCanceled())
	}
	close(m.gate)
	if err := b.rt.Wait(ctx, st.Run); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(guard); ; time.Sleep(10 * time.Millisecond) {
		// The turn's lease goes last, after Wait returns.
		if _, err := a.rt.SweepOrphans(ctx); err != nil {
			t.Fatal(err)
		}
		if rec, err := a.st.LoadTask(ctx, low); err == nil && rec.Status == loop.TaskCanceled && tools.remoteCanceled() {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("sub-task after the turn on host B ended: %s (%v), remote canceled %v; want canceled",
				rec.Status, err, tools.remoteCanceled())
		}
	}
}
