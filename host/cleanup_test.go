package host

import (
	"context"
	"errors"
	"log/slog"
	"slices"
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

func TestSweepDurable(t *testing.T) {
	t.Parallel()
	st := openBadger(t)
	ctx := context.Background()
	// deleted: record gone; never: no record at all; done: finished, kept;
	// running: a turn runs here; waiting: waits for its client.
	for _, id := range []string{"deleted", "never", "done", "running", "waiting"} {
		seedDurable(t, st, id)
	}
	saveTask(t, st, "deleted", loop.TaskCompleted, time.Time{})
	if err := st.DeleteTask(ctx, "deleted"); err != nil {
		t.Fatal(err)
	}
	saveTask(t, st, "done", loop.TaskFailed, time.Time{})
	saveTask(t, st, "running", loop.TaskWorking, time.Time{})
	saveTask(t, st, "waiting", loop.TaskWaitingInput, time.Time{})

	m := newTaskManager(nil, Stores{Tasks: st, Checkpoints: st, Journal: st}, nil, LimitsConfig{}, AgentConfig{},
		slog.New(slog.DiscardHandler))
	m.running["running"] = &run{taskID: "running"}

	n, err := m.sweepDurable(ctx, st)
	if err != nil || n != 3 {
		t.Fatalf("sweep: %d tasks, %v; want 3 (deleted, never, done)", n, err)
	}
	ids, err := st.DurableTaskIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"done", "running", "waiting"}; !slices.Equal(ids, want) {
		t.Fatalf("tasks with a journal or checkpoint after the sweep: %v, want %v", ids, want)
	}
	for _, id := range []string{"deleted", "never"} {
		if calls, err := st.Calls(ctx, id); err != nil || len(calls) != 0 {
			t.Errorf("journal of %s: %v, %v; want it gone", id, calls, err)
		}
	}
	// A finished task keeps its journal (for the operator) but not its
	// checkpoint; running and waiting tasks keep both.
	if calls, _ := st.Calls(ctx, "done"); len(calls) != 1 {
		t.Errorf("journal of the finished task: %v, want its call", calls)
	}
	if _, err := st.LoadCheckpoint(ctx, "done"); !errors.Is(err, loop.ErrNotFound) {
		t.Errorf("checkpoint of the finished task: %v, want it gone", err)
	}
	for _, id := range []string{"running", "waiting"} {
		if _, err := st.LoadCheckpoint(ctx, id); err != nil {
			t.Errorf("checkpoint of %s: %v, want it kept", id, err)
		}
	}
	// Nothing is left to do: a second sweep changes nothing.
	if n, err := m.sweepDurable(ctx, st); err != nil || n != 0 {
		t.Fatalf("second sweep: %d, %v; want 0", n, err)
	}
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
		Stores: Stores{Messages: st, Agents: st, Tasks: st, Events: st.Events(), Checkpoints: st, Journal: st}})
	if err != nil {
		t.Fatal(err)
	}
	if srv.cleanup == nil {
		t.Fatal("no cleanup started with a store that lists journals")
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
	select {
	case <-srv.cleanup.done:
	default:
		t.Fatal("cleanup still running after Shutdown")
	}
}
