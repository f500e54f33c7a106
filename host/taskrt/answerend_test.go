package taskrt

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
	"github.com/looopy-go/looopy/store"
)

// askModel asks its client's tool "ask" once, then answers with what the
// tool returned.
type askModel struct{}

func (askModel) Generate(_ context.Context, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == loop.RoleTool {
		return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "told: " + last.Content},
			FinishReason: loop.FinishStop}, nil
	}
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant,
		ToolCalls: []loop.ToolCall{{ID: "call-1", Name: "ask", Arguments: json.RawMessage(`{}`)}}},
		FinishReason: loop.FinishToolCalls}, nil
}

// settleHook is a runtime's Events whose Settle first calls at: Settle is
// what the runtime does once a turn's end is out and before it lets go of
// the task (its lease, its place among the running turns).
type settleHook struct {
	hubEndEvents
	at func(taskID string, terminal bool)
}

func (s settleHook) Settle(ctx context.Context, taskID, contextID string, terminal bool) error {
	s.at(taskID, terminal)
	return s.hubEndEvents.Settle(ctx, taskID, contextID, terminal)
}

// settleHookLog is settleHook over the log alone: the turn's commit and
// its end are separate writes.
type settleHookLog struct {
	*logEvents
	at func(taskID string, terminal bool)
}

func (s settleHookLog) Settle(ctx context.Context, taskID, contextID string, terminal bool) error {
	s.at(taskID, terminal)
	return s.logEvents.Settle(ctx, taskID, contextID, terminal)
}

// A client that reads its task paused (its turn's end written) and answers
// at once is not refused: the answer waits for the turn that paused to let
// go of the task, instead of answering "agent is busy with another turn";
// and with MaxRunningPerPrincipal 1 the same principal's next task is
// admitted, not refused over its quota by a turn it was told had ended.
// Both are tried in the window between the end and the runtime letting go
// (the Settle of the paused turn), with the turn's end in one write with
// its commit (the Hub) and in separate writes (the log alone).
func TestPausedTaskAnsweredAsSoonAsItsEndIsRead(t *testing.T) {
	t.Parallel()
	for _, oneWrite := range []bool{true, false} {
		name := "one write"
		if !oneWrite {
			name = "separate writes"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db, err := store.Open(store.Options{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			l, err := loop.New(loop.Config{Model: askModel{}, Checkpoints: db, Journal: db})
			if err != nil {
				t.Fatal(err)
			}
			const taskID = "t-paused"
			var rt *Runtime
			var once sync.Once
			waiting := make(chan struct{}, 1)
			type result struct {
				st  *Started
				err error
			}
			answered := make(chan result, 1)
			var paused loop.TaskStatus
			var otherErr error
			ctx, cancel := context.WithTimeout(context.Background(), guard)
			defer cancel()
			at := func(id string, terminal bool) {
				if id != taskID || terminal {
					return
				}
				once.Do(func() {
					// The end is written: the client can read the task
					// paused and its open request.
					rec, err := db.LoadTask(ctx, taskID)
					if err != nil {
						t.Error(err)
						return
					}
					paused = rec.Status
					open := rec.OpenRequests()
					if len(open) != 1 {
						t.Errorf("open requests %+v, want 1", open)
						return
					}
					// Another task of the same principal: its paused
					// turn no longer counts as running.
					// It pauses in turn, its end awaited whole, so that
					// the answer below is the principal's only turn.
					other, err := rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-other", Message: user("hello"),
						ClientTools: []loop.ClientTool{{ToolDefinition: loop.ToolDefinition{Name: "ask", Client: true}}}})
					if otherErr = err; err == nil {
						if err := rt.Wait(ctx, other.Run); err != nil {
							t.Error(err)
							return
						}
					}
					go func() {
						st, err := rt.Start(ctx, StartRequest{Auth: alice(), TaskID: taskID,
							Answers: []loop.InputAnswer{{InputID: open[0].InputID, Result: &loop.ToolResult{Content: "42"}}}})
						answered <- result{st, err}
					}()
					// The answer either is refused at once or waits for
					// this turn to let go of the task (which it cannot
					// before this returns).
					select {
					case r := <-answered:
						answered <- r
					case <-waiting:
					case <-ctx.Done():
						t.Error("the answer neither refused nor waiting")
					}
				})
			}
			rt = pauseRuntime(t, db, l, oneWrite, at, waiting)
			st, err := rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-ask", Message: user("ask me"),
				ClientTools: []loop.ClientTool{{ToolDefinition: loop.ToolDefinition{Name: "ask", Client: true}}},
				NewID:       func() string { return taskID }})
			if err != nil {
				t.Fatal(err)
			}
			if err := rt.Wait(ctx, st.Run); err != nil {
				t.Fatal(err)
			}
			if paused != loop.TaskWaitingInput {
				t.Fatalf("the task read at its end was %q, want %s", paused, loop.TaskWaitingInput)
			}
			if otherErr != nil {
				t.Errorf("another task of the principal, once the paused turn's end was out: %v", otherErr)
			}
			var r result
			select {
			case r = <-answered:
			case <-ctx.Done():
				t.Fatal("no outcome of the answer")
			}
			if r.err != nil {
				if errors.Is(r.err, loop.ErrBusy) {
					t.Fatalf("the answer to the paused task was refused: %v", r.err)
				}
				t.Fatal(r.err)
			}
			if err := rt.Wait(ctx, r.st.Run); err != nil {
				t.Fatal(err)
			}
			rec, err := db.LoadTask(ctx, taskID)
			if err != nil || rec.Status != loop.TaskCompleted || rec.Content != "told: 42" {
				t.Fatalf("after the answer: %s %q, %v; want completed with the answer", rec.Status, rec.Content, err)
			}
		})
	}
}

// pauseRuntime is a runtime over db whose Events call at before each
// Settle, with the turn's end in one write with its commit (the Hub) or
// not (the log alone); waiting gets a value at PointTurnWaiting. Its
// principals may run one turn each.
func pauseRuntime(t *testing.T, db *store.Badger, l *loop.Loop, oneWrite bool, at func(string, bool), waiting chan struct{}) *Runtime {
	t.Helper()
	hub, err := sse.New(sse.Config{Log: db.Events()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Close() })
	var ev Events = settleHook{hubEndEvents: hubEndEvents{hub: hub, log: db.Events()}, at: at}
	if !oneWrite {
		ev = settleHookLog{logEvents: &logEvents{log: db.Events()}, at: at}
	}
	rt, err := New(Config{Loop: l, Events: ev, Owner: "host-a", MaxRunningPerPrincipal: 1,
		Crashpoint: func(p string) {
			if p == PointTurnWaiting {
				select {
				case waiting <- struct{}{}:
				default:
				}
			}
		},
		Stores: Stores{Messages: db, Agents: db, Tasks: db, Commit: db, Checkpoints: db, Journal: db, Durable: db,
			Leases: db, TaskLeases: db}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		rt.Shutdown(ctx)
	})
	return rt
}

// A client that reads its task paused and cancels it at once gets it
// canceled: the turn that paused (still letting go of the task) is not
// what is cancelled, the paused task is, once that turn let go. Before,
// the cancel went to the ended turn, waited for it and answered the task
// still paused, which stayed so.
func TestPausedTaskCanceledAsSoonAsItsEndIsRead(t *testing.T) {
	t.Parallel()
	for _, oneWrite := range []bool{true, false} {
		name := "one write"
		if !oneWrite {
			name = "separate writes"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db, err := store.Open(store.Options{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			l, err := loop.New(loop.Config{Model: askModel{}, Checkpoints: db, Journal: db})
			if err != nil {
				t.Fatal(err)
			}
			const taskID = "t-paused"
			ctx, cancel := context.WithTimeout(context.Background(), guard)
			defer cancel()
			type result struct {
				rec loop.TaskRecord
				err error
			}
			canceled := make(chan result, 1)
			waiting := make(chan struct{}, 1)
			var once sync.Once
			var paused loop.TaskStatus
			var rt *Runtime
			at := func(id string, terminal bool) {
				if id != taskID || terminal {
					return
				}
				once.Do(func() {
					rec, err := db.LoadTask(ctx, taskID)
					if err != nil {
						t.Error(err)
						return
					}
					paused = rec.Status
					go func() {
						rec, err := rt.Cancel(ctx, "alice", taskID)
						canceled <- result{rec, err}
					}()
					select {
					case r := <-canceled:
						canceled <- r
					case <-waiting:
					case <-ctx.Done():
						t.Error("the cancel neither answered nor waited for the paused turn to let go " +
							"(it waits on that turn itself, as on a running one)")
					}
				})
			}
			rt = pauseRuntime(t, db, l, oneWrite, at, waiting)
			st, err := rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-ask", Message: user("ask me"),
				ClientTools: []loop.ClientTool{{ToolDefinition: loop.ToolDefinition{Name: "ask", Client: true}}},
				NewID:       func() string { return taskID }})
			if err != nil {
				t.Fatal(err)
			}
			if err := rt.Wait(ctx, st.Run); err != nil {
				t.Fatal(err)
			}
			if paused != loop.TaskWaitingInput {
				t.Fatalf("the task read at its end was %q, want %s", paused, loop.TaskWaitingInput)
			}
			var r result
			select {
			case r = <-canceled:
			case <-ctx.Done():
				t.Fatal("no outcome of the cancel")
			}
			if r.err != nil || r.rec.Status != loop.TaskCanceled {
				t.Fatalf("cancel answered %s, %v; want canceled", r.rec.Status, r.err)
			}
			if rec, err := db.LoadTask(ctx, taskID); err != nil || rec.Status != loop.TaskCanceled {
				t.Fatalf("the task is %s, %v; want canceled", rec.Status, err)
			}
		})
	}
}
