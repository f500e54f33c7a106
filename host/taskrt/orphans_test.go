package taskrt

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// remoteCancels is a remote agent's toolset that records the remote tasks
// it was asked to cancel.
type remoteCancels struct {
	mu       sync.Mutex
	canceled []string
}

func (*remoteCancels) Tools(context.Context) ([]loop.ToolDefinition, error) { return nil, nil }
func (*remoteCancels) Call(context.Context, loop.ToolCall, *loop.ToolEnv) (loop.ToolResult, error) {
	return loop.ToolResult{}, errors.New("no tools")
}
func (r *remoteCancels) CancelRemoteTask(_ context.Context, agentID, remoteTaskID string) (bool, error) {
	if agentID != "peer" {
		return false, nil
	}
	r.mu.Lock()
	r.canceled = append(r.canceled, remoteTaskID)
	r.mu.Unlock()
	return true, nil
}

func (r *remoteCancels) was(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.canceled {
		if c == id {
			return true
		}
	}
	return false
}

// pausedChain stores what an answer racing a cancel leaves: the top task
// p with status top (its end written), its sub-task p.call_1 (a local
// sub-agent) waiting for input on the request it relayed from its own
// sub-task p.call_1.call_2 (a remote agent's call), waiting for the remote
// task remote-<p> on peer.
func pausedChain(t *testing.T, h *harness, p string, top loop.TaskStatus) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	mid, low := p+".call_1", p+".call_1.call_2"
	approve := func(id string, rt *loop.InputRoute) []loop.InputRequest {
		return []loop.InputRequest{{InputID: id, InputType: "approval", Prompt: "approve ledger", Route: rt}}
	}
	for _, rec := range []loop.TaskRecord{
		{ID: p, ContextID: "c-" + p, Owner: "alice", Status: top, Subtasks: []string{mid}, CreatedAt: now, UpdatedAt: now},
		{ID: mid, ContextID: "c-" + p, Owner: "alice", ParentTaskID: p, AgentID: "researcher", Status: loop.TaskWaitingInput,
			History: []loop.Message{user("dig")}, CreatedAt: now, UpdatedAt: now,
			Requests: approve("in-mid", &loop.InputRoute{SubtaskID: low, AgentID: "peer", InputID: "in-low", RemoteTaskID: "remote-" + p})},
		{ID: low, ContextID: "c-" + p, Owner: "alice", ParentTaskID: mid, AgentID: "peer", Status: loop.TaskWaitingInput,
			History: []loop.Message{user("ledger")}, CreatedAt: now, UpdatedAt: now, Requests: approve("in-low", nil)},
	} {
		if err := h.db.SaveTask(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
}

func orphanHarness(t *testing.T) (*harness, *remoteCancels) {
	t.Helper()
	remote := &remoteCancels{}
	h := newHarness(t, t.TempDir(), &scriptModel{}, func(c *Config) {
		db := c.Stores.Tasks
		l, err := loop.New(loop.Config{Model: &scriptModel{}, Checkpoints: c.Stores.Checkpoints, Journal: c.Stores.Journal,
			Subtasks: db, Toolsets: []loop.Toolset{remote}})
		if err != nil {
			t.Fatal(err)
		}
		c.Loop = l
		c.Stores.Conversations = c.Stores.Tasks.(ConversationExpirer)
	})
	return h, remote
}

func wantOrphanEnded(t *testing.T, h *harness, remote *remoteCancels, p string) {
	t.Helper()
	for _, id := range []string{p + ".call_1", p + ".call_1.call_2"} {
		rec, err := h.db.LoadTask(context.Background(), id)
		if err != nil || rec.Status != loop.TaskCanceled || rec.Message == "" {
			t.Fatalf("sub-task %s: %+v (%v), want canceled with a reason", id, rec.Status, err)
		}
	}
	if !remote.was("remote-" + p) {
		t.Fatalf("the remote task remote-%s was not canceled (canceled: %v)", p, remote.canceled)
	}
}

// TestOrphanedSubtasksEnd: sub-tasks left waiting for input under a parent
// whose end is written (an answer resumed them while a cancel ended the
// parent) are orphans. A CancelTask of one is accepted and cancels it,
// what is below it, and the remote task through the recorded route; the
// recovery at start (and the periodic cleanup, the same sweep) ends the
// others. A chain whose top task still waits is left alone.
func TestOrphanedSubtasksEnd(t *testing.T) {
	t.Parallel()
	h, remote := orphanHarness(t)
	ctx := context.Background()
	pausedChain(t, h, "p1", loop.TaskCanceled)
	pausedChain(t, h, "p2", loop.TaskFailed)
	pausedChain(t, h, "p3", loop.TaskWaitingInput)

	rec, err := h.rt.Cancel(ctx, "alice", "p1.call_1")
	if err != nil || rec.Status != loop.TaskCanceled {
		t.Fatalf("cancel of a sub-task whose parent was canceled: %v (%v), want canceled", rec.Status, err)
	}
	wantOrphanEnded(t, h, remote, "p1")
	if _, err := h.rt.Cancel(ctx, "alice", "p3.call_1"); !errors.Is(err, ErrNotCancelable) || !strings.Contains(err.Error(), "cancel the parent") {
		t.Fatalf("cancel of a sub-task whose parent waits: %v, want refused", err)
	}

	if err := h.rt.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	wantOrphanEnded(t, h, remote, "p2")
	for _, id := range []string{"p3", "p3.call_1", "p3.call_1.call_2"} {
		if rec, err := h.db.LoadTask(ctx, id); err != nil || rec.Status != loop.TaskWaitingInput {
			t.Fatalf("%s under a waiting top task: %v (%v), want left waiting", id, rec.Status, err)
		}
	}
	if remote.was("remote-p3") {
		t.Fatal("the remote task of a waiting chain was canceled")
	}

	// The delete of its conversation with cancel=true cancels the top
	// task and, with it, the chain below.
	if _, err := h.rt.DeleteConversation(ctx, "c-p3", true); err != nil {
		t.Fatalf("delete of the conversation with cancel=true: %v", err)
	}
	if !remote.was("remote-p3") {
		t.Fatal("the remote task of the deleted conversation's chain was not canceled")
	}
}

// leaveTools starts a sub-task and, once the turn is canceled, returns
// without ending it: what a sub-agent resumed by an answer leaves when a
// cancel of its parent lands before it ends.
type leaveTools struct{ started chan struct{} }

func (leaveTools) Tools(context.Context) ([]loop.ToolDefinition, error) {
	return []loop.ToolDefinition{{Name: "delegate"}}, nil
}

func (l leaveTools) Call(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	if _, err := env.StartSubtask(ctx, loop.SubtaskSpec{AgentID: "researcher", Prompt: "dig"}); err != nil {
		return loop.ToolResult{}, err
	}
	close(l.started)
	<-ctx.Done()
	return loop.ToolResult{}, ctx.Err()
}

// TestCanceledTurnEndsItsOrphans: a turn canceled while a sub-task it
// started is unfinished (the sub-agent returned without ending it) ends
// that sub-task canceled with its own end, not at the next start.
func TestCanceledTurnEndsItsOrphans(t *testing.T) {
	t.Parallel()
	tools := leaveTools{started: make(chan struct{})}
	h := newHarness(t, t.TempDir(), delegateModel{}, func(c *Config) {
		l, err := loop.New(loop.Config{Model: delegateModel{}, Toolsets: []loop.Toolset{tools},
			Checkpoints: c.Stores.Checkpoints, Journal: c.Stores.Journal, Subtasks: c.Stores.Tasks})
		if err != nil {
			t.Fatal(err)
		}
		c.Loop = l
	})
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	st, err := h.rt.Start(ctx, StartRequest{Auth: alice(), Message: user("go")})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tools.started:
	case <-ctx.Done():
		t.Fatal("the sub-task did not start")
	}
	rec, err := h.rt.Cancel(ctx, "alice", st.Task.ID)
	if err != nil || rec.Status != loop.TaskCanceled {
		t.Fatalf("cancel: %v (%v), want canceled", rec.Status, err)
	}
	// The orphans end before the turn lets go of the task: the turn's
	// goroutine may still be ending once Cancel returned; Shutdown waits
	// for it.
	h.rt.Shutdown(ctx)
	h.rt = nil
	sub := loop.SubtaskID(st.Task.ID, "c1")
	srec, err := h.db.LoadTask(ctx, sub)
	if err != nil || srec.Status != loop.TaskCanceled || !strings.Contains(srec.Message, "parent task") {
		t.Fatalf("sub-task %s: %v %q (%v), want canceled as an orphan of its canceled parent", sub, srec.Status, srec.Message, err)
	}
}
