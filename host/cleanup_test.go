package host

import (
	"context"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// doneModel answers every call with "done".
type doneModel struct{}

func (doneModel) Generate(ctx context.Context, req *loop.ModelRequest, onDelta func(loop.Delta)) (*loop.ModelResponse, error) {
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "done"},
		FinishReason: loop.FinishStop}, nil
}

// seedDurable gives a task a journaled call and a checkpoint.
func seedDurable(t *testing.T, st *store.Badger, taskID string) {
	t.Helper()
	ctx := context.Background()
	if err := st.BeginCall(ctx, loop.JournalEntry{TaskID: taskID, CallID: "call-1", Key: loop.IdempotencyKey(taskID, "call-1"),
		Tool: "ledger_append", StartedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if err := st.EndCall(ctx, taskID, "call-1", loop.ToolResult{ToolCallID: "call-1", Content: "ok"}); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveCheckpoint(ctx, loop.Checkpoint{TaskID: taskID, ContextID: "ctx-" + taskID, Iteration: 1, Stage: loop.StageModel}); err != nil {
		t.Fatal(err)
	}
}

func saveTask(t *testing.T, st *store.Badger, id string, status loop.TaskStatus, expires time.Time) {
	t.Helper()
	now := time.Now().UTC()
	if err := st.SaveTask(context.Background(), loop.TaskRecord{ID: id, ContextID: "ctx-" + id, Owner: "local",
		Status: status, CreatedAt: now, UpdatedAt: now, ExpiresAt: expires}); err != nil {
		t.Fatal(err)
	}
}

func openBadger(t *testing.T) *store.Badger {
	t.Helper()
	st, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// The server's cleanup removes a finished task's journal once its record
// has expired, and stops with the server.
func TestCleanupAfterRetention(t *testing.T) {
	t.Parallel()
	st := openBadger(t)
	seedDurable(t, st, "finished")
	saveTask(t, st, "finished", loop.TaskCompleted, time.Now().Add(time.Second))
	seedDurable(t, st, "orphan")

	cfg := Config{Limits: LimitsConfig{TaskTTL: Duration(time.Second)}}
	srv, err := NewServer(cfg, Options{Model: doneModel{},
		Stores: Stores{Messages: st, Agents: st, Tasks: st, Events: st.Events(), Checkpoints: st, Journal: st, Durable: st}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ids, err := st.DurableTaskIDs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s the cleanup has left %v (the record expired after 1s)", ids)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
