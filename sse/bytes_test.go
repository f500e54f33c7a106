package sse_test

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
)

// bigDelta is a content delta of about 64 KiB.
func bigDelta(task string, i int) *loop.ContentDelta {
	d := delta(task, i)
	d.Delta = strings.Repeat("x", 64<<10)
	return d
}

// readAll reads n events of stream from its start and checks their order.
func readAll(t *testing.T, h *sse.Hub, stream string, n int) {
	t.Helper()
	sub, err := h.Subscribe(t.Context(), stream, 0, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := range n {
		it, err := sub.Next(t.Context())
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		ev, err := loop.DecodeEvent(it.Data)
		if err != nil {
			t.Fatal(err)
		}
		if it.ID != uint64(i+1) || ev.(*loop.ContentDelta).Index != i {
			t.Fatalf("event %d: id %d index %d", i, it.ID, ev.(*loop.ContentDelta).Index)
		}
	}
}

// The queue of events waiting for the log is bounded by bytes as well as
// by count: a turn emitting large events faster than the log takes them
// waits at MaxPendingBytes (here 256 KiB, four 64 KiB events), not at
// 4,096 events; once the log takes them every event is there, in order.
func TestPendingQueueBoundedByBytes(t *testing.T) {
	const bound = 256 << 10
	log := memoryLog(t)
	gate := make(chan struct{})
	log.gate = gate // the log takes nothing for now
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	h := newHub(t, sse.Config{Log: log, MaxPendingBytes: bound})
	t.Cleanup(open) // before the Hub's Close, which waits for the appends
	one := int64(len(mustEncode(t, bigDelta("t", 0))))
	const n = 40
	done := make(chan struct{})
	go func() {
		defer close(done)
		sink := h.Sink(nil)
		for i := range n {
			sink.Emit(bigDelta("t", i))
		}
	}()
	stream := sse.TaskStream("t")
	deadline := time.Now().Add(time.Minute) // a guard only
	for {
		select {
		case <-done:
			events, bytes := h.Pending(stream)
			t.Fatalf("all %d events (%d bytes) were queued for a log that takes nothing: the queue is not bounded by bytes (%d events wait)", n, bytes, events)
		default:
		}
		if _, bytes := h.Pending(stream); bytes+one > bound {
			break // the next event would pass the bound: the publisher waits
		}
		if time.Now().After(deadline) {
			t.Fatal("the events were never queued")
		}
		runtime.Gosched()
	}
	if events, bytes := h.Pending(stream); bytes > bound {
		t.Fatalf("%d events of %d bytes wait, past the bound of %d", events, bytes, bound)
	}
	open()
	<-done
	if err := h.Finish(t.Context(), stream); err != nil {
		t.Fatal(err)
	}
	readAll(t, h, stream, n)
}

// The in-memory tail of a followed stream is bounded by bytes as well as by
// count, and a subscriber reading back from the log holds at most about
// ReadBatchBytes at once: replay still yields every event, in order.
func TestTailAndReadsBoundedByBytes(t *testing.T) {
	const tailBound, readBound = 256 << 10, 128 << 10
	log := memoryLog(t)
	h := newHub(t, sse.Config{Log: log, TailBytes: tailBound, ReadBatchBytes: readBound})
	stream := sse.TaskStream("t")
	follower, err := h.Subscribe(t.Context(), stream, 0, sse.Filter{}) // keeps the tail
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()
	const n = 40
	for i := range n {
		if _, err := h.Publish(t.Context(), stream, bigDelta("t", i)); err != nil {
			t.Fatal(err)
		}
	}
	events, bytes := h.TailLen(stream)
	if bytes > tailBound || events < 1 {
		t.Fatalf("the tail holds %d events of %d bytes, want at most %d bytes", events, bytes, tailBound)
	}
	readAll(t, h, stream, n)
	one := int64(len(mustEncode(t, bigDelta("t", 0))))
	if got := log.largestRead(); got > readBound+one {
		t.Fatalf("a subscriber read %d bytes from the log at once, past ReadBatchBytes %d (+ one event of %d)", got, readBound, one)
	}
}

func mustEncode(t *testing.T, e loop.Event) []byte {
	t.Helper()
	b, err := loop.EncodeEvent(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
