package sse

import (
	"bytes"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// A content delta published in this process is mapped to A2A from the
// event kept at publishing, not decoded again: the frames must be the ones
// a client replaying the log gets, with the context id the client knows,
// and the publisher's event must be left as it was.
func TestKeptContentDeltaMapsAsTheLoggedOne(t *testing.T) {
	scoped := loop.ScopedContextID("alice", "conv-1")
	for _, e := range []*loop.ContentDelta{
		{Header: loop.Header{Kind: loop.KindContentDelta, ContextID: scoped, TaskID: "t1",
			Timestamp: time.Date(2026, 11, 24, 16, 0, 0, 123456789, time.UTC)}, Delta: "Hello, \"wörld\"\n", Index: 3, Iteration: 2, Response: "r"},
		{Header: loop.Header{Kind: loop.KindContentDelta, ContextID: "plain", TaskID: "sub", ParentTaskID: "t1"}, Delta: " x"},
	} {
		before := e.ContextID
		it, err := itemOf(e)
		if err != nil {
			t.Fatal(err)
		}
		if it.client == nil {
			t.Fatal("the published content delta was not kept for its mapping")
		}
		if e.ContextID != before {
			t.Fatalf("publishing changed the publisher's event: context %q, was %q", e.ContextID, before)
		}
		logged := Item{ID: 7, Kind: it.Kind, TaskID: it.TaskID, Data: it.Data}
		it.ID = 7
		for _, enc := range []Encoder{A2AEncoder{RequestID: "req"}, A2A03Encoder{RequestID: 5}} {
			live, okLive, err := enc.Encode(it)
			if err != nil {
				t.Fatal(err)
			}
			replay, okReplay, err := enc.Encode(logged)
			if err != nil {
				t.Fatal(err)
			}
			if okLive != okReplay || !bytes.Equal(live.Data, replay.Data) || live.Last != replay.Last {
				t.Fatalf("%T: live frame %s (%v), from the log %s (%v)", enc, live.Data, okLive, replay.Data, okReplay)
			}
			if !okLive || bytes.Contains(live.Data, []byte(loop.ContextScope("alice"))) || !bytes.Contains(live.Data, []byte(e.Delta[:2])) {
				t.Fatalf("%T: frame %s, want the delta with the client's context id", enc, live.Data)
			}
		}
	}
}

// BenchmarkA2AContentDelta: the A2A 1.0 frame of one content delta, from
// the event kept at publishing (a live subscriber of this process) and from
// the log record (a replay, or a delta published by another host).
func BenchmarkA2AContentDelta(b *testing.B) {
	e := &loop.ContentDelta{Header: loop.Header{Kind: loop.KindContentDelta, ContextID: loop.ScopedContextID("alice", "conv-1"),
		TaskID: "task-0123456789", Timestamp: time.Now().UTC()}, Delta: " w17", Index: 17, Response: "r1"}
	it, err := itemOf(e)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		it   Item
	}{{"kept", it}, {"logged", Item{Kind: it.Kind, TaskID: it.TaskID, Data: it.Data}}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			enc := A2AEncoder{RequestID: "req"}
			for b.Loop() {
				x := tc.it
				x.memo = new(memo)
				if _, ok, err := enc.Encode(x); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
