package loop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// SubtaskSpec describes a sub-agent's task about to start under a tool call.
type SubtaskSpec struct {
	// AgentID names the sub-agent (an agent plugin, a remote agent).
	AgentID string
	// Prompt is what the sub-agent is asked; it is the sub-task's input.
	Prompt string
	// CallID is the tool call that runs the sub-agent, when the env does
	// not name it (ToolEnv.CallID). The sub-task's id is derived from the
	// parent task and the call, so a resumed turn finds the same sub-task.
	CallID string
	// Metadata is recorded with the sub-task and sent with its
	// task-created.
	Metadata map[string]any
}

// SubtaskID is the id of the sub-task a tool call of a task runs.
func SubtaskID(parentTaskID, callID string) string { return parentTaskID + "." + callID }

// Subtask is a sub-agent's task running under a tool call of a turn: it has
// its own record (ParentTaskID set, same owner as the parent), its own
// task-created (initiator agent) and status events, and its usage counts
// into the parent's turn and budget. Start it with ToolEnv.StartSubtask,
// run the sub-agent with Env, end it with Finish.
type Subtask struct {
	ID           string
	ParentTaskID string
	ContextID    string
	AgentID      string
	// Previous is the record a run of the same call left when a restart
	// cut it off (ToolEnv.Resumed, and a record found): what that run
	// noted (Note) is in its Metadata. Nil otherwise.
	Previous *TaskRecord
	// Attempt counts the times the call started over as a new call
	// under its id (run again without the answer its sub-task waited
	// for: other arguments), recorded in the sub-task's metadata
	// (SubtaskAttemptKey): 0 for the first. A sub-agent whose calls carry
	// an identity elsewhere (a remote agent's message and context ids)
	// tells the attempts apart with it.
	Attempt int

	tr     *turn // nil: the env belongs to no turn (a tool called directly)
	env    ToolEnv
	parent func(Event)

	mu       sync.Mutex
	usage    Usage
	calls    int
	held     int // model calls reserved (the name of each call's reservation)
	thoughts int
	rec      TaskRecord
	done     bool

	prompt      string
	parentModel Model  // the parent's own model (AnswerByModel)
	coordinator string // the parent's agent id
	stop        func()
	pause       *InputRequest
}

// StartSubtask opens the sub-task of a sub-agent run by the tool call env
// was made for: it records the task (working), announces it to the parent
// (subtask-created, then the parent's status waiting-subtask while any of
// its sub-tasks runs) and opens its own stream of events (task-created with
// initiator agent and parentTaskId, then working). A sub-task whose record
// exists already (the call runs again: a resumed turn, or an answer to the
// request it passed up) is not announced again: only its working status
// is sent. An error means the
// sub-task could not be recorded; the sub-agent must not run then.
func (env *ToolEnv) StartSubtask(ctx context.Context, spec SubtaskSpec) (*Subtask, error) {
	callID := env.CallID
	if callID == "" {
		callID = spec.CallID
	}
	if callID == "" {
		return nil, fmt.Errorf("start sub-task: %w: no tool call id", ErrInvalid)
	}
	s := &Subtask{ID: SubtaskID(env.TaskID, callID), ParentTaskID: env.TaskID, ContextID: env.ContextID,
		AgentID: spec.AgentID, tr: env.turn, parent: env.Emit, prompt: spec.Prompt, parentModel: env.Model, coordinator: env.AgentID}
	if s.parent == nil {
		s.parent = func(Event) {}
	}
	s.env = *env
	s.env.TaskID = s.ID
	s.env.Depth = env.Depth + 1
	s.env.Emit = s.Emit
	s.env.sub = s
	if env.Model != nil {
		inner := env.Model
		if tm, ok := inner.(*turnModel); ok && tm.tr == s.tr {
			// The sub-task holds and counts its calls itself.
			inner = tm.tr.model
		}
		s.env.Model = &subtaskModel{s: s, inner: inner}
	}
	now := time.Now().UTC()
	s.rec = TaskRecord{ID: s.ID, ContextID: env.ContextID, AgentID: spec.AgentID, ParentTaskID: env.TaskID,
		Status: TaskWorking, History: []Message{{Role: RoleUser, Content: spec.Prompt}}, TurnInput: 1,
		CreatedAt: now, UpdatedAt: now, Metadata: spec.Metadata}
	// again: the sub-task was announced by an earlier run of the call (a
	// resumed turn, or a sub-agent run again with the answer to the
	// request it passed up); its subtask-created and task-created are not
	// sent twice.
	again := false
	if tr := s.tr; tr != nil {
		s.rec.Owner = tr.t.Owner
		if ts := tr.l.subtasks; ts != nil {
			wctx := context.WithoutCancel(ctx)
			if old, err := ts.LoadTask(wctx, s.ID); err == nil {
				again = true
				s.Attempt = attemptOf(old)
				if old.Status.Interrupted() && old.ParentTaskID == env.TaskID && env.Routed == nil && !env.Resumed {
					// The call runs again without the answer its sub-task
					// waited for (the sub-agent above, run again, made
					// another call under the same id: other arguments):
					// the wait is abandoned, and what waited below ends
					// before the call starts anew, as a new attempt.
					tr.endAbandoned(wctx, old)
					s.Attempt++
				}
				if s.Attempt > 0 {
					s.rec.Metadata = withMeta(s.rec.Metadata, SubtaskAttemptKey, strconv.Itoa(s.Attempt))
				}
				// A resumed turn runs the call again: the same sub-task
				// starts over.
				s.rec.CreatedAt, s.rec.Version = old.CreatedAt, old.Version
				if id, ok := old.Metadata[RemoteTaskKey].(string); ok && env.Routed != nil && s.rec.Metadata[RemoteTaskKey] == nil {
					// Run again with the answer to its remote task's
					// request: the same remote task goes on, and the
					// record keeps naming it (an orphan's end cancels it).
					s.rec.Metadata = withMeta(s.rec.Metadata, RemoteTaskKey, id)
				}
				if env.Resumed {
					prev := old
					s.Previous = &prev
				}
			}
			if err := ts.SaveTask(wctx, s.rec); err != nil {
				return nil, fmt.Errorf("record sub-task %q: %w", s.ID, err)
			}
			s.rec.Version++
		}
	}
	if !again {
		s.parent(&SubtaskCreated{Header: Header{Kind: KindSubtaskCreated, ContextID: env.ContextID, TaskID: env.TaskID},
			SubtaskID: s.ID, AgentID: spec.AgentID, Prompt: spec.Prompt})
	}
	if tr := s.tr; tr != nil {
		tr.subMu.Lock()
		tr.activeSubs++
		first := tr.activeSubs == 1
		tr.subtasks = append(tr.subtasks, s.ID)
		tr.subMu.Unlock()
		if first {
			s.parent(&TaskStatusEvent{Header: Header{Kind: KindTaskStatus, ContextID: env.ContextID, TaskID: env.TaskID},
				Status: TaskWaitingSubtask, Message: fmt.Sprintf("waiting for the sub-agent %s", spec.AgentID),
				Metadata: map[string]any{"subtaskId": s.ID}})
		}
	}
	if !again {
		s.Emit(&TaskCreated{Header: Header{Kind: KindTaskCreated}, Initiator: "agent", AgentID: spec.AgentID, Metadata: spec.Metadata})
	}
	s.Emit(&TaskStatusEvent{Header: Header{Kind: KindTaskStatus}, Status: TaskWorking})
	return s, nil
}

// Env is what the sub-agent runs with: the parent's env with the sub-task's
// id, one level deeper, its events stamped with the sub-task's id and the
// parent's, and the parent's model counted against the parent's budget
// (each call streams the sub-task's content and thoughts).
func (s *Subtask) Env() *ToolEnv { e := s.env; return &e }

// Emit sends an event of the sub-task: one that names no task gets the
// sub-task's id and the parent's as parentTaskId.
func (s *Subtask) Emit(e Event) {
	h := e.Head()
	if h.ContextID == "" {
		h.ContextID = s.ContextID
	}
	if h.TaskID == "" {
		h.TaskID = s.ID
	}
	if h.TaskID == s.ID && h.ParentTaskID == "" {
		h.ParentTaskID = s.ParentTaskID
	}
	if h.Timestamp.IsZero() {
		h.Timestamp = time.Now().UTC()
	}
	s.parent(e)
}

// Note records md in the sub-task's metadata, durably when the turn has a
// sub-task store (the write returns when it is stored): what a run must
// find again after a restart to resume instead of starting over (a remote
// agent's task id). Without a store it is kept in memory only.
func (s *Subtask) Note(ctx context.Context, md map[string]any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return fmt.Errorf("note on sub-task %q: %w: it has finished", s.ID, ErrInvalid)
	}
	merged := make(map[string]any, len(s.rec.Metadata)+len(md))
	for k, v := range s.rec.Metadata {
		merged[k] = v
	}
	for k, v := range md {
		merged[k] = v
	}
	rec := s.rec
	rec.Metadata, rec.UpdatedAt = merged, time.Now().UTC()
	if tr := s.tr; tr != nil && tr.l.subtasks != nil {
		if err := tr.l.subtasks.SaveTask(context.WithoutCancel(ctx), rec); err != nil {
			return fmt.Errorf("record sub-task %q: %w", s.ID, err)
		}
		rec.Version++
	}
	s.rec = rec
	return nil
}

// Usage is what the sub-task used so far.
func (s *Subtask) Usage() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usage
}

// AddUsage counts usage the sub-agent reports (a remote agent's) into the
// sub-task and the parent's turn, and asks the parent's budget whether the
// sub-agent may go on: an error means it may not.
func (s *Subtask) AddUsage(ctx context.Context, u Usage) error {
	s.mu.Lock()
	s.usage = s.usage.Add(u)
	s.mu.Unlock()
	if s.tr == nil {
		return nil
	}
	return s.tr.chargeSubtask(ctx, u, "", 0)
}

// Finish ends the sub-task: its final status and task-complete (with its
// usage), its record, and the parent's status back to working when none
// of its sub-tasks runs any more. err is the failure's reason (nil for a
// completed task). Finishing twice does nothing.
func (s *Subtask) Finish(ctx context.Context, status TaskStatus, content string, err error) {
	if Suspended(ctx) {
		// The host hands the parent's turn on (StopError.Suspend): the
		// sub-task is left as a crash leaves it, for the resumed call to
		// run again or report interrupted; a final record written now
		// would have its end cut from its stream.
		return
	}
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return
	}
	s.done = true
	usage := s.usage
	s.mu.Unlock()
	reason := ReasonStop
	switch status {
	case TaskFailed:
		reason = ReasonError
		if errors.Is(err, ErrBudget) {
			reason = ReasonBudget
		}
	case TaskCanceled:
		reason = ReasonCanceled
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if tr := s.tr; tr != nil && tr.l.subtasks != nil {
		now := time.Now().UTC()
		rec := s.rec
		rec.Status, rec.Reason, rec.Content, rec.Message, rec.Usage = status, reason, content, msg, usage
		rec.TurnInput, rec.UpdatedAt = 0, now
		if content != "" {
			rec.History = append(rec.History, Message{Role: RoleAssistant, Content: content})
		}
		s.mu.Lock()
		rec.Iterations = s.calls
		s.mu.Unlock()
		if ttl := tr.l.subtaskTTL; ttl > 0 && status.Terminal() {
			rec.ExpiresAt = now.Add(ttl)
		}
		if serr := tr.l.subtasks.SaveTask(context.WithoutCancel(ctx), rec); serr != nil {
			tr.l.log.LogAttrs(ctx, slog.LevelError, "sub-task not recorded", slog.String("task_id", s.ID),
				slog.String("error", serr.Error()))
		}
	}
	md := map[string]any{"reason": reason}
	s.Emit(&TaskStatusEvent{Header: Header{Kind: KindTaskStatus}, Status: status, Message: msg, Metadata: md})
	s.Emit(&TaskComplete{Header: Header{Kind: KindTaskComplete}, Status: status, Content: content, Reason: reason,
		Usage: usage, Metadata: map[string]any{"reason": reason}})
	s.leave(status)
}

// turnModel is the turn's model as its tools get it (ToolEnv.Model): a
// call a tool makes (a tool plugin granted model_call) is a model call of
// the turn, reserved with the budget's check before it runs under a name
// of its own (TurnUsage.Call), refused past a limit, settled with what it
// used and counted into the turn's usage. A sub-agent's sub-task does the
// same with the turn's model itself (its calls stream its events).
type turnModel struct {
	tr    *turn
	calls atomic.Int64
}

func (m *turnModel) Generate(ctx context.Context, req *ModelRequest, onDelta func(Delta)) (*ModelResponse, error) {
	tr := m.tr
	call := ""
	if tr.l.budget != nil {
		call = "tool#" + strconv.FormatInt(m.calls.Add(1), 10)
		if err := tr.chargeSubtask(ctx, Usage{}, call, tr.tokenEstimate(req)); err != nil {
			return nil, &ModelError{Code: "budget", Message: err.Error(), Err: fmt.Errorf("%w: %w", ErrBudget, err)}
		}
	}
	resp, err := safeGenerate(ctx, tr.model, req, onDelta)
	if err == nil && resp == nil {
		err = &ModelError{Code: "empty_response", Message: "the model returned no response"}
	}
	var used Usage
	if err == nil {
		used = resp.Usage
	}
	_ = tr.chargeSubtask(context.WithoutCancel(ctx), used, call, 0)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// ErrBudget marks a sub-agent's model call refused by its parent's budget.
var ErrBudget = errors.New("budget exhausted")

// subtaskModel is the parent's model as a sub-agent sees it: every call is
// first cleared with the parent's budget, streams the sub-task's content
// and thoughts, and counts its usage into the sub-task and the parent.
type subtaskModel struct {
	s     *Subtask
	inner Model
}

func (m *subtaskModel) Generate(ctx context.Context, req *ModelRequest, onDelta func(Delta)) (*ModelResponse, error) {
	s := m.s
	// A sub-agent run by a sub-agent of the same turn calls through its
	// parent's model: the call is held and counted there, once.
	tr := s.tr
	if in, ok := m.inner.(*subtaskModel); ok && in.s.tr == tr {
		tr = nil
	}
	call := ""
	if tr != nil && tr.l.budget != nil {
		// The call's tokens are reserved with the check, under its own
		// name (sub-agents call at once), and settled when it ends: what
		// it used, or nothing when it failed.
		s.mu.Lock()
		s.held++
		call = s.ID + "#" + strconv.Itoa(s.held)
		s.mu.Unlock()
		if err := tr.chargeSubtask(ctx, Usage{}, call, tr.tokenEstimate(req)); err != nil {
			return nil, &ModelError{Code: "budget", Message: err.Error(), Err: fmt.Errorf("%w: %w", ErrBudget, err)}
		}
	}
	s.mu.Lock()
	s.calls++
	iter := s.calls
	s.mu.Unlock()
	deltas := 0
	// The sub-task's responses are named by their call: unique within it.
	response := strconv.Itoa(iter)
	wrapped := func(d Delta) {
		if d.Content != "" {
			s.Emit(&ContentDelta{Header: Header{Kind: KindContentDelta}, Delta: d.Content, Index: deltas, Iteration: iter,
				Response: response})
			deltas++
		}
		if d.Thought != "" {
			s.mu.Lock()
			n := s.thoughts
			s.thoughts++
			s.mu.Unlock()
			s.Emit(&ThoughtStream{Header: Header{Kind: KindThoughtStream}, ThoughtID: fmt.Sprintf("%s-t%d", s.ID, iter),
				ThoughtType: "reasoning", Verbosity: "normal", Content: d.Thought, Index: n})
		}
		if onDelta != nil {
			onDelta(d)
		}
	}
	resp, err := safeGenerate(ctx, m.inner, req, wrapped)
	if err == nil && resp == nil {
		err = &ModelError{Code: "empty_response", Message: "the model returned no response"}
	}
	if err != nil {
		if call != "" {
			_ = tr.chargeSubtask(context.WithoutCancel(ctx), Usage{}, call, 0)
		}
		return nil, err
	}
	// The answer is the sub-agent's: the budget refuses its next call.
	s.mu.Lock()
	s.usage = s.usage.Add(resp.Usage)
	s.mu.Unlock()
	if tr != nil {
		_ = tr.chargeSubtask(context.WithoutCancel(ctx), resp.Usage, call, 0)
	}
	if resp.Message.Content != "" {
		s.Emit(&ContentComplete{Header: Header{Kind: KindContentComplete}, Content: resp.Message.Content, Iteration: iter,
			Response: response, Deltas: deltas})
	}
	return resp, nil
}

// chargeSubtask counts a sub-agent's usage into the turn and asks the
// budget, with everything the turn used so far, whether it may go on.
// Sub-agents' reports are serialized, so the budget sees usage grow.
// A report naming call settles that model call's reservation (u is what
// it used); with pendingTokens it reserves them for the call about to be
// made (TurnUsage.Call, PendingTokens).
func (tr *turn) chargeSubtask(ctx context.Context, u Usage, call string, pendingTokens int) error {
	tr.subMu.Lock()
	defer tr.subMu.Unlock()
	tr.subUsage = tr.subUsage.Add(u)
	b := tr.l.budget
	if b == nil {
		return nil
	}
	used := TurnUsage{Usage: tr.subUsage, ToolCalls: tr.reservedCallsLocked(), Call: call, PendingTokens: pendingTokens}
	if tr.out != nil {
		used.Usage = tr.out.Usage.Add(tr.subUsage)
		used.Iterations = tr.out.Iterations
	}
	if err := b(ctx, tr.t, used); err != nil {
		return fmt.Errorf("the parent task's budget: %w", err)
	}
	return nil
}

// takeSubUsage returns what the turn's sub-agents used since the last
// call, to fold into the turn's usage.
func (tr *turn) takeSubUsage() Usage {
	tr.subMu.Lock()
	defer tr.subMu.Unlock()
	u := tr.subUsage
	tr.subUsage = Usage{}
	return u
}

// EndPassedUp ends what still waits behind the requests that the task
// rec passed up from its sub-agents (InputRequest.Route) and that nobody
// answered, as rec itself ends without answering them (status canceled
// when it was canceled, failed when a request expired with the outcome
// "fail"; why says how): each sub-task's record ends with status, and a
// remote sub-agent's task is canceled (RemoteTaskCanceler). It returns the
// sub-tasks' final events (task-status and task-complete, parentTaskId
// rec's) for the caller to publish, and what could not be done.
func (l *Loop) EndPassedUp(ctx context.Context, rec TaskRecord, status TaskStatus, why string) ([]Event, error) {
	var evs []Event
	var errs []error
	seen := map[string]bool{}
	for _, r := range rec.OpenRequests() {
		if r.Route == nil || r.Route.SubtaskID == "" || seen[r.Route.SubtaskID] {
			continue
		}
		seen[r.Route.SubtaskID] = true
		e, err := l.endRoute(ctx, rec.ID, r.Route, status, why)
		evs = append(evs, e...)
		errs = append(errs, err)
	}
	return evs, errors.Join(errs...)
}

// endRoute ends what waits behind the route rt of a request the task
// parentID passed up, level by level (a sub-agent that relayed a request
// of its own sub-agent: Route.Inner): each sub-task's record ends with
// status, a remote sub-agent's task is canceled.
func (l *Loop) endRoute(ctx context.Context, parentID string, rt *InputRoute, status TaskStatus, why string) ([]Event, error) {
	var evs []Event
	var errs []error
	for ; rt != nil && rt.SubtaskID != ""; parentID, rt = rt.SubtaskID, rt.Inner {
		if rt.RemoteTaskID != "" {
			errs = append(errs, l.cancelRemote(ctx, rt))
		}
		if l.subtasks == nil {
			continue
		}
		e, err := endSubtaskRecord(ctx, l, rt.SubtaskID, parentID, status, why)
		if err != nil {
			errs = append(errs, err)
		}
		evs = append(evs, e...)
	}
	return evs, errors.Join(errs...)
}

// RemoteTaskKey is the metadata key of a remote sub-agent's sub-task that
// names its remote task (recorded once the remote agent took the message).
const RemoteTaskKey = "remoteTaskId"

// cancelRemote cancels the remote task rt names (rt.RemoteTaskID of the
// sub-agent rt.AgentID, for the sub-task rt.SubtaskID) through the
// toolset that runs that agent (RemoteTaskCanceler).
func (l *Loop) cancelRemote(ctx context.Context, rt *InputRoute) error {
	for _, ts := range l.toolsets {
		c, ok := ts.(RemoteTaskCanceler)
		if !ok {
			continue
		}
		h, err := c.CancelRemoteTask(ctx, rt.AgentID, rt.RemoteTaskID)
		if err != nil {
			return fmt.Errorf("cancel the remote task %q of sub-task %q: %w", rt.RemoteTaskID, rt.SubtaskID, err)
		}
		if h {
			return nil
		}
	}
	return fmt.Errorf("sub-task %q: no remote agent %q to cancel its task %q", rt.SubtaskID, rt.AgentID, rt.RemoteTaskID)
}

// endNotTaken ends what still waits below rt, the route of a request the
// turn's call relayed from its sub-agent, once the sub-agent ran again
// with the answer and went on without the call the request was about:
// level by level, a sub-task whose record still waits for the route's
// request is ended canceled (and its remote task canceled); a level taken
// up again since (its record no longer waits for that request) is left,
// with what is below it.
func (tr *turn) endNotTaken(ctx context.Context, rt *InputRoute) {
	ts := tr.l.subtasks
	if ts == nil || rt == nil {
		return
	}
	wctx := context.WithoutCancel(ctx)
	const why = "the sub-agent went on without the call this request was about"
	parentID := rt.SubtaskID
	for in := rt.Inner; in != nil && in.SubtaskID != ""; parentID, in = in.SubtaskID, in.Inner {
		rec, err := ts.LoadTask(wctx, in.SubtaskID)
		if err != nil || !rec.Status.Interrupted() || rec.ParentTaskID != parentID {
			return
		}
		waits := false
		for _, r := range rec.OpenRequests() {
			waits = waits || r.InputID == in.InputID
		}
		if !waits {
			return
		}
		one := *in
		one.Inner = nil
		evs, err := tr.l.endRoute(wctx, parentID, &one, TaskCanceled, why)
		for _, e := range evs {
			tr.emit(e)
		}
		if err != nil {
			tr.l.log.LogAttrs(ctx, slog.LevelWarn, "a relayed request's sub-agents not all ended", slog.String("task_id", tr.t.TaskID),
				slog.String("error", err.Error()))
		}
	}
}

// SubtaskAttemptKey is the metadata key of a sub-task that records its
// Attempt (a decimal string), once above 0.
const SubtaskAttemptKey = "callAttempt"

// attemptOf is the Attempt rec records.
func attemptOf(rec TaskRecord) int {
	s, _ := rec.Metadata[SubtaskAttemptKey].(string)
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// withMeta returns a copy of md with k set to v.
func withMeta(md map[string]any, k string, v any) map[string]any {
	out := make(map[string]any, len(md)+1)
	for key, val := range md {
		out[key] = val
	}
	out[k] = v
	return out
}

// endAbandoned ends what waits below old, the record of a sub-task paused
// on a request whose call runs again without its answer: its remote task
// is canceled, and every level below its open requests ends canceled
// (with their remote tasks). The record itself is left to the call, which
// starts it over.
func (tr *turn) endAbandoned(ctx context.Context, old TaskRecord) {
	const why = "the sub-agent made another call in place of the one this request was about"
	var errs []error
	if id, _ := old.Metadata[RemoteTaskKey].(string); id != "" {
		errs = append(errs, tr.l.cancelRemote(ctx, &InputRoute{SubtaskID: old.ID, AgentID: old.AgentID, RemoteTaskID: id}))
	}
	for _, r := range old.OpenRequests() {
		if r.Route == nil {
			continue
		}
		evs, err := tr.l.endRoute(ctx, old.ID, r.Route, TaskCanceled, why)
		for _, e := range evs {
			tr.emit(e)
		}
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		tr.l.log.LogAttrs(ctx, slog.LevelWarn, "an abandoned request's sub-agents not all ended", slog.String("task_id", old.ID),
			slog.String("error", err.Error()))
	}
}

// endRelayed ends what waits behind req, a request one of the turn's calls
// passed up that goes no further (canceled, with why), and sends the
// sub-tasks' final events.
func (tr *turn) endRelayed(ctx context.Context, req InputRequest, why string) {
	evs, err := tr.l.endRoute(context.WithoutCancel(ctx), tr.t.TaskID, req.Route, TaskCanceled, why)
	for _, e := range evs {
		tr.emit(e)
	}
	if err != nil {
		tr.l.log.LogAttrs(ctx, slog.LevelWarn, "a passed-up request's sub-agents not all ended", slog.String("task_id", tr.t.TaskID),
			slog.String("error", err.Error()))
	}
}

// PassedUpWatch returns how the remote task behind r, a request a paused
// task passed up from a remote sub-agent (Route.Remote: directly, or
// relayed by local sub-agents), is watched (RemoteTaskWatcher): how often
// it is read, and one read, true once it no longer waits for r. ok is
// false when r names no remote task or no toolset watches its agent.
func (l *Loop) PassedUpWatch(r InputRequest) (every time.Duration, read func(ctx context.Context) (movedOn bool, err error), ok bool) {
	rt := r.Route.Remote()
	if rt == nil {
		return 0, nil, false
	}
	for _, ts := range l.toolsets {
		w, is := ts.(RemoteTaskWatcher)
		if !is {
			continue
		}
		if every, h := w.RemoteWatchEvery(rt.AgentID); h {
			agent, task, input := rt.AgentID, rt.RemoteTaskID, rt.InputID
			return every, func(ctx context.Context) (bool, error) { return w.RemoteTaskMovedOn(ctx, agent, task, input) }, true
		}
	}
	return 0, nil, false
}

// endSubtaskRecord ends the stored sub-task id of parentID, unless it has
// ended already, with status (failed or canceled) and why, and returns its
// final events.
func endSubtaskRecord(ctx context.Context, l *Loop, id, parentID string, status TaskStatus, why string) ([]Event, error) {
	ts := l.subtasks
	wctx := context.WithoutCancel(ctx)
	rec, err := ts.LoadTask(wctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load sub-task %q: %w", id, err)
	}
	if rec.Status.Terminal() || rec.ParentTaskID != parentID {
		return nil, nil
	}
	reason := ReasonError
	if status == TaskCanceled {
		reason = ReasonCanceled
	}
	now := time.Now().UTC()
	rec.Status, rec.Reason, rec.Message, rec.TurnInput, rec.UpdatedAt = status, reason, why, 0, now
	if ttl := l.subtaskTTL; ttl > 0 {
		rec.ExpiresAt = now.Add(ttl)
	}
	if err := ts.SaveTask(wctx, rec); err != nil {
		return nil, fmt.Errorf("record sub-task %q: %w", id, err)
	}
	h := func(k EventKind) Header {
		return Header{Kind: k, ContextID: rec.ContextID, TaskID: rec.ID, ParentTaskID: rec.ParentTaskID, Timestamp: now}
	}
	return []Event{
		&TaskStatusEvent{Header: h(KindTaskStatus), Status: status, Message: why, Metadata: map[string]any{"reason": reason}},
		&TaskComplete{Header: h(KindTaskComplete), Status: status, Reason: reason, Usage: rec.Usage,
			Metadata: map[string]any{"reason": reason}},
	}, nil
}

// endCutSubtask ends the sub-task a call cut off by a crash had started,
// when the resumed turn reports the call interrupted: its record failed
// with why, and its final events.
func (tr *turn) endCutSubtask(ctx context.Context, call ToolCall, why string) {
	ts := tr.l.subtasks
	if ts == nil {
		return
	}
	wctx := context.WithoutCancel(ctx)
	rec, err := ts.LoadTask(wctx, SubtaskID(tr.t.TaskID, call.ID))
	if err != nil || rec.Status.Terminal() || rec.ParentTaskID != tr.t.TaskID {
		return
	}
	now := time.Now().UTC()
	rec.Status, rec.Reason, rec.Message, rec.TurnInput, rec.UpdatedAt = TaskFailed, ReasonError, why, 0, now
	if ttl := tr.l.subtaskTTL; ttl > 0 {
		rec.ExpiresAt = now.Add(ttl)
	}
	if err := ts.SaveTask(wctx, rec); err != nil {
		tr.l.log.LogAttrs(ctx, slog.LevelError, "sub-task not recorded", slog.String("task_id", rec.ID),
			slog.String("error", err.Error()))
		return
	}
	h := func(k EventKind) Header {
		return Header{Kind: k, ContextID: rec.ContextID, TaskID: rec.ID, ParentTaskID: rec.ParentTaskID, Timestamp: now}
	}
	md := map[string]any{"reason": ReasonError}
	tr.emit(&TaskStatusEvent{Header: h(KindTaskStatus), Status: TaskFailed, Message: why, Metadata: md})
	tr.emit(&TaskComplete{Header: h(KindTaskComplete), Status: TaskFailed, Reason: ReasonError, Usage: rec.Usage,
		Metadata: map[string]any{"reason": ReasonError}})
}

// EndOrphans ends the unfinished sub-tasks of rec, a task that has ended
// (its final record is written): a sub-task never runs without its
// parent's turn, so one left working or waiting for input under a final
// parent is an orphan that nothing would end (an answer that resumed it
// while a cancel ended the parent, a crash between the two). Each one
// found, and what is below it, ends with status and why; a remote
// sub-agent's task behind one of its requests is canceled. Found are
// those rec's turns started (rec.Subtasks, which names nested ones too:
// a sub-agent's own sub-tasks belong to the same turn), those behind its
// open requests' routes, and, when rec ever had a sub-task, every
// unfinished task of its conversation whose id derives from rec's
// (SubtaskID): a nested sub-task whose parent's record lost it (a
// sub-agent run again with an answer starts its record over, without the
// request and the route that named the level below) is found all the
// same. It returns the sub-tasks' final events for the caller to publish.
func (l *Loop) EndOrphans(ctx context.Context, rec TaskRecord, status TaskStatus, why string) ([]Event, error) {
	if l.subtasks == nil || !rec.Status.Terminal() {
		return nil, nil
	}
	scan := len(rec.Subtasks) > 0
	for _, r := range rec.OpenRequests() {
		scan = scan || r.Route != nil
	}
	return l.endOrphans(context.WithoutCancel(ctx), rec, status, why, 0, scan)
}

// UnfinishedStatuses are the statuses of a task that has not ended.
var UnfinishedStatuses = []TaskStatus{TaskSubmitted, TaskWorking, TaskWaitingInput, TaskWaitingAuth, TaskWaitingSubtask}

// descends reports whether sub is a sub-task of the task id, directly or
// below one of its sub-tasks: its id and its parent's derive from id's.
func descends(sub TaskRecord, id string) bool {
	if sub.ParentTaskID == id {
		return true
	}
	p := id + "."
	return strings.HasPrefix(sub.ID, p) && strings.HasPrefix(sub.ParentTaskID, p)
}

// endOrphans ends the unfinished sub-tasks of rec; scan: the unfinished
// tasks of its conversation are read for those whose id derives from
// rec's (once, at the top: it finds every level below).
func (l *Loop) endOrphans(ctx context.Context, rec TaskRecord, status TaskStatus, why string, depth int, scan bool) ([]Event, error) {
	if depth > 64 {
		return nil, fmt.Errorf("sub-tasks of %q: nested too deep", rec.ID)
	}
	var evs []Event
	var errs []error
	ids := append([]string(nil), rec.Subtasks...)
	for _, r := range rec.OpenRequests() {
		if r.Route != nil && r.Route.SubtaskID != "" {
			ids = append(ids, r.Route.SubtaskID)
		}
	}
	if scan && rec.ContextID != "" {
		open, err := l.subtasks.ListTasks(ctx, TaskFilter{ContextID: rec.ContextID, Statuses: UnfinishedStatuses})
		if err != nil {
			errs = append(errs, fmt.Errorf("sub-tasks of %q: %w", rec.ID, err))
		}
		for _, t := range open {
			if t.ID != rec.ID && descends(t, rec.ID) {
				ids = append(ids, t.ID)
			}
		}
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] || id == rec.ID {
			continue
		}
		seen[id] = true
		sub, err := l.subtasks.LoadTask(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("load sub-task %q: %w", id, err))
			continue
		}
		if sub.Status.Terminal() || !descends(sub, rec.ID) {
			continue
		}
		e, err := l.endSubtree(ctx, sub, status, why, depth, false)
		evs, errs = append(evs, e...), append(errs, err)
	}
	return evs, errors.Join(errs...)
}

// EndSubtask ends sub, an unfinished sub-task whose parent has ended (an
// orphan, see EndOrphans), with what waits below it, and returns the final
// events for the caller to publish.
func (l *Loop) EndSubtask(ctx context.Context, sub TaskRecord, status TaskStatus, why string) ([]Event, error) {
	if l.subtasks == nil || sub.ParentTaskID == "" || sub.Status.Terminal() {
		return nil, nil
	}
	return l.endSubtree(context.WithoutCancel(ctx), sub, status, why, 0, true)
}

// endSubtree ends the sub-task sub: what waits behind its own requests
// first (a remote task is canceled through the recorded route), then its
// own sub-tasks (scan: found in its conversation too, see endOrphans),
// then itself.
func (l *Loop) endSubtree(ctx context.Context, sub TaskRecord, status TaskStatus, why string, depth int, scan bool) ([]Event, error) {
	var errs []error
	evs, err := l.EndPassedUp(ctx, sub, status, why)
	errs = append(errs, err)
	if id, _ := sub.Metadata[RemoteTaskKey].(string); id != "" {
		// A remote sub-agent's call: its remote task, which no route
		// names any more (its parent's record started over), is
		// canceled through the sub-task's own record.
		errs = append(errs, l.cancelRemote(ctx, &InputRoute{SubtaskID: sub.ID, AgentID: sub.AgentID, RemoteTaskID: id}))
	}
	done := sub
	done.Status = status
	e, err := l.endOrphans(ctx, done, status, why, depth+1, scan)
	evs, errs = append(evs, e...), append(errs, err)
	e, err = endSubtaskRecord(ctx, l, sub.ID, sub.ParentTaskID, status, why)
	evs, errs = append(evs, e...), append(errs, err)
	return evs, errors.Join(errs...)
}
