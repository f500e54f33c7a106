package sse_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
)

func newHub(t testing.TB, cfg sse.Config) *sse.Hub {
	t.Helper()
	h, err := sse.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func hdr(kind loop.EventKind, ctxID, task string) loop.Header {
	return loop.Header{Kind: kind, ContextID: ctxID, TaskID: task, Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func delta(task string, i int) *loop.ContentDelta {
	return &loop.ContentDelta{Header: hdr(loop.KindContentDelta, "c1", task), Delta: "d" + strconv.Itoa(i), Index: i}
}

type frame struct {
	id      uint64
	event   string
	data    string
	comment string
}

// parseFrames reads an SSE byte stream the way a client does.
func parseFrames(t testing.TB, b []byte) []frame {
	t.Helper()
	var out []frame
	var cur frame
	var has bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if has {
				out = append(out, cur)
			}
			cur, has = frame{}, false
		case strings.HasPrefix(line, ":"):
			cur.comment, has = strings.TrimSpace(line[1:]), true
		case strings.HasPrefix(line, "id: "):
			id, err := strconv.ParseUint(line[4:], 10, 64)
			if err != nil {
				t.Fatalf("bad id line %q", line)
			}
			cur.id, has = id, true
		case strings.HasPrefix(line, "event: "):
			cur.event, has = line[7:], true
		case strings.HasPrefix(line, "data: "):
			if cur.data != "" {
				cur.data += "\n"
			}
			cur.data, has = cur.data+line[6:], true
		case strings.HasPrefix(line, "retry: "):
			has = true
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	if has {
		t.Fatalf("stream ends inside a frame: %+v", cur)
	}
	return out
}

func eventFrames(fs []frame) []frame {
	var out []frame
	for _, f := range fs {
		if f.comment == "" {
			out = append(out, f)
		}
	}
	return out
}

// checkContiguous fails unless ids are exactly after+1 .. last.
func checkContiguous(t testing.TB, who string, ids []uint64, after, last uint64) {
	t.Helper()
	if uint64(len(ids)) != last-after {
		t.Errorf("%s: after %d got %d events, want %d (first %v)", who, after, len(ids), last-after, ids[:min(len(ids), 5)])
		return
	}
	for i, id := range ids {
		if id != after+1+uint64(i) {
			t.Errorf("%s: event %d has id %d, want %d", who, i, id, after+1+uint64(i))
			return
		}
	}
}

// TestReplayThenLiveHammer: publishers append to one stream while
// subscribers join at random points (replaying from a random id) and read to
// the end; each must see exactly the ids after its start, in order. Small
// tails make subscribers switch between the log and the tail often.
func TestReplayThenLiveHammer(t *testing.T) {
	t.Run("memory", func(t *testing.T) { hammer(t, memoryLog, []int{3, 64, 4096}, 300) })
	// Every append to Badger is synced: fewer events.
	t.Run("badger", func(t *testing.T) { hammer(t, badgerLog, []int{3, 64}, 80) })
}

func hammer(t *testing.T, newLog func(testing.TB) *spyLog, tails []int, perPub int) {
	for _, tail := range tails {
		t.Run(fmt.Sprintf("tail=%d", tail), func(t *testing.T) {
			log := newLog(t)
			h := newHub(t, sse.Config{Log: log, TailSize: tail, ReadBatch: 5})
			ctx := t.Context()
			stream := sse.TaskStream("hammer")
			const pubs, subs = 4, 24
			total := uint64(pubs * perPub)

			var maxID atomic.Uint64
			var pubWG, subWG sync.WaitGroup
			sink := h.Sink(func(_ loop.Event, err error) { t.Errorf("sink: %v", err) })
			for p := range pubs {
				pubWG.Go(func() {
					for i := range perPub {
						if p%2 == 1 { // half the publishers do not wait for the log
							sink.Emit(delta("hammer", p*perPub+i))
							continue
						}
						id, err := h.Publish(ctx, stream, delta("hammer", p*perPub+i))
						if err != nil {
							t.Errorf("publish: %v", err)
							return
						}
						for {
							m := maxID.Load()
							if id <= m || maxID.CompareAndSwap(m, id) {
								break
							}
						}
						if rand.IntN(50) == 0 {
							time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
						}
					}
				})
			}
			for s := range subs {
				subWG.Go(func() {
					time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
					after := uint64(0)
					if m := maxID.Load(); m > 0 {
						after = rand.Uint64N(m + 1)
					}
					sub, err := h.Subscribe(ctx, stream, after, sse.Filter{})
					if err != nil {
						t.Errorf("subscribe: %v", err)
						return
					}
					defer sub.Close()
					var ids []uint64
					if s%2 == 0 {
						for {
							it, err := sub.Next(ctx)
							if errors.Is(err, sse.ErrFinished) {
								break
							}
							if err != nil {
								t.Errorf("next: %v", err)
								return
							}
							ids = append(ids, it.ID)
						}
					} else {
						var buf bytes.Buffer
						if err := sse.Serve(ctx, &buf, nil, sub, sse.LooopyEncoder{}, sse.ServeOptions{Heartbeat: -1}); err != nil {
							t.Errorf("serve: %v", err)
							return
						}
						for _, f := range eventFrames(parseFrames(t, buf.Bytes())) {
							ids = append(ids, f.id)
						}
					}
					checkContiguous(t, fmt.Sprintf("subscriber %d", s), ids, after, total)
				})
			}
			pubWG.Wait()
			if err := h.Finish(ctx, stream); err != nil {
				t.Fatalf("finish: %v", err)
			}
			subWG.Wait()
		})
	}
}

func TestSubscribeAfterFinishReplaysAndEnds(t *testing.T) {
	log := memoryLog(t)
	h := newHub(t, sse.Config{Log: log, Retention: time.Hour})
	ctx := t.Context()
	stream := sse.TaskStream("t")
	for i := range 5 {
		if _, err := h.Publish(ctx, stream, delta("t", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Finish(ctx, stream); err != nil {
		t.Fatal(err)
	}
	if got, _ := log.expiry(stream); got != time.Hour {
		t.Fatalf("Finish expired the log after %v, want the retention 1h", got)
	}
	if _, err := h.Publish(ctx, stream, delta("t", 9)); !errors.Is(err, sse.ErrFinished) {
		t.Fatalf("publish to a finished stream: %v, want ErrFinished", err)
	}
	sub, err := h.Subscribe(ctx, stream, 2, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var ids []uint64
	for {
		it, err := sub.Next(ctx)
		if errors.Is(err, sse.ErrFinished) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, it.ID)
	}
	checkContiguous(t, "late subscriber", ids, 2, 5)
}

func TestRetentionNeverWhenNegative(t *testing.T) {
	log := memoryLog(t)
	h := newHub(t, sse.Config{Log: log, Retention: -1})
	if _, err := h.Publish(t.Context(), "s", delta("t", 0)); err != nil {
		t.Fatal(err)
	}
	if err := h.Finish(t.Context(), "s"); err != nil {
		t.Fatal(err)
	}
	if _, ok := log.expiry("s"); ok {
		t.Fatal("negative retention must keep the log, but Expire was called")
	}
}

func TestRetentionExpiresTheLog(t *testing.T) {
	eachLog(t, func(t *testing.T, newLog func(testing.TB) *spyLog) {
		log := newLog(t)
		h := newHub(t, sse.Config{Log: log, Retention: time.Second})
		ctx := t.Context()
		if _, err := h.Publish(ctx, "s", delta("t", 0)); err != nil {
			t.Fatal(err)
		}
		if err := h.Finish(ctx, "s"); err != nil {
			t.Fatal(err)
		}
		// The log's records go once the retention has passed (the stores
		// count expiry in whole seconds); wait for it, without asserting
		// when. The stream's last id stays.
		deadline := time.Now().Add(20 * time.Second)
		for {
			recs, err := log.Read(ctx, "s", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the log of a finished stream never expired")
			}
			time.Sleep(100 * time.Millisecond)
		}
		if last, err := h.Last(ctx, "s"); err != nil || last != 1 {
			t.Fatalf("Last of the expired stream = %d, %v; want 1 (its ids never go back)", last, err)
		}
	})
}

func TestPublishTaskWritesTaskThenContextStream(t *testing.T) {
	log := memoryLog(t)
	h := newHub(t, sse.Config{Log: log})
	ctx := t.Context()
	for i, task := range []string{"a", "b", "a"} {
		id, err := h.PublishTask(ctx, delta(task, i))
		if err != nil {
			t.Fatal(err)
		}
		want := map[int]uint64{0: 1, 1: 1, 2: 2}[i]
		if id != want {
			t.Fatalf("event %d: task id %d, want %d", i, id, want)
		}
	}
	if _, err := h.PublishTask(ctx, &loop.Warning{Header: loop.Header{Kind: loop.KindWarning}}); err == nil {
		t.Fatal("an event with neither task nor context must be refused")
	}
	for stream, want := range map[string]uint64{sse.TaskStream("a"): 2, sse.TaskStream("b"): 1, sse.ContextStream("c1"): 3} {
		if last, err := h.Last(ctx, stream); err != nil || last != want {
			t.Fatalf("%s: last %d (%v), want %d", stream, last, err, want)
		}
	}
}

func TestFilterByTaskAndKind(t *testing.T) {
	h := newHub(t, sse.Config{Log: memoryLog(t)})
	ctx := t.Context()
	evs := []loop.Event{
		&loop.TaskCreated{Header: hdr(loop.KindTaskCreated, "c1", "a")},
		delta("a", 0),
		&loop.InternalLLMCall{Header: hdr(loop.KindInternalLLMCall, "c1", "a")},
		&loop.TaskCreated{Header: hdr(loop.KindTaskCreated, "c1", "b")},
		delta("b", 0),
		&loop.ToolStart{Header: hdr(loop.KindToolStart, "c1", "b"), ToolName: "x"},
		delta("a", 1),
	}
	for _, e := range evs {
		if _, err := h.PublishTask(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Finish(ctx, sse.ContextStream("c1")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		filter sse.Filter
		want   []uint64
	}{
		{"all external", sse.Filter{}, []uint64{1, 2, 4, 5, 6, 7}},
		{"with internal", sse.Filter{Internal: true}, []uint64{1, 2, 3, 4, 5, 6, 7}},
		{"task a", sse.Filter{TaskIDs: []string{"a"}}, []uint64{1, 2, 7}},
		{"deltas", sse.Filter{Kinds: []loop.EventKind{loop.KindContentDelta}}, []uint64{2, 5, 7}},
		{"deltas of b", sse.Filter{TaskIDs: []string{"b"}, Kinds: []loop.EventKind{loop.KindContentDelta, loop.KindToolStart}}, []uint64{5, 6}},
		{"internal kind without Internal", sse.Filter{Kinds: []loop.EventKind{loop.KindInternalLLMCall}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sub, err := h.Subscribe(ctx, sse.ContextStream("c1"), 0, c.filter)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			var got []uint64
			for {
				it, err := sub.Next(ctx)
				if errors.Is(err, sse.ErrFinished) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, it.ID)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("ids %v, want %v", got, c.want)
			}
			if sub.Cursor() != 7 {
				t.Fatalf("cursor %d, want 7 (filtered records are passed too)", sub.Cursor())
			}
		})
	}
}

func TestInternalEventsNeverServed(t *testing.T) {
	h := newHub(t, sse.Config{Log: memoryLog(t)})
	ctx := t.Context()
	stream := sse.TaskStream("t")
	evs := []loop.Event{
		&loop.TaskCreated{Header: hdr(loop.KindTaskCreated, "c1", "t")},
		&loop.InternalLLMCall{Header: hdr(loop.KindInternalLLMCall, "c1", "t"), MessageCount: 3},
		&loop.InternalCheckpoint{Header: hdr(loop.KindInternalCheckpoint, "c1", "t"), Stage: "model-response"},
		&loop.InternalThoughtProcess{Header: hdr(loop.KindInternalThoughtProcess, "c1", "t"), Reasoning: "secret"},
		&loop.InternalLLMRetry{Header: hdr(loop.KindInternalLLMRetry, "c1", "t"), Error: "secret"},
		delta("t", 0),
		&loop.TaskStatusEvent{Header: hdr(loop.KindTaskStatus, "c1", "t"), Status: loop.TaskCompleted},
	}
	for _, e := range evs {
		if _, err := h.Publish(ctx, stream, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Finish(ctx, stream); err != nil {
		t.Fatal(err)
	}
	encoders := map[string]sse.Encoder{"looopy": sse.LooopyEncoder{}, "a2a": sse.A2AEncoder{RequestID: 1}, "a2a03": sse.A2A03Encoder{RequestID: "r"}}
	for name, enc := range encoders {
		t.Run(name, func(t *testing.T) {
			// Even a filter that lets internal events through must not get
			// them onto the wire.
			sub, err := h.Subscribe(ctx, stream, 0, sse.Filter{Internal: true})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			var buf bytes.Buffer
			if err := sse.Serve(ctx, &buf, nil, sub, enc, sse.ServeOptions{Heartbeat: -1}); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			if strings.Contains(out, "internal") || strings.Contains(out, "secret") {
				t.Fatalf("internal event on the wire:\n%s", out)
			}
			fs := eventFrames(parseFrames(t, buf.Bytes()))
			if len(fs) != 3 {
				t.Fatalf("%d frames, want 3 (created, delta, status):\n%s", len(fs), out)
			}
		})
	}
}

// TestLastEventIDReplayAfterRestart: a client reads part of a stream and
// leaves; the host restarts (a new Hub over the same Badger directory,
// reopened); the client reconnects with Last-Event-ID and gets the rest,
// then the live tail, with no gap and no duplicate.
func TestLastEventIDReplayAfterRestart(t *testing.T) {
	dir := t.TempDir()
	db1 := openBadger(t, dir)
	log := db1.Events()
	ctx := t.Context()
	stream := sse.ContextStream("c1")

	h1, err := sse.New(sse.Config{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := h1.PublishTask(ctx, delta("t", i)); err != nil {
			t.Fatal(err)
		}
	}
	// A client reads four events, then goes away (its fifth write fails).
	sub, err := h1.Subscribe(ctx, stream, 0, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	gone := errors.New("connection reset")
	w := &failingWriter{failAt: 5, err: gone}
	err = sse.Serve(ctx, w, nil, sub, sse.LooopyEncoder{}, sse.ServeOptions{Heartbeat: -1, FlushEvery: 1})
	if !errors.Is(err, gone) {
		t.Fatalf("serve to a departed client: %v, want the write error", err)
	}
	seen := eventFrames(parseFrames(t, w.buf.Bytes()))
	if len(seen) != 4 {
		t.Fatalf("client saw %d frames before leaving, want 4", len(seen))
	}
	_ = sub.Close()
	_ = h1.Close()
	if err := db1.Close(); err != nil {
		t.Fatal(err)
	}

	// The host restarts over the same directory; the client reconnects.
	db2 := openBadger(t, dir)
	t.Cleanup(func() { _ = db2.Close() })
	h2 := newHub(t, sse.Config{Log: db2.Events()})
	after, err := sse.ParseLastEventID(strconv.FormatUint(seen[len(seen)-1].id, 10))
	if err != nil {
		t.Fatal(err)
	}
	sub2, err := h2.Subscribe(ctx, stream, after, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Close()
	var buf bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- sse.Serve(ctx, &buf, nil, sub2, sse.LooopyEncoder{}, sse.ServeOptions{Heartbeat: -1})
	}()
	for i := 10; i < 12; i++ {
		if _, err := h2.PublishTask(ctx, delta("t", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := h2.Finish(ctx, stream); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	var ids []uint64
	for i, f := range eventFrames(parseFrames(t, buf.Bytes())) {
		ids = append(ids, f.id)
		ev, err := loop.DecodeEvent([]byte(f.data))
		if err != nil {
			t.Fatal(err)
		}
		if d := ev.(*loop.ContentDelta).Delta; d != "d"+strconv.Itoa(4+i) {
			t.Fatalf("frame %d carries %q, want d%d", f.id, d, 4+i)
		}
		if f.event != string(loop.KindContentDelta) {
			t.Fatalf("frame %d event %q", f.id, f.event)
		}
	}
	checkContiguous(t, "reconnected client", ids, 4, 12)
}

// failingWriter records what it is given and fails its failAt-th write.
type failingWriter struct {
	buf    bytes.Buffer
	n      int
	failAt int
	err    error
}

func (w *failingWriter) Write(p []byte) (int, error) {
	w.n++
	if w.n >= w.failAt {
		return 0, w.err
	}
	return w.buf.Write(p)
}

func TestFailedWriteOrFlushEndsServe(t *testing.T) {
	h := newHub(t, sse.Config{Log: memoryLog(t)})
	ctx := t.Context()
	for i := range 3 {
		if _, err := h.Publish(ctx, "s", delta("t", i)); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("write", func(t *testing.T) {
		sub, err := h.Subscribe(ctx, "s", 0, sse.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		gone := errors.New("broken pipe")
		err = sse.Serve(ctx, &failingWriter{failAt: 2, err: gone}, nil, sub, sse.LooopyEncoder{}, sse.ServeOptions{Heartbeat: -1})
		if !errors.Is(err, gone) {
			t.Fatalf("Serve returned %v, want the write error", err)
		}
	})
	t.Run("flush", func(t *testing.T) {
		sub, err := h.Subscribe(ctx, "s", 0, sse.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		gone := errors.New("flush: connection closed")
		err = sse.Serve(ctx, &bytes.Buffer{}, func() error { return gone }, sub, sse.LooopyEncoder{}, sse.ServeOptions{Heartbeat: -1})
		if !errors.Is(err, gone) {
			t.Fatalf("Serve returned %v, want the flush error", err)
		}
	})
	t.Run("heartbeat", func(t *testing.T) {
		sub, err := h.Subscribe(ctx, "s", 3, sse.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		gone := errors.New("client left")
		err = sse.Serve(ctx, &failingWriter{failAt: 1, err: gone}, nil, sub, sse.LooopyEncoder{}, sse.ServeOptions{Heartbeat: time.Millisecond})
		if !errors.Is(err, gone) {
			t.Fatalf("Serve on an idle stream returned %v, want the heartbeat's write error", err)
		}
	})
}

// notifyWriter signals each write to a channel.
type notifyWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes chan string
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	w.mu.Unlock()
	select {
	case w.writes <- string(p):
	default:
	}
	return len(p), nil
}

func TestHeartbeatOnIdleStream(t *testing.T) {
	h := newHub(t, sse.Config{Log: memoryLog(t)})
	ctx, cancel := context.WithCancel(t.Context())
	sub, err := h.Subscribe(ctx, "idle", 0, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	w := &notifyWriter{writes: make(chan string, 16)}
	done := make(chan error, 1)
	go func() {
		done <- sse.Serve(ctx, w, nil, sub, sse.LooopyEncoder{}, sse.ServeOptions{Heartbeat: 2 * time.Millisecond, Retry: 1500 * time.Millisecond})
	}()
	pings := 0
	for pings < 2 {
		if s := <-w.writes; s == ": ping\n\n" {
			pings++
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Serve after cancel: %v, want context.Canceled", err)
	}
	w.mu.Lock()
	fs := parseFrames(t, w.buf.Bytes())
	w.mu.Unlock()
	if !strings.HasPrefix(w.buf.String(), "retry: 1500\n\n") {
		t.Fatalf("stream does not start with the retry field: %q", w.buf.String())
	}
	for _, f := range fs {
		if f.id != 0 {
			t.Fatalf("an idle stream wrote an event: %+v", f)
		}
	}
}

// Each probe makes an idle stream write a ": ping" comment at once, with
// no heartbeat to come.
func TestProbeWritesAPingAtOnce(t *testing.T) {
	h := newHub(t, sse.Config{Log: memoryLog(t)})
	ctx, cancel := context.WithCancel(t.Context())
	sub, err := h.Subscribe(ctx, "idle", 0, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	w := &notifyWriter{writes: make(chan string, 16)}
	probe := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- sse.Serve(ctx, w, nil, sub, sse.LooopyEncoder{}, sse.ServeOptions{Heartbeat: -1, Probe: probe})
	}()
	for range 2 {
		probe <- struct{}{} // taken by the idle stream only
		if s := <-w.writes; s != ": ping\n\n" {
			t.Fatalf("a probe wrote %q", s)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Serve after cancel: %v, want context.Canceled", err)
	}
}

// stallWriter blocks its first write until released.
type stallWriter struct {
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func (w *stallWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.started) })
	<-w.release
	return 0, errors.New("connection closed")
}

func TestStalledSubscriberDoesNotBlockAndIsDisconnected(t *testing.T) {
	h := newHub(t, sse.Config{Log: memoryLog(t), TailSize: 16})
	ctx := t.Context()
	stream := sse.TaskStream("busy")

	stalledSub, err := h.Subscribe(ctx, stream, 0, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer stalledSub.Close()
	healthySub, err := h.Subscribe(ctx, stream, 0, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer healthySub.Close()

	sw := &stallWriter{started: make(chan struct{}), release: make(chan struct{})}
	aborted := make(chan struct{})
	var abortOnce sync.Once
	stalledDone := make(chan error, 1)
	go func() {
		stalledDone <- sse.Serve(ctx, sw, nil, stalledSub, sse.LooopyEncoder{}, sse.ServeOptions{
			Heartbeat:    -1,
			WriteTimeout: 20 * time.Millisecond,
			Abort:        func() { abortOnce.Do(func() { close(aborted) }) },
		})
	}()
	var healthy bytes.Buffer
	healthyDone := make(chan error, 1)
	go func() {
		healthyDone <- sse.Serve(ctx, &healthy, nil, healthySub, sse.LooopyEncoder{}, sse.ServeOptions{Heartbeat: -1})
	}()

	if _, err := h.Publish(ctx, stream, delta("busy", 0)); err != nil {
		t.Fatal(err)
	}
	<-sw.started // the stalled subscriber is now stuck in a write
	const n = 2000
	for i := 1; i < n; i++ {
		if _, err := h.Publish(ctx, stream, delta("busy", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Finish(ctx, stream); err != nil {
		t.Fatal(err)
	}
	// The publisher finished and the healthy subscriber got everything while
	// the stalled one was still blocked (it is released only below).
	if err := <-healthyDone; err != nil {
		t.Fatalf("healthy subscriber: %v", err)
	}
	var ids []uint64
	for _, f := range eventFrames(parseFrames(t, healthy.Bytes())) {
		ids = append(ids, f.id)
	}
	checkContiguous(t, "healthy subscriber", ids, 0, n)

	<-aborted // the watchdog gave up on the stalled write
	close(sw.release)
	if err := <-stalledDone; !errors.Is(err, sse.ErrStalled) {
		t.Fatalf("stalled subscriber: %v, want ErrStalled", err)
	}
}

func TestHubCloseEndsSubscriptions(t *testing.T) {
	h, err := sse.New(sse.Config{Log: memoryLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	sub, err := h.Subscribe(ctx, "s", 0, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := sub.Next(ctx); done <- err }()
	_ = h.Close()
	if err := <-done; !errors.Is(err, sse.ErrClosed) {
		t.Fatalf("Next after Close: %v, want ErrClosed", err)
	}
	if _, err := h.Publish(ctx, "s", delta("t", 0)); !errors.Is(err, sse.ErrClosed) {
		t.Fatalf("Publish after Close: %v, want ErrClosed", err)
	}
	if _, err := h.Subscribe(ctx, "s", 0, sse.Filter{}); !errors.Is(err, sse.ErrClosed) {
		t.Fatalf("Subscribe after Close: %v, want ErrClosed", err)
	}
}

func TestBadInput(t *testing.T) {
	if _, err := sse.New(sse.Config{}); err == nil || !strings.Contains(err.Error(), "Log") {
		t.Fatalf("New without a log: %v", err)
	}
	if _, err := sse.New(sse.Config{Log: memoryLog(t), TailSize: -1}); err == nil {
		t.Fatal("New with a negative tail size must fail")
	}
	h := newHub(t, sse.Config{Log: memoryLog(t)})
	ctx := t.Context()
	if _, err := h.Publish(ctx, "s", nil); err == nil {
		t.Fatal("Publish(nil) must fail")
	}
	if _, err := h.Publish(ctx, "", delta("t", 0)); err == nil {
		t.Fatal("Publish to an empty stream name must fail")
	}
	if _, err := h.Subscribe(ctx, "", 0, sse.Filter{}); err == nil {
		t.Fatal("Subscribe to an empty stream name must fail")
	}
	if _, err := h.Publish(ctx, "s", delta("t", 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Subscribe(ctx, "s", 2, sse.Filter{}); !errors.Is(err, sse.ErrAhead) {
		t.Fatalf("Subscribe after an id the stream never had: %v, want ErrAhead", err)
	}
	if sub, err := h.Subscribe(ctx, "s", 1, sse.Filter{}); err != nil {
		t.Fatalf("Subscribe after the last id: %v", err)
	} else {
		_ = sub.Close()
	}
	if err := sse.Serve(ctx, nil, nil, nil, nil, sse.ServeOptions{}); err == nil {
		t.Fatal("Serve with nothing must fail")
	}
}

func TestSubscriberReadsTheLogOnlyWhenBehind(t *testing.T) {
	log := memoryLog(t)
	h := newHub(t, sse.Config{Log: log, TailSize: 8})
	ctx := t.Context()
	sub, err := h.Subscribe(ctx, "s", 0, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	before := log.readCount()
	for i := range 100 {
		if _, err := h.Publish(ctx, "s", delta("t", i)); err != nil {
			t.Fatal(err)
		}
		if it, err := sub.Next(ctx); err != nil || it.ID != uint64(i+1) {
			t.Fatalf("next: %v %v", it.ID, err)
		}
	}
	if n := log.readCount() - before; n != 0 {
		t.Fatalf("a live subscriber read the log %d times; the tail should serve it", n)
	}
	// Far behind: the tail holds 8, so 100 - 8 come from the log.
	late, err := h.Subscribe(ctx, "s", 0, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	for i := range 100 {
		if it, err := late.Next(ctx); err != nil || it.ID != uint64(i+1) {
			t.Fatalf("late next: %v %v", it.ID, err)
		}
	}
	if log.readCount() == before {
		t.Fatal("a subscriber behind the tail must read the log")
	}
}

// TestStallWithoutAbort: with no way to break the write, the stall is
// reported once the write returns.
func TestStallWithoutAbort(t *testing.T) {
	h := newHub(t, sse.Config{Log: memoryLog(t)})
	ctx := t.Context()
	if _, err := h.Publish(ctx, "s", delta("t", 0)); err != nil {
		t.Fatal(err)
	}
	sub, err := h.Subscribe(ctx, "s", 0, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	w := &slowWriter{release: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		done <- sse.Serve(ctx, w, nil, sub, sse.LooopyEncoder{}, sse.ServeOptions{Heartbeat: -1, WriteTimeout: time.Millisecond})
	}()
	// Hold the write well past the limit: release it only after the writer
	// has seen more than the timeout go by.
	w.waitStarted()
	time.Sleep(20 * time.Millisecond)
	close(w.release)
	if err := <-done; !errors.Is(err, sse.ErrStalled) {
		t.Fatalf("Serve: %v, want ErrStalled", err)
	}
}

// slowWriter's writes succeed, once released.
type slowWriter struct {
	once    sync.Once
	started chan struct{}
	release chan struct{}
	mu      sync.Mutex
}

func (w *slowWriter) waitStarted() {
	w.mu.Lock()
	if w.started == nil {
		w.started = make(chan struct{})
	}
	ch := w.started
	w.mu.Unlock()
	<-ch
}

func (w *slowWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.started == nil {
		w.started = make(chan struct{})
	}
	ch := w.started
	w.mu.Unlock()
	w.once.Do(func() { close(ch) })
	<-w.release
	return len(p), nil
}

// A stream deleted under its subscribers (Hub.Delete: a conversation
// deleted) ends them with ErrDeleted, on every log; what is published to
// it afterwards continues after its last id (ids never go back), and a new
// subscriber reads only that.
func TestDeleteEndsTheSubscribers(t *testing.T) {
	eachLog(t, func(t *testing.T, newLog func(testing.TB) *spyLog) {
		h := newHub(t, sse.Config{Log: newLog(t)})
		ctx := t.Context()
		stream := sse.ContextStream("c1")
		for i := range 3 {
			if _, err := h.Publish(ctx, stream, delta("t", i)); err != nil {
				t.Fatal(err)
			}
		}
		sub, err := h.Subscribe(ctx, stream, 0, sse.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		ended := make(chan error, 1)
		go func() {
			for {
				if _, err := sub.Next(ctx); err != nil {
					ended <- err
					return
				}
			}
		}()
		if err := h.Delete(ctx, stream); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-ended:
			if !errors.Is(err, sse.ErrDeleted) {
				t.Fatalf("the subscriber ended with %v, want ErrDeleted", err)
			}
		case <-time.After(time.Minute): // a hang guard
			t.Fatal("the subscriber of the deleted stream still waits")
		}
		if last, err := h.Last(ctx, stream); err != nil || last != 3 {
			t.Fatalf("Last after the delete: %d %v, want 3 (the stream's last id stays)", last, err)
		}
		id, err := h.Publish(ctx, stream, delta("t2", 0))
		if err != nil || id != 4 {
			t.Fatalf("publish after the delete: id %d %v, want 4", id, err)
		}
		again, err := h.Subscribe(ctx, stream, 0, sse.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		defer again.Close()
		it, err := again.Next(ctx)
		if err != nil || it.ID != 4 || it.TaskID != "t2" {
			t.Fatalf("a new subscriber reads %+v %v, want the new event 4", it, err)
		}
	})
}

// TestExpiredStreamIDsGoOn: a stream whose records expired (its writer was
// done a retention ago: a conversation idle for limits.taskTTL) and that
// is then written again (the conversation's next turn) continues its ids.
// A follower that stayed open across the expiry gets the new events, a
// client resuming with the last id it saw gets them too, and one resuming
// from an id whose successors expired is told (ErrExpired), never left
// with nothing.
func TestExpiredStreamIDsGoOn(t *testing.T) {
	eachLog(t, func(t *testing.T, newLog func(testing.TB) *spyLog) {
		log := newLog(t)
		h := newHub(t, sse.Config{Log: log})
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		const stream = "ctx/c"
		follower, err := h.Subscribe(ctx, stream, 0, sse.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		defer follower.Close()
		for i := range 3 {
			if _, err := h.Publish(ctx, stream, delta("t1", i)); err != nil {
				t.Fatal(err)
			}
		}
		for want := uint64(1); want <= 3; want++ {
			if it, err := follower.Next(ctx); err != nil || it.ID != want {
				t.Fatalf("follower: %d, %v; want id %d", it.ID, err, want)
			}
		}
		if err := log.Expire(ctx, stream, 0); err != nil {
			t.Fatal(err)
		}
		if recs, err := log.Read(ctx, stream, 0, 0); err != nil || len(recs) != 0 {
			t.Fatalf("the expired stream still reads %d records, %v", len(recs), err)
		}
		for i := 3; i < 5; i++ {
			id, err := h.Publish(ctx, stream, delta("t2", i))
			if err != nil {
				t.Fatal(err)
			}
			if id != uint64(i+1) {
				t.Fatalf("event published after the expiry got id %d, want %d (ids never go back)", id, i+1)
			}
		}
		// The follower opened before the expiry hears the new events.
		for want := uint64(4); want <= 5; want++ {
			it, ok, err := follower.TryNext(ctx)
			if err != nil || !ok || it.ID != want {
				t.Fatalf("follower after the expiry: %d, %v, %v; want id %d", it.ID, ok, err, want)
			}
		}
		// A client resuming with the last id it saw before the expiry.
		resumed, err := h.Subscribe(ctx, stream, 3, sse.Filter{})
		if err != nil {
			t.Fatalf("resume after 3: %v", err)
		}
		defer resumed.Close()
		for want := uint64(4); want <= 5; want++ {
			it, ok, err := resumed.TryNext(ctx)
			if err != nil || !ok || it.ID != want {
				t.Fatalf("resumed after 3: %d, %v, %v; want id %d", it.ID, ok, err, want)
			}
		}
		// Once no subscriber keeps the stream's tail in memory, the Hub
		// answers from the log alone.
		_ = follower.Close()
		_ = resumed.Close()
		// One that had seen only event 1: events 2 and 3 are gone.
		if _, err := h.Subscribe(ctx, stream, 1, sse.Filter{}); !errors.Is(err, sse.ErrExpired) {
			t.Fatalf("resume after 1, whose successors expired: err = %v, want ErrExpired", err)
		}
		// From the start: what the log keeps.
		fresh, err := h.Subscribe(ctx, stream, 0, sse.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		defer fresh.Close()
		for want := uint64(4); want <= 5; want++ {
			it, ok, err := fresh.TryNext(ctx)
			if err != nil || !ok || it.ID != want {
				t.Fatalf("subscribed from 0: %d, %v, %v; want id %d", it.ID, ok, err, want)
			}
		}
		if it, ok, err := fresh.TryNext(ctx); ok || err != nil {
			t.Fatalf("subscribed from 0: more after 5: %d, %v, %v", it.ID, ok, err)
		}
	})
}

// TestSeedContinuesIDs: a stream seeded with the ids of another name (a
// conversation started again under its scoped id) continues after them,
// for publishers and subscribers alike; a stream with records is left as
// it is.
func TestSeedContinuesIDs(t *testing.T) {
	eachLog(t, func(t *testing.T, newLog func(testing.TB) *spyLog) {
		h := newHub(t, sse.Config{Log: newLog(t)})
		ctx := t.Context()
		const stream = "ctx/scoped"
		if err := h.Seed(ctx, stream, 8); err != nil {
			t.Fatal(err)
		}
		if last, err := h.Last(ctx, stream); err != nil || last != 8 {
			t.Fatalf("Last of the seeded stream: %d, %v; want 8", last, err)
		}
		if _, err := h.Subscribe(ctx, stream, 8, sse.Filter{}); err != nil {
			t.Fatalf("resume after the seeded id: %v", err)
		}
		sub, err := h.Subscribe(ctx, stream, 0, sse.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		id, err := h.Publish(ctx, stream, delta("t", 0))
		if err != nil || id != 9 {
			t.Fatalf("first event of the seeded stream: id %d, %v; want 9", id, err)
		}
		if it, ok, err := sub.TryNext(ctx); err != nil || !ok || it.ID != 9 {
			t.Fatalf("subscriber: %d, %v, %v; want 9", it.ID, ok, err)
		}
		if err := h.Seed(ctx, stream, 20); err != nil {
			t.Fatal(err)
		}
		if id, err := h.Publish(ctx, stream, delta("t", 1)); err != nil || id != 10 {
			t.Fatalf("a stream with records is not seeded: id %d, %v; want 10", id, err)
		}
		if it, ok, err := sub.TryNext(ctx); err != nil || !ok || it.ID != 10 {
			t.Fatalf("subscriber: %d, %v, %v; want 10", it.ID, ok, err)
		}
	})
}
