package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// wrappedCommitter passes its commits on to the store it wraps, as the
// host's telemetry wrapper does.
type wrappedCommitter struct{ loop.TurnCommitter }

func (w wrappedCommitter) UnwrapCommitter() loop.TurnCommitter { return w.TurnCommitter }

func readStream(t *testing.T, b *store.Badger, stream string) []string {
	t.Helper()
	recs, err := b.Events().Read(context.Background(), stream, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, r := range recs {
		if r.Seq != uint64(i+1) {
			t.Fatalf("%s: record %d has seq %d", stream, i, r.Seq)
		}
		got = append(got, string(r.Data))
	}
	return got
}

func wantStream(t *testing.T, b *store.Badger, stream string, want ...string) {
	t.Helper()
	got := readStream(t, b, stream)
	if len(got) != len(want) {
		t.Fatalf("%s holds %q, want %q", stream, got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s holds %q, want %q", stream, got, want)
		}
	}
}

func recs(s ...string) [][]byte {
	out := make([][]byte, len(s))
	for i, v := range s {
		out[i] = []byte(v)
	}
	return out
}

// setupAppendCommit stores a working task "t" of context "c" with a
// checkpoint and a lease, and one event in its stream.
func setupAppendCommit(t *testing.T, b *store.Badger) (loop.TaskRecord, loop.Lease) {
	t.Helper()
	ctx := context.Background()
	tr := loop.TaskRecord{ID: "t", ContextID: "c", Status: loop.TaskWorking, CreatedAt: time.Now().UTC(), UpdatedAt: time.Now().UTC()}
	if err := b.SaveTask(ctx, tr); err != nil {
		t.Fatal(err)
	}
	tr.Version++
	if err := b.SaveCheckpoint(ctx, loop.Checkpoint{TaskID: "t", ContextID: "c", Iteration: 1, Stage: loop.StageModel}); err != nil {
		t.Fatal(err)
	}
	l, err := b.AcquireLease(ctx, "t", "host-a", "c", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Events().Append(ctx, "task/t", []byte("created")); err != nil {
		t.Fatal(err)
	}
	return tr, l
}

func turnCommit(tr loop.TaskRecord, l *loop.Lease) loop.TurnCommit {
	tr.Status = loop.TaskCompleted
	return loop.TurnCommit{ContextID: "c",
		Messages: []loop.Message{{Role: loop.RoleUser, Content: "q"}, {Role: loop.RoleAssistant, Content: "a"}},
		Agent:    loop.AgentMetadata{ContextID: "c", TurnCount: 1, Status: loop.AgentReady},
		Task:     &tr, DeleteCheckpoint: tr.ID, Lease: l}
}

// AppendCommit saves a turn's commit and the events around it in one
// synced commit: the events queued before it, then the events that
// announce its end, each stream continuing its sequence.
func TestAppendCommitIsOneWrite(t *testing.T) {
	dir := t.TempDir()
	b, err := store.Open(store.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tr, l := setupAppendCommit(t, b)
	ev := b.Events()
	before := b.Commits()
	first, commitErr, err := ev.AppendCommit(ctx, []loop.CommitAppend{
		{Stream: "task/t", Before: recs("delta"), After: recs("status", "complete")},
		{Stream: "ctx/c", After: recs("status", "complete")},
	}, turnCommit(tr, &l))
	if err != nil || commitErr != nil {
		t.Fatalf("AppendCommit: %v, commit: %v", err, commitErr)
	}
	if n := b.Commits() - before; n != 1 {
		t.Fatalf("%d commits, want 1", n)
	}
	if len(first) != 2 || first[0] != 2 || first[1] != 1 {
		t.Fatalf("first seqs %v, want [2 1]", first)
	}
	// All of it survives a reopen.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err = store.Open(store.Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	wantStream(t, b, "task/t", "created", "delta", "status", "complete")
	wantStream(t, b, "ctx/c", "status", "complete")
	got, err := b.LoadTask(ctx, "t")
	if err != nil || got.Status != loop.TaskCompleted || got.Version != tr.Version+1 {
		t.Fatalf("task after the write: %s version %d, %v", got.Status, got.Version, err)
	}
	if n, err := b.Count(ctx, "c"); err != nil || n != 2 {
		t.Fatalf("history after the write: %d messages, %v", n, err)
	}
	if md, err := b.LoadAgent(ctx, "c"); err != nil || md.TurnCount != 1 {
		t.Fatalf("agent after the write: %+v, %v", md, err)
	}
	if _, err := b.LoadCheckpoint(ctx, "t"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("checkpoint after the write: %v, want ErrNotFound", err)
	}
}

// A refused commit (a stale task version, a lost lease) writes nothing of
// itself and none of the events that announce its end; the events queued
// before it are appended alone. Were the end ever written without its
// commit, a client would read an end the store does not hold.
func TestAppendCommitRefusedWritesNoEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		mess func(t *testing.T, b *store.Badger, tr *loop.TaskRecord, l *loop.Lease)
		want error
	}{
		{"stale version", func(t *testing.T, b *store.Badger, tr *loop.TaskRecord, l *loop.Lease) {
			tr.Version--
		}, loop.ErrConflict},
		{"lost lease", func(t *testing.T, b *store.Badger, tr *loop.TaskRecord, l *loop.Lease) {
			if err := b.ReleaseLease(context.Background(), *l); err != nil {
				t.Fatal(err)
			}
			if _, err := b.AcquireLease(context.Background(), "t", "host-b", "c", time.Hour); err != nil {
				t.Fatal(err)
			}
		}, loop.ErrLeaseLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := store.Open(store.Options{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			ctx := context.Background()
			tr, l := setupAppendCommit(t, b)
			stored := tr.Version
			tc.mess(t, b, &tr, &l)
			before := b.Commits()
			first, commitErr, err := b.Events().AppendCommit(ctx, []loop.CommitAppend{
				{Stream: "task/t", Before: recs("delta"), After: recs("status", "complete")},
				{Stream: "ctx/c", After: recs("status", "complete")},
			}, turnCommit(tr, &l))
			if err != nil {
				t.Fatalf("AppendCommit: %v", err)
			}
			if !errors.Is(commitErr, tc.want) {
				t.Fatalf("commit error %v, want %v", commitErr, tc.want)
			}
			if n := b.Commits() - before; n != 1 {
				t.Fatalf("%d commits, want 1", n)
			}
			if first[0] != 2 || first[1] != 0 {
				t.Fatalf("first seqs %v, want [2 0]", first)
			}
			wantStream(t, b, "task/t", "created", "delta")
			wantStream(t, b, "ctx/c")
			got, err := b.LoadTask(ctx, "t")
			if err != nil || got.Status != loop.TaskWorking || got.Version != stored {
				t.Fatalf("task after a refused commit: %s version %d, %v", got.Status, got.Version, err)
			}
			if n, err := b.Count(ctx, "c"); err != nil || n != 0 {
				t.Fatalf("history after a refused commit: %d messages, %v", n, err)
			}
			if _, err := b.LoadCheckpoint(ctx, "t"); err != nil {
				t.Fatalf("a refused commit removed the checkpoint: %v", err)
			}
			// The next append continues after what was written.
			if n, err := b.Events().Append(ctx, "task/t", []byte("failed")); err != nil || n != 3 {
				t.Fatalf("next append: seq %d, %v; want 3", n, err)
			}
		})
	}
}

// Commits names the log's own store, through a wrapper, and nothing else:
// a commit of another store is never made in this one's write.
func TestAppendCommitCommitsOnlyItsOwnStore(t *testing.T) {
	b, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	other, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	ev := b.Events()
	for _, c := range []struct {
		tc   loop.TurnCommitter
		want bool
	}{
		{b, true}, {wrappedCommitter{b}, true}, {wrappedCommitter{wrappedCommitter{b}}, true},
		{other, false}, {wrappedCommitter{other}, false}, {store.NewMemory(store.MemoryOptions{}), false}, {nil, false},
	} {
		if got := ev.Commits(c.tc); got != c.want {
			t.Fatalf("Commits(%T) = %v, want %v", c.tc, got, c.want)
		}
	}
	for _, bad := range [][]loop.CommitAppend{
		nil,
		{{Stream: "task/t", Before: recs("x")}, {Stream: "task/t", After: recs("y")}},
		{{Stream: "", Before: recs("x")}},
	} {
		if _, _, err := ev.AppendCommit(context.Background(), bad, loop.TurnCommit{ContextID: "c"}); !errors.Is(err, loop.ErrInvalid) {
			t.Fatalf("AppendCommit(%v): %v, want ErrInvalid", bad, err)
		}
	}
}
