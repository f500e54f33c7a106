package sse_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
)

// TestSinkDoesNotWaitForTheLog: a turn's events are queued, not appended
// while it waits; the queue goes to the log in few appends, in order, before
// any subscriber sees an event; Finish waits for it.
func TestSinkDoesNotWaitForTheLog(t *testing.T) {
	log := memoryLog(t)
	log.gate = make(chan struct{}) // the log accepts nothing for now
	h := newHub(t, sse.Config{Log: log})
	ctx := t.Context()

	sub, err := h.Subscribe(ctx, sse.TaskStream("t"), 0, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	var mu sync.Mutex
	var errs []error
	sink := h.Sink(func(e loop.Event, err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	})
	const n = 200
	for i := range n {
		sink.Emit(delta("t", i)) // returns although no append can complete
	}
	if it, ok, err := sub.TryNext(ctx); ok || err != nil {
		t.Fatalf("a subscriber saw event %d before it was in the log (err %v)", it.ID, err)
	}
	close(log.gate)
	if err := h.Finish(ctx, sse.TaskStream("t")); err != nil {
		t.Fatal(err)
	}
	if a := log.appendCount(); a >= 2*n {
		t.Fatalf("%d appends for %d events on two streams: queued events should share appends", a, n)
	}
	for i := range n {
		it, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := loop.DecodeEvent(it.Data)
		if err != nil {
			t.Fatal(err)
		}
		if it.ID != uint64(i+1) || ev.(*loop.ContentDelta).Index != i {
			t.Fatalf("event %d: id %d index %d", i, it.ID, ev.(*loop.ContentDelta).Index)
		}
	}
	if _, err := sub.Next(ctx); !errors.Is(err, sse.ErrFinished) {
		t.Fatalf("after the last event: %v, want ErrFinished", err)
	}
	if err := h.Flush(ctx, sse.ContextStream("c1")); err != nil {
		t.Fatal(err)
	}
	if last, _ := h.Last(ctx, sse.ContextStream("c1")); last != n {
		t.Fatalf("context stream has %d events, want %d", last, n)
	}

	// After Finish the task stream refuses events; the sink reports it.
	sink.Emit(delta("t", n))
	if err := h.Flush(ctx, sse.TaskStream("t")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 1 || !errors.Is(errs[0], sse.ErrFinished) {
		t.Fatalf("sink errors %v, want one ErrFinished", errs)
	}
}

// TestCloseWaitsForQueuedEvents: what a sink accepted is in the log once
// Close returns.
func TestCloseWaitsForQueuedEvents(t *testing.T) {
	log := memoryLog(t)
	h, err := sse.New(sse.Config{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	sink := h.Sink(nil)
	for i := range 50 {
		sink.Emit(delta("t", i))
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if last, _ := log.Last(t.Context(), sse.TaskStream("t")); last != 50 {
		t.Fatalf("after Close the log has %d events, want 50", last)
	}
}
