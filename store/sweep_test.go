package store

import (
	"context"
	"slices"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

// durableStore is what DurableTaskIDs is tested on, in both stores.
type durableStore interface {
	loop.CheckpointStore
	loop.Journal
	DurableTaskIDs(ctx context.Context) ([]string, error)
}

func TestDurableTaskIDs(t *testing.T) {
	b, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for name, s := range map[string]durableStore{"badger": b, "memory": NewMemory(MemoryOptions{})} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			// Ids with the characters keys escape; one task with both a
			// checkpoint and two calls is listed once.
			for _, id := range []string{"t/1", "t%2", "only-ckpt"} {
				if err := s.SaveCheckpoint(ctx, loop.Checkpoint{TaskID: id, ContextID: "c"}); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range [][2]string{{"t/1", "a"}, {"t/1", "b/c"}, {"only-journal", "a"}} {
				if err := s.BeginCall(ctx, loop.JournalEntry{TaskID: c[0], CallID: c[1], Tool: "x"}); err != nil {
					t.Fatal(err)
				}
			}
			ids, err := s.DurableTaskIDs(ctx)
			want := []string{"only-ckpt", "only-journal", "t%2", "t/1"}
			if err != nil || !slices.Equal(ids, want) {
				t.Fatalf("ids %q, %v; want %q", ids, err, want)
			}
			if err := s.DeleteCalls(ctx, "only-journal"); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteCheckpoint(ctx, "only-ckpt"); err != nil {
				t.Fatal(err)
			}
			ids, _ = s.DurableTaskIDs(ctx)
			if want := []string{"t%2", "t/1"}; !slices.Equal(ids, want) {
				t.Fatalf("after deletes: %q, want %q", ids, want)
			}
		})
	}
}
