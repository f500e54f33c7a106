package store

import (
	"context"
	"errors"
	"testing"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
)

func TestDurableRecordsSurviveReopenAndCorruptionIsNamed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cp := loop.Checkpoint{TaskID: "t/1", ContextID: "c", Iteration: 2, Stage: loop.StageTools,
		Pending: []loop.ToolCall{{ID: "a", Name: "calc"}}}
	if err := b.SaveCheckpoint(ctx, cp); err != nil {
		t.Fatal(err)
	}
	if err := b.BeginCall(ctx, loop.JournalEntry{TaskID: "t/1", CallID: "a", Key: "t/1/a", Tool: "calc"}); err != nil {
		t.Fatal(err)
	}
	if err := b.EndCall(ctx, "t/1", "a", loop.ToolResult{Content: "4"}); err != nil {
		t.Fatal(err)
	}
	if err := b.EndCall(ctx, "t/1", "zzz", loop.ToolResult{}); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("ending an unknown call: %v", err)
	}
	b.Close()

	b, err = Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.LoadCheckpoint(ctx, "t/1")
	if err != nil || got.Iteration != 2 || got.Pending[0].Name != "calc" {
		t.Fatalf("checkpoint after reopen %+v, %v", got, err)
	}
	calls, err := b.Calls(ctx, "t/1")
	if err != nil || len(calls) != 1 || calls[0].State != loop.CallCompleted || calls[0].Result.Content != "4" {
		t.Fatalf("journal after reopen %+v, %v", calls, err)
	}
	// Garbage under the checkpoint key: a CorruptError naming the key.
	if err := b.db.Update(func(txn *badger.Txn) error { return txn.Set(ckptKey("t/1"), []byte("{nope")) }); err != nil {
		t.Fatal(err)
	}
	_, err = b.LoadCheckpoint(ctx, "t/1")
	var ce *loop.CorruptError
	if !errors.As(err, &ce) || ce.Key != "ckpt/t%2F1" {
		t.Fatalf("corrupt checkpoint: %v", err)
	}
	if err := b.DeleteCalls(ctx, "t/1"); err != nil {
		t.Fatal(err)
	}
	if calls, _ := b.Calls(ctx, "t/1"); len(calls) != 0 {
		t.Fatalf("journal after delete: %+v", calls)
	}
	b.Close()
}

func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add([]byte(`{"taskId":"t","stage":"tool-execution","pending":[{"id":"a","name":"x"}]}`))
	f.Add([]byte(`{"taskId":"t","stage":"model-call","produced":[{"role":"user"}]}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		cp, err := decodeCheckpoint([]byte("ckpt/t"), v)
		if err != nil {
			if !errors.Is(err, loop.ErrCorrupt) {
				t.Fatalf("error is not a corrupt-record error: %v", err)
			}
			return
		}
		if cp.TaskID == "" {
			t.Fatal("accepted a checkpoint without a task id")
		}
	})
}

func FuzzDecodeJournal(f *testing.F) {
	f.Add([]byte(`{"taskId":"t","callId":"a","state":"started"}`))
	f.Add([]byte(`{"taskId":"t","callId":"a","state":"completed","result":{"content":"x"}}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		e, err := decodeJournal([]byte("journal/t/a"), v)
		if err != nil {
			if !errors.Is(err, loop.ErrCorrupt) {
				t.Fatalf("error is not a corrupt-record error: %v", err)
			}
			return
		}
		if e.State != loop.CallStarted && e.State != loop.CallCompleted {
			t.Fatalf("accepted state %q", e.State)
		}
	})
}
