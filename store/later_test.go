package store

import (
	"context"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// A write queued to ride with the next batch (KVSetQueued, and the
// stream expiries and lease releases made with writeLater) costs no sync
// of its own: queued before another write is submitted, it is committed
// in that write's transaction, whatever the delay after which it would
// have gone alone; queued writes of one key are applied in their order;
// one that no batch takes goes alone after laterDelay; Close commits what
// is queued. Before, each was a commit (a sync) of its own: a turn's
// usage record was a sync after its end's, on the way to the answer.
func TestLaterWritesRideTheNextBatch(t *testing.T) {
	dir := t.TempDir()
	b, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b.laterMu.Lock()
	b.laterDelay = time.Hour // no batch of their own: only a ride
	b.laterMu.Unlock()

	before := b.commits.Load()
	w1 := b.KVSetQueued("ns", "counter", []byte("1"))
	w2 := b.KVSetQueued("ns", "counter", []byte("2"))
	lease, err := b.AcquireLease(ctx, "task-1", "me", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := w1(); err != nil {
		t.Fatal(err)
	}
	if err := w2(); err != nil {
		t.Fatal(err)
	}
	if n := b.commits.Load() - before; n != 1 {
		t.Fatalf("%d commits for two queued writes and a lease; want 1 (the lease's, which they ride)", n)
	}
	if v, err := b.KVGet(ctx, "ns", "counter"); err != nil || string(v) != "2" {
		t.Fatalf("counter: %q, %v; want the last queued value", v, err)
	}

	// writeLater waits for a batch: the release rides with the next write.
	released := make(chan error, 1)
	go func() { released <- b.ReleaseLease(ctx, lease) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b.laterMu.Lock()
		n := len(b.later)
		b.laterMu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the release never queued")
		}
		time.Sleep(time.Millisecond)
	}
	before = b.commits.Load()
	if err := b.Append(ctx, "ctx-1", loop.Message{Role: loop.RoleUser, Content: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if n := b.commits.Load() - before; n != 1 {
		t.Fatalf("%d commits for a message and a release queued before it; want 1", n)
	}
	if ls, err := b.ListLeases(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("leases after the release: %v, %v", ls, err)
	}

	// Alone, a queued write goes after laterDelay.
	b.laterMu.Lock()
	b.laterDelay = time.Millisecond
	b.laterMu.Unlock()
	if err := b.KVSetQueued("ns", "alone", []byte("x"))(); err != nil {
		t.Fatal(err)
	}

	// Close commits what is queued.
	b.laterMu.Lock()
	b.laterDelay = time.Hour
	b.laterMu.Unlock()
	w3 := b.KVSetQueued("ns", "counter", []byte("3"))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w3(); err != nil {
		t.Fatalf("a write queued before Close: %v", err)
	}
	if err := b.KVSetQueued("ns", "counter", []byte("4"))(); err == nil {
		t.Fatal("a write queued after Close was taken")
	}
	b, err = Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if v, err := b.KVGet(ctx, "ns", "counter"); err != nil || string(v) != "3" {
		t.Fatalf("counter after a reopen: %q, %v; want 3", v, err)
	}
	if v, err := b.KVGet(ctx, "ns", "alone"); err != nil || string(v) != "x" {
		t.Fatalf("alone after a reopen: %q, %v", v, err)
	}
}
