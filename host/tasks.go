package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/looopy-go/looopy/artifacts"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
)

// Stores are the durable stores the task manager works on.
type Stores struct {
	Messages loop.MessageStore
	Agents   loop.AgentStore
	Tasks    loop.TaskStore
	Events   loop.EventLog
	// Checkpoints and Journal make turns durable: a task left working by a
	// crash resumes when the host starts. Without them such a task fails.
	Checkpoints loop.CheckpointStore
	Journal     loop.Journal
}

// taskManager runs turns on contexts the host owns. A client that goes
// away does not stop its task; CancelTask does. It keeps one loop.Agent per
// contextId, started from the stores on first use.
type taskManager struct {
	loop   *loop.Loop
	stores Stores
	hub    *sse.Hub
	// artifacts, when set, has the artifacts of a finished task expire
	// with it.
	artifacts *artifacts.DB
	log       *slog.Logger
	limits    LimitsConfig
	agent     AgentConfig

	base      context.Context // parent of every turn; cancelled at the end of a shutdown
	cancelAll context.CancelFunc

	mu       sync.Mutex
	agents   map[string]*loop.Agent
	running  map[string]*run      // by task id
	busy     map[string]*run      // by context id
	expiry   map[string]time.Time // when each context stream's expiry was last set
	closing  bool
	wg       sync.WaitGroup
	starting sync.Map // contextId -> *sync.Mutex: one Start per context at a time
}

// run is a turn in progress.
type run struct {
	taskID, contextID, owner string
	after                    uint64 // the turn's events have ids above this in the task stream
	created                  time.Time
	ctx                      context.Context // the host-owned context the turn runs on
	cancel                   context.CancelFunc
	done                     chan struct{}
	outcome                  loop.Outcome
	err                      error
}

func newTaskManager(l *loop.Loop, st Stores, hub *sse.Hub, limits LimitsConfig, ac AgentConfig, log *slog.Logger) *taskManager {
	base, cancel := context.WithCancel(context.Background())
	return &taskManager{loop: l, stores: st, hub: hub, log: log, limits: limits, agent: ac,
		base: base, cancelAll: cancel,
		agents: make(map[string]*loop.Agent), running: make(map[string]*run), busy: make(map[string]*run),
		expiry: make(map[string]time.Time)}
}

// recover takes over the tasks a previous process left running. With
// checkpoints they resume where they were (their streams go on under the
// same ids); without, or when a task cannot resume, they fail with the
// reason, so no task ever stays working. It returns once every task is
// resumed or finished; resumed turns run on in the background, at most
// Limits.ResumeConcurrency at a time.
func (m *taskManager) recover(ctx context.Context) error {
	recs, err := m.stores.Tasks.ListTasks(ctx, loop.TaskFilter{Statuses: []loop.TaskStatus{loop.TaskSubmitted, loop.TaskWorking}})
	if err != nil {
		return fmt.Errorf("recover tasks: %w", err)
	}
	durable := m.stores.Checkpoints != nil && m.stores.Journal != nil
	sem := make(chan struct{}, max(m.limits.ResumeConcurrency, 1))
	// Tasks are taken over in parallel: each costs synced writes (the
	// context's metadata, or the failed record), which the store commits
	// in groups only when they come together. Their turns wait until all
	// are taken over (gate): the host is ready soon after a crash however
	// many tasks were in flight, instead of sharing the machine with the
	// first resumed turns while it takes over the others.
	gate := make(chan struct{})
	defer close(gate)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(m.limits.ResumeConcurrency, 1))
	for _, rec := range recs {
		g.Go(func() error {
			if !durable || rec.Status != loop.TaskWorking {
				m.log.LogAttrs(gctx, slog.LevelWarn, "task interrupted by a restart", slog.String("task_id", rec.ID))
				return m.finishStored(gctx, rec, loop.TaskFailed, "interrupted: the host restarted during the turn")
			}
			if err := m.resume(gctx, rec, gate, sem); err != nil {
				m.log.LogAttrs(gctx, slog.LevelError, "task not resumed", slog.String("task_id", rec.ID), slog.String("error", err.Error()))
				return m.finishStored(gctx, rec, loop.TaskFailed, "cannot be resumed after a restart: "+err.Error())
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if len(recs) > 0 {
		m.log.LogAttrs(ctx, slog.LevelInfo, "tasks taken over after a restart", slog.Int("tasks", len(recs)))
	}
	return nil
}

// resume registers a task left working by a crash as running and resumes
// its turn in the background once gate is closed and sem has room.
func (m *taskManager) resume(ctx context.Context, rec loop.TaskRecord, gate <-chan struct{}, sem chan struct{}) error {
	agent, err := m.getAgent(ctx, rec.ContextID, rec.Owner)
	if err != nil {
		return err
	}
	r, err := m.register(ctx, rec.ID, rec.ContextID, rec.Owner)
	if err != nil {
		return err
	}
	r.created = rec.CreatedAt
	m.launch(r, rec, func(ctx context.Context, sink loop.EventSink) (loop.Outcome, error) {
		select {
		case <-gate:
		case <-ctx.Done():
			return loop.Outcome{}, ctx.Err()
		}
		select {
		case sem <- struct{}{}:
			defer func() { <-sem }()
		case <-ctx.Done():
			return loop.Outcome{}, ctx.Err()
		}
		m.log.LogAttrs(ctx, slog.LevelInfo, "resuming task", slog.String("task_id", rec.ID))
		return agent.ResumeTask(ctx, rec.ID, sink)
	})
	return nil
}

// register marks a task as running on its context: one turn per context.
func (m *taskManager) register(ctx context.Context, taskID, contextID, owner string) (*run, error) {
	after, err := m.hub.Last(ctx, sse.TaskStream(taskID))
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return nil, ErrShuttingDown
	}
	if _, ok := m.busy[contextID]; ok {
		return nil, fmt.Errorf("context %q: %w", contextID, loop.ErrBusy)
	}
	runCtx, cancel := context.WithTimeout(m.base, time.Duration(m.limits.TurnTimeout))
	// The turn is a child of the request's span, not of its cancellation.
	runCtx = withRequestTrace(runCtx, ctx)
	r := &run{taskID: taskID, contextID: contextID, owner: owner, after: after, ctx: runCtx, cancel: cancel, done: make(chan struct{})}
	m.busy[contextID], m.running[taskID] = r, r
	return r, nil
}

// launch runs a turn of r on the host's context, in a goroutine the task
// manager owns; rec is what is known of the task if the turn cannot start.
func (m *taskManager) launch(r *run, rec loop.TaskRecord, turn func(ctx context.Context, sink loop.EventSink) (loop.Outcome, error)) {
	taskID, contextID := r.taskID, r.contextID
	pub := m.hub.Sink(func(e loop.Event, err error) {
		m.log.LogAttrs(context.Background(), slog.LevelError, "event not logged",
			slog.String("task_id", taskID), slog.String("kind", string(e.Head().Kind)), slog.String("error", err.Error()))
	})
	sink := loop.SinkFunc(func(e loop.Event) {
		if e.Head().Kind.Internal() {
			return // internal events are for tracing, not for the log clients read
		}
		pub.Emit(e)
	})
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer r.cancel()
		out, err := turn(r.ctx, sink)
		if err != nil {
			// The turn did not start: the task fails, and says why.
			m.log.LogAttrs(context.Background(), slog.LevelError, "turn not started",
				slog.String("task_id", taskID), slog.String("error", err.Error()))
			st := loop.TaskFailed
			if r.ctx.Err() != nil {
				st = loop.TaskCanceled
			}
			if ferr := m.finishStored(context.Background(), rec, st, err.Error()); ferr != nil {
				m.log.LogAttrs(context.Background(), slog.LevelError, "task not finished",
					slog.String("task_id", taskID), slog.String("error", ferr.Error()))
			}
		}
		if err == nil {
			m.turnEnded(taskID, contextID, out.Status)
		}
		m.mu.Lock()
		r.outcome, r.err = out, err
		delete(m.busy, contextID)
		delete(m.running, taskID)
		m.mu.Unlock()
		close(r.done)
	}()
}

// getAgent returns the started Agent of a context, creating it for owner
// when the context is new. Another principal's context is not found.
func (m *taskManager) getAgent(ctx context.Context, contextID, owner string) (*loop.Agent, error) {
	m.mu.Lock()
	a, ok := m.agents[contextID]
	m.mu.Unlock()
	if !ok {
		lk, _ := m.starting.LoadOrStore(contextID, &sync.Mutex{})
		mu := lk.(*sync.Mutex)
		mu.Lock()
		defer mu.Unlock()
		m.mu.Lock()
		a, ok = m.agents[contextID]
		m.mu.Unlock()
		if !ok {
			if meta, err := m.stores.Agents.LoadAgent(ctx, contextID); err == nil && meta.Owner != owner {
				return nil, contextNotFound(contextID)
			} else if err != nil && !errors.Is(err, loop.ErrNotFound) {
				return nil, fmt.Errorf("load context %q: %w", contextID, err)
			}
			var err error
			a, err = loop.NewAgent(loop.AgentConfig{ContextID: contextID, Owner: owner, Loop: m.loop,
				Messages: m.stores.Messages, Agents: m.stores.Agents, Tasks: m.stores.Tasks,
				HistoryLimit: m.agent.HistoryLimit, TaskTTL: time.Duration(m.limits.TaskTTL), Logger: m.log,
				Artifacts: m.artifactLister()})
			if err != nil {
				return nil, fmt.Errorf("agent of %q: %w", contextID, err)
			}
			if err := a.Start(ctx); err != nil {
				return nil, fmt.Errorf("agent of %q: %w", contextID, err)
			}
			m.mu.Lock()
			m.evictLocked()
			m.agents[contextID] = a
			m.mu.Unlock()
		}
	}
	if a.Metadata().Owner != owner {
		return nil, contextNotFound(contextID)
	}
	return a, nil
}

// artifactLister is the artifact store as the Agent sees it (nil when the
// host keeps no artifacts).
func (m *taskManager) artifactLister() loop.ArtifactLister {
	if m.artifacts == nil {
		return nil
	}
	return m.artifacts
}

// evictLocked keeps the agent cache under Limits.MaxAgents: it drops
// agents without a running turn (their state is in the stores already;
// the next message starts them again). m.mu is held.
func (m *taskManager) evictLocked() {
	limit := m.limits.MaxAgents
	for id := range m.agents {
		if len(m.agents) < limit {
			return
		}
		if _, busy := m.busy[id]; busy {
			continue
		}
		delete(m.agents, id)
		delete(m.expiry, id)
		m.starting.Delete(id)
	}
}

func contextNotFound(id string) error {
	return a2a.NewError(a2a.ErrTaskNotFound, fmt.Sprintf("context %q not found", id))
}

func taskNotFound(id string) error {
	return a2a.NewError(a2a.ErrTaskNotFound, fmt.Sprintf("task %q not found", id))
}

// load returns the record of a task the principal owns.
func (m *taskManager) load(ctx context.Context, principal, taskID string) (loop.TaskRecord, error) {
	if taskID == "" {
		return loop.TaskRecord{}, fmt.Errorf("%w: task id is required", a2a.ErrInvalidParams)
	}
	rec, err := m.stores.Tasks.LoadTask(ctx, taskID)
	if errors.Is(err, loop.ErrNotFound) {
		// A task whose turn is about to start has no record yet.
		if r := m.runOf(taskID); r != nil && r.owner == principal {
			return loop.TaskRecord{ID: taskID, ContextID: r.contextID, Owner: r.owner,
				Status: loop.TaskSubmitted, CreatedAt: r.created, UpdatedAt: r.created}, nil
		}
	}
	if errors.Is(err, loop.ErrNotFound) || (err == nil && rec.Owner != principal) {
		return loop.TaskRecord{}, taskNotFound(taskID)
	}
	if err != nil {
		return loop.TaskRecord{}, fmt.Errorf("load task %q: %w", taskID, err)
	}
	return rec, nil
}

// started is what start hands back: the turn and the task as submitted.
type started struct {
	run  *run
	task *a2a.Task
}

// start begins a turn for the message of req and returns at once.
func (m *taskManager) start(ctx context.Context, auth *loop.AuthContext, req *a2a.SendMessageRequest) (*started, error) {
	if req == nil || req.Message == nil {
		return nil, fmt.Errorf("%w: message is required", a2a.ErrInvalidParams)
	}
	msg, err := toLoopMessage(req.Message)
	if err != nil {
		return nil, err
	}
	principal := auth.Principal
	contextID := req.Message.ContextID
	taskID := string(req.Message.TaskID)
	var prev *loop.TaskRecord
	if taskID != "" {
		rec, err := m.load(ctx, principal, taskID)
		if err != nil {
			return nil, err
		}
		if contextID != "" && contextID != rec.ContextID {
			return nil, fmt.Errorf("%w: task %q belongs to another context", a2a.ErrInvalidParams, taskID)
		}
		if !rec.Status.Interrupted() {
			return nil, fmt.Errorf("%w: task %q is %s and takes no more messages; send without taskId to start a new task",
				a2a.ErrInvalidParams, taskID, rec.Status)
		}
		contextID, prev = rec.ContextID, &rec
	}
	if contextID == "" {
		contextID = uuid.NewString()
	}
	if len(contextID) > 200 {
		return nil, fmt.Errorf("%w: contextId longer than 200 bytes", a2a.ErrInvalidParams)
	}
	agent, err := m.getAgent(ctx, contextID, principal)
	if err != nil {
		return nil, err
	}
	if taskID == "" {
		taskID = uuid.NewString()
	}
	r, err := m.register(ctx, taskID, contextID, principal)
	if err != nil {
		return nil, err
	}

	// The record is saved by the agent as the turn starts; until then the
	// task is known from r (see load).
	now := time.Now().UTC()
	rec := loop.TaskRecord{ID: taskID, ContextID: contextID, Owner: principal, Status: loop.TaskSubmitted,
		CreatedAt: now, UpdatedAt: now}
	if prev != nil {
		rec = *prev
		rec.Status, rec.UpdatedAt = loop.TaskSubmitted, now
	}
	r.created = now
	task := toA2ATask(rec, -1)
	task.History = append(task.History, toA2AMessages(taskID, contextID, []loop.Message{msg})...)
	if req.Message.ContextID == "" {
		// The client's message did not know its context; the task says it.
		task.History[len(task.History)-1].ContextID = contextID
	}

	m.launch(r, rec, func(ctx context.Context, sink loop.EventSink) (loop.Outcome, error) {
		return agent.Turn(ctx, loop.TurnInput{TaskID: taskID, Messages: []loop.Message{msg},
			Auth: auth, Sink: sink, Metadata: req.Metadata})
	})
	return &started{run: r, task: task}, nil
}

// turnEnded finishes the task's stream when the task is over, and keeps
// the context's stream for the retention time after its last turn.
func (m *taskManager) turnEnded(taskID, contextID string, st loop.TaskStatus) {
	ctx := context.Background()
	// The turn's events are queued; they are in the log before the turn
	// counts as ended (a blocking SendMessage returns, a client reads them).
	for _, stream := range []string{sse.TaskStream(taskID), sse.ContextStream(contextID)} {
		if err := m.hub.Flush(ctx, stream); err != nil {
			m.log.LogAttrs(ctx, slog.LevelError, "events not flushed to the log",
				slog.String("stream", stream), slog.String("error", err.Error()))
		}
	}
	if st.Terminal() && m.artifacts != nil && m.limits.TaskTTL > 0 {
		if err := m.artifacts.ExpireTask(ctx, taskID, time.Duration(m.limits.TaskTTL)); err != nil {
			m.log.LogAttrs(ctx, slog.LevelWarn, "artifact expiry not set",
				slog.String("task_id", taskID), slog.String("error", err.Error()))
		}
	}
	if st.Terminal() {
		if err := m.hub.Finish(ctx, sse.TaskStream(taskID)); err != nil {
			m.log.LogAttrs(ctx, slog.LevelWarn, "task stream not finished",
				slog.String("task_id", taskID), slog.String("error", err.Error()))
		}
	}
	// Setting an expiry touches the whole stream, so it is renewed at most
	// once per half retention period (records appended later share it).
	ttl := time.Duration(m.limits.TaskTTL)
	m.mu.Lock()
	due := time.Since(m.expiry[contextID]) > ttl/2
	if due {
		m.expiry[contextID] = time.Now()
	}
	m.mu.Unlock()
	if due {
		if err := m.stores.Events.Expire(ctx, sse.ContextStream(contextID), ttl); err != nil {
			m.log.LogAttrs(ctx, slog.LevelWarn, "context stream expiry not set",
				slog.String("context_id", contextID), slog.String("error", err.Error()))
		}
	}
}

// finishStored ends a task that has no running turn: it records the final
// status and publishes it, so that open streams of the task end too.
func (m *taskManager) finishStored(ctx context.Context, rec loop.TaskRecord, st loop.TaskStatus, why string) error {
	rec.Status, rec.Message, rec.UpdatedAt = st, why, time.Now().UTC()
	if st.Terminal() && m.limits.TaskTTL > 0 {
		rec.ExpiresAt = rec.UpdatedAt.Add(time.Duration(m.limits.TaskTTL))
	}
	if err := m.stores.Tasks.SaveTask(ctx, rec); err != nil {
		return fmt.Errorf("finish task %q: %w", rec.ID, err)
	}
	h := loop.Header{ContextID: rec.ContextID, TaskID: rec.ID, Timestamp: rec.UpdatedAt}
	h.Kind = loop.KindTaskStatus
	if _, err := m.hub.PublishTask(ctx, &loop.TaskStatusEvent{Header: h, Status: st, Message: why}); err != nil {
		return fmt.Errorf("finish task %q: %w", rec.ID, err)
	}
	h.Kind = loop.KindTaskComplete
	reason := "error"
	if st == loop.TaskCanceled {
		reason = "canceled"
	}
	if _, err := m.hub.PublishTask(ctx, &loop.TaskComplete{Header: h, Status: st, Reason: reason}); err != nil {
		return fmt.Errorf("finish task %q: %w", rec.ID, err)
	}
	m.turnEnded(rec.ID, rec.ContextID, st)
	return nil
}

// runOf returns the running turn of a task, or nil.
func (m *taskManager) runOf(taskID string) *run {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.running[taskID]
}

// wait blocks until the turn of r ends or ctx does.
func (m *taskManager) wait(ctx context.Context, r *run) error {
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cancel stops a task: a running turn is cancelled and awaited; a task
// waiting on the client is closed as canceled. A finished task is not
// cancelable.
func (m *taskManager) cancel(ctx context.Context, principal, taskID string) (loop.TaskRecord, error) {
	rec, err := m.load(ctx, principal, taskID)
	if err != nil {
		return rec, err
	}
	m.mu.Lock()
	r := m.running[taskID]
	m.mu.Unlock()
	if r != nil {
		r.cancel()
		if err := m.wait(ctx, r); err != nil {
			return rec, err
		}
		return m.load(ctx, principal, taskID)
	}
	if rec.Status.Terminal() {
		return rec, a2a.NewError(a2a.ErrTaskNotCancelable, fmt.Sprintf("task %q is %s", taskID, rec.Status))
	}
	if err := m.finishStored(ctx, rec, loop.TaskCanceled, "canceled by the client"); err != nil {
		return rec, err
	}
	return m.load(ctx, principal, taskID)
}

// shutdown stops new turns, lets running ones finish until ctx ends, then
// cancels the rest and waits for them to record their end.
func (m *taskManager) shutdown(ctx context.Context) {
	m.mu.Lock()
	m.closing = true
	m.mu.Unlock()
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		m.cancelAll()
		<-done
	}
	m.cancelAll()
}
