package taskrt

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// A cancel that reaches a running turn while its end is being written
// (its commit does not stop for a cancel: the turn completes) answers that
// the task is not cancelable, with the completed task; it never answers
// success for a task that completed.
func TestCancelLateForATurnsEndIsNotCancelable(t *testing.T) {
	t.Parallel()
	db := openBadger(t)
	var rt *Runtime
	ending := make(chan struct{})
	rt = hubRuntime(t, db, db.Events(), loop.Config{Model: &scriptModel{}}, func(c *Config) {
		c.Crashpoint = func(p string) {
			if p != PointTurnEnding {
				return
			}
			// The end is about to be written: it waits until the cancel
			// has reached the turn.
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
