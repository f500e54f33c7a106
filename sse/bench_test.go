package sse_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
)

// latencyWriter is a client: for every k-th frame it records the time from
// the publish of that event to its write.
type latencyWriter struct {
	pubAt  []atomic.Int64
	every  uint64
	lat    []int64
	frames int
}

func (w *latencyWriter) Write(p []byte) (int, error) {
	if rest, ok := bytes.CutPrefix(p, []byte("id: ")); ok {
		w.frames++
		end := bytes.IndexByte(rest, '\n')
		id, err := strconv.ParseUint(string(rest[:end]), 10, 64)
		if err == nil && id%w.every == 0 && id < uint64(len(w.pubAt)) {
			w.lat = append(w.lat, time.Now().UnixNano()-w.pubAt[id].Load())
		}
	}
	return len(p), nil
}

func percentile(sorted []int64, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return time.Duration(sorted[min(len(sorted)-1, int(p*float64(len(sorted))))])
}

// fanout publishes b.N events to one stream read by subs subscribers, each
// through Serve, pacing the publisher at rate events/s (0: as fast as it
// can). It reports events delivered per second and the delivery latency.
func fanout(b *testing.B, subs int, enc sse.Encoder, rate int) {
	h := newHub(b, sse.Config{Log: memoryLog(b), TailSize: 1024})
	ctx := context.Background()
	stream := sse.TaskStream("bench")
	n := b.N
	pubAt := make([]atomic.Int64, n+1)
	every := uint64(max(1, n/5000))
	writers := make([]*latencyWriter, subs)
	var wg sync.WaitGroup
	for i := range subs {
		sub, err := h.Subscribe(ctx, stream, 0, sse.Filter{})
		if err != nil {
			b.Fatal(err)
		}
		w := &latencyWriter{pubAt: pubAt, every: every}
		writers[i] = w
		wg.Go(func() {
			defer sub.Close()
			if err := sse.Serve(ctx, w, nil, sub, enc, sse.ServeOptions{Heartbeat: -1}); err != nil {
				b.Error(err)
			}
		})
	}
	ev := &loop.ContentDelta{Header: hdr(loop.KindContentDelta, "c1", "bench"), Delta: "a token or two", Index: 1}
	var interval time.Duration
	if rate > 0 {
		interval = time.Second / time.Duration(rate)
	}
	b.ResetTimer()
	start := time.Now()
	for i := 1; i <= n; i++ {
		if interval > 0 {
			if d := time.Until(start.Add(time.Duration(i-1) * interval)); d > 0 {
				time.Sleep(d)
			}
		}
		pubAt[i].Store(time.Now().UnixNano())
		if _, err := h.Publish(ctx, stream, ev); err != nil {
			b.Fatal(err)
		}
	}
	if err := h.Finish(ctx, stream); err != nil {
		b.Fatal(err)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()

	var lat []int64
	frames := 0
	for _, w := range writers {
		lat = append(lat, w.lat...)
		frames += w.frames
	}
	if frames != n*subs {
		b.Fatalf("delivered %d frames, want %d", frames, n*subs)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(frames)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(percentile(lat, 0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
}

// BenchmarkFanout100 is one busy task stream read by 100 subscribers; an op
// is one published event (delivered 100 times).
func BenchmarkFanout100(b *testing.B) {
	b.Run("looopy/flood", func(b *testing.B) { fanout(b, 100, sse.LooopyEncoder{}, 0) })
	b.Run("looopy/1000eps", func(b *testing.B) { fanout(b, 100, sse.LooopyEncoder{}, 1000) })
	b.Run("a2a/flood", func(b *testing.B) { fanout(b, 100, sse.A2AEncoder{RequestID: 1}, 0) })
	b.Run("a2a/1000eps", func(b *testing.B) { fanout(b, 100, sse.A2AEncoder{RequestID: 1}, 1000) })
}

// BenchmarkPublish measures appending events: to one stream without
// subscribers, to one stream with a live subscriber, and to many streams
// from parallel publishers.
func BenchmarkPublish(b *testing.B) {
	ev := &loop.ContentDelta{Header: hdr(loop.KindContentDelta, "c1", "bench"), Delta: "a token or two", Index: 1}
	report := func(b *testing.B, start time.Time) {
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
	}
	b.Run("badger/one-stream", func(b *testing.B) {
		h := newHub(b, sse.Config{Log: badgerLog(b)})
		b.ReportAllocs()
		start := time.Now()
		for b.Loop() {
			if _, err := h.Publish(context.Background(), "s", ev); err != nil {
				b.Fatal(err)
			}
		}
		report(b, start)
	})
	b.Run("badger/task-and-context", func(b *testing.B) {
		h := newHub(b, sse.Config{Log: badgerLog(b)})
		b.ReportAllocs()
		start := time.Now()
		for b.Loop() {
			if _, err := h.PublishTask(context.Background(), ev); err != nil {
				b.Fatal(err)
			}
		}
		report(b, start)
	})
	// The same on a log that writes both streams at once (Badger's own
	// handle, which offers AppendStreams): one write per event; above it
	// is Badger behind a wrapper that hides that, a writer per stream.
	b.Run("badger/task-and-context-one-write", func(b *testing.B) {
		log, _ := badgerMultiLog(b)
		h := newHub(b, sse.Config{Log: log})
		b.ReportAllocs()
		start := time.Now()
		for b.Loop() {
			if _, err := h.PublishTask(context.Background(), ev); err != nil {
				b.Fatal(err)
			}
		}
		report(b, start)
	})
	sink := func(b *testing.B, log loop.EventLog) {
		h := newHub(b, sse.Config{Log: log})
		sink := h.Sink(func(_ loop.Event, err error) { b.Error(err) })
		b.ReportAllocs()
		start := time.Now()
		for b.Loop() {
			sink.Emit(ev)
		}
		for _, s := range []string{sse.TaskStream(ev.TaskID), sse.ContextStream(ev.ContextID)} {
			if err := h.Flush(context.Background(), s); err != nil {
				b.Fatal(err)
			}
		}
		report(b, start)
	}
	b.Run("badger/sink", func(b *testing.B) { sink(b, badgerLog(b)) })
	b.Run("badger/sink-one-write", func(b *testing.B) {
		log, _ := badgerMultiLog(b)
		sink(b, log)
	})
	b.Run("sink", func(b *testing.B) { sink(b, memoryLog(b)) })
	b.Run("badger/task-and-context-parallel", func(b *testing.B) {
		h := newHub(b, sse.Config{Log: badgerLog(b)})
		var next atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(16)
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			e := *ev
			e.TaskID = fmt.Sprintf("task-%d", next.Add(1))
			e.ContextID = e.TaskID
			for pb.Next() {
				if _, err := h.PublishTask(context.Background(), &e); err != nil {
					b.Error(err)
					return
				}
			}
		})
		report(b, start)
	})
	b.Run("one-stream", func(b *testing.B) {
		h := newHub(b, sse.Config{Log: memoryLog(b)})
		b.ReportAllocs()
		start := time.Now()
		for b.Loop() {
			if _, err := h.Publish(context.Background(), "s", ev); err != nil {
				b.Fatal(err)
			}
		}
		report(b, start)
	})
	b.Run("one-stream-subscribed", func(b *testing.B) {
		h := newHub(b, sse.Config{Log: memoryLog(b)})
		sub, err := h.Subscribe(context.Background(), "s", 0, sse.Filter{})
		if err != nil {
			b.Fatal(err)
		}
		defer sub.Close()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = sse.Serve(ctx, io.Discard, nil, sub, sse.LooopyEncoder{}, sse.ServeOptions{Heartbeat: -1})
		}()
		b.ReportAllocs()
		start := time.Now()
		for b.Loop() {
			if _, err := h.Publish(context.Background(), "s", ev); err != nil {
				b.Fatal(err)
			}
		}
		report(b, start)
		cancel()
		<-done
	})
	b.Run("task-and-context-parallel", func(b *testing.B) {
		h := newHub(b, sse.Config{Log: memoryLog(b)})
		var next atomic.Int64
		b.ReportAllocs()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			e := *ev
			e.TaskID = fmt.Sprintf("task-%d", next.Add(1))
			for pb.Next() {
				if _, err := h.PublishTask(context.Background(), &e); err != nil {
					b.Error(err)
					return
				}
			}
		})
		report(b, start)
	})
}

// BenchmarkIdleSubscriptions opens 10,000 idle subscriptions, each on its
// own task stream and served by its own Serve goroutine, and reports the
// memory each costs (heap and goroutine stack) after a garbage collection.
func BenchmarkIdleSubscriptions(b *testing.B) {
	const n = 10000
	h := newHub(b, sse.Config{Log: memoryLog(b)})
	var heap, stack float64
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		subs := make([]*sse.Subscription, n)
		for i := range n {
			sub, err := h.Subscribe(ctx, sse.TaskStream("idle-"+strconv.Itoa(i)), 0, sse.Filter{})
			if err != nil {
				b.Fatal(err)
			}
			subs[i] = sub
			wg.Go(func() {
				_ = sse.Serve(ctx, io.Discard, nil, sub, sse.LooopyEncoder{}, sse.ServeOptions{Heartbeat: time.Minute})
			})
		}
		// Let every Serve reach its wait.
		for range 5 {
			time.Sleep(20 * time.Millisecond)
			runtime.Gosched()
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
		stack = float64(int64(after.StackInuse)-int64(before.StackInuse)) / n
		cancel()
		wg.Wait()
		for _, s := range subs {
			_ = s.Close()
		}
	}
	b.ReportMetric(heap, "heap-B/sub")
	b.ReportMetric(stack, "stack-B/sub")
	b.ReportMetric(heap+stack, "B/sub")
}
