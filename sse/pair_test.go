package sse_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
)

// An event of a task goes to its task's stream and its context's in one
// write to a log that can do both at once: one synced commit per event,
// never a write per stream.
func TestTaskEventIsOneWriteForBothStreams(t *testing.T) {
	log, db := badgerMultiLog(t)
	h := newHub(t, sse.Config{Log: log})
	ctx := t.Context()
	before := db.Commits()
	for i := range 20 {
		id, err := h.PublishTask(ctx, delta("a", i))
		if err != nil {
			t.Fatal(err)
		}
		if id != uint64(i+1) {
			t.Fatalf("event %d: id %d, want %d", i, id, i+1)
		}
	}
	if n := log.appendCount(); n != 0 {
		t.Fatalf("%d appends to one stream, want every event written to both streams at once", n)
	}
	if n := log.pairCount(); n != 20 {
		t.Fatalf("%d writes for 20 events published one after the other, want 20", n)
	}
	if n := db.Commits() - before; n != 20 {
		t.Fatalf("%d commits for 20 events, want one each", n)
	}
	// A burst through a turn's sink: both streams get every event, in
	// order, and the writes stay shared.
	sink := h.Sink(func(e loop.Event, err error) { t.Errorf("event %s: %v", e.Head().Kind, err) })
	for i := 20; i < 220; i++ {
		sink.Emit(delta("a", i))
	}
	for _, s := range []string{sse.TaskStream("a"), sse.ContextStream("c1")} {
		if err := h.Flush(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if n := log.appendCount(); n != 0 {
		t.Fatalf("%d appends to one stream during the burst", n)
	}
	for _, s := range []string{sse.TaskStream("a"), sse.ContextStream("c1")} {
		recs, err := log.Read(ctx, s, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 220 {
			t.Fatalf("%s holds %d records, want 220", s, len(recs))
		}
		for i, r := range recs {
			e, err := loop.DecodeEvent(r.Data)
			if err != nil {
				t.Fatal(err)
			}
			if d, ok := e.(*loop.ContentDelta); !ok || d.Index != i || r.Seq != uint64(i+1) {
				t.Fatalf("%s record %d: seq %d, event %+v", s, i, r.Seq, e)
			}
		}
	}
}

// When the shared write fails, the publishers of both streams get the
// error and neither stream holds the event.
func TestTaskEventWriteFailsForBothStreams(t *testing.T) {
	log, _ := badgerMultiLog(t)
	h := newHub(t, sse.Config{Log: log})
	ctx := t.Context()
	boom := errors.New("disk gone")
	log.mu.Lock()
	log.fail = boom
	log.mu.Unlock()
	if _, err := h.PublishTask(ctx, delta("a", 0)); !errors.Is(err, boom) {
		t.Fatalf("publish: %v, want the log's error", err)
	}
	var reported []string
	done := make(chan struct{}, 2)
	sink := h.Sink(func(e loop.Event, err error) {
		reported = append(reported, fmt.Sprint(errors.Is(err, boom)))
		done <- struct{}{}
	})
	sink.Emit(delta("a", 1))
	<-done
	<-done
	if fmt.Sprint(reported) != "[true true]" {
		t.Fatalf("sink reported %v, want the log's error for each stream", reported)
	}
	for _, s := range []string{sse.TaskStream("a"), sse.ContextStream("c1")} {
		if last, err := h.Last(ctx, s); err != nil || last != 0 {
			t.Fatalf("%s: last %d (%v), want nothing written", s, last, err)
		}
	}
}

// A finished task stream refuses the event; its context's stream still
// gets it.
func TestTaskEventToAFinishedTaskStream(t *testing.T) {
	log, _ := badgerMultiLog(t)
	h := newHub(t, sse.Config{Log: log})
	ctx := t.Context()
	if _, err := h.PublishTask(ctx, delta("a", 0)); err != nil {
		t.Fatal(err)
	}
	if err := h.End(ctx, sse.TaskStream("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.PublishTask(ctx, delta("a", 1)); !errors.Is(err, sse.ErrFinished) {
		t.Fatalf("publish after the end: %v, want ErrFinished", err)
	}
	if err := h.Flush(ctx, sse.ContextStream("c1")); err != nil {
		t.Fatal(err)
	}
	if last, err := h.Last(ctx, sse.ContextStream("c1")); err != nil || last != 2 {
		t.Fatalf("context stream: last %d (%v), want 2", last, err)
	}
	if last, err := h.Last(ctx, sse.TaskStream("a")); err != nil || last != 1 {
		t.Fatalf("task stream: last %d (%v), want 1", last, err)
	}
}

// A context's stream written by one task's pair writer still takes another
// task's events: every event reaches both of its streams.
func TestTaskEventsOfTwoTasksOfOneContext(t *testing.T) {
	log, _ := badgerMultiLog(t)
	h := newHub(t, sse.Config{Log: log})
	ctx := context.Background()
	sink := h.Sink(func(e loop.Event, err error) { t.Errorf("event %s: %v", e.Head().Kind, err) })
	for i := range 300 {
		sink.Emit(delta([]string{"a", "b"}[i%2], i))
	}
	for _, s := range []string{sse.TaskStream("a"), sse.TaskStream("b"), sse.ContextStream("c1")} {
		if err := h.Flush(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for s, want := range map[string]uint64{sse.TaskStream("a"): 150, sse.TaskStream("b"): 150, sse.ContextStream("c1"): 300} {
		if last, err := h.Last(ctx, s); err != nil || last != want {
			t.Fatalf("%s: last %d (%v), want %d", s, last, err, want)
		}
	}
}
