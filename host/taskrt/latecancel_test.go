package taskrt

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
	"github.com/looopy-go/looopy/store"
)

// A cancel that reaches a running turn while its end is being written
// (its commit does not stop for a cancel: the turn completes) answers that
// the task is not cancelable, with the completed task; it never answers
// success for a task that completed.
func TestCancelLateForATurnsEndIsNotCancelable(t *testing.T) {
	t.Parallel()
	db, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	hub, err := sse.New(sse.Config{Log: db.Events()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Close() })
	l, err := loop.New(loop.Config{Model: &scriptModel{}, Checkpoints: db, Journal: db})
	if err != nil {
		t.Fatal(err)
	}
	var rt *Runtime
	ending := make(chan struct{})
	cfg := Config{Loop: l, Events: hubEndEvents{hub: hub, log: db.Events()}, Owner: "host-a",
		Stores: Stores{Messages: db, Agents: db, Tasks: db, Commit: db, Checkpoints: db, Journal: db, Durable: db,
			Leases: db, TaskLeases: db}}
	cfg.Crashpoint = func(p string) {
		if p != PointTurnEnding {
			return
		}
		// The end is about to be written: it waits until the cancel has
		// reached the turn.
		r := rt.Running("t-late")
		if r == nil {
			return
		}
		close(ending)
		select {
		case <-r.ctx.Done():
		case <-time.After(guard):
		}
	}
	if rt, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		rt.Shutdown(ctx)
	})
	ctx := context.Background()
	// A first turn makes the conversation: the second's task write has no
	// new context's record to note in the agent its turn holds.
	first, err := rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-late", Message: user("hi"),
		NewID: func() string { return "t-first" }})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Wait(ctx, first.Run); err != nil {
		t.Fatal(err)
	}
	st, err := rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-late", Message: user("hello"),
		NewID: func() string { return "t-late" }})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ending:
	case <-time.After(guard):
		t.Fatal("the turn never reached its end")
	}
	rec, err := rt.Cancel(ctx, "alice", st.Run.TaskID)
	if !errors.Is(err, ErrNotCancelable) || rec.Status != loop.TaskCompleted {
		t.Fatalf("late cancel: %s, %v; want the completed task and ErrNotCancelable", rec.Status, err)
	}
}
