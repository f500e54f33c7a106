package taskrt

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
	"github.com/looopy-go/looopy/store"
)

// hubEndEvents is the host's Events over a real sse.Hub: a turn's commit
// and its end go through the Hub in one write.
type hubEndEvents struct {
	hub *sse.Hub
	log loop.EventLog
}

func (h hubEndEvents) Sink(onErr func(loop.Event, error)) loop.EventSink { return h.hub.Sink(onErr) }
func (h hubEndEvents) Publish(ctx context.Context, e loop.Event) error {
	_, err := h.hub.PublishTask(ctx, e)
	return err
}
func (h hubEndEvents) Last(ctx context.Context, id string) (uint64, error) {
	return h.hub.Last(ctx, sse.TaskStream(id))
}
func (h hubEndEvents) LastEvent(ctx context.Context, id string) (loop.Event, error) {
	evs, err := (&logEvents{log: h.log}).events(ctx, id)
	if err != nil || len(evs) == 0 {
		return nil, err
	}
	return evs[len(evs)-1], nil
}
func (h hubEndEvents) Settle(ctx context.Context, taskID, contextID string, terminal bool) error {
	err := errors.Join(h.hub.Flush(ctx, sse.TaskStream(taskID)), h.hub.Flush(ctx, sse.ContextStream(contextID)))
	if terminal {
		err = errors.Join(err, h.hub.End(ctx, sse.TaskStream(taskID)))
	}
	return err
}
func (h hubEndEvents) Retire(ctx context.Context, id string) error {
	return h.hub.Retire(ctx, sse.TaskStream(id))
}
func (h hubEndEvents) KeepContext(ctx context.Context, id string, ttl time.Duration) error {
	return h.log.Expire(ctx, sse.ContextStream(id), ttl)
}
func (h hubEndEvents) CommitEnd(ctx context.Context, tc loop.TurnCommitter, c loop.TurnCommit, end []loop.Event, onDurable func()) (bool, error) {
	return h.hub.CommitEnd(ctx, tc, c, end, onDurable)
}

// logCall is one write the Hub made to the log, with the kinds of the
// events it appended (per stream, in order).
type logCall struct {
	op    string // append, streams, commit
	kinds map[string][]string
	after map[string][]string // commit: the events appended with the commit
}

// spyLog is the Badger event log, recording each write the Hub makes.
type spyLog struct {
	*store.BadgerEvents
	mu    sync.Mutex
	calls []logCall
}

func kindsOf(t *testing.T, recs [][]byte) []string {
	var out []string
	for _, r := range recs {
		e, err := loop.DecodeEvent(r)
		if err != nil {
			t.Errorf("undecodable record: %v", err)
			continue
		}
		k := string(e.Head().Kind)
		if st, ok := e.(*loop.TaskStatusEvent); ok {
			k += ":" + string(st.Status)
		}
		out = append(out, k)
	}
	return out
}

type spy struct {
	*spyLog
	t *testing.T
}

func (s spy) record(c logCall) {
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
}

func (s spy) Append(ctx context.Context, stream string, data ...[]byte) (uint64, error) {
	s.record(logCall{op: "append", kinds: map[string][]string{stream: kindsOf(s.t, data)}})
	return s.BadgerEvents.Append(ctx, stream, data...)
}

func (s spy) AppendStreams(ctx context.Context, as []loop.StreamAppend) ([]uint64, error) {
	c := logCall{op: "streams", kinds: map[string][]string{}}
	for _, a := range as {
		c.kinds[a.Stream] = kindsOf(s.t, a.Data)
	}
	s.record(c)
	return s.BadgerEvents.AppendStreams(ctx, as)
}

func (s spy) AppendCommit(ctx context.Context, as []loop.CommitAppend, tc loop.TurnCommit) ([]uint64, error, error) {
	c := logCall{op: "commit", kinds: map[string][]string{}, after: map[string][]string{}}
	for _, a := range as {
		c.kinds[a.Stream] = kindsOf(s.t, a.Before)
		c.after[a.Stream] = kindsOf(s.t, a.After)
	}
	s.record(c)
	return s.BadgerEvents.AppendCommit(ctx, as, tc)
}

// countingCommitter is the store's TurnCommitter, counting the commits
// made on their own.
type countingCommitter struct {
	loop.TurnCommitter
	mu sync.Mutex
	n  int
}

func (c *countingCommitter) CommitTurn(ctx context.Context, tc loop.TurnCommit) error {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.TurnCommitter.CommitTurn(ctx, tc)
}

func (c *countingCommitter) UnwrapCommitter() loop.TurnCommitter { return c.TurnCommitter }

// A turn's end on Badger through the Hub: the turn's commit and the
// events that announce its end (its final status and task-complete) are
// one write, made after the crash point turn-ending, at which nothing of
// either is stored; the commit is never made on its own, the final events
// never appended apart from it, and the point between the two
// (turn-committed) is never reached. Were they split again, the client
// would wait for one more synced write at every turn's end.
func TestTurnEndIsOneWriteWithItsCommit(t *testing.T) {
	t.Parallel()
	db, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	sl := &spyLog{BadgerEvents: db.Events()}
	log := spy{spyLog: sl, t: t}
	hub, err := sse.New(sse.Config{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Close() })
	l, err := loop.New(loop.Config{Model: &scriptModel{}, Checkpoints: db, Journal: db})
	if err != nil {
		t.Fatal(err)
	}
	commits := &countingCommitter{TurnCommitter: db}
	var mu sync.Mutex
	var points []string
	var atEnding []string // what the task's stream held at turn-ending
	var recAtEnding loop.TaskStatus
	cfg := Config{Loop: l, Events: hubEndEvents{hub: hub, log: log}, Owner: "host-a",
		Stores: Stores{Messages: db, Agents: db, Tasks: db, Commit: commits, Checkpoints: db, Journal: db, Durable: db,
			Leases: db, TaskLeases: db}}
	var taskID string
	cfg.Crashpoint = func(p string) {
		mu.Lock()
		defer mu.Unlock()
		points = append(points, p)
		if p == PointTurnEnding {
			recs, err := db.Events().Read(context.Background(), sse.TaskStream(taskID), 0, 100)
			if err != nil {
				t.Error(err)
			}
			for _, r := range recs {
				atEnding = append(atEnding, kindsOf(t, [][]byte{r.Data})...)
			}
			// A new task's end may be written right behind the task's
			// own write (its model answered before that write was out):
			// the task is then not stored yet, which also says nothing
			// of the end is.
			rec, err := db.LoadTask(context.Background(), taskID)
			switch {
			case errors.Is(err, loop.ErrNotFound):
				recAtEnding = loop.TaskWorking
			case err != nil:
				t.Error(err)
			default:
				recAtEnding = rec.Status
			}
		}
	}
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		rt.Shutdown(ctx)
	})
	ctx := context.Background()
	for i, ctxID := range []string{"c-one", "c-one", "c-two"} {
		mu.Lock()
		points, atEnding, taskID = nil, nil, ""
		mu.Unlock()
		sl.mu.Lock()
		sl.calls = nil
		sl.mu.Unlock()
		// The task's id is known before its turn runs: the crash hook
		// reads its stream.
		id := "t-" + string(rune('a'+i))
		mu.Lock()
		taskID = id
		mu.Unlock()
		st, err := rt.Start(ctx, StartRequest{Auth: alice(), ContextID: ctxID, Message: user("hello"),
			NewID: func() string { return id }})
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.Wait(ctx, st.Run); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the lease released", func() bool {
			ls, _ := db.ListLeases(ctx)
			return len(ls) == 0
		})

		mu.Lock()
		gotPoints, gotAtEnding, gotRec := points, atEnding, recAtEnding
		mu.Unlock()
		if !containsStr(gotPoints, PointTurnEnding) || containsStr(gotPoints, PointTurnCommitted) {
			t.Fatalf("turn %d: crash points %v; want %s and never %s", i, gotPoints, PointTurnEnding, PointTurnCommitted)
		}
		if gotRec != loop.TaskWorking {
			t.Fatalf("turn %d: the task was %s at %s, want working (nothing of the end stored)", i, gotRec, PointTurnEnding)
		}
		for _, k := range gotAtEnding {
			if k == string(loop.KindTaskComplete) || k == "task-status:completed" {
				t.Fatalf("turn %d: the stream held %v at %s: the end was out before its commit", i, gotAtEnding, PointTurnEnding)
			}
		}
		commits.mu.Lock()
		alone := commits.n
		commits.n = 0
		commits.mu.Unlock()
		if alone != 0 {
			t.Fatalf("turn %d: %d commits made on their own, want 0 (the commit goes with the end)", i, alone)
		}
		sl.mu.Lock()
		calls := sl.calls
		sl.mu.Unlock()
		var withCommit int
		for _, c := range calls {
			for stream, kinds := range c.kinds {
				for _, k := range kinds {
					if k == string(loop.KindTaskComplete) || k == "task-status:completed" {
						t.Fatalf("turn %d: %s appended %v to %s apart from the commit", i, c.op, kinds, stream)
					}
				}
			}
			if c.op != "commit" {
				continue
			}
			withCommit++
			for _, stream := range []string{sse.TaskStream(id), sse.ContextStream(ctxID)} {
				// The end, after the events the turn's task held back
				// while its own write was under way (when it ended first).
				a := c.after[stream]
				if len(a) < 2 || a[len(a)-2] != "task-status:completed" || a[len(a)-1] != string(loop.KindTaskComplete) {
					t.Fatalf("turn %d: the commit's write appended %v to %s, want the completed status and task-complete", i, a, stream)
				}
			}
		}
		if withCommit != 1 {
			t.Fatalf("turn %d: %d writes with a commit, want 1", i, withCommit)
		}
		rec, err := db.LoadTask(ctx, id)
		if err != nil || rec.Status != loop.TaskCompleted {
			t.Fatalf("turn %d: task %s, %v; want completed", i, rec.Status, err)
		}
		evs, err := (&logEvents{log: db.Events()}).events(ctx, id)
		if err != nil || len(evs) < 2 {
			t.Fatalf("turn %d: stream %d events, %v", i, len(evs), err)
		}
		if tc, ok := evs[len(evs)-1].(*loop.TaskComplete); !ok || tc.Status != loop.TaskCompleted {
			t.Fatalf("turn %d: the stream ends with %s, want task-complete", i, evs[len(evs)-1].Head().Kind)
		}
	}
}

func containsStr(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// The Hub's CommitEnd with a live subscriber: the events queued before the
// commit come first, the end after them, in the write of the commit; a
// refused commit (a stale task version) has the events before it appended
// and read by the subscriber, and none of the end, neither in the log nor
// in what the subscriber reads; the ids stay contiguous across both.
func TestHubCommitEndRefusedPublishesNoEnd(t *testing.T) {
	t.Parallel()
	db, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	hub, err := sse.New(sse.Config{Log: db.Events()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Close() })
	ctx := context.Background()
	rec := loop.TaskRecord{ID: "t", ContextID: "c", Status: loop.TaskWorking, CreatedAt: time.Now().UTC(), UpdatedAt: time.Now().UTC()}
	if err := db.SaveTask(ctx, rec); err != nil {
		t.Fatal(err)
	}
	rec.Version++
	sub, err := hub.Subscribe(ctx, sse.TaskStream("t"), 0, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Close() }()
	hd := func(k loop.EventKind) loop.Header { return loop.Header{Kind: k, TaskID: "t", ContextID: "c"} }
	sink := hub.Sink(func(e loop.Event, err error) { t.Errorf("event %s not logged: %v", e.Head().Kind, err) })
	end := func() []loop.Event {
		return []loop.Event{&loop.TaskStatusEvent{Header: hd(loop.KindTaskStatus), Status: loop.TaskCompleted},
			&loop.TaskComplete{Header: hd(loop.KindTaskComplete), Status: loop.TaskCompleted}}
	}
	commit := func(r loop.TaskRecord) loop.TurnCommit {
		r.Status = loop.TaskCompleted
		return loop.TurnCommit{ContextID: "c", Agent: loop.AgentMetadata{ContextID: "c", Status: loop.AgentReady}, Task: &r}
	}
	for range 3 {
		sink.Emit(&loop.ContentDelta{Header: hd(loop.KindContentDelta), Delta: "piece"})
	}
	stale := rec
	stale.Version--
	handled, err := hub.CommitEnd(ctx, db, commit(stale), end(), func() { t.Error("onDurable ran for a refused commit") })
	if !handled || !errors.Is(err, loop.ErrConflict) {
		t.Fatalf("CommitEnd of a stale version: %v, %v; want handled, ErrConflict", handled, err)
	}
	got := kindsOfStream(t, db, sse.TaskStream("t"))
	if len(got) != 3 || got[2] != string(loop.KindContentDelta) {
		t.Fatalf("after the refused commit the stream holds %v, want the 3 deltas alone", got)
	}
	for i := range 3 {
		it, err := sub.Next(ctx)
		if err != nil || it.ID != uint64(i+1) || it.Kind != loop.KindContentDelta {
			t.Fatalf("subscriber's event %d: %+v, %v; want delta %d", i, it, err, i+1)
		}
	}
	sink.Emit(&loop.ContentDelta{Header: hd(loop.KindContentDelta), Delta: "once more"})
	durable := false
	handled, err = hub.CommitEnd(ctx, db, commit(rec), end(), func() { durable = true })
	if !handled || err != nil || !durable {
		t.Fatalf("CommitEnd: %v, %v, onDurable ran: %v", handled, err, durable)
	}
	got = kindsOfStream(t, db, sse.TaskStream("t"))
	want := []string{"content-delta", "content-delta", "content-delta", "content-delta", "task-status:completed", "task-complete"}
	if len(got) != len(want) {
		t.Fatalf("stream %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("stream %v, want %v", got, want)
		}
	}
	if ck := kindsOfStream(t, db, sse.ContextStream("c")); len(ck) != len(want) || ck[4] != want[4] || ck[5] != want[5] {
		t.Fatalf("context stream %v, want %v", ck, want)
	}
	for i := 4; i <= 6; i++ {
		it, err := sub.Next(ctx)
		if err != nil || it.ID != uint64(i) {
			t.Fatalf("subscriber's event %d: %+v, %v", i, it, err)
		}
	}
	stored, err := db.LoadTask(ctx, "t")
	if err != nil || stored.Status != loop.TaskCompleted {
		t.Fatalf("task after the commit: %s, %v", stored.Status, err)
	}
}

func kindsOfStream(t *testing.T, db *store.Badger, stream string) []string {
	t.Helper()
	recs, err := db.Events().Read(context.Background(), stream, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, kindsOf(t, [][]byte{r.Data})...)
	}
	return out
}

// A turn whose commit is refused (its task written meanwhile by someone
// else: a version conflict) through the Hub on Badger: nothing of its
// completed end is ever logged; the loop announces the failure instead,
// as when the commit and the end were two writes.
func TestTurnEndRefusedAnnouncesTheFailure(t *testing.T) {
	t.Parallel()
	db, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	hub, err := sse.New(sse.Config{Log: db.Events()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Close() })
	m := &scriptModel{gate: make(chan struct{})}
	l, err := loop.New(loop.Config{Model: m, Checkpoints: db, Journal: db})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var points []string
	rt, err := New(Config{Loop: l, Events: hubEndEvents{hub: hub, log: db.Events()}, Owner: "host-a",
		Stores: Stores{Messages: db, Agents: db, Tasks: db, Commit: db, Checkpoints: db, Journal: db, Durable: db,
			Leases: db, TaskLeases: db},
		Crashpoint: func(p string) { mu.Lock(); points = append(points, p); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		rt.Shutdown(ctx)
	})
	ctx := context.Background()
	st, err := rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c", Message: user("hello")})
	if err != nil {
		t.Fatal(err)
	}
	id := st.Run.TaskID
	rec, err := db.LoadTask(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	rec.Metadata = map[string]any{"touched": true}
	if err := db.SaveTask(ctx, rec); err != nil {
		t.Fatal(err)
	}
	close(m.gate)
	if err := rt.Wait(ctx, st.Run); err != nil {
		t.Fatal(err)
	}
	if err := hub.Flush(ctx, sse.TaskStream(id)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if !containsStr(points, PointTurnEnding) {
		t.Errorf("crash points %v: the commit did not go with the end", points)
	}
	mu.Unlock()
	got := kindsOfStream(t, db, sse.TaskStream(id))
	for _, k := range got {
		if k == "task-status:completed" {
			t.Fatalf("stream %v announces the end of a turn whose commit was refused", got)
		}
	}
	if len(got) < 2 || got[len(got)-2] != "task-status:failed" || got[len(got)-1] != string(loop.KindTaskComplete) {
		t.Fatalf("stream %v, want it to end with the failed status and task-complete", got)
	}
	evs, err := (&logEvents{log: db.Events()}).events(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if fs := evs[len(evs)-2].(*loop.TaskStatusEvent); !strings.Contains(fs.Message, "concurrent modification") {
		t.Fatalf("the failed status says %q, want the commit's version conflict", fs.Message)
	}
	stored, err := db.LoadTask(ctx, id)
	if err != nil || stored.Status == loop.TaskCompleted {
		t.Fatalf("task after a refused commit: %s, %v", stored.Status, err)
	}
}
