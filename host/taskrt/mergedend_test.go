package taskrt

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
	"github.com/looopy-go/looopy/store"
)

// lateTaskWrite is the store's LeasedTaskSubmitter whose task writes are
// answered only once the turn has reached its end (turn-ending): the end
// is decided while the task's write is still under way, as when the
// model answers before that write's sync.
type lateTaskWrite struct {
	*store.Badger
	ending chan struct{}
}

func (s *lateTaskWrite) SubmitTaskLeased(ctx context.Context, t loop.TaskRecord, agent *loop.AgentMetadata, owner, data string, ttl time.Duration) (loop.Lease, func() error, error) {
	l, wait, err := s.Badger.SubmitTaskLeased(ctx, t, agent, owner, data, ttl)
	if err != nil {
		return l, nil, err
	}
	return l, func() error {
		err := wait()
		select {
		case <-s.ending:
		case <-time.After(guard):
			return errors.New("the turn did not reach its end while its task's write was under way")
		}
		return err
	}, nil
}

// mergedHarness runs the runtime over a real Hub on a Badger log that
// records each write, with task writes answered at turn-ending.
func mergedHarness(t *testing.T) (*Runtime, *store.Badger, *spyLog, *lateTaskWrite) {
	t.Helper()
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
	late := &lateTaskWrite{Badger: db, ending: make(chan struct{})}
	cfg := Config{Loop: l, Events: hubEndEvents{hub: hub, log: log}, Owner: "host-a",
		Stores: Stores{Messages: db, Agents: db, Tasks: db, Commit: db, Checkpoints: db, Journal: db, Durable: db,
			Leases: db, TaskLeases: late}}
	cfg.Crashpoint = func(p string) {
		if p == PointTurnEnding {
			select {
			case <-late.ending:
			default:
				close(late.ending)
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
	return rt, db, sl, late
}

// A new task whose turn ends before its own write is out has its whole
// turn written in one more write, behind the task's: the events its start
// held back (task-created, working, its thoughts and content) and its end,
// with its commit; no other write appends to its streams, and it answers
// completed. So a blocking SendMessage waits for the task's write and one
// more, not for a write of held events between them.
func TestTurnEndedBeforeItsTaskIsStoredIsOneWrite(t *testing.T) {
	t.Parallel()
	rt, db, sl, _ := mergedHarness(t)
	ctx := context.Background()
	st, err := rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-one", Message: user("hello"),
		NewID: func() string { return "t-one" }})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Wait(ctx, st.Run); err != nil {
		t.Fatal(err)
	}
	rec, err := db.LoadTask(ctx, "t-one")
	if err != nil || rec.Status != loop.TaskCompleted {
		t.Fatalf("task %s, %v; want completed", rec.Status, err)
	}
	sl.mu.Lock()
	calls := sl.calls
	sl.mu.Unlock()
	var writes int
	for _, c := range calls {
		if len(c.kinds[sse.TaskStream("t-one")]) == 0 && len(c.after[sse.TaskStream("t-one")]) == 0 {
			continue
		}
		writes++
		a := c.after[sse.TaskStream("t-one")]
		if c.op != "commit" || len(c.kinds[sse.TaskStream("t-one")]) != 0 || len(a) < 4 ||
			a[0] != string(loop.KindTaskCreated) || a[1] != "task-status:working" ||
			a[len(a)-2] != "task-status:completed" || a[len(a)-1] != string(loop.KindTaskComplete) {
			t.Fatalf("write %s appended %v before and %v with the commit; want the whole turn with the commit", c.op, c.kinds, c.after)
		}
	}
	if writes != 1 {
		t.Fatalf("%d writes appended to the task's stream, want 1", writes)
	}
	evs, err := (&logEvents{log: db.Events()}).events(ctx, "t-one")
	if err != nil || len(evs) < 4 {
		t.Fatalf("stream: %d events, %v", len(evs), err)
	}
	if _, ok := evs[0].(*loop.TaskCreated); !ok {
		t.Fatalf("the stream starts with %s, want task-created", evs[0].Head().Kind)
	}
}

// When the task's write is refused (another host holds a lease of its
// id) after its turn ended, the end written behind it is refused by its
// fence: Start answers busy, nothing of the turn is stored or published,
// and the conversation takes its next turn as if the refused one never
// ran.
func TestRefusedTaskWriteLeavesItsEndUnwritten(t *testing.T) {
	t.Parallel()
	rt, db, _, late := mergedHarness(t)
	ctx := context.Background()
	if _, err := db.AcquireLease(ctx, "t-taken", "host-b", "", time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err := rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-one", Message: user("refused"),
		NewID: func() string { return "t-taken" }})
	if !errors.Is(err, loop.ErrBusy) {
		t.Fatalf("start under another host's lease: %v; want busy", err)
	}
	select {
	case <-late.ending:
	default:
		t.Fatal("the turn never reached its end: the case under test did not happen")
	}
	if _, err := db.LoadTask(ctx, "t-taken"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("refused task: %v; want not stored", err)
	}
	for _, stream := range []string{sse.TaskStream("t-taken"), sse.ContextStream("c-one")} {
		recs, err := db.Events().Read(ctx, stream, 0, 100)
		if err != nil || len(recs) != 0 {
			t.Fatalf("%s: %d events, %v; want none", stream, len(recs), err)
		}
	}
	if msgs, _ := db.Recent(ctx, "c-one", 10); len(msgs) != 0 {
		t.Fatalf("the refused turn stored %d messages", len(msgs))
	}

	late.ending = make(chan struct{})
	st, err := rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-one", Message: user("next"),
		NewID: func() string { return "t-next" }})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Wait(ctx, st.Run); err != nil {
		t.Fatal(err)
	}
	rec, err := db.LoadTask(ctx, "t-next")
	if err != nil || rec.Status != loop.TaskCompleted {
		t.Fatalf("next task %s, %v; want completed", rec.Status, err)
	}
	msgs, err := db.Recent(ctx, "c-one", 10)
	if err != nil || len(msgs) != 2 || msgs[0].Content != "next" {
		t.Fatalf("messages %+v, %v; want the next turn's two only", msgs, err)
	}
}
