package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// Durable is a store of checkpoints and tool-call journals.
type Durable interface {
	loop.CheckpointStore
	loop.Journal
	loop.DurableLister
}

// RunCheckpoints runs the suite of loop.CheckpointStore.
func RunCheckpoints(t *testing.T, open func(t *testing.T) loop.CheckpointStore) {
	t.Run("SaveLoadDelete", func(t *testing.T) {
		cs := open(t)
		ctx := context.Background()
		if _, err := cs.LoadCheckpoint(ctx, "none"); !errors.Is(err, loop.ErrNotFound) {
			t.Fatalf("LoadCheckpoint(unknown): err = %v, want ErrNotFound", err)
		}
		cp := loop.Checkpoint{TaskID: "t", ContextID: "c", Iteration: 2, Stage: loop.StageTools,
			Produced: []loop.Message{{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{{ID: "1", Name: "x", Arguments: json.RawMessage(`{}`)}}}},
			Pending:  []loop.ToolCall{{ID: "1", Name: "x", Arguments: json.RawMessage(`{}`)}},
			Usage:    loop.Usage{TotalTokens: 5}, UpdatedAt: t0}
		if err := cs.SaveCheckpoint(ctx, cp); err != nil {
			t.Fatalf("SaveCheckpoint: %v", err)
		}
		got, err := cs.LoadCheckpoint(ctx, "t")
		if err != nil || got.Iteration != 2 || got.Stage != loop.StageTools || len(got.Pending) != 1 || got.Usage.TotalTokens != 5 {
			t.Fatalf("LoadCheckpoint = %+v, %v", got, err)
		}
		cp.Iteration, cp.Stage = 3, loop.StageModel
		if err := cs.SaveCheckpoint(ctx, cp); err != nil {
			t.Fatal(err)
		}
		if got, _ := cs.LoadCheckpoint(ctx, "t"); got.Iteration != 3 || got.Stage != loop.StageModel {
			t.Fatalf("checkpoint not replaced: %+v", got)
		}
		if err := cs.DeleteCheckpoint(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.LoadCheckpoint(ctx, "t"); !errors.Is(err, loop.ErrNotFound) {
			t.Fatalf("LoadCheckpoint after delete: err = %v, want ErrNotFound", err)
		}
		if err := cs.SaveCheckpoint(ctx, loop.Checkpoint{ContextID: "c"}); !errors.Is(err, loop.ErrInvalid) {
			t.Fatalf("SaveCheckpoint without a task id: err = %v, want ErrInvalid", err)
		}
	})
}

// RunJournal runs the suite of loop.Journal and loop.DurableLister.
func RunJournal(t *testing.T, open func(t *testing.T) Durable) {
	t.Run("BeginEndCalls", func(t *testing.T) {
		j := open(t)
		ctx := context.Background()
		for i, id := range []string{"b", "a", "c"} {
			e := loop.JournalEntry{TaskID: "t", CallID: id, Key: loop.IdempotencyKey("t", id), Tool: "ledger",
				Arguments: json.RawMessage(`{"n":1}`), Attempts: 1, StartedAt: t0.Add(time.Duration(i) * time.Second)}
			if err := j.BeginCall(ctx, e); err != nil {
				t.Fatalf("BeginCall(%s): %v", id, err)
			}
		}
		if err := j.EndCall(ctx, "t", "a", loop.ToolResult{ToolCallID: "a", Content: "ok"}); err != nil {
			t.Fatalf("EndCall: %v", err)
		}
		if err := j.EndCall(ctx, "t", "zz", loop.ToolResult{}); !errors.Is(err, loop.ErrNotFound) {
			t.Fatalf("EndCall of a call never begun: err = %v, want ErrNotFound", err)
		}
		calls, err := j.Calls(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		var order []string
		for _, c := range calls {
			order = append(order, c.CallID)
			want := loop.CallStarted
			if c.CallID == "a" {
				want = loop.CallCompleted
				if c.Result == nil || c.Result.Content != "ok" || c.EndedAt.IsZero() {
					t.Fatalf("completed call = %+v", c)
				}
			}
			if c.State != want {
				t.Fatalf("call %s state %s, want %s", c.CallID, c.State, want)
			}
		}
		if !slices.Equal(order, []string{"b", "a", "c"}) {
			t.Fatalf("Calls order = %v, want the order they began", order)
		}
		if other, err := j.Calls(ctx, "other"); err != nil || len(other) != 0 {
			t.Fatalf("Calls of another task = %v, %v", other, err)
		}
	})
	t.Run("ListAndDelete", func(t *testing.T) {
		j := open(t)
		ctx := context.Background()
		if err := j.BeginCall(ctx, loop.JournalEntry{TaskID: "j1", CallID: "1", StartedAt: t0}); err != nil {
			t.Fatal(err)
		}
		if err := j.SaveCheckpoint(ctx, loop.Checkpoint{TaskID: "c1", ContextID: "c"}); err != nil {
			t.Fatal(err)
		}
		ids, err := j.DurableTaskIDs(ctx)
		if err != nil || !slices.Equal(ids, []string{"c1", "j1"}) {
			t.Fatalf("DurableTaskIDs = %v, %v; want [c1 j1]", ids, err)
		}
		if err := j.DeleteCalls(ctx, "j1"); err != nil {
			t.Fatal(err)
		}
		if calls, _ := j.Calls(ctx, "j1"); len(calls) != 0 {
			t.Fatalf("Calls after DeleteCalls = %v", calls)
		}
		if ids, _ := j.DurableTaskIDs(ctx); !slices.Equal(ids, []string{"c1"}) {
			t.Fatalf("DurableTaskIDs after DeleteCalls = %v", ids)
		}
	})
}
