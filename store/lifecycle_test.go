package store

import (
	"context"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// TestMemorySweep checks that the sweeper removes expired tasks and streams
// (reads hide them at once; the sweep frees them).
func TestMemorySweep(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	now := time.Now()
	for _, tr := range []loop.TaskRecord{
		{ID: "old", ContextID: "c", ExpiresAt: now.Add(time.Minute)},
		{ID: "new", ContextID: "c", ExpiresAt: now.Add(time.Hour)},
		{ID: "forever", ContextID: "c"},
	} {
		if err := m.SaveTask(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Events().Append(ctx, "s", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := m.Events().Expire(ctx, "s", time.Minute); err != nil {
		t.Fatal(err)
	}
	m.Sweep(now.Add(30 * time.Minute))
	m.taskMu.RLock()
	_, oldKept := m.tasks["old"]
	n := len(m.tasks)
	m.taskMu.RUnlock()
	if oldKept || n != 2 {
		t.Fatalf("after the sweep: old kept = %v, %d tasks; want old gone and 2 left", oldKept, n)
	}
	m.events.mu.RLock()
	st := m.events.streams["s"]
	m.events.mu.RUnlock()
	if st == nil || len(st.recs) != 0 || st.floor != 1 {
		t.Fatalf("expired stream after the sweep: %+v; want its records gone and its last seq 1 kept", st)
	}
}

// TestBadgerGCLoop runs value-log GC every few milliseconds under writes and
// overwrites, then closes: the GC goroutine must stop with the store.
func TestBadgerGCLoop(t *testing.T) {
	ctx := context.Background()
	b, err := Open(Options{Dir: t.TempDir(), GCInterval: 5 * time.Millisecond, GCDiscardRatio: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 64<<10)
	for i := range 50 {
		big[0] = byte(i)
		if err := b.KVSet(ctx, "p", "k", big); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- b.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return: the GC goroutine did not stop")
	}
}
