package store

import (
	"context"
	"errors"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
)

// TestCorruptRecords writes damaged bytes under real keys and checks that
// every reader reports a *loop.CorruptError naming the key, and never
// panics.
func TestCorruptRecords(t *testing.T) {
	ctx := context.Background()
	b, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Append(ctx, "c", loop.Message{Role: loop.RoleUser, Content: "1"}, loop.Message{Role: loop.RoleUser, Content: "2"}); err != nil {
		t.Fatal(err)
	}
	if err := b.SaveTask(ctx, loop.TaskRecord{ID: "t", ContextID: "c", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Events().Append(ctx, "s", []byte("a"), []byte("b")); err != nil {
		t.Fatal(err)
	}
	poke := func(key string, value []byte) {
		t.Helper()
		err := b.db.Update(func(txn *badger.Txn) error {
			if value == nil {
				return txn.Delete([]byte(key))
			}
			return txn.Set([]byte(key), value)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wantCorrupt := func(name, key string, err error) {
		t.Helper()
		var ce *loop.CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, loop.ErrCorrupt) {
			t.Fatalf("%s: err = %v, want a *loop.CorruptError", name, err)
		}
		if ce.Key != key {
			t.Fatalf("%s: corrupt key %q, want %q", name, ce.Key, key)
		}
	}
	recent := func() error { _, err := b.Recent(ctx, "c", 0); return err }

	msg2 := "msg/c/00000000000000000002"
	poke(msg2, []byte(`{"role":`))
	wantCorrupt("message not JSON", msg2, recent())
	poke(msg2, []byte(`{"content":"no role"}`))
	wantCorrupt("message without role", msg2, recent())
	poke(msg2, nil)
	wantCorrupt("message missing", msg2, recent())
	poke("msgh/c", head{a: 1, b: 1 << 62}.encode())
	wantCorrupt("history head with an absurd range", "msgh/c", func() error { _, err := b.Count(ctx, "c"); return err }())
	wantCorrupt("recent with an absurd range", msg2, recent())
	poke("evth/s", head{a: 1 << 62, b: 0}.encode())
	_, err = b.Events().Read(ctx, "s", 0, 0)
	wantCorrupt("event head with an absurd range", "evt/s/00000000000000000003", err)
	poke("evth/s", head{a: 2, b: 0}.encode())
	poke("msgh/c", []byte{1, 2, 3})
	wantCorrupt("history head", "msgh/c", recent())
	wantCorrupt("append on a bad head", "msgh/c", b.Append(ctx, "c", loop.Message{Role: loop.RoleUser}))
	_, err = b.Count(ctx, "c")
	wantCorrupt("count on a bad head", "msgh/c", err)

	poke("task/t", []byte("garbage"))
	_, err = b.LoadTask(ctx, "t")
	wantCorrupt("task", "task/t", err)
	// A record that does not decode does not take the list down: it is
	// listed as broken, from its index entry, beside the others.
	if err := b.SaveTask(ctx, loop.TaskRecord{ID: "t2", ContextID: "c", CreatedAt: time.Now().Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	list, err := b.ListTasks(ctx, loop.TaskFilter{})
	if err != nil || len(list) != 2 || list[0].ID != "t2" || list[1].ID != "t" || list[1].ContextID != "c" ||
		list[1].Metadata["broken"] != true || list[1].Message == "" {
		t.Fatalf("tasks listed beside a damaged record: %v %+v", err, list)
	}
	if err := b.DeleteTask(ctx, "t2"); err != nil {
		t.Fatal(err)
	}
	// A damaged record is replaced by deleting it and saving the task
	// again (its version cannot be read, so a versioned write over it is
	// refused).
	if err := b.SaveTask(ctx, loop.TaskRecord{ID: "t", ContextID: "c"}); !errors.Is(err, loop.ErrConflict) {
		t.Fatalf("SaveTask of version 0 over a damaged record of version 1: err = %v, want ErrConflict", err)
	}
	if err := b.DeleteTask(ctx, "t"); err != nil {
		t.Fatalf("DeleteTask of a damaged record: %v", err)
	}
	if err := b.SaveTask(ctx, loop.TaskRecord{ID: "t", ContextID: "c"}); err != nil {
		t.Fatalf("SaveTask over a damaged record: %v", err)
	}
	if _, err := b.LoadTask(ctx, "t"); err != nil {
		t.Fatalf("LoadTask after repair: %v", err)
	}
	idx := "tidx/all/0000000000000000000/t"
	poke(idx, []byte("{"))
	_, err = b.ListTasks(ctx, loop.TaskFilter{})
	wantCorrupt("task index summary", idx, err)

	poke("agent/c", []byte(`{"contextId":5}`))
	_, err = b.LoadAgent(ctx, "c")
	wantCorrupt("agent", "agent/c", err)

	poke("evt/s/00000000000000000001", nil)
	_, err = b.Events().Read(ctx, "s", 0, 0)
	wantCorrupt("event missing", "evt/s/00000000000000000001", err)
	poke("evth/s", []byte("short"))
	_, err = b.Events().Last(ctx, "s")
	wantCorrupt("event head", "evth/s", err)
	_, err = b.Events().Append(ctx, "s", []byte("x"))
	wantCorrupt("event append on a bad head", "evth/s", err)

	// Other contexts are not affected.
	if err := b.Append(ctx, "other", loop.Message{Role: loop.RoleUser}); err != nil {
		t.Fatalf("Append to a healthy context: %v", err)
	}
}

func TestOpenRequiresDir(t *testing.T) {
	if _, err := Open(Options{}); !errors.Is(err, loop.ErrInvalid) {
		t.Fatalf("Open without Dir: err = %v, want ErrInvalid", err)
	}
}

func TestClosed(t *testing.T) {
	ctx := context.Background()
	b, err := Open(Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := b.Append(ctx, "c", loop.Message{Role: loop.RoleUser}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: err = %v, want ErrClosed", err)
	}
	if _, err := b.Recent(ctx, "c", 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Recent after Close: err = %v, want ErrClosed", err)
	}
}

// TestCloseWhileWriting closes the store under concurrent writers: every
// write either succeeds or reports ErrClosed; none hangs or panics.
func TestCloseWhileWriting(t *testing.T) {
	b, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 8)
	for g := range 8 {
		go func() {
			for {
				_, err := b.Events().Append(context.Background(), "s", []byte{byte(g)})
				if err != nil {
					done <- err
					return
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for range 8 {
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Fatalf("write during Close: err = %v, want ErrClosed", err)
		}
	}
}
