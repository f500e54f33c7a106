package taskrt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// guard bounds a wait that must end; it only turns a hang into a failure.
const guard = 30 * time.Second

// logEvents publishes straight to a loop.EventLog: every event is
// appended before Emit returns. It is the simplest Events there is.
type logEvents struct {
	log loop.EventLog
	mu  sync.Mutex
}

func taskStream(id string) string { return "task/" + id }
func ctxStream(id string) string  { return "ctx/" + id }

func (l *logEvents) append(e loop.Event) error {
	b, err := loop.EncodeEvent(e)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	h := e.Head()
	if _, err := l.log.Append(context.Background(), taskStream(h.TaskID), b); err != nil {
		return err
	}
	_, err = l.log.Append(context.Background(), ctxStream(h.ContextID), b)
	return err
}

func (l *logEvents) Sink(onErr func(loop.Event, error)) loop.EventSink {
	return loop.SinkFunc(func(e loop.Event) {
		if err := l.append(e); err != nil && onErr != nil {
			onErr(e, err)
		}
	})
}
func (l *logEvents) Publish(_ context.Context, e loop.Event) error { return l.append(e) }
func (l *logEvents) Last(ctx context.Context, id string) (uint64, error) {
	return l.log.Last(ctx, taskStream(id))
}
func (l *logEvents) LastEvent(ctx context.Context, id string) (loop.Event, error) {
	evs, err := l.events(ctx, id)
	if err != nil || len(evs) == 0 {
		return nil, err
	}
	return evs[len(evs)-1], nil
}
func (l *logEvents) events(ctx context.Context, id string) ([]loop.Event, error) {
	recs, err := l.log.Read(ctx, taskStream(id), 0, 0)
	if err != nil {
		return nil, err
	}
	var out []loop.Event
	for _, r := range recs {
		e, err := loop.DecodeEvent(r.Data)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}
func (l *logEvents) Settle(context.Context, string, string, bool) error { return nil }
func (l *logEvents) Retire(context.Context, string) error               { return nil }
func (l *logEvents) KeepContext(ctx context.Context, id string, ttl time.Duration) error {
	return l.log.Expire(ctx, ctxStream(id), ttl)
}

// scriptModel answers with "done" after gate (when set) is closed.
type scriptModel struct {
	gate  chan struct{}
	calls atomic.Int64
}

func (m *scriptModel) Generate(ctx context.Context, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
	m.calls.Add(1)
	if m.gate != nil {
		select {
		case <-m.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "done: " + req.Messages[len(req.Messages)-1].Content},
		FinishReason: loop.FinishStop}, nil
}

type harness struct {
	db  *store.Badger
	ev  *logEvents
	rt  *Runtime
	cfg Config
}

func newHarness(t *testing.T, dir string, model loop.Model, set func(*Config)) *harness {
	t.Helper()
	db, err := store.Open(store.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	l, err := loop.New(loop.Config{Model: model, Checkpoints: db, Journal: db})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{db: db, ev: &logEvents{log: db.Events()}}
	h.cfg = Config{Loop: l, Events: h.ev, Owner: "host-a",
		Stores: Stores{Messages: db, Agents: db, Tasks: db, Commit: db, Checkpoints: db, Journal: db, Durable: db, Leases: db,
			TaskLeases: db}}
	if set != nil {
		set(&h.cfg)
	}
	h.rt, err = New(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.close() })
	return h
}

func (h *harness) close() {
	if h.rt != nil {
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		h.rt.Shutdown(ctx)
		cancel()
		h.rt = nil
	}
	if h.db != nil {
		_ = h.db.Close()
		h.db = nil
	}
}

func user(s string) loop.Message { return loop.Message{Role: loop.RoleUser, Content: s} }

func alice() *loop.AuthContext { return &loop.AuthContext{Principal: "alice"} }

// An acknowledged task is durable: the record, working, with its input,
// is stored before Start returns, and its lease is held.
func TestStartIsDurableBeforeItReturns(t *testing.T) {
	t.Parallel()
	m := &scriptModel{gate: make(chan struct{})}
	h := newHarness(t, t.TempDir(), m, nil)
	ctx := context.Background()
	st, err := h.rt.Start(ctx, StartRequest{Auth: alice(), Message: user("hi")})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := h.db.LoadTask(ctx, st.Run.TaskID)
	if err != nil {
		t.Fatalf("task not stored when Start returned: %v", err)
	}
	if rec.Status != loop.TaskWorking || len(rec.History) != 1 || rec.History[0].Content != "hi" || rec.TurnInput != 1 {
		t.Fatalf("stored task = %s %+v turnInput %d; want working with its input", rec.Status, rec.History, rec.TurnInput)
	}
	leases, err := h.db.ListLeases(ctx)
	if err != nil || len(leases) != 1 || leases[0].Key != st.Run.TaskID || leases[0].Owner != "host-a" {
		t.Fatalf("leases while the turn runs = %+v, %v", leases, err)
	}
	close(m.gate)
	if err := h.rt.Wait(ctx, st.Run); err != nil {
		t.Fatal(err)
	}
	rec, _ = h.db.LoadTask(ctx, st.Run.TaskID)
	if rec.Status != loop.TaskCompleted || rec.Content != "done: hi" {
		t.Fatalf("task after the turn = %s %q", rec.Status, rec.Content)
	}
	waitFor(t, "lease released after the turn", func() bool {
		l, _ := h.db.ListLeases(ctx)
		return len(l) == 0
	})
}

// A starting task's lease and record are one write when the store has
// it (no lease-taken point between them, one commit); apart, the lease
// comes first. Either way no client hears of the task before both.
func TestStartWrites(t *testing.T) {
	t.Parallel()
	for _, together := range []bool{true, false} {
		t.Run(fmt.Sprintf("together=%v", together), func(t *testing.T) {
			var mu sync.Mutex
			var points []string
			var commits []int64
			var db *store.Badger
			m := &scriptModel{gate: make(chan struct{})}
			h := newHarness(t, t.TempDir(), m, func(c *Config) {
				db = c.Stores.Tasks.(*store.Badger)
				if !together {
					c.Stores.TaskLeases = nil
				}
				c.Crashpoint = func(p string) {
					mu.Lock()
					defer mu.Unlock()
					points = append(points, p)
					commits = append(commits, db.Commits())
				}
			})
			ctx := context.Background()
			before := db.Commits()
			st, err := h.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c1", Message: user("hi")})
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			got, n := slices.Clone(points), slices.Clone(commits)
			mu.Unlock()
			// A new context: its agent record goes with the lease and
			// the task when they are one write. (The turn's first events
			// follow once the task is stored, before or after Start
			// returns: counted up to the task's saved point.)
			wantCommits := int64(1)
			if !together {
				wantCommits = 3
			}
			if d := n[len(n)-1] - before; d != wantCommits {
				t.Fatalf("Start of a new context made %d commits before the task was saved, want %d", d, wantCommits)
			}
			if m, err := h.db.LoadAgent(ctx, st.Run.ContextID); err != nil || m.Owner != alice().Principal {
				t.Fatalf("agent record after Start = %+v, %v", m, err)
			}
			want := []string{PointTaskStarting, PointTaskSaved}
			if !together {
				want = []string{PointTaskStarting, PointLeaseTaken, PointTaskSaved}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("points reached by Start = %v, want %v", got, want)
			}
			if d := n[len(n)-1] - n[0]; d != int64(len(want)-1) {
				t.Fatalf("Start made %d commits between %s and %s, want %d", d, want[0], want[len(want)-1], len(want)-1)
			}
			leases, err := h.db.ListLeases(ctx)
			if err != nil || len(leases) != 1 || leases[0].Key != st.Run.TaskID || leases[0].Data != "c1" {
				t.Fatalf("leases = %+v, %v", leases, err)
			}
			if rec, err := h.db.LoadTask(ctx, st.Run.TaskID); err != nil || rec.Status != loop.TaskWorking {
				t.Fatalf("task = %+v, %v", rec, err)
			}
			close(m.gate)
			if err := h.rt.Wait(ctx, st.Run); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A task whose lease another process holds is refused with nothing
// written, whether lease and record are one write or two.
func TestStartRefusedUnderAnothersLease(t *testing.T) {
	t.Parallel()
	for _, together := range []bool{true, false} {
		t.Run(fmt.Sprintf("together=%v", together), func(t *testing.T) {
			h := newHarness(t, t.TempDir(), &scriptModel{}, func(c *Config) {
				if !together {
					c.Stores.TaskLeases = nil
				}
			})
			ctx := context.Background()
			if _, err := h.db.AcquireLease(ctx, "t-held", "host-b", "", time.Minute); err != nil {
				t.Fatal(err)
			}
			_, err := h.rt.Start(ctx, StartRequest{Auth: alice(), Message: user("hi"), NewID: func() string { return "t-held" }})
			if !errors.Is(err, loop.ErrBusy) {
				t.Fatalf("Start under another's lease: err = %v, want ErrBusy", err)
			}
			if _, err := h.db.LoadTask(ctx, "t-held"); !errors.Is(err, loop.ErrNotFound) {
				t.Fatalf("task stored although refused: %v", err)
			}
			if r := h.rt.Running("t-held"); r != nil {
				t.Fatal("refused task still registered")
			}
			// The refused task's new context is not stored either; the
			// next task on it stores it, owned by its principal.
			_, err = h.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-new", Message: user("hi"),
				NewID: func() string { return "t-held" }})
			if !errors.Is(err, loop.ErrBusy) {
				t.Fatalf("Start under another's lease: err = %v, want ErrBusy", err)
			}
			if _, err := h.db.LoadAgent(ctx, "c-new"); together && !errors.Is(err, loop.ErrNotFound) {
				t.Fatalf("context of a refused task stored: %v", err)
			}
			st, err := h.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-new", Message: user("hi")})
			if err != nil {
				t.Fatal(err)
			}
			if m, err := h.db.LoadAgent(ctx, st.Run.ContextID); err != nil || m.Owner != alice().Principal {
				t.Fatalf("agent record after the next Start = %+v, %v", m, err)
			}
			if err := h.rt.Wait(ctx, st.Run); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Seeing the end of a turn means the next turn of the context is
// accepted: the context is released before the final status is published.
func TestNextTurnAcceptedAtFinalStatus(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), &scriptModel{}, nil)
	ctx := context.Background()
	first, err := h.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c1", Message: user("one")})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		// Wait for the final status in the log, as a streaming client
		// would, then send the next message at once.
		task := first.Run.TaskID
		waitFor(t, "final status of "+task, func() bool {
			e, _ := h.ev.LastEvent(ctx, task)
			tc, ok := e.(*loop.TaskComplete)
			return ok && tc.Status == loop.TaskCompleted
		})
		next, err := h.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c1", Message: user(fmt.Sprint(i))})
		if err != nil {
			t.Fatalf("turn %d refused right after the previous one's final status: %v", i, err)
		}
		first = next
	}
}

// A principal cannot take a context another principal created; the answer
// is the one of an unknown context.
func TestForeignContextNotFound(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), &scriptModel{}, nil)
	ctx := context.Background()
	st, err := h.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "shared", Message: user("x")})
	if err != nil {
		t.Fatal(err)
	}
	_ = h.rt.Wait(ctx, st.Run)
	_, err = h.rt.Start(ctx, StartRequest{Auth: &loop.AuthContext{Principal: "bob"}, ContextID: "shared", Message: user("y")})
	if !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("bob on alice's context: err = %v, want not found", err)
	}
	if _, err := h.rt.Load(ctx, "bob", st.Run.TaskID); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("bob loading alice's task: err = %v, want not found", err)
	}
}

// A principal runs at most MaxRunningPerPrincipal turns at once; another
// principal is not affected.
func TestPerPrincipalQuota(t *testing.T) {
	t.Parallel()
	m := &scriptModel{gate: make(chan struct{})}
	h := newHarness(t, t.TempDir(), m, func(c *Config) { c.MaxRunningPerPrincipal = 2 })
	ctx := context.Background()
	for i := range 2 {
		if _, err := h.rt.Start(ctx, StartRequest{Auth: alice(), Message: user(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.rt.Start(ctx, StartRequest{Auth: alice(), Message: user("3")}); !errors.Is(err, ErrQuota) {
		t.Fatalf("third running turn of alice: err = %v, want ErrQuota", err)
	}
	bob, err := h.rt.Start(ctx, StartRequest{Auth: &loop.AuthContext{Principal: "bob"}, Message: user("b")})
	if err != nil {
		t.Fatalf("bob refused while alice is at her quota: %v", err)
	}
	close(m.gate)
	_ = h.rt.Wait(ctx, bob.Run)
	waitFor(t, "alice's turns end", func() bool { n, _ := h.rt.Stats(); return n == 0 })
	if _, err := h.rt.Start(ctx, StartRequest{Auth: alice(), Message: user("again")}); err != nil {
		t.Fatalf("alice refused after her turns ended: %v", err)
	}
}

// A task whose turn was committed but whose final events were never
// written (the process died in between) gets them at the next start, and
// its lease is released.
func TestRecoverWritesMissingFinalEvents(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHarness(t, dir, &scriptModel{}, nil)
	ctx := context.Background()
	// What a process leaves when it dies between the turn's commit and
	// its final events: the lease, the task completed, and a stream
	// without its end.
	l, err := h.db.AcquireLease(ctx, "t1", "host-dead", "c1", time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	_ = l
	now := time.Now().UTC()
	if err := h.db.SaveTask(ctx, loop.TaskRecord{ID: "t1", ContextID: "c1", Owner: "alice", Status: loop.TaskCompleted,
		Content: "answer", Reason: loop.ReasonStop, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := h.ev.Publish(ctx, &loop.TaskStatusEvent{Header: loop.Header{Kind: loop.KindTaskStatus, TaskID: "t1", ContextID: "c1"},
		Status: loop.TaskWorking}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the dead host's lease lapses
	if err := h.rt.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := h.ev.events(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, string(e.Head().Kind))
	}
	want := []string{string(loop.KindTaskStatus), string(loop.KindTaskStatus), string(loop.KindTaskComplete)}
	if !slices.Equal(kinds, want) {
		t.Fatalf("stream after recovery = %v, want %v", kinds, want)
	}
	if st := evs[1].(*loop.TaskStatusEvent); st.Status != loop.TaskCompleted {
		t.Fatalf("final status written = %s, want completed", st.Status)
	}
	if leases, _ := h.db.ListLeases(ctx); len(leases) != 0 {
		t.Fatalf("leases after recovery = %+v, want none", leases)
	}
	// A second pass writes nothing more.
	if err := h.rt.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if again, _ := h.ev.events(ctx, "t1"); len(again) != len(evs) {
		t.Fatalf("second recovery wrote %d more events", len(again)-len(evs))
	}
}

// A task another live process holds the lease of is not taken over; once
// the lease lapses, it is.
func TestRecoverRespectsLiveLeases(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), &scriptModel{}, nil)
	ctx := context.Background()
	now := time.Now().UTC()
	if err := h.db.SaveTask(ctx, loop.TaskRecord{ID: "t2", ContextID: "c2", Owner: "alice", Status: loop.TaskWorking,
		History: []loop.Message{user("go")}, TurnInput: 1, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.db.AcquireLease(ctx, "t2", "host-b", "c2", 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := h.rt.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, _ := h.db.LoadTask(ctx, "t2"); rec.Status != loop.TaskWorking || h.rt.Running("t2") != nil {
		t.Fatalf("task of a live host taken over: %s, running here %v", rec.Status, h.rt.Running("t2") != nil)
	}
	time.Sleep(350 * time.Millisecond)
	if err := h.rt.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "lapsed task resumed and completed here", func() bool {
		rec, _ := h.db.LoadTask(ctx, "t2")
		return rec.Status == loop.TaskCompleted
	})
}

// A turn whose lease was taken over stops and saves nothing: the new
// owner's writes win.
func TestLostLeaseFencesTheTurn(t *testing.T) {
	t.Parallel()
	m := &scriptModel{gate: make(chan struct{})}
	h := newHarness(t, t.TempDir(), m, func(c *Config) { c.LeaseTTL = 150 * time.Millisecond })
	ctx := context.Background()
	st, err := h.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c3", Message: user("x")})
	if err != nil {
		t.Fatal(err)
	}
	// Another host takes the lease over as if this one had stalled: the
	// store is told the lease lapsed by releasing it and taking it.
	leases, _ := h.db.ListLeases(ctx)
	if len(leases) != 1 {
		t.Fatalf("leases = %+v", leases)
	}
	if err := h.db.ReleaseLease(ctx, leases[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := h.db.AcquireLease(ctx, st.Run.TaskID, "host-b", "c3", time.Hour); err != nil {
		t.Fatal(err)
	}
	// The renewal notices within a third of the TTL and cancels the turn.
	select {
	case <-st.Run.Done():
	case <-time.After(guard):
		t.Fatal("turn not stopped after its lease was lost")
	}
	rec, err := h.db.LoadTask(ctx, st.Run.TaskID)
	if err != nil || rec.Status != loop.TaskWorking {
		t.Fatalf("task after the old owner stopped = %s, %v; want it left working for its new owner", rec.Status, err)
	}
	if n, _ := h.db.Count(ctx, "c3"); n != 0 {
		t.Fatalf("old owner saved %d messages after losing its lease", n)
	}
	// Nor did it announce an end: the stream is the new owner's.
	evs, _ := h.ev.events(ctx, st.Run.TaskID)
	for _, e := range evs {
		if isFinal(st.Run, e) || e.Head().Kind == loop.KindTaskComplete {
			t.Fatalf("old owner announced %s after losing its lease", e.Head().Kind)
		}
	}
	if leases, _ := h.db.ListLeases(ctx); len(leases) != 1 || leases[0].Owner != "host-b" {
		t.Fatalf("leases after the old owner stopped = %+v, want host-b's", leases)
	}
}

func TestSweep(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), &scriptModel{}, nil)
	st := h.db
	ctx := context.Background()
	seed := func(id string) {
		if err := st.BeginCall(ctx, loop.JournalEntry{TaskID: id, CallID: "call-1", Key: loop.IdempotencyKey(id, "call-1"),
			Tool: "ledger_append", StartedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
		if err := st.SaveCheckpoint(ctx, loop.Checkpoint{TaskID: id, ContextID: "ctx-" + id, Iteration: 1, Stage: loop.StageModel}); err != nil {
			t.Fatal(err)
		}
	}
	save := func(id string, status loop.TaskStatus) {
		now := time.Now().UTC()
		if err := st.SaveTask(ctx, loop.TaskRecord{ID: id, ContextID: "ctx-" + id, Owner: "local",
			Status: status, CreatedAt: now, UpdatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"deleted", "never", "done", "running", "waiting"} {
		seed(id)
	}
	save("deleted", loop.TaskCompleted)
	if err := st.DeleteTask(ctx, "deleted"); err != nil {
		t.Fatal(err)
	}
	save("done", loop.TaskFailed)
	save("running", loop.TaskWorking)
	save("waiting", loop.TaskWaitingInput)
	h.rt.mu.Lock()
	h.rt.running["running"] = &Run{TaskID: "running"}
	h.rt.mu.Unlock()
	defer func() { h.rt.mu.Lock(); delete(h.rt.running, "running"); h.rt.mu.Unlock() }()

	n, err := h.rt.Sweep(ctx)
	if err != nil || n != 3 {
		t.Fatalf("sweep: %d tasks, %v; want 3 (deleted, never, done)", n, err)
	}
	ids, err := st.DurableTaskIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"done", "running", "waiting"}; !slices.Equal(ids, want) {
		t.Fatalf("tasks with a journal or checkpoint after the sweep: %v, want %v", ids, want)
	}
	if _, err := st.LoadCheckpoint(ctx, "done"); !errors.Is(err, loop.ErrNotFound) {
		t.Errorf("checkpoint of the finished task: %v, want it gone", err)
	}
	if n, err := h.rt.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("second sweep: %d, %v; want 0", n, err)
	}
}

// A turn longer than its lease keeps the lease by renewing it, and its
// commit (fenced by the lease) goes through.
func TestRenewedLeaseKeepsTheTurn(t *testing.T) {
	t.Parallel()
	m := &scriptModel{gate: make(chan struct{})}
	h := newHarness(t, t.TempDir(), m, func(c *Config) { c.LeaseTTL = 30 * time.Millisecond })
	ctx := context.Background()
	st, err := h.rt.Start(ctx, StartRequest{Auth: alice(), Message: user("long")})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := h.db.ListLeases(ctx)
	if len(first) != 1 {
		t.Fatalf("leases %+v, want one", first)
	}
	// Several lease lifetimes pass, and the lease is renewed past them
	// (waited for: a loaded machine runs the renewal late, not never).
	lapsed := first[0].Expires.Add(5 * 30 * time.Millisecond)
	time.Sleep(time.Until(lapsed))
	var now []loop.Lease
	waitFor(t, "the lease renewed past several lifetimes", func() bool {
		now, _ = h.db.ListLeases(ctx)
		return len(now) != 1 || now[0].Expires.After(lapsed)
	})
	if len(now) != 1 || now[0].Token != first[0].Token {
		t.Fatalf("leases %+v then %+v: want one lease, renewed with the same token", first, now)
	}
	close(m.gate)
	if err := h.rt.Wait(ctx, st.Run); err != nil {
		t.Fatal(err)
	}
	if rec, _ := h.db.LoadTask(ctx, st.Run.TaskID); rec.Status != loop.TaskCompleted {
		t.Fatalf("task after a renewed turn = %s, want completed", rec.Status)
	}
}

// A task running on another host is not canceled here: the answer says
// so instead of reporting a cancellation that the running turn would never
// see. Once that host's lease lapses (it died), the cancel takes the lease
// and ends the task.
func TestCancelOfATaskRunningElsewhere(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t.TempDir(), &scriptModel{}, nil)
	ctx := context.Background()
	now := time.Now().UTC()
	if err := h.db.SaveTask(ctx, loop.TaskRecord{ID: "t3", ContextID: "c3", Owner: "alice", Status: loop.TaskWorking,
		History: []loop.Message{user("go")}, TurnInput: 1, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.db.AcquireLease(ctx, "t3", "host-b", "c3", 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := h.rt.Cancel(ctx, "alice", "t3"); !errors.Is(err, ErrNotCancelable) || !strings.Contains(err.Error(), "another host") {
		t.Fatalf("Cancel of a task another host runs: err = %v, want ErrNotCancelable naming it", err)
	}
	if rec, _ := h.db.LoadTask(ctx, "t3"); rec.Status != loop.TaskWorking {
		t.Fatalf("task of a live host changed to %s", rec.Status)
	}
	waitFor(t, "cancel after the other host's lease lapsed", func() bool {
		rec, err := h.rt.Cancel(ctx, "alice", "t3")
		return err == nil && rec.Status == loop.TaskCanceled
	})
	if ls, _ := h.db.ListLeases(ctx); len(ls) != 0 {
		t.Fatalf("leases left after the cancel: %+v", ls)
	}
}

// A sub-task left working by a dead process is never resumed on its own
// (it runs only inside its parent's turn): it fails as interrupted, unless
// its parent is held by a live process, which still runs it.
func TestRecoverFailsOrphanedSubtasks(t *testing.T) {
	t.Parallel()
	model := &scriptModel{}
	h := newHarness(t, t.TempDir(), model, nil)
	ctx := context.Background()
	now := time.Now().UTC()
	for _, rec := range []loop.TaskRecord{
		{ID: "p1", ContextID: "c1", Owner: "alice", Status: loop.TaskCompleted, CreatedAt: now, UpdatedAt: now},
		{ID: "p1.call1", ContextID: "c1", Owner: "alice", ParentTaskID: "p1", Status: loop.TaskWorking,
			History: []loop.Message{user("dig")}, TurnInput: 1, CreatedAt: now, UpdatedAt: now},
		{ID: "p2.call1", ContextID: "c2", Owner: "alice", ParentTaskID: "p2", Status: loop.TaskWorking,
			History: []loop.Message{user("dig")}, TurnInput: 1, CreatedAt: now, UpdatedAt: now},
	} {
		if err := h.db.SaveTask(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	// p2 runs on a live host.
	if _, err := h.db.AcquireLease(ctx, "p2", "host-live", "c2", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := h.rt.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := h.db.LoadTask(ctx, "p1.call1")
	if err != nil || rec.Status != loop.TaskFailed || !strings.Contains(rec.Message, "interrupted") {
		t.Fatalf("orphaned sub-task after recovery: %+v (%v), want failed as interrupted", rec, err)
	}
	if rec, err := h.db.LoadTask(ctx, "p2.call1"); err != nil || rec.Status != loop.TaskWorking {
		t.Fatalf("sub-task of a live parent after recovery: %+v (%v), want it left working", rec, err)
	}
	if h.rt.Running("p1.call1") != nil || model.calls.Load() != 0 {
		t.Fatalf("a sub-task ran on its own (model calls %d)", model.calls.Load())
	}
}

// settleEvents is logEvents that records which streams were settled.
type settleEvents struct {
	*logEvents
	settled sync.Map // task id → true
}

func (s *settleEvents) Settle(_ context.Context, taskID, _ string, terminal bool) error {
	if terminal {
		s.settled.Store(taskID, true)
	}
	return nil
}

// subTools runs a sub-agent as a sub-task that finishes at once, then
// holds the call until gate closes.
type subTools struct{ gate chan struct{} }

func (subTools) Tools(context.Context) ([]loop.ToolDefinition, error) {
	return []loop.ToolDefinition{{Name: "delegate"}}, nil
}

func (s subTools) Call(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	st, err := env.StartSubtask(ctx, loop.SubtaskSpec{AgentID: "helper", Prompt: "help"})
	if err != nil {
		return loop.ToolResult{}, err
	}
	st.Finish(ctx, loop.TaskCompleted, "helped", nil)
	select {
	case <-s.gate:
	case <-ctx.Done():
	}
	return loop.ToolResult{Content: "helped"}, nil
}

// delegateModel calls delegate once, then answers.
type delegateModel struct{}

func (delegateModel) Generate(_ context.Context, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
	if req.Messages[len(req.Messages)-1].Role == loop.RoleTool {
		return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "done"}, FinishReason: loop.FinishStop}, nil
	}
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant,
		ToolCalls: []loop.ToolCall{{ID: "c1", Name: "delegate", Arguments: []byte(`{}`)}}}, FinishReason: loop.FinishToolCalls}, nil
}

// A sub-task's stream is settled (finished) when its task-complete goes
// out, while its parent's turn still runs: its followers end with it, not
// with the parent's turn.
func TestSubtaskStreamEndsWithTheSubtask(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	var ev *settleEvents
	h := newHarness(t, t.TempDir(), delegateModel{}, func(c *Config) {
		l, err := loop.New(loop.Config{Model: delegateModel{}, Toolsets: []loop.Toolset{subTools{gate: gate}},
			Checkpoints: c.Stores.Checkpoints, Journal: c.Stores.Journal, Subtasks: c.Stores.Tasks})
		if err != nil {
			t.Fatal(err)
		}
		ev = &settleEvents{logEvents: c.Events.(*logEvents)}
		c.Loop, c.Events = l, ev
	})
	ctx := context.Background()
	st, err := h.rt.Start(ctx, StartRequest{Auth: alice(), Message: user("go")})
	if err != nil {
		t.Fatal(err)
	}
	sub := loop.SubtaskID(st.Task.ID, "c1")
	for deadline := time.Now().Add(guard); ; time.Sleep(time.Millisecond) {
		if _, ok := ev.settled.Load(sub); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sub-task's stream was not settled while its parent's call runs")
		}
	}
	if _, ok := ev.settled.Load(st.Task.ID); ok {
		t.Fatal("the parent's stream settled before its turn ended")
	}
	close(gate)
}

// A sub-task whose parent resumes on this host is left to the parent's
// resumed turn at recovery (its call may take it up); once that turn has
// ended without taking it up, the next recovery pass fails it.
func TestRecoverLeavesSubtasksOfResumedParents(t *testing.T) {
	t.Parallel()
	model := &scriptModel{}
	h := newHarness(t, t.TempDir(), model, nil)
	ctx := context.Background()
	now := time.Now().UTC()
	for _, rec := range []loop.TaskRecord{
		{ID: "p3", ContextID: "c3", Owner: "alice", Status: loop.TaskWorking, History: []loop.Message{user("go")},
			TurnInput: 1, CreatedAt: now, UpdatedAt: now},
		{ID: "p3.call1", ContextID: "c3", Owner: "alice", ParentTaskID: "p3", Status: loop.TaskWorking,
			History: []loop.Message{user("dig")}, TurnInput: 1, CreatedAt: now, UpdatedAt: now},
	} {
		if err := h.db.SaveTask(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.rt.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	// p3 resumes here; whatever its turn does, recovery did not fail its
	// sub-task.
	for deadline := time.Now().Add(guard); ; time.Sleep(time.Millisecond) {
		rec, _ := h.db.LoadTask(ctx, "p3")
		if rec.Status.Terminal() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("p3 never ended: %s", rec.Status)
		}
	}
	if rec, err := h.db.LoadTask(ctx, "p3.call1"); err != nil || rec.Status != loop.TaskWorking {
		t.Fatalf("sub-task of a resumed parent after recovery: %+v (%v), want it left to the parent", rec, err)
	}
	for deadline := time.Now().Add(guard); h.rt.Running("p3") != nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("p3's turn never let go")
		}
	}
	if err := h.rt.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, err := h.db.LoadTask(ctx, "p3.call1"); err != nil || rec.Status != loop.TaskFailed {
		t.Fatalf("sub-task left working after its parent's resumed turn: %+v (%v), want failed", rec, err)
	}
}

// The agent cache's byte total follows every agent it holds: it grows with
// each turn's messages, loses an evicted agent's bytes, and so keeps the
// cache under MaxAgentBytes while it holds what fits.
func TestAgentCacheByteTotal(t *testing.T) {
	t.Parallel()
	const bound = 12 << 10
	h := newHarness(t, t.TempDir(), &scriptModel{}, func(c *Config) { c.MaxAgentBytes = bound })
	ctx := context.Background()
	// sum is what the cached agents hold, and the running total.
	sum := func() (held, total int64, n int) {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		for _, a := range h.rt.agents {
			held += a.CachedBytes()
		}
		return held, h.rt.agentBytes.Load(), len(h.rt.agents)
	}
	check := func(step string) {
		t.Helper()
		if held, total, n := sum(); total != held {
			t.Fatalf("%s: byte total %d, the %d agents hold %d", step, total, n, held)
		}
		// The eviction after a turn runs once its end is out.
		waitFor(t, step+": cache under its bound", func() bool { held, _, _ := sum(); return held <= bound })
	}
	big := strings.Repeat("x", 1500)
	for i := range 12 {
		id := fmt.Sprintf("c%d", i%4) // four conversations that keep growing
		st, err := h.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: id, Message: user(fmt.Sprint(i, big))})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.rt.Wait(ctx, st.Run); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("after turn %d", i))
	}
	if _, _, n := sum(); n == 0 || n == 4 {
		t.Fatalf("%d agents cached: the bound should keep some and drop others", n)
	}
}

// heldSave lets a test hold the write that stores a starting task (the
// real Badger write, made when the test lets it).
type heldSave struct {
	loop.LeasedTaskSaver
	entered chan struct{}
	release chan struct{}
}

func (s *heldSave) SaveTaskLeased(ctx context.Context, t loop.TaskRecord, agent *loop.AgentMetadata, owner, data string, ttl time.Duration) (loop.Lease, error) {
	close(s.entered)
	<-s.release
	return s.LeasedTaskSaver.SaveTaskLeased(ctx, t, agent, owner, data, ttl)
}

// A new task's model is called while its record is being stored, yet
// nothing of the turn is out before the record is: no event in its
// streams (a client would learn of the task from them) and no checkpoint,
// until the write is done; then the turn goes on and completes.
func TestModelCalledWhileTheTaskIsStored(t *testing.T) {
	t.Parallel()
	m := &scriptModel{gate: make(chan struct{})}
	hold := &heldSave{entered: make(chan struct{}), release: make(chan struct{})}
	h := newHarness(t, t.TempDir(), m, func(c *Config) {
		hold.LeasedTaskSaver = c.Stores.TaskLeases
		c.Stores.TaskLeases = hold
	})
	ctx := context.Background()
	started := make(chan *Started, 1)
	go func() {
		st, err := h.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c1", Message: user("hi"),
			NewID: func() string { return "t1" }})
		if err != nil {
			t.Error(err)
		}
		started <- st
	}()
	<-hold.entered
	waitFor(t, "the model called while the task is being stored", func() bool { return m.calls.Load() > 0 })
	close(m.gate) // the model answers before the task is stored
	time.Sleep(20 * time.Millisecond)
	for _, s := range []string{taskStream("t1"), ctxStream("c1")} {
		if last, err := h.db.Events().Last(ctx, s); err != nil || last != 0 {
			t.Fatalf("stream %s before the task is stored: last event %d, %v; want none", s, last, err)
		}
	}
	if _, err := h.db.LoadCheckpoint(ctx, "t1"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("checkpoint before the task is stored: %v", err)
	}
	if _, err := h.db.LoadTask(ctx, "t1"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("task stored while its write is held: %v", err)
	}
	close(hold.release)
	st := <-started
	if st == nil {
		t.FailNow()
	}
	if err := h.rt.Wait(ctx, st.Run); err != nil {
		t.Fatal(err)
	}
	rec, err := h.db.LoadTask(ctx, "t1")
	if err != nil || rec.Status != loop.TaskCompleted || rec.Content != "done: hi" {
		t.Fatalf("task after the turn = %+v, %v", rec, err)
	}
	evs, err := h.ev.events(ctx, "t1")
	if err != nil || len(evs) == 0 || evs[0].Head().Kind != loop.KindTaskCreated {
		t.Fatalf("task stream after the turn: %d events (first %v), %v; want task-created first", len(evs), kindOf(evs), err)
	}
	if m.calls.Load() != 1 {
		t.Fatalf("model called %d times, want once", m.calls.Load())
	}
}

// A new task whose record cannot be stored leaves nothing of the turn
// that had begun meanwhile: no event, no checkpoint, no lease, the model
// call stopped; and its context takes the next task.
func TestTurnOfAnUnstoredTaskLeavesNothing(t *testing.T) {
	t.Parallel()
	m := &scriptModel{gate: make(chan struct{})}
	h := newHarness(t, t.TempDir(), m, nil)
	ctx := context.Background()
	if _, err := h.db.AcquireLease(ctx, "t-held", "host-b", "", time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err := h.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c1", Message: user("hi"),
		NewID: func() string { return "t-held" }})
	if !errors.Is(err, loop.ErrBusy) {
		t.Fatalf("Start under another's lease: err = %v, want ErrBusy", err)
	}
	// Start returned after the turn had ended: nothing comes later.
	for _, s := range []string{taskStream("t-held"), ctxStream("c1")} {
		if last, err := h.db.Events().Last(ctx, s); err != nil || last != 0 {
			t.Fatalf("stream %s of a task not stored: last event %d, %v; want none", s, last, err)
		}
	}
	if _, err := h.db.LoadCheckpoint(ctx, "t-held"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("checkpoint of a task not stored: %v", err)
	}
	if leases, err := h.db.ListLeases(ctx); err != nil || len(leases) != 1 || leases[0].Owner != "host-b" {
		t.Fatalf("leases = %+v, %v; want host-b's only", leases, err)
	}
	close(m.gate)
	st, err := h.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c1", Message: user("again")})
	if err != nil {
		t.Fatalf("next task of the context: %v", err)
	}
	if err := h.rt.Wait(ctx, st.Run); err != nil {
		t.Fatal(err)
	}
	if rec, err := h.db.LoadTask(ctx, st.Run.TaskID); err != nil || rec.Status != loop.TaskCompleted || rec.Content != "done: again" {
		t.Fatalf("next task = %+v, %v", rec, err)
	}
	if hist, err := h.db.Recent(ctx, "c1", 0); err != nil || len(hist) != 2 || hist[0].Content != "again" {
		t.Fatalf("history of the context = %+v, %v; want the next task's turn only", hist, err)
	}
}

func kindOf(evs []loop.Event) []loop.EventKind {
	var ks []loop.EventKind
	for _, e := range evs {
		ks = append(ks, e.Head().Kind)
	}
	return ks
}

// Only a context id the runtime makes itself skips the reads of a new
// context: a context a client names is read, after a restart too (its
// owner checked, its history and metadata loaded).
func TestNamedContextIsReadAfterARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHarness(t, dir, &scriptModel{}, nil)
	ctx := context.Background()
	st, err := h.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "shared", Message: user("x")})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.rt.Wait(ctx, st.Run); err != nil {
		t.Fatal(err)
	}
	h.close()
	h = newHarness(t, dir, &scriptModel{}, nil)
	if _, err := h.rt.Start(ctx, StartRequest{Auth: &loop.AuthContext{Principal: "bob"}, ContextID: "shared", Message: user("y")}); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("bob on alice's stored context: err = %v, want not found", err)
	}
	st, err = h.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "shared", Message: user("z")})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.rt.Wait(ctx, st.Run); err != nil {
		t.Fatal(err)
	}
	m, err := h.db.LoadAgent(ctx, "shared")
	if err != nil || m.Owner != "alice" || m.TurnCount != 2 {
		t.Fatalf("context after its second turn = %+v, %v; want alice's, 2 turns", m, err)
	}
}
