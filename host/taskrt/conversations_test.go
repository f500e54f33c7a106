package taskrt

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

// DeleteConversation refuses a conversation whose turn runs; with cancel
// it cancels the turn (and waits for its end) and deletes the agent
// record, the history and the finished tasks; an unknown one is not
// found.
func TestDeleteConversationOfARunningTurn(t *testing.T) {
	t.Parallel()
	m := &scriptModel{gate: make(chan struct{})}
	h := newHarness(t, t.TempDir(), m, func(c *Config) { c.Stores.Conversations = c.Stores.Messages.(ConversationExpirer) })
	ctx := context.Background()
	close(m.gate)
	first, err := h.rt.Start(ctx, StartRequest{Auth: alice(), Message: user("one")})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.rt.Wait(ctx, first.Run); err != nil {
		t.Fatal(err)
	}
	conv := first.Run.ContextID
	m.gate = make(chan struct{}) // the next turn waits
	second, err := h.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: conv, Message: user("two")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.rt.DeleteConversation(ctx, conv, false); !errors.Is(err, ErrConversationBusy) {
		t.Fatalf("delete while a turn runs: %v, want ErrConversationBusy", err)
	}
	if _, err := h.db.LoadAgent(ctx, conv); err != nil {
		t.Fatalf("the refused delete deleted the agent: %v", err)
	}
	ids, err := h.rt.DeleteConversation(ctx, conv, true)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	want := []string{first.Run.TaskID, second.Run.TaskID}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Fatalf("deleted tasks %v, want %v", ids, want)
	}
	if _, err := h.db.LoadAgent(ctx, conv); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("agent after the delete: %v", err)
	}
	if n, err := h.db.Count(ctx, conv); err != nil || n != 0 {
		t.Fatalf("%d messages after the delete (%v)", n, err)
	}
	for _, id := range want {
		if _, err := h.db.LoadTask(ctx, id); !errors.Is(err, loop.ErrNotFound) {
			t.Fatalf("task %s after the delete: %v", id, err)
		}
	}
	if _, err := h.rt.DeleteConversation(ctx, conv, false); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("deleted again: %v, want not found", err)
	}
}
