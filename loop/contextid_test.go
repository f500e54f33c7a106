package loop_test

import (
	"testing"

	"github.com/looopy-go/looopy/loop"
)

func TestContextScopes(t *testing.T) {
	a := loop.ScopedContextID("alice", "chat-1")
	b := loop.ScopedContextID("bob", "chat-1")
	if a == b {
		t.Fatalf("two principals share the scoped id %q", a)
	}
	for _, id := range []string{a, b} {
		if got := loop.ClientContextID(id); got != "chat-1" {
			t.Fatalf("ClientContextID(%q) = %q, want chat-1", id, got)
		}
		if loop.ValidClientContextID(id) {
			t.Fatalf("a client may name the scoped id %q", id)
		}
	}
	if loop.ScopedContextID("alice", "") != "" {
		t.Fatal("an empty id must stay empty: it asks for a new conversation")
	}
	// Ids that are not scoped come back as they are, whatever they look like.
	for _, id := range []string{"", "chat", "~", "~~", "~0123456789abcdef", "~0123456789abcdeX~x", "~0123456789ABCDEF~x"} {
		if got := loop.ClientContextID(id); got != id {
			t.Fatalf("ClientContextID(%q) = %q, want it unchanged", id, got)
		}
	}
	// A scoped id of a scoped-looking id loses one prefix only.
	nested := loop.ScopedContextID("bob", a)
	if got := loop.ClientContextID(nested); got != a {
		t.Fatalf("nested: %q, want %q", got, a)
	}
}
