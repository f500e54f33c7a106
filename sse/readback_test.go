package sse_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
)

// gatedReadLog is a real event log whose reads wait for gate to close, and
// which counts the reads under way.
type gatedReadLog struct {
	*spyLog
	gate     chan struct{}
	inflight atomic.Int64
}

func (g *gatedReadLog) Read(ctx context.Context, stream string, after uint64, limit int) ([]loop.LogRecord, error) {
	g.inflight.Add(1)
	defer g.inflight.Add(-1)
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.spyLog.Read(ctx, stream, after, limit)
}

// Many subscribers of one stream lagging behind its in-memory tail cost
// the log one reader, not one each: they wait for it and take the batch it
// read. Meanwhile a live subscriber of the stream and the publisher are not
// held by them.
func TestLaggingSubscribersShareOneLogReader(t *testing.T) {
	const lagging, events = 20, 100
	log := &gatedReadLog{spyLog: badgerLog(t), gate: make(chan struct{})}
	h := newHub(t, sse.Config{Log: log, TailSize: 8})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a guard against a hang only
	defer cancel()
	subs := make([]*sse.Subscription, lagging)
	for i := range subs {
		s, err := h.Subscribe(ctx, "s", 0, sse.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		subs[i] = s
	}
	for i := range events {
		if _, err := h.Publish(ctx, "s", delta("t", i)); err != nil {
			t.Fatal(err)
		}
	}
	got := make([][]uint64, lagging)
	var wg sync.WaitGroup
	for i, s := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range events {
				it, err := s.Next(ctx)
				if err != nil {
					t.Errorf("lagging subscriber %d: %v", i, err)
					return
				}
				got[i] = append(got[i], it.ID)
			}
		}()
	}
	// Every lagging subscriber is reading the log or waiting to: only one
	// reads.
	for {
		_, waiting := h.LogReads()
		if log.inflight.Load()+waiting == lagging {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("lagging subscribers never all reached the log (reading %d)", log.inflight.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if n := log.inflight.Load(); n != 1 {
		t.Fatalf("%d subscribers of one stream read the log at once; want 1", n)
	}
	// A live subscriber and the publisher go on while they wait.
	live, err := h.Subscribe(ctx, "s", events, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if _, err := h.Publish(ctx, "s", delta("t", events)); err != nil {
		t.Fatal(err)
	}
	if it, err := live.Next(ctx); err != nil || it.ID != events+1 {
		t.Fatalf("live subscriber beside the lagging ones: event %d, %v; want %d", it.ID, err, events+1)
	}

	close(log.gate)
	wg.Wait()
	for i := range got {
		checkContiguous(t, "lagging subscriber", got[i], 0, events)
	}
	if n := log.readCount(); n != 1 {
		t.Fatalf("the log was read %d times for %d subscribers lagging at one place; want 1, shared", n, lagging)
	}
}
