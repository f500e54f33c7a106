package loop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// AgentConfig configures an Agent. Zero fields take their defaults.
type AgentConfig struct {
	ContextID string
	AgentID   string
	Owner     string // principal the context belongs to
	Loop      *Loop
	Messages  MessageStore
	Agents    AgentStore
	Tasks     TaskStore // optional: a record per turn
	// Commit, when set, saves each finished turn in one atomic write. It
	// must keep the same data as Messages, Agents, Tasks and the loop's
	// Checkpoints (the checkpoint that served is deleted by the commit).
	// Nil: the turn is saved piece by piece.
	Commit TurnCommitter
	// HistoryLimit bounds the messages handed to the model for a turn
	// (the most recent ones); 0 hands the whole history.
	HistoryLimit int
	// HistoryBytes bounds the history handed to the model for a turn by
	// size as well: the most recent messages whose MessageSize adds up to
	// at most HistoryBytes (the turn's input always goes whole). 0: no
	// bound. With no compaction configured (MaxMessages 0), the agent
	// keeps in memory only what the window needs (at most about twice
	// the larger of the two bounds); older messages stay in the store.
	HistoryBytes int
	// Compactor shrinks the stored history when it exceeds MaxMessages.
	// Nil: KeepRecent.
	Compactor Compactor
	// MaxMessages is the history size that triggers compaction; 0: never.
	MaxMessages int
	// DisableAutoSave stops the agent from saving messages and metadata
	// after each turn (SaveState saves them on demand).
	DisableAutoSave bool
	// TaskTTL makes finished task records expire; 0 keeps them.
	TaskTTL time.Duration
	// Artifacts lists the conversation's artifacts (optional).
	Artifacts ArtifactLister
	// CacheTally, when set, is kept equal to the sum of CachedBytes over
	// the agents that share it, until each one's Untally: a cache of
	// agents bounded by bytes reads its total without visiting them.
	CacheTally *atomic.Int64
	// DeferNewMetadata stops Start from saving the metadata of a context
	// the store does not know yet: the caller saves it (PendingMetadata,
	// MetadataSaved) in the write that stores the context's first task,
	// so that a new conversation costs no synced write of its own and no
	// context is stored without the task that made it.
	DeferNewMetadata bool
	// Fresh says the context is new for certain (an id the caller has just
	// made): Start reads nothing from the stores. A read on a store that
	// syncs its writes waits for the commit in flight, which a first turn
	// then need not do before its model call.
	Fresh  bool
	Logger *slog.Logger
}

// TurnInput is one turn asked of an Agent.
type TurnInput struct {
	TaskID string // required: the caller names tasks
	// Messages is the turn's input: a user message, or tool messages that
	// answer the client tool calls the previous turn ended with.
	Messages    []Message
	ClientTools []ToolDefinition
	Auth        *AuthContext // for this turn only; never stored
	Sink        EventSink
	Metadata    map[string]any
	// Lease, when set, fences the turn's writes: the turn is saved only
	// while the lease is held (see TurnCommit.Lease).
	Lease *Lease
}

// RunInput runs a task whose record is already stored, working (see
// Agent.RunTask).
type RunInput struct {
	TaskID      string
	Auth        *AuthContext
	Sink        EventSink
	ClientTools []ToolDefinition
	Lease       *Lease
	// Task, when set, is the task's record as the caller is storing it
	// (its Version the one it will have stored): the turn starts from it,
	// without reading it back, and calls its model while the record is
	// being written. Stored must be set with it.
	Task *TaskRecord
	// Stored is waited for before the turn writes anything or runs a tool
	// (Turn.Stored): it returns once the caller has stored Task, with the
	// lease that fences the turn's writes, or with why the task could not
	// be stored (the turn then ends without writing anything, the agent
	// ready for the next).
	Stored func() (*Lease, error)
	// Queued, optional with Stored, returns once the caller has queued
	// Task's write ahead of every write the turn makes after it, with the
	// lease that write stores (loop.LeasedTaskSubmitter): a turn that runs
	// no tool then commits its end without waiting for Stored (Turn.Queued).
	Queued func() (*Lease, error)
	// Resumed says the task ran before (in a process that stopped): the
	// turn continues from its checkpoint, or from its first model call
	// without one, and says so in its events. Otherwise the turn starts.
	Resumed bool
}

// Agent is the stateful, multi-turn conversation of one contextId over the
// stateless Loop. Its lifecycle is created → ready ⇄ busy → paused or
// shutdown, and failed when its state could not be saved. One turn runs at a
// time; a second concurrent one gets ErrBusy. All methods are safe for
// concurrent use.
type Agent struct {
	cfg       AgentConfig
	log       *slog.Logger
	compactor Compactor

	mu      sync.Mutex
	meta    AgentMetadata
	history []Message // the stored history (or its tail, see partial), cached since Start
	unsaved int       // messages at the end of history not yet saved
	partial bool      // history holds only the most recent messages
	// pending: meta is not stored yet (DeferNewMetadata). Not under mu:
	// the write that stores it may be done while a turn's end holds mu
	// (MetadataSaved must not wait for that end).
	pending atomic.Bool
	cached  atomic.Int64 // MessagesSize(history), for CachedBytes without the lock

	// tallyMu orders the changes of cached with Untally, so that
	// cfg.CacheTally gets every change once and none after Untally. It is
	// a leaf lock: nothing else is taken while it is held.
	tallyMu   sync.Mutex
	untallied bool
}

// NewAgent returns an agent in state created; Start makes it ready.
func NewAgent(cfg AgentConfig) (*Agent, error) {
	switch {
	case cfg.ContextID == "":
		return nil, fmt.Errorf("new agent: %w: empty context id", ErrInvalid)
	case cfg.Loop == nil:
		return nil, fmt.Errorf("new agent %q: %w: no loop", cfg.ContextID, ErrInvalid)
	case cfg.Messages == nil || cfg.Agents == nil:
		return nil, fmt.Errorf("new agent %q: %w: message and agent stores are required", cfg.ContextID, ErrInvalid)
	}
	a := &Agent{cfg: cfg, log: cfg.Logger, compactor: cfg.Compactor}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.compactor == nil {
		a.compactor = KeepRecent{}
	}
	a.meta = AgentMetadata{ContextID: cfg.ContextID, AgentID: cfg.AgentID, Owner: cfg.Owner, Status: AgentCreated}
	return a, nil
}

// ContextID returns the conversation's id.
func (a *Agent) ContextID() string { return a.cfg.ContextID }

// Status returns the lifecycle state.
func (a *Agent) Status() AgentStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.meta.Status
}

// Metadata returns a copy of the agent's metadata.
func (a *Agent) Metadata() AgentMetadata {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.meta
}

// PendingMetadata returns the agent's metadata while it is not stored yet
// (a new context started with AgentConfig.DeferNewMetadata); ok is false
// once it is.
func (a *Agent) PendingMetadata() (m AgentMetadata, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	m = a.meta
	if m.Status == AgentBusy {
		// Its first turn may have begun while this is being stored
		// (RunInput.Stored): a running turn is no part of the record.
		m.Status = AgentReady
	}
	return m, a.pending.Load()
}

// MetadataSaved records that the caller stored what PendingMetadata
// returned.
func (a *Agent) MetadataSaved() {
	a.pending.Store(false)
}

// Start loads the agent's metadata and history from the stores (resuming a
// conversation after a restart) and makes it ready. Starting a ready agent
// does nothing.
func (a *Agent) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch a.meta.Status {
	case AgentReady, AgentBusy:
		return nil
	case AgentPaused:
		return fmt.Errorf("start agent %q: %w: it is paused; resume it", a.cfg.ContextID, ErrNotReady)
	}
	now := time.Now().UTC()
	var meta AgentMetadata
	var hist []Message
	var err error
	isNew := a.cfg.Fresh
	if !isNew {
		meta, err = a.cfg.Agents.LoadAgent(ctx, a.cfg.ContextID)
		isNew = errors.Is(err, ErrNotFound)
		if err != nil && !isNew {
			return fmt.Errorf("start agent %q: load metadata: %w", a.cfg.ContextID, err)
		}
	}
	if isNew {
		meta = AgentMetadata{ContextID: a.cfg.ContextID, AgentID: a.cfg.AgentID, Owner: a.cfg.Owner, CreatedAt: now, LastActivity: now}
	}
	if !a.cfg.Fresh {
		if hist, err = a.cfg.Messages.Recent(ctx, a.cfg.ContextID, a.cacheLimit()); err != nil {
			return fmt.Errorf("start agent %q: load history: %w", a.cfg.ContextID, err)
		}
	}
	meta.Status = AgentReady
	meta.Error = ""
	if meta.Owner == "" {
		meta.Owner = a.cfg.Owner
	}
	if !isNew || !a.cfg.DeferNewMetadata {
		if err := a.cfg.Agents.SaveAgent(ctx, meta); err != nil {
			return fmt.Errorf("start agent %q: save metadata: %w", a.cfg.ContextID, err)
		}
	}
	a.pending.Store(isNew && a.cfg.DeferNewMetadata)
	if a.windowed() && a.cfg.HistoryBytes > 0 {
		hist = append([]Message(nil), a.window(hist)...)
	}
	a.meta, a.history, a.unsaved = meta, hist, 0
	a.partial = a.windowed()
	a.noteCache()
	return nil
}

// windowed says the agent keeps only the turn's window in memory: it has
// one, and compaction does not need the whole history.
func (a *Agent) windowed() bool {
	return a.cfg.MaxMessages == 0 && (a.cfg.HistoryLimit > 0 || a.cfg.HistoryBytes > 0)
}

// cacheLimit is how many messages Start loads: the turn's window by count
// when the agent is windowed; 0 loads everything.
func (a *Agent) cacheLimit() int {
	if a.windowed() {
		return a.cfg.HistoryLimit
	}
	return 0
}

// window returns the tail of h the model is handed: HistoryLimit messages
// at most, HistoryBytes at most, starting at a safe cut.
func (a *Agent) window(h []Message) []Message {
	if a.cfg.HistoryLimit > 0 && len(h) > a.cfg.HistoryLimit {
		h = trimHistory(h, a.cfg.HistoryLimit)
	}
	if a.cfg.HistoryBytes > 0 {
		h = trimHistoryBytes(h, a.cfg.HistoryBytes)
	}
	return h
}

// trimCache drops saved messages the agent no longer needs in memory: once
// the cache holds twice the window (by count or by size), it keeps the
// window.
func (a *Agent) trimCache() {
	if !a.windowed() || a.unsaved > 0 {
		return
	}
	over := a.cfg.HistoryLimit > 0 && len(a.history) > 2*a.cfg.HistoryLimit
	over = over || a.cfg.HistoryBytes > 0 && a.cached.Load() > 2*int64(a.cfg.HistoryBytes)
	if !over {
		return
	}
	a.history = append([]Message(nil), a.window(a.history)...)
	a.noteCache()
}

// noteCache records the size of the cached history. Caller holds a.mu.
func (a *Agent) noteCache() {
	n := int64(MessagesSize(a.history))
	a.tallyMu.Lock()
	old := a.cached.Swap(n)
	if a.cfg.CacheTally != nil && !a.untallied {
		a.cfg.CacheTally.Add(n - old)
	}
	a.tallyMu.Unlock()
}

// Untally takes the agent's cached bytes out of AgentConfig.CacheTally, for
// good: the cache that shares the tally has dropped it. Later changes of its
// history are not counted; a second call does nothing.
func (a *Agent) Untally() {
	a.tallyMu.Lock()
	defer a.tallyMu.Unlock()
	if a.cfg.CacheTally == nil || a.untallied {
		return
	}
	a.untallied = true
	a.cfg.CacheTally.Add(-a.cached.Load())
}

// CachedBytes is the size (MessagesSize) of the history the agent holds in
// memory, for a cache of agents bounded by bytes.
func (a *Agent) CachedBytes() int64 { return a.cached.Load() }

// History returns the last limit messages of the conversation (all when
// limit <= 0), oldest first.
func (a *Agent) History(ctx context.Context, limit int) ([]Message, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.meta.Status == AgentCreated || a.meta.Status == AgentShutdown {
		return a.cfg.Messages.Recent(ctx, a.cfg.ContextID, limit)
	}
	h := a.history
	if a.partial && (limit <= 0 || limit > len(h)) && a.unsaved == 0 {
		return a.cfg.Messages.Recent(ctx, a.cfg.ContextID, limit)
	}
	if limit > 0 && len(h) > limit {
		h = h[len(h)-limit:]
	}
	return append([]Message(nil), h...), nil
}

// Turn runs one turn: the input messages are added to the history, the loop
// runs over the history, and the new messages and metadata are saved (before
// the events announcing the end of the turn are sent). A turn that fails
// keeps the messages produced up to the failure. Cancelling ctx ends the turn
// as canceled. It returns ErrBusy while another turn runs, ErrNotReady when
// the agent is not ready; the turn's own failure is in the Outcome.
func (a *Agent) Turn(ctx context.Context, in TurnInput) (Outcome, error) {
	if in.TaskID == "" {
		return Outcome{}, fmt.Errorf("turn of %q: %w: empty task id", a.cfg.ContextID, ErrInvalid)
	}
	a.mu.Lock()
	switch a.meta.Status {
	case AgentReady:
	case AgentBusy:
		a.mu.Unlock()
		return Outcome{}, fmt.Errorf("turn of %q: %w", a.cfg.ContextID, ErrBusy)
	default:
		st := a.meta.Status
		a.mu.Unlock()
		return Outcome{}, fmt.Errorf("turn of %q: %w (status %s)", a.cfg.ContextID, ErrNotReady, st)
	}
	a.meta.Status = AgentBusy
	a.mu.Unlock()

	now := time.Now().UTC()
	rec := TaskRecord{ID: in.TaskID, ContextID: a.cfg.ContextID, AgentID: a.cfg.AgentID, Owner: a.meta.Owner,
		Status: TaskWorking, History: in.Messages, TurnInput: len(in.Messages), CreatedAt: now, UpdatedAt: now, Metadata: in.Metadata}
	if a.cfg.Tasks != nil {
		if old, err := a.cfg.Tasks.LoadTask(ctx, in.TaskID); err == nil {
			rec.CreatedAt = old.CreatedAt // a task continued (input-required) keeps its birth
			rec.History = append(old.History, in.Messages...)
			rec.Version = old.Version
		}
		if err := a.cfg.Tasks.SaveTask(ctx, rec); err != nil {
			a.setStatus(AgentReady)
			return Outcome{}, fmt.Errorf("turn of %q: save task %q: %w", a.cfg.ContextID, in.TaskID, err)
		}
		rec.Version++
	}
	return a.run(ctx, &rec, in.Messages, Turn{ClientTools: in.ClientTools, Auth: in.Auth, Sink: in.Sink, Metadata: in.Metadata}, in.Lease), nil
}

// run runs the loop over the history and input, then finishes the turn.
// The agent is busy; run makes it ready again.
func (a *Agent) run(ctx context.Context, rec *TaskRecord, input []Message, t Turn, lease *Lease) Outcome {
	return a.runLeased(ctx, rec, input, t, func() *Lease { return lease })
}

// runLeased is run with the lease known once the turn finishes.
func (a *Agent) runLeased(ctx context.Context, rec *TaskRecord, input []Message, t Turn, lease func() *Lease) Outcome {
	a.mu.Lock()
	history := a.history
	a.mu.Unlock()
	ctx, span := a.cfg.Loop.startSpan(ctx, "agent.turn",
		attribute.String("looopy.context_id", a.cfg.ContextID),
		attribute.String("looopy.task_id", rec.ID))
	defer span.End()
	history = a.window(history)
	msgs := make([]Message, 0, len(history)+len(input))
	t.Messages = append(append(msgs, history...), input...)
	t.ContextID, t.TaskID, t.AgentID = a.cfg.ContextID, rec.ID, a.cfg.AgentID
	if t.Owner == "" {
		t.Owner = rec.Owner
	}
	// A task a remote agent's call started runs as deep as the chain it
	// came with says, and its own remote calls send the chain on.
	if c, err := CallChainOf(rec.Metadata); err == nil {
		t.Depth = max(t.Depth, c.Depth)
		ctx = WithCallChain(ctx, CallChainFrom(ctx).Merge(c))
	}
	t.OnFinish = func(ctx context.Context, o *Outcome) error {
		return a.finishTurn(ctx, rec, input, o, lease())
	}
	out := a.cfg.Loop.Run(ctx, t)
	if out.Err != nil {
		span.RecordError(out.Err)
		span.SetStatus(codes.Error, out.Err.Error())
	}
	return out
}

// ResumeTask continues a task that was running when the process stopped,
// from its last checkpoint: tool calls the journal shows completed are not
// run again. It needs the Tasks store and a loop with Checkpoints. A task
// whose checkpoint cannot be read ends as failed with the reason; it never
// stays working.
func (a *Agent) ResumeTask(ctx context.Context, taskID string, sink EventSink) (Outcome, error) {
	return a.RunTask(ctx, RunInput{TaskID: taskID, Sink: sink, Resumed: true})
}

// RunTask runs the turn of a task whose record is stored already, working,
// with the turn's input as the last TurnInput messages of its History: a
// task the caller made durable before it acknowledged it, or one that
// was running when a process stopped (in.Resumed). A resumed task goes on
// from its last checkpoint: tool calls the journal shows completed are not
// run again. A task that cannot resume ends as failed with the reason; it
// never stays working. It needs the Tasks store; resuming needs a loop
// with Checkpoints.
func (a *Agent) RunTask(ctx context.Context, in RunInput) (Outcome, error) {
	taskID := in.TaskID
	cps := a.cfg.Loop.checkpoints
	if a.cfg.Tasks == nil || (in.Resumed && cps == nil) {
		return Outcome{}, fmt.Errorf("run task %q: %w: needs a task store (and checkpoints to resume)", taskID, ErrInvalid)
	}
	if (in.Task == nil) != (in.Stored == nil) || (in.Task != nil && (in.Resumed || in.Task.ID != taskID)) {
		return Outcome{}, fmt.Errorf("run task %q: %w: Task and Stored go together, for the task's first run", taskID, ErrInvalid)
	}
	var rec TaskRecord
	var err error
	if in.Task != nil {
		rec = *in.Task
		rec.History = slices.Clone(rec.History)
	} else if rec, err = a.cfg.Tasks.LoadTask(ctx, taskID); err != nil {
		return Outcome{}, fmt.Errorf("run task %q: %w", taskID, err)
	}
	if rec.Status != TaskWorking {
		return Outcome{}, fmt.Errorf("run task %q: %w: it is %s, not working", taskID, ErrInvalid, rec.Status)
	}
	if rec.ContextID != a.cfg.ContextID {
		return Outcome{}, fmt.Errorf("run task %q: %w: it belongs to another context", taskID, ErrInvalid)
	}
	a.mu.Lock()
	switch a.meta.Status {
	case AgentReady:
	case AgentBusy:
		a.mu.Unlock()
		return Outcome{}, fmt.Errorf("run task %q: %w", taskID, ErrBusy)
	default:
		st := a.meta.Status
		a.mu.Unlock()
		return Outcome{}, fmt.Errorf("run task %q: %w (status %s)", taskID, ErrNotReady, st)
	}
	a.meta.Status = AgentBusy
	a.mu.Unlock()

	n := min(max(rec.TurnInput, 0), len(rec.History))
	input := rec.History[len(rec.History)-n:]
	t := Turn{Sink: in.Sink, Metadata: rec.Metadata, Auth: in.Auth, ClientTools: in.ClientTools}
	if len(t.ClientTools) == 0 {
		t.ClientTools, t.ClientResultSchemas = clientToolDefs(rec.ClientTools)
	}
	// A task that was paused goes on with its answers (unless a checkpoint
	// of this turn shows them settled already).
	cont, answers, routes := answeredCalls(&rec)
	t.Answers, t.Routes = answers, routes
	if in.Resumed {
		cp, err := cps.LoadCheckpoint(ctx, taskID)
		switch {
		case err == nil:
			if cp.ContextID != a.cfg.ContextID {
				err = fmt.Errorf("checkpoint belongs to context %q", cp.ContextID)
			} else {
				t.Resume, t.ClientTools = &cp, cp.ClientTools
			}
		case errors.Is(err, ErrNotFound):
			// No checkpoint: the turn died before its first model response
			// was saved, so no tool ran. Start it again from the model call.
			err = nil
			t.Resume = &Checkpoint{TaskID: taskID, ContextID: a.cfg.ContextID, Iteration: 1, Stage: StageModel}
			t.Continue = cont
		}
		if err != nil {
			out := Outcome{Status: TaskFailed, Reason: ReasonError,
				Err: fmt.Errorf("task %q cannot be resumed: %w", taskID, err)}
			a.failUnresumable(ctx, &rec, input, in.Sink, &out, in.Lease)
			return out, nil
		}
	}
	if !in.Resumed {
		t.Continue = cont
	}
	if in.Stored == nil {
		return a.run(ctx, &rec, input, t, in.Lease), nil
	}
	stored := sync.OnceValues(in.Stored)
	t.Stored = func(context.Context) error {
		if _, err := stored(); err != nil {
			return fmt.Errorf("task %q not stored: %w", taskID, err)
		}
		return nil
	}
	lease := func() *Lease { l, _ := stored(); return l }
	var before AgentMetadata
	if in.Queued != nil {
		queued := sync.OnceValues(in.Queued)
		t.Queued = func(context.Context) error {
			if _, err := queued(); err != nil {
				return fmt.Errorf("task %q not stored: %w", taskID, err)
			}
			return nil
		}
		lease = func() *Lease { l, _ := queued(); return l }
		a.mu.Lock()
		before = a.meta
		a.mu.Unlock()
	}
	out := a.runLeased(ctx, &rec, input, t, lease)
	if _, err := stored(); err != nil {
		// Not stored, nothing saved: the agent takes the next turn. A
		// commit made on Queued was refused by its fence; the agent is
		// as it was before the turn (finishTurn took back the messages
		// it cached).
		a.mu.Lock()
		switch {
		case in.Queued != nil && (a.meta.Status == AgentBusy || a.meta.Status == AgentFailed):
			a.meta = before
			a.meta.Status = AgentReady
		case a.meta.Status == AgentBusy:
			a.meta.Status = AgentReady
		}
		a.mu.Unlock()
	}
	return out, nil
}

// failUnresumable records and announces the end of a task that cannot
// resume, so that it never hangs in working.
func (a *Agent) failUnresumable(ctx context.Context, rec *TaskRecord, input []Message, sink EventSink, out *Outcome, lease *Lease) {
	if err := a.finishTurn(ctx, rec, input, out, lease); err != nil {
		out.Err = errors.Join(out.Err, err)
	}
	tr := &turn{t: &Turn{ContextID: a.cfg.ContextID, TaskID: rec.ID}, sink: sink}
	if sink == nil {
		tr.sink = SinkFunc(func(Event) {})
	}
	tr.finish(out)
}

// finishTurn records the turn: history, metadata and task record, durably,
// before the loop announces the end of the turn.
func (a *Agent) finishTurn(ctx context.Context, rec *TaskRecord, input []Message, o *Outcome, lease *Lease) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	added := len(input) + len(o.Messages)
	a.history = append(a.history, input...)
	a.history = append(a.history, o.Messages...)
	a.unsaved += added
	a.meta.TurnCount++
	a.meta.LastActivity = time.Now().UTC()
	a.meta.Usage = a.meta.Usage.Add(o.Usage)
	for _, m := range o.Messages {
		if m.Role == RoleTool {
			a.meta.ToolCalls++
		}
	}
	a.meta.Status = AgentReady
	a.noteCache()

	if a.cfg.Tasks != nil {
		rec.Status, rec.Reason, rec.Content = o.Status, o.Reason, o.Content
		rec.Usage, rec.Iterations, rec.PendingCalls = o.Usage, o.Iterations, o.PendingCalls
		rec.Requests = o.Requests
		for _, id := range o.Subtasks {
			if !slices.Contains(rec.Subtasks, id) {
				rec.Subtasks = append(rec.Subtasks, id)
			}
		}
		rec.History = append(rec.History, o.Messages...)
		rec.UpdatedAt = time.Now().UTC()
		rec.TurnInput = 0
		rec.Message = o.StatusMessage()
		rec.FinishReason, rec.Retries = string(o.Finish), o.Retries
		if a.cfg.TaskTTL > 0 && o.Status.Terminal() {
			rec.ExpiresAt = rec.UpdatedAt.Add(a.cfg.TaskTTL)
		}
	}
	cps := a.cfg.Loop.checkpoints
	if tc := a.cfg.Commit; tc != nil && !a.cfg.DisableAutoSave {
		// One atomic, synced write for the whole turn.
		c := TurnCommit{ContextID: a.cfg.ContextID, Messages: a.history[len(a.history)-a.unsaved:], Agent: a.meta, Lease: lease}
		if a.cfg.Tasks != nil {
			c.Task = rec
		}
		if cps != nil {
			c.DeleteCheckpoint = rec.ID
			cps = nil
		}
		// With the events that announce the turn's end, when its sink
		// can write them with the commit.
		if err := o.end.commit(ctx, tc, c, o); err != nil {
			a.meta.Status, a.meta.Error = AgentFailed, err.Error()
			// What was added to the cache is not stored: forget it, so
			// that a later turn does not save it as its own.
			a.history = a.history[:len(a.history)-added]
			a.unsaved -= added
			a.noteCache()
			return fmt.Errorf("save turn: %w", err)
		}
		a.unsaved = 0
		a.pending.Store(false)
		if c.Task != nil {
			rec.Version++
		}
	} else {
		var errs []error
		if !a.cfg.DisableAutoSave {
			if err := a.saveLocked(ctx); err != nil {
				a.meta.Status, a.meta.Error = AgentFailed, err.Error()
				errs = append(errs, err)
			}
		}
		if a.cfg.Tasks != nil {
			if err := a.cfg.Tasks.SaveTask(ctx, *rec); err != nil {
				errs = append(errs, fmt.Errorf("save task %q: %w", rec.ID, err))
			} else {
				rec.Version++
			}
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	if a.cfg.Tasks != nil {
		// What the store holds now, for answering without reading it
		// back; its slices are clipped so no append shares them.
		saved := *rec
		saved.History, saved.Subtasks = slices.Clip(rec.History), slices.Clip(rec.Subtasks)
		saved.PendingCalls, saved.Requests = slices.Clip(rec.PendingCalls), slices.Clip(rec.Requests)
		o.Saved = &saved
	}
	if cps != nil {
		// The turn is recorded whole: its checkpoint has served.
		if err := cps.DeleteCheckpoint(ctx, rec.ID); err != nil && !errors.Is(err, ErrNotFound) {
			a.log.LogAttrs(ctx, slog.LevelWarn, "delete checkpoint", slog.String("task_id", rec.ID),
				slog.String("error", err.Error()))
		}
	}
	a.trimCache()
	if a.cfg.MaxMessages > 0 && len(a.history) > a.cfg.MaxMessages && a.unsaved == 0 {
		if err := a.compactLocked(ctx); err != nil {
			// Compaction is housekeeping: the turn's data is saved already.
			a.log.LogAttrs(ctx, slog.LevelWarn, "history compaction failed",
				slog.String("context_id", a.cfg.ContextID), slog.String("error", err.Error()))
		}
	}
	return nil
}

// saveLocked appends the unsaved messages and saves the metadata.
func (a *Agent) saveLocked(ctx context.Context) error {
	if a.unsaved > 0 {
		tail := a.history[len(a.history)-a.unsaved:]
		if err := a.cfg.Messages.Append(ctx, a.cfg.ContextID, tail...); err != nil {
			return fmt.Errorf("save messages of %q: %w", a.cfg.ContextID, err)
		}
		a.unsaved = 0
	}
	if err := a.cfg.Agents.SaveAgent(ctx, a.meta); err != nil {
		return fmt.Errorf("save metadata of %q: %w", a.cfg.ContextID, err)
	}
	a.pending.Store(false)
	return nil
}

func (a *Agent) compactLocked(ctx context.Context) error {
	compacted := a.compactor.Compact(a.history, a.cfg.MaxMessages)
	if len(compacted) >= len(a.history) {
		return nil
	}
	if err := a.cfg.Messages.Replace(ctx, a.cfg.ContextID, compacted); err != nil {
		return fmt.Errorf("compact history of %q: %w", a.cfg.ContextID, err)
	}
	a.history = compacted
	a.noteCache()
	return nil
}

// Artifacts lists the artifacts the conversation's turns produced. Without
// an ArtifactLister configured it returns none.
func (a *Agent) Artifacts(ctx context.Context) ([]ArtifactSummary, error) {
	if a.cfg.Artifacts == nil {
		return nil, nil
	}
	list, err := a.cfg.Artifacts.ContextArtifacts(ctx, a.cfg.ContextID)
	if err != nil {
		return nil, fmt.Errorf("artifacts of %q: %w", a.cfg.ContextID, err)
	}
	return list, nil
}

// SaveState saves unsaved messages and the metadata now.
func (a *Agent) SaveState(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.saveLocked(ctx)
}

// Pause saves the agent's state and stops it from taking turns until Resume.
// It keeps the agent in memory. Pausing a busy agent is ErrBusy.
func (a *Agent) Pause(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch a.meta.Status {
	case AgentPaused:
		return nil
	case AgentBusy:
		return fmt.Errorf("pause agent %q: %w", a.cfg.ContextID, ErrBusy)
	case AgentReady:
	default:
		return fmt.Errorf("pause agent %q: %w (status %s)", a.cfg.ContextID, ErrNotReady, a.meta.Status)
	}
	a.meta.Status = AgentPaused
	if err := a.saveLocked(ctx); err != nil {
		a.meta.Status = AgentReady
		return fmt.Errorf("pause: %w", err)
	}
	return nil
}

// Resume makes a paused agent ready again.
func (a *Agent) Resume(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.meta.Status != AgentPaused {
		return fmt.Errorf("resume agent %q: %w (status %s)", a.cfg.ContextID, ErrNotReady, a.meta.Status)
	}
	a.meta.Status = AgentReady
	return a.cfg.Agents.SaveAgent(ctx, a.meta)
}

// Shutdown saves the agent's state and releases its cached history. Start
// brings it back from the stores.
func (a *Agent) Shutdown(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch a.meta.Status {
	case AgentShutdown, AgentCreated:
		return nil
	case AgentBusy:
		return fmt.Errorf("shutdown agent %q: %w", a.cfg.ContextID, ErrBusy)
	}
	a.meta.Status = AgentShutdown
	if err := a.saveLocked(ctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	a.history = nil
	a.noteCache()
	return nil
}

// Clear deletes the conversation's history and resets its counters. The
// agent stays in its state.
func (a *Agent) Clear(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.meta.Status == AgentBusy {
		return fmt.Errorf("clear agent %q: %w", a.cfg.ContextID, ErrBusy)
	}
	if err := a.cfg.Messages.Delete(ctx, a.cfg.ContextID); err != nil {
		return fmt.Errorf("clear agent %q: %w", a.cfg.ContextID, err)
	}
	a.history, a.unsaved, a.partial = nil, 0, false
	a.noteCache()
	a.meta.TurnCount, a.meta.Usage, a.meta.ToolCalls = 0, Usage{}, 0
	a.meta.LastActivity = time.Now().UTC()
	return a.cfg.Agents.SaveAgent(ctx, a.meta)
}

func (a *Agent) setStatus(s AgentStatus) {
	a.mu.Lock()
	a.meta.Status = s
	a.mu.Unlock()
}
