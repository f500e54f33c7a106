package taskrt

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
	mu     sync.Mutex
	ending chan struct{}
}

// endingCommitter notes a turn's commit made on its own (not with its end
// through the Hub) as the turn's end.
type endingCommitter struct {
	loop.TurnCommitter
	ending func()
}

func (c *endingCommitter) CommitTurn(ctx context.Context, tc loop.TurnCommit) error {
	c.ending()
	return c.TurnCommitter.CommitTurn(ctx, tc)
}

func (c *endingCommitter) UnwrapCommitter() loop.TurnCommitter { return c.TurnCommitter }

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

// openBadger is a Badger store in the test's folder, closed after it.
func openBadger(t *testing.T) *store.Badger {
	t.Helper()
	db, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// hubRuntime is a runtime over a real Hub on log (db's event log, or a
// wrapper of it) with db's stores and a loop configured as lc; set, when
// not nil, adjusts its Config before New. It shuts down after the test.
func hubRuntime(t *testing.T, db *store.Badger, log loop.EventLog, lc loop.Config, set func(*Config)) *Runtime {
	t.Helper()
	hub, err := sse.New(sse.Config{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Close() })
	lc.Checkpoints, lc.Journal = db, db
	l, err := loop.New(lc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Loop: l, Events: hubEndEvents{hub: hub, log: log}, Owner: "host-a",
		Stores: Stores{Messages: db, Agents: db, Tasks: db, Commit: db, Checkpoints: db, Journal: db, Durable: db,
			Leases: db, TaskLeases: db}}
	if set != nil {
		set(&cfg)
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
	return rt
}

// mergedHarness runs the runtime over a real Hub on a Badger log that
// records each write, with task writes answered at turn-ending.
func mergedHarness(t *testing.T, model loop.Model) (*Runtime, *store.Badger, *spyLog, *lateTaskWrite) {
	t.Helper()
	db := openBadger(t)
	sl := &spyLog{BadgerEvents: db.Events()}
	late := &lateTaskWrite{Badger: db, ending: make(chan struct{})}
	ending := func() {
		late.mu.Lock()
		defer late.mu.Unlock()
		select {
		case <-late.ending:
		default:
			close(late.ending)
		}
	}
	rt := hubRuntime(t, db, spy{spyLog: sl, t: t}, loop.Config{Model: model}, func(c *Config) {
		c.Stores.Commit = &endingCommitter{TurnCommitter: db, ending: ending}
		c.Stores.TaskLeases = late
		c.Crashpoint = func(p string) {
			if p == PointTurnEnding {
				ending()
			}
		}
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
	rt, db, sl, _ := mergedHarness(t, &scriptModel{})
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
	rt, db, _, late := mergedHarness(t, &scriptModel{})
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

// probeLog records, for each commit the Hub writes, whether the task it
// saves was in the store before the write.
type probeLog struct {
	spy
	db      *store.Badger
	mu      sync.Mutex
	before  []bool // the task was stored before the write
	written []loop.TaskStatus
}

func (p *probeLog) AppendCommit(ctx context.Context, as []loop.CommitAppend, tc loop.TurnCommit) ([]uint64, error, error) {
	var was bool
	if tc.Task != nil {
		_, err := p.db.LoadTask(ctx, tc.Task.ID)
		was = err == nil
	}
	first, cerr, err := p.spy.AppendCommit(ctx, as, tc)
	var st loop.TaskStatus
	if tc.Task != nil {
		if rec, lerr := p.db.LoadTask(ctx, tc.Task.ID); lerr == nil {
			st = rec.Status
		}
	}
	p.mu.Lock()
	p.before, p.written = append(p.before, was), append(p.written, st)
	p.mu.Unlock()
	return first, cerr, err
}

// storedCheckTool notes whether its task was stored when it ran.
type storedCheckTool struct {
	db     *store.Badger
	mu     sync.Mutex
	stored []bool
}

func (*storedCheckTool) Tools(context.Context) ([]loop.ToolDefinition, error) {
	return []loop.ToolDefinition{{Name: "look"}}, nil
}

func (s *storedCheckTool) Call(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	_, err := s.db.LoadTask(ctx, env.TaskID)
	s.mu.Lock()
	s.stored = append(s.stored, err == nil)
	s.mu.Unlock()
	return loop.ToolResult{Content: "looked"}, nil
}

// lookModel asks for the tool "look" when the message says so, then
// answers.
type lookModel struct{}

func (lookModel) Generate(_ context.Context, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == loop.RoleUser && last.Content == "look" {
		return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant,
			ToolCalls: []loop.ToolCall{{ID: "c1", Name: "look", Arguments: []byte(`{}`)}}}, FinishReason: loop.FinishToolCalls}, nil
	}
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "done"}, FinishReason: loop.FinishStop}, nil
}

// A blocking send's new task (StartRequest.AnswerAtEnd) is written with
// its turn's end when the turn ends first: the task is not in the store
// when the end's write begins, and is there, completed, when it returns;
// Start returns once it is durable. A turn that runs a tool has its task
// stored before the tool runs (its write goes then, not at its deadline,
// here an hour).
func TestBlockingSendTaskWrittenWithItsEnd(t *testing.T) {
	t.Parallel()
	db := openBadger(t)
	probe := &probeLog{spy: spy{spyLog: &spyLog{BadgerEvents: db.Events()}, t: t}, db: db}
	tool := &storedCheckTool{db: db}
	// The task's write waits for its turn's end as long as it takes, so
	// that the case shows whatever the machine's speed.
	rt := hubRuntime(t, db, probe, loop.Config{Model: lookModel{}, Toolsets: []loop.Toolset{tool}},
		func(c *Config) { c.DeferTaskWrite = time.Hour })
	ctx := context.Background()
	st, err := rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-one", Message: user("hello"), AnswerAtEnd: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.LoadTask(ctx, st.Run.TaskID); err != nil {
		t.Fatalf("task not stored when Start returned: %v", err)
	}
	if err := rt.Wait(ctx, st.Run); err != nil {
		t.Fatal(err)
	}
	probe.mu.Lock()
	before, written := probe.before, probe.written
	probe.mu.Unlock()
	if len(before) != 1 || before[0] || written[0] != loop.TaskCompleted {
		t.Fatalf("commits %v (task stored before each), task after each %v; want one, the task written with it, completed", before, written)
	}

	// Start returns once the task is stored: here, once the turn, about
	// to run its tool, has sent its write.
	type started struct {
		st  *Started
		err error
	}
	res := make(chan started, 1)
	go func() {
		st, err := rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-two", Message: user("look"), AnswerAtEnd: true})
		res <- started{st, err}
	}()
	var got started
	select {
	case got = <-res:
	case <-time.After(guard):
		_ = db.Close() // sends the held write: the runtime can stop
		t.Fatal("Start waited for the task write's deadline: the turn did not send it before running its tool")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	gctx, cancel := context.WithTimeout(ctx, guard)
	defer cancel()
	if err := rt.Wait(gctx, got.st.Run); err != nil {
		t.Fatal(err)
	}
	tool.mu.Lock()
	defer tool.mu.Unlock()
	if len(tool.stored) != 1 || !tool.stored[0] {
		t.Fatalf("tool ran %d times, task stored each time: %v; want once, stored", len(tool.stored), tool.stored)
	}
}

// chattyModel streams its answer in many deltas: more events than a turn's
// end carries in its own write (maxMergedHeld).
type chattyModel struct{}

func (chattyModel) Generate(_ context.Context, _ *loop.ModelRequest, onDelta func(loop.Delta)) (*loop.ModelResponse, error) {
	var all string
	for i := range 3 * maxMergedHeld {
		d := fmt.Sprintf("w%d ", i)
		all += d
		if onDelta != nil {
			onDelta(loop.Delta{Content: d})
		}
	}
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: all}, FinishReason: loop.FinishStop}, nil
}

// A new task (of a new context) whose turn ends before its task's write is
// out, holding too many events to carry them in its end's write: its end
// is committed on its own behind the task's write and its events follow,
// all of them, in order; nothing waits on the task's write while the turn
// holds its agent (which that write, done, updates: a deadlock before).
func TestTurnEndedBeforeItsTaskHoldingManyEvents(t *testing.T) {
	t.Parallel()
	rt, db, _, late := mergedHarness(t, chattyModel{})
	ctx := context.Background()
	st, err := rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-chatty", Message: user("talk"),
		NewID: func() string { return "t-chatty" }})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-late.ending:
	default:
		t.Fatal("the turn never reached its end while its task's write was under way: the case under test did not happen")
	}
	gctx, cancel := context.WithTimeout(ctx, guard)
	defer cancel()
	if err := rt.Wait(gctx, st.Run); err != nil {
		t.Fatal(err)
	}
	rec, err := db.LoadTask(ctx, "t-chatty")
	if err != nil || rec.Status != loop.TaskCompleted {
		t.Fatalf("task %s, %v; want completed", rec.Status, err)
	}
	evs, err := (&logEvents{log: db.Events()}).events(ctx, "t-chatty")
	if err != nil {
		t.Fatal(err)
	}
	deltas := 0
	for _, e := range evs {
		if _, ok := e.(*loop.ContentDelta); ok {
			deltas++
		}
	}
	if deltas != 3*maxMergedHeld {
		t.Fatalf("%d content deltas in the stream, want %d", deltas, 3*maxMergedHeld)
	}
	if _, ok := evs[0].(*loop.TaskCreated); !ok {
		t.Fatalf("the stream starts with %s, want task-created", evs[0].Head().Kind)
	}
	if tc, ok := evs[len(evs)-1].(*loop.TaskComplete); !ok || tc.Status != loop.TaskCompleted {
		t.Fatalf("the stream ends with %s, want task-complete", evs[len(evs)-1].Head().Kind)
	}
}

// Start of a new conversation's first task returns once the task is
// stored, also when the turn's end is being written then (the turn holds
// its agent while it writes): noting the conversation's record stored in
// the agent does not wait for that end. It did, so Start (and a stream's
// first event) waited for the end's write.
func TestStartOfANewConversationDoesNotWaitForItsTurnsEnd(t *testing.T) {
	t.Parallel()
	db := openBadger(t)
	late := &lateTaskWrite{Badger: db, ending: make(chan struct{})}
	release := make(chan struct{})
	rt := hubRuntime(t, db, db.Events(), loop.Config{Model: &scriptModel{}}, func(c *Config) {
		c.Stores.TaskLeases = late
		c.Crashpoint = func(p string) {
			if p != PointTurnEnding {
				return
			}
			close(late.ending) // the task's write is answered now
			select {
			case <-release:
			case <-time.After(2 * guard):
			}
		}
	})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	t.Cleanup(let) // before the runtime shuts down
	ctx := context.Background()
	type started struct {
		st  *Started
		err error
	}
	res := make(chan started, 1)
	go func() {
		st, err := rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-new", Message: user("hello"),
			NewID: func() string { return "t-new" }})
		res <- started{st, err}
	}()
	var got started
	select {
	case got = <-res:
	case <-time.After(guard):
		t.Fatal("Start waited for its turn's end to be written")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	let()
	gctx, cancel := context.WithTimeout(ctx, guard)
	defer cancel()
	if err := rt.Wait(gctx, got.st.Run); err != nil {
		t.Fatal(err)
	}
	if rec, err := db.LoadTask(ctx, "t-new"); err != nil || rec.Status != loop.TaskCompleted {
		t.Fatalf("task %s, %v; want completed", rec.Status, err)
	}
	if _, err := db.LoadAgent(ctx, "c-new"); err != nil {
		t.Fatalf("the new conversation's record: %v", err)
	}
}
