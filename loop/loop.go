package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of Config.
const (
	DefaultMaxIterations   = 10
	DefaultToolConcurrency = 5
	DefaultToolTimeout     = 30 * time.Second
	DefaultRetryAttempts   = 3
	DefaultRetryBaseDelay  = 250 * time.Millisecond
	DefaultRetryMaxDelay   = 8 * time.Second
	// DefaultMaxRetryAfter bounds the wait a model's Retry-After may ask.
	DefaultMaxRetryAfter = time.Minute
	// MaxSubAgentDepth bounds sub-agent nesting.
	MaxSubAgentDepth = 8
	// DefaultReserveTokens is Config.ReserveTokens' default.
	DefaultReserveTokens = 4096
)

// RetryPolicy says how transient model errors are retried: up to Attempts
// calls in all, waiting BaseDelay·2ⁿ (capped at MaxDelay) with jitter between
// them, or longer when the model's error asks for a longer wait
// (ModelError.RetryAfter) up to MaxRetryAfter; an error asking for more is
// not retried. A call that failed after it had streamed text is never
// retried: the client has seen that text, and a second attempt would show
// it a different answer after it. Zero fields take the defaults; Attempts 1
// disables retries.
type RetryPolicy struct {
	Attempts      int
	BaseDelay     time.Duration
	MaxDelay      time.Duration
	MaxRetryAfter time.Duration
}

// ModelParams are the parameters of every model call of a Loop: the model
// name (as ModelRequest.Metadata["model"]), temperature and max tokens.
// Zero fields leave the model plugin's own settings.
type ModelParams struct {
	Model       string
	Temperature *float64
	MaxTokens   int
}

// Config configures a Loop. Zero fields take their defaults.
type Config struct {
	Model           Model
	Params          ModelParams
	Toolsets        []Toolset
	SystemPrompt    string // injected at call time, never stored in history
	MaxIterations   int
	ToolConcurrency int
	ToolTimeout     time.Duration // bounds a tool call (default 30s), except a SelfTimed toolset's
	Retry           RetryPolicy
	Tracer          trace.Tracer // nil: no spans
	Logger          *slog.Logger // nil: discard
	// Checkpoints and Journal make turns durable: with them a turn saves
	// its state after each model response and each round of tool results,
	// and records every tool call before it starts and when it ends, so that
	// a turn interrupted by a crash resumes without running a finished call
	// again. Nil: turns are not durable.
	Checkpoints CheckpointStore
	Journal     Journal
	// Meter, when set, records the loop's metrics: turns, iterations,
	// tool calls and their durations, model calls, their latency and
	// tokens. Nil: no metrics, at no cost.
	Meter metric.Meter
	// Budget, when set, is asked before each model call and after each
	// model response whether the turn may go on, with what it has used so
	// far; an error ends the turn as failed with reason "budget" and the
	// error as its message. It is called once more when the turn has ended
	// (TurnUsage.Final), to account for the whole turn. It must be safe for
	// concurrent use by many turns.
	Budget func(ctx context.Context, t *Turn, used TurnUsage) error
	// ReserveTokens is the answer's size a model call is reckoned to use
	// at most when its request sets no max tokens, for the budget's
	// reservation before the call (TurnUsage.PendingTokens; default
	// DefaultReserveTokens).
	ReserveTokens int
	// Approval, when set, is asked before each tool call whether the call
	// needs an approval: such a call does not run; the turn ends waiting
	// for input with the request (Outcome.Requests), and the task's next
	// turn runs it only if the answer approves it (Turn.Continue).
	Approval ApprovalGate
	// CheckArguments, when set, checks a client tool call's arguments
	// against the tool's parameters schema: a call that fails is answered
	// to the model as an error at once, without a pause.
	CheckArguments func(schema, args json.RawMessage) error
	// Subtasks, when set, keeps a record of each sub-agent's task
	// (ToolEnv.StartSubtask), owned by the parent task's owner; finished
	// ones expire after SubtaskTTL (0: never).
	Subtasks   TaskStore
	SubtaskTTL time.Duration
	// ThoughtLevel is the most detailed level of thought-stream events the
	// loop sends (its own and the model's): brief, normal, detailed
	// (default) or none. Readers choose how much of it they see.
	ThoughtLevel string
	// DebugThoughts sends internal:thought-process events (the loop's
	// state at each decision point) for the operator's debugging.
	DebugThoughts bool
	// Credentials, when set, are the credentials clients supply for their
	// tasks; tool calls find them through ToolEnv.Credentials. A tool
	// that lacks one returns an AuthRequiredError: the turn pauses in
	// waiting-auth and the call runs again once it is supplied.
	Credentials *Credentials
}

// Loop runs single turns: call the model, run the tools it asks for in
// parallel, repeat until the model stops or the iteration limit is reached.
// A Loop holds no per-turn state and is safe for concurrent use.
type Loop struct {
	model         Model
	params        ModelParams
	toolsets      []Toolset
	systemPrompt  string
	maxIter       int
	concurrency   int
	toolTimeout   time.Duration
	retry         RetryPolicy
	tracer        trace.Tracer
	log           *slog.Logger
	checkpoints   CheckpointStore
	journal       Journal
	metrics       *loopMetrics
	budget        func(context.Context, *Turn, TurnUsage) error
	reserveTokens int
	approval      ApprovalGate
	checkArgs     func(schema, args json.RawMessage) error
	subtasks      TaskStore
	subtaskTTL    time.Duration
	credentials   *Credentials
	// thoughtRank is VerbosityRank of Config.ThoughtLevel.
	thoughtRank   int
	debugThoughts bool
}

// New returns a Loop for cfg.
func New(cfg Config) (*Loop, error) {
	if cfg.Model == nil {
		return nil, fmt.Errorf("new loop: %w: no model", ErrInvalid)
	}
	level, err := ParseVerbosity(cfg.ThoughtLevel)
	if err != nil {
		return nil, fmt.Errorf("new loop: thought level: %w", err)
	}
	if level == "" {
		level = VerbosityDetailed
	}
	l := &Loop{
		model:        cfg.Model,
		params:       cfg.Params,
		toolsets:     append([]Toolset(nil), cfg.Toolsets...),
		systemPrompt: cfg.SystemPrompt,
		maxIter:      orDefault(cfg.MaxIterations, DefaultMaxIterations),
		concurrency:  orDefault(cfg.ToolConcurrency, DefaultToolConcurrency),
		toolTimeout:  orDefault(cfg.ToolTimeout, DefaultToolTimeout),
		retry: RetryPolicy{
			Attempts:      orDefault(cfg.Retry.Attempts, DefaultRetryAttempts),
			BaseDelay:     orDefault(cfg.Retry.BaseDelay, DefaultRetryBaseDelay),
			MaxDelay:      orDefault(cfg.Retry.MaxDelay, DefaultRetryMaxDelay),
			MaxRetryAfter: orDefault(cfg.Retry.MaxRetryAfter, DefaultMaxRetryAfter),
		},
		tracer:        cfg.Tracer,
		log:           cfg.Logger,
		checkpoints:   cfg.Checkpoints,
		journal:       cfg.Journal,
		budget:        cfg.Budget,
		reserveTokens: orDefault(cfg.ReserveTokens, DefaultReserveTokens),
		approval:      cfg.Approval,
		checkArgs:     cfg.CheckArguments,
		subtasks:      cfg.Subtasks,
		subtaskTTL:    cfg.SubtaskTTL,
		credentials:   cfg.Credentials,

		thoughtRank:   VerbosityRank(level),
		debugThoughts: cfg.DebugThoughts,
	}
	if cfg.Meter != nil {
		lm, err := newLoopMetrics(cfg.Meter)
		if err != nil {
			return nil, fmt.Errorf("new loop: %w", err)
		}
		l.metrics = lm
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	return l, nil
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Turn is the input of one turn.
type Turn struct {
	ContextID    string
	TaskID       string
	AgentID      string
	ParentTaskID string
	// Owner is the principal the task belongs to; its sub-tasks are
	// recorded as theirs.
	Owner string
	// Messages is the history followed by this turn's input: a user message,
	// or tool messages answering the client tool calls of the previous turn.
	Messages []Message
	// ClientTools are tools the client runs; a call to one ends the turn as
	// waiting-input with the call in Outcome.PendingCalls.
	ClientTools []ToolDefinition
	Auth        *AuthContext
	Sink        EventSink // nil: events are discarded
	Depth       int       // sub-agent nesting, 0 at the top
	Metadata    map[string]any
	// OnFinish, when set, runs after the turn's work and before the events
	// that announce its end, so that what they announce is already durable.
	// An error from it fails the turn.
	OnFinish func(ctx context.Context, o *Outcome) error
	// Stored, when set, is waited for once before the turn does anything
	// that lasts: its first model call runs and its events go to Sink, but
	// no checkpoint, tool call, journal entry or OnFinish comes before
	// Stored has returned (for a resumed or continued turn, it is waited for
	// first). The caller stores the task meanwhile, so that the model is
	// already called while that write syncs. An error ends the turn with
	// that error and without OnFinish: nothing of it is written.
	Stored func(ctx context.Context) error
	// Queued, when set with Stored, stands for Stored before OnFinish in a
	// turn that ran no tool: it returns once the task's write is queued
	// ahead of every write the turn makes after it, and the lease that
	// fences the turn's commit names that write (loop.LeasedTaskSubmitter):
	// the commit is stored only if the task is, and durable only once the
	// task is. So a turn whose model answered before the task's write was
	// out commits its end right behind it, without waiting for it first.
	// Its events still wait for Stored in the caller's sink. An error ends
	// the turn as Stored's does.
	Queued func(ctx context.Context) error
	// Resume continues a turn from its checkpoint instead of starting it:
	// Messages must then be the same history and input the turn started
	// with. The turn's events continue; task-created is not sent again.
	Resume *Checkpoint
	// Continue are the calls a paused task's answers settle before the
	// turn calls the model (approved calls run, rejected ones and client
	// tool results become their results), with Answers by call id.
	Continue []ToolCall
	Answers  map[string]InputAnswer
	// Routes are, by call id, the answered requests those calls passed up
	// from their sub-agents (InputRequest.Route): such a call runs again
	// with its answer (ToolEnv.Routed) whatever the answer says.
	Routes map[string]InputRequest
	// ClientResultSchemas are the result schemas of client tools, by name,
	// for the requests a call to one raises.
	ClientResultSchemas map[string]json.RawMessage
}

// Outcome is the result of a turn.
type Outcome struct {
	Status       TaskStatus // completed, failed, canceled or waiting-input
	Reason       string     // stop, max_iterations, client_tool, error, canceled
	Content      string     // the last assistant text
	Messages     []Message  // what the turn produced (assistant and tool messages), in order
	PendingCalls []ToolCall // calls awaiting a client's result or an approval
	// Requests are what the turn waits for (waiting-input): one per
	// pending call.
	Requests   []InputRequest
	Usage      Usage
	Iterations int
	// Retries counts the model calls made again after a transient error.
	Retries int
	// Finish is the finish reason of the last model response (stop,
	// length, content_filter, tool_calls; empty when none came).
	Finish FinishReason
	// Subtasks are the ids of the sub-tasks the turn started.
	Subtasks []string
	// Saved is the task's record as the turn's end saved it (its Version
	// the stored one): what loading the task returns right after the
	// turn. Nil when the turn saved no task record.
	Saved *TaskRecord
	Err   error

	// end is how the turn's end events go out with its commit (EndSink),
	// while OnFinish runs.
	end *endHook
}

// endHook lets the commit of a turn (OnFinish) publish the events that
// announce its end in the same write, through the turn's EndSink.
type endHook struct {
	tr   *turn
	sink EndSink
	sent bool // the end is out: the loop does not announce it again
}

// commit saves c with tc, with o's end events in the same write when the
// turn's sink can; otherwise with tc alone (the loop announces the end
// after).
func (h *endHook) commit(ctx context.Context, tc TurnCommitter, c TurnCommit, o *Outcome) error {
	if h == nil || h.tr.halted.Load() {
		return tc.CommitTurn(ctx, c)
	}
	tr := h.tr
	end := tr.endEvents(o)
	tr.emitMu.Lock()
	handled, err := h.sink.CommitEnd(ctx, tc, c, end)
	tr.emitMu.Unlock()
	if !handled {
		return tc.CommitTurn(ctx, c)
	}
	h.sent = err == nil
	return err
}

// Reasons a turn ends.
const (
	ReasonStop          = "stop"
	ReasonMaxIterations = "max_iterations"
	ReasonClientTool    = "client_tool"
	// ReasonAuth: the turn ended waiting for a credential a tool lacks.
	ReasonAuth     = "auth_required"
	ReasonError    = "error"
	ReasonCanceled = "canceled"
	// ReasonTimeout: the turn ran past its time limit (a StopError, or a
	// deadline of its context); ReasonShutdown: the host shut down before
	// the turn ended. Both end the turn failed, unless the StopError
	// suspends the turn (StopError.Suspend): then it is left working.
	ReasonTimeout  = "timeout"
	ReasonShutdown = "shutdown"
	// ReasonStorageFull: the store refused a write of the turn for want
	// of space (ErrStorageFull). The turn is suspended (StopError.Suspend)
	// at that write: nothing more of it is written or announced, its task
	// stays working with its last checkpoint, and the host resumes it once
	// the store takes writes again.
	ReasonStorageFull = "storage_full"
	// ReasonLength and ReasonContentFilter: the model stopped before its
	// answer was done (its token limit, its provider's filter); the turn
	// completes with what it wrote.
	ReasonLength        = "length"
	ReasonContentFilter = "content_filter"
)

// StatusMessage is what the status that ends the turn says to the client:
// the error of a failed turn, the question of one waiting for input, and
// why a completed turn stopped short (iteration limit, cut-off answer).
func (o *Outcome) StatusMessage() string {
	switch {
	case o.Err != nil:
		return o.Err.Error()
	case o.Status.Interrupted():
		return o.Content
	case o.Reason == ReasonMaxIterations:
		return fmt.Sprintf("the turn stopped at its limit of %d iterations; its answer may be unfinished", o.Iterations)
	case o.Reason == ReasonLength:
		return "the model's answer was cut off at its token limit (finish reason length)"
	case o.Reason == ReasonContentFilter:
		return "the model's answer was cut off by its content filter (finish reason content_filter)"
	}
	return ""
}

// EndMetadata is how the turn ended, as the metadata of its last status
// and of its task: the reason, the model's last finish reason and the
// number of model calls made again after transient errors.
func EndMetadata(o Outcome) map[string]any {
	m := map[string]any{"reason": o.Reason}
	if o.Finish != "" {
		m["finishReason"] = string(o.Finish)
	}
	if o.Retries > 0 {
		m["retries"] = o.Retries
	}
	return m
}

// turn is the state of one running turn.
type turn struct {
	// reserved is the count of tool calls the budget holds for the round
	// of calls running now (tr.subMu; see budget).
	reserved int
	// suspend stops the turn's context (Run's own) with a cause; halted
	// is set once a refused write suspended the turn.
	suspend  context.CancelCauseFunc
	halted   atomic.Bool
	l        *Loop
	t        *Turn
	model    Model
	toolsets []Toolset
	emitMu   sync.Mutex
	sink     EventSink
	index    map[string]Toolset // tool name → toolset, rebuilt before each model call
	client   map[string]bool
	defs     []ToolDefinition
	env      ToolEnv
	// journaled holds the journal of a resumed turn, by call id.
	journaled map[string]JournalEntry
	// continuing: the turn settles the answered calls of its task (Turn.Continue).
	continuing bool
	// toolCalls counts the tool calls the turn ran.
	toolCalls atomic.Int64
	// retries counts the model calls made again (callModel runs on the
	// turn's goroutine only).
	retries int
	// out is the outcome being built (its usage is read by sub-agents'
	// budget checks while tools run; it changes only between rounds).
	out *Outcome
	// subMu guards what sub-agents report: their usage not yet folded
	// into out, how many run, the sub-tasks started.
	subMu      sync.Mutex
	subUsage   Usage
	activeSubs int
	subtasks   []string
	// thoughts counts the turn's thought-stream events: their index.
	thoughts atomic.Int64
	// storedOnce and storedErr: Turn.Stored, waited for once.
	storedOnce sync.Once
	storedErr  error
	// ranTools: a tool call of the turn was stored (Stored waited for);
	// its end commits only after Stored, not on Queued.
	ranTools bool
	// planned: the turn's strategy thought was sent.
	planned bool
	// started names the turn in its responses' names (ContentDelta.Response);
	// deltas is how many deltas the last model call streamed.
	started string
	deltas  int
}

// lastTurnStamp is the last turnStamp handed out.
var lastTurnStamp atomic.Int64

// turnStamp is the clock in nanoseconds, strictly increasing within the
// process: two turns never share one, even started at the same instant.
func turnStamp() int64 {
	for {
		now, last := time.Now().UnixNano(), lastTurnStamp.Load()
		if now <= last {
			now = last + 1
		}
		if lastTurnStamp.CompareAndSwap(last, now) {
			return now
		}
	}
}

// responseName names the model response of iteration iter: unique within
// the task, since a task's turns start at different times.
func (tr *turn) responseName(iter int) string {
	return tr.started + "-" + strconv.Itoa(iter)
}

// Run executes one turn. It never panics on a misbehaving model or tool and
// always returns an Outcome; cancelling ctx ends the turn as canceled.
func (l *Loop) Run(ctx context.Context, t Turn) (out Outcome) {
	tr := &turn{l: l, t: &t, sink: t.Sink, started: strconv.FormatInt(turnStamp(), 36)}
	if tr.sink == nil {
		tr.sink = SinkFunc(func(Event) {})
	}
	tr.model = l.model
	if p, ok := l.model.(ModelPinner); ok {
		m, release := p.PinModel()
		defer release()
		tr.model = m
	}
	tr.toolsets = make([]Toolset, len(l.toolsets))
	for i, ts := range l.toolsets {
		tr.toolsets[i] = ts
		if p, ok := ts.(ToolsetPinner); ok {
			pinned, release := p.PinToolset()
			defer release()
			tr.toolsets[i] = pinned
		}
	}
	tr.env = ToolEnv{
		ContextID: t.ContextID, TaskID: t.TaskID, AgentID: t.AgentID,
		Auth: t.Auth, Emit: tr.emit, Tools: (*turnTools)(tr), Depth: t.Depth, turn: tr,
		Credentials: l.credentials,
	}
	if tr.model != nil {
		tr.env.Model = &turnModel{tr: tr}
	}

	// The turn's own context: a write the store refuses for want of space
	// suspends the turn from inside (tr.refused). It is not cancelled when
	// Run returns: what the turn started may outlive it, as it outlives
	// the caller's context's other children.
	ctx, tr.suspend = context.WithCancelCause(ctx)

	ctx, span := l.startSpan(ctx, "agent.execute",
		attribute.String("looopy.context_id", t.ContextID),
		attribute.String("looopy.task_id", t.TaskID),
		attribute.String("looopy.agent_id", t.AgentID))
	defer span.End()

	if t.Resume == nil {
		initiator := "user"
		if t.ParentTaskID != "" {
			initiator = "agent"
		}
		tr.emit(&TaskCreated{Header: Header{Kind: KindTaskCreated}, Initiator: initiator, AgentID: t.AgentID, Metadata: t.Metadata})
		tr.emit(&TaskStatusEvent{Header: Header{Kind: KindTaskStatus}, Status: TaskWorking})
	} else {
		tr.emit(&TaskStatusEvent{Header: Header{Kind: KindTaskStatus}, Status: TaskWorking,
			Message: "resumed after a restart of the host", Metadata: map[string]any{
				"resumedAt": string(t.Resume.Stage), "iteration": t.Resume.Iteration}})
	}

	out = tr.run(ctx)
	if Suspended(ctx) {
		// The host hands the turn on (its shutdown): nothing of its end
		// is saved or announced; the task resumes from its checkpoint.
		se := &StopError{}
		_ = errors.As(context.Cause(ctx), &se)
		out.Status, out.Reason, out.Err = TaskWorking, se.Reason, se
		span.RecordError(se)
		return out
	}
	out.Retries = tr.retries
	out.Usage = out.Usage.Add(tr.takeSubUsage())
	tr.subMu.Lock()
	out.Subtasks = append([]string(nil), tr.subtasks...)
	tr.subMu.Unlock()

	// The final report comes before the end is committed: what the turn
	// used is known, and a budget that saves it (the host's usage
	// records) has it written with the commit, not in a sync after it.
	_ = tr.budget(ctx, &out, true, 0, 0)
	if err := tr.queued(ctx); err != nil {
		// The task is not stored: nothing of the turn may be either.
		out.Status, out.Reason, out.Err = TaskFailed, ReasonError, err
	} else if t.OnFinish != nil {
		if es, ok := tr.sink.(EndSink); ok {
			out.end = &endHook{tr: tr, sink: es}
		}
		err := t.OnFinish(context.WithoutCancel(ctx), &out)
		if err != nil {
			if out.end != nil && out.end.sent {
				// Not expected (the end is out with the commit, and
				// OnFinish fails only for the commit): the end stands.
				err = nil
			}
		}
		if err != nil {
			out.Status, out.Reason = TaskFailed, ReasonError
			out.Err = fmt.Errorf("finish turn: %w", err)
			if se := (&StopError{}); tr.refused(err) && Suspended(ctx) && errors.As(context.Cause(ctx), &se) {
				// The turn's end was refused for want of space: nothing of
				// it is stored, and nothing of it is announced.
				out.Status, out.Reason, out.Err = TaskWorking, se.Reason, se
				span.RecordError(se)
				return out
			}
		}
	}
	if out.Err != nil {
		span.RecordError(out.Err)
		span.SetStatus(codes.Error, out.Err.Error())
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("looopy.status", string(out.Status)),
			attribute.String("looopy.reason", out.Reason),
			attribute.Int("looopy.iterations", out.Iterations),
			attribute.Int("looopy.tool_calls", int(tr.toolCalls.Load())),
			attribute.Int("gen_ai.usage.input_tokens", out.Usage.PromptTokens),
			attribute.Int("gen_ai.usage.output_tokens", out.Usage.CompletionTokens),
			attribute.Int("looopy.tokens.total", out.Usage.TotalTokens))
	}
	if l.metrics != nil {
		l.metrics.turn(ctx, &out)
	}
	sent := out.end != nil && out.end.sent
	out.end = nil
	if !sent {
		tr.finish(&out)
	}
	return out
}

// stored waits for Turn.Stored (once; nil when there is none).
func (tr *turn) stored(ctx context.Context) error {
	if tr.t.Stored == nil {
		return nil
	}
	tr.storedOnce.Do(func() { tr.storedErr = tr.t.Stored(context.WithoutCancel(ctx)) })
	return tr.storedErr
}

// queued waits for Turn.Queued before the turn's end is committed, when
// the turn ran no tool and has Queued; otherwise for Turn.Stored.
func (tr *turn) queued(ctx context.Context) error {
	if tr.t.Queued == nil || tr.ranTools {
		return tr.stored(ctx)
	}
	return tr.t.Queued(context.WithoutCancel(ctx))
}

func (tr *turn) finish(out *Outcome) {
	for _, e := range tr.endEvents(out) {
		tr.emit(e)
	}
}

// endEvents are the events that announce the end of the turn as out says
// it: the requests it ends on, its final status and its task-complete,
// stamped as emit stamps them.
func (tr *turn) endEvents(out *Outcome) []Event {
	var end []Event
	st := &TaskStatusEvent{Header: Header{Kind: KindTaskStatus}, Status: out.Status,
		Message: out.StatusMessage(), Metadata: EndMetadata(*out)}
	if len(out.PendingCalls) > 0 {
		st.Metadata["pendingCalls"] = out.PendingCalls
	}
	if len(out.Requests) > 0 {
		if st.Metadata == nil {
			st.Metadata = map[string]any{}
		}
		st.Metadata["requests"] = out.Requests
		if st.Message == "" {
			st.Message = RequestsPrompt(out.Requests)
		}
		for _, r := range out.Requests {
			if r.InputType == InputAuth {
				end = append(end, authRequiredEvent(r))
				continue
			}
			end = append(end, inputRequiredEvent(r))
		}
	}
	end = append(end, st, &TaskComplete{Header: Header{Kind: KindTaskComplete}, Status: out.Status,
		Content: out.Content, Reason: out.Reason, Usage: out.Usage, Metadata: EndMetadata(*out)})
	for _, e := range end {
		tr.stamp(e)
	}
	return end
}

// emit stamps the header and hands the event to the sink, one at a time.
func (tr *turn) emit(e Event) {
	if tr.halted.Load() {
		return // suspended at a refused write: nothing more is announced
	}
	tr.stamp(e)
	tr.emitMu.Lock()
	defer tr.emitMu.Unlock()
	if ts, ok := e.(*ThoughtStream); ok && !tr.stampThought(ts) {
		return
	}
	tr.sink.Emit(e)
}

// stamp fills in the header of an event of the turn: its context, task
// and time.
func (tr *turn) stamp(e Event) {
	h := e.Head()
	if h.ContextID == "" {
		h.ContextID = tr.t.ContextID
	}
	if h.TaskID == "" {
		h.TaskID = tr.t.TaskID
		if h.ParentTaskID == "" {
			h.ParentTaskID = tr.t.ParentTaskID
		}
	}
	if h.Timestamp.IsZero() {
		h.Timestamp = time.Now().UTC()
	}
}

func (tr *turn) run(ctx context.Context) Outcome {
	l := tr.l
	var out Outcome
	tr.out = &out
	// conv is what the model sees: the system prompt, then the history.
	conv := make([]Message, 0, len(tr.t.Messages)+8)
	if l.systemPrompt != "" {
		conv = append(conv, Message{Role: RoleSystem, Content: l.systemPrompt})
	}
	conv = append(conv, tr.t.Messages...)
	if tr.t.Depth > MaxSubAgentDepth {
		out.Status, out.Reason = TaskFailed, ReasonError
		out.Err = fmt.Errorf("%w: sub-agents nested deeper than %d", ErrInvalid, MaxSubAgentDepth)
		return out
	}
	if tr.t.Resume != nil || len(tr.t.Continue) > 0 {
		// Such a turn may run tools before it calls the model.
		tr.ranTools = true
		if err := tr.stored(ctx); err != nil {
			out.Status, out.Reason, out.Err = TaskFailed, ReasonError, err
			return out
		}
	}
	first := 1
	if cp := tr.t.Resume; cp != nil {
		out.Messages = append([]Message(nil), cp.Produced...)
		out.Usage = cp.Usage
		out.Content = lastContent(cp.Produced)
		conv = append(conv, cp.Produced...)
		first = max(cp.Iteration, 1)
		if tr.l.journal != nil {
			entries, err := tr.l.journal.Calls(ctx, tr.t.TaskID)
			if err != nil {
				if ctx.Err() != nil {
					// The turn was canceled (or stopped) while reading:
					// it ends as its context says, never failed by it.
					return canceled(ctx, out)
				}
				out.Status, out.Reason = TaskFailed, ReasonError
				out.Err = fmt.Errorf("resume task %q: read tool-call journal: %w", tr.t.TaskID, err)
				return out
			}
			tr.journaled = make(map[string]JournalEntry, len(entries))
			for _, e := range entries {
				tr.journaled[e.CallID] = e
			}
		}
		if cp.Stage == StageTools && len(cp.Pending) > 0 {
			out.Iterations = first
			tr.env.Iteration = first
			if err := tr.collectTools(ctx); err != nil {
				out.Status, out.Reason, out.Err = TaskFailed, ReasonError, err
				return out
			}
			results, done := tr.toolPhase(ctx, first, cp.Pending, &out)
			if done {
				return out
			}
			conv = append(conv, results...)
			first++
		}
	}
	if len(tr.t.Routes) > 0 && tr.journaled == nil && tr.l.journal != nil {
		// A call that passed a sub-agent's request up runs again: what its
		// sub-agent's calls already did is in the journal, and is not done
		// twice.
		entries, err := tr.l.journal.Calls(ctx, tr.t.TaskID)
		if err != nil {
			if ctx.Err() != nil {
				return canceled(ctx, out)
			}
			out.Status, out.Reason = TaskFailed, ReasonError
			out.Err = fmt.Errorf("continue task %q: read tool-call journal: %w", tr.t.TaskID, err)
			return out
		}
		tr.journaled = make(map[string]JournalEntry, len(entries))
		for _, e := range entries {
			tr.journaled[e.CallID] = e
		}
	}
	if len(tr.t.Continue) > 0 {
		// The task's answers first: approved calls run, the others get
		// their answers as results; then the model sees them all.
		out.Iterations = first
		tr.env.Iteration = first
		if err := tr.collectTools(ctx); err != nil {
			out.Status, out.Reason, out.Err = TaskFailed, ReasonError, err
			return out
		}
		tr.announceAnswers()
		tr.continuing = true
		results, done := tr.toolPhase(ctx, first, tr.t.Continue, &out)
		tr.continuing = false
		if done {
			return out
		}
		conv = append(conv, results...)
		first++
	}
	for iter := first; ; iter++ {
		if ctx.Err() != nil {
			return canceled(ctx, out)
		}
		if iter > l.maxIter {
			tr.think(ThoughtDecision, VerbosityBrief, fmt.Sprintf("Stopping: the turn reached its limit of %d iterations.", l.maxIter),
				map[string]any{"decision": "stop", "reason": ReasonMaxIterations})
			tr.debugThought(iter, "stop", "iteration limit reached", map[string]any{"maxIterations": l.maxIter})
			tr.emit(&Warning{Header: Header{Kind: KindWarning}, Code: ReasonMaxIterations,
				Message: fmt.Sprintf("the turn reached its limit of %d iterations; what was produced is kept", l.maxIter)})
			out.Status, out.Reason = TaskCompleted, ReasonMaxIterations
			return out
		}
		out.Iterations = iter
		tr.env.Iteration = iter
		if l.metrics != nil {
			l.metrics.iterations.Add(ctx, 1)
		}
		ictx, ispan := l.startSpanf(ctx, "iteration[%d]", iter, attribute.Int("looopy.iteration", iter))
		msg, done := tr.iterate(ictx, iter, conv, &out)
		ispan.End()
		if done {
			return out
		}
		conv = append(conv, msg...)
	}
}

func lastContent(ms []Message) string {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Role == RoleAssistant && ms[i].Content != "" {
			return ms[i].Content
		}
	}
	return ""
}

// iterate runs one model call and the tools it asks for. It returns the
// messages to add to the conversation, or done with out filled in.
func (tr *turn) iterate(ctx context.Context, iter int, conv []Message, out *Outcome) ([]Message, bool) {
	if err := tr.collectTools(ctx); err != nil {
		out.Status, out.Reason, out.Err = TaskFailed, ReasonError, err
		return nil, true
	}
	req := &ModelRequest{Messages: conv, Tools: tr.defs, Stream: true,
		Temperature: tr.l.params.Temperature, MaxTokens: tr.l.params.MaxTokens}
	if tr.l.params.Model != "" {
		req.Metadata = map[string]any{"model": tr.l.params.Model}
	}
	// The call's tokens are reserved with the check: held until the next
	// report counts what it used.
	est := 0
	if tr.l.budget != nil {
		est = tr.tokenEstimate(req)
	}
	if err := tr.budget(ctx, out, false, 0, est); err != nil {
		out.Status, out.Reason, out.Err = TaskFailed, ReasonBudget, err
		return nil, true
	}
	tr.emit(&InternalLLMCall{Header: Header{Kind: KindInternalLLMCall}, Iteration: iter,
		MessageCount: len(conv), ToolCount: len(tr.defs)})
	tr.planThoughts(iter, conv, out)
	resp, err := tr.callModel(ctx, iter, req)
	wait := tr.stored
	if err == nil && len(resp.Message.ToolCalls) == 0 {
		// An answer without tool calls: what follows is the turn's end,
		// which may be committed once the task's write is queued.
		wait = tr.queued
	} else {
		tr.ranTools = true
	}
	if serr := wait(ctx); serr != nil {
		out.Status, out.Reason, out.Err = TaskFailed, ReasonError, serr
		return nil, true
	}
	if err != nil {
		if ctx.Err() != nil {
			*out = canceled(ctx, *out)
			return nil, true
		}
		out.Status, out.Reason, out.Err = TaskFailed, ReasonError, err
		return nil, true
	}
	out.Usage = out.Usage.Add(resp.Usage)
	out.Finish = resp.FinishReason
	msg := resp.Message
	msg.Role = RoleAssistant
	out.Messages = append(out.Messages, msg)
	if len(msg.ToolCalls) > 0 {
		// The tools it asks for run only within budget. Refused, the answer
		// is kept without its calls (a call with no result would break
		// the history).
		if err := tr.budget(ctx, out, false, tr.hostCalls(msg.ToolCalls), 0); err != nil {
			out.Messages[len(out.Messages)-1].ToolCalls = nil
			if msg.Content != "" {
				out.Content = msg.Content
			}
			out.Status, out.Reason, out.Err = TaskFailed, ReasonBudget, err
			return nil, true
		}
	}
	if len(msg.ToolCalls) > 0 {
		// Durable before anything announces the response or a tool starts.
		if err := tr.checkpoint(ctx, iter, StageTools, out, msg.ToolCalls); err != nil {
			out.Status, out.Reason, out.Err = TaskFailed, ReasonError, err
			return nil, true
		}
	}
	if msg.Content != "" {
		out.Content = msg.Content
		tr.emit(&ContentComplete{Header: Header{Kind: KindContentComplete}, Content: msg.Content, Iteration: iter,
			Response: tr.responseName(iter), Deltas: tr.deltas})
	}
	// After the response's text is complete: a client drawing the deltas
	// sees them closed before the next thought.
	tr.observeResponse(iter, resp, out)
	if len(msg.ToolCalls) == 0 {
		out.Status, out.Reason = TaskCompleted, ReasonStop
		switch resp.FinishReason {
		case FinishLength:
			out.Reason = ReasonLength
		case FinishContentFilter:
			out.Reason = ReasonContentFilter
		}
		tr.stopThought(iter, out)
		if out.Reason != ReasonStop {
			tr.emit(&Warning{Header: Header{Kind: KindWarning}, Code: out.Reason, Message: out.StatusMessage()})
		}
		return nil, true
	}
	results, done := tr.toolPhase(ctx, iter, msg.ToolCalls, out)
	if done {
		return nil, true
	}
	next := make([]Message, 0, 1+len(results))
	next = append(next, msg)
	return append(next, results...), false
}

// toolPhase runs the calls of one model response (server-side ones now;
// client ones end the turn waiting for input), then checkpoints.
func (tr *turn) toolPhase(ctx context.Context, iter int, calls []ToolCall, out *Outcome) ([]Message, bool) {
	var pending []ToolCall
	var reqs []InputRequest
	results := tr.runTools(ctx, calls, &pending, &reqs)
	out.Usage = out.Usage.Add(tr.takeSubUsage()) // what sub-agents used is the turn's
	out.Messages = append(out.Messages, results...)
	tr.reflect(iter, results)
	if len(pending) > 0 {
		out.Status, out.Reason, out.PendingCalls, out.Requests = TaskWaitingInput, ReasonClientTool, pending, reqs
		for _, r := range reqs {
			if r.InputType != InputClientTool && out.Reason != ReasonAuth {
				out.Reason = ReasonInput
			}
			if r.InputType == InputAuth {
				out.Status, out.Reason = TaskWaitingAuth, ReasonAuth
			}
		}
		tr.pauseThought(iter, reqs)
		return nil, true
	}
	if ctx.Err() != nil {
		*out = canceled(ctx, *out)
		return nil, true
	}
	if err := tr.checkpoint(ctx, iter+1, StageModel, out, nil); err != nil {
		out.Status, out.Reason, out.Err = TaskFailed, ReasonError, err
		return nil, true
	}
	return results, false
}

// checkpoint saves the turn's state when the loop is durable.
func (tr *turn) checkpoint(ctx context.Context, iter int, stage Stage, out *Outcome, pending []ToolCall) error {
	cs := tr.l.checkpoints
	if cs == nil {
		return nil
	}
	if Suspended(ctx) {
		return context.Cause(ctx) // handed on: the last checkpoint stands
	}
	cp := Checkpoint{TaskID: tr.t.TaskID, ContextID: tr.t.ContextID, AgentID: tr.t.AgentID,
		ParentTaskID: tr.t.ParentTaskID, Iteration: iter, Stage: stage, Produced: out.Messages,
		Pending: pending, Usage: out.Usage, ClientTools: tr.t.ClientTools, UpdatedAt: time.Now().UTC()}
	if err := cs.SaveCheckpoint(context.WithoutCancel(ctx), cp); err != nil {
		tr.refused(err)
		return fmt.Errorf("save checkpoint of task %q: %w", tr.t.TaskID, err)
	}
	tr.emit(&InternalCheckpoint{Header: Header{Kind: KindInternalCheckpoint}, Iteration: iter, Stage: string(stage)})
	return nil
}

// canceled ends a turn whose context ended. Only a cancel (a client's, a
// parent task's) ends it canceled; the host stopping it (a StopError as
// the context's cause) or a deadline ends it failed, saying why.
func canceled(ctx context.Context, out Outcome) Outcome {
	cause := context.Cause(ctx)
	var se *StopError
	switch {
	case errors.As(cause, &se):
		out.Status, out.Reason, out.Err = TaskFailed, se.Reason, se
	case errors.Is(cause, context.DeadlineExceeded):
		out.Status, out.Reason = TaskFailed, ReasonTimeout
		out.Err = fmt.Errorf("the turn ran past its deadline: %w", cause)
	default:
		out.Status, out.Reason = TaskCanceled, ReasonCanceled
		out.Err = fmt.Errorf("turn canceled: %w", ctx.Err())
	}
	return out
}

// collectTools merges the tools of every toolset and the client tools. A name
// offered twice is a configuration error, never a silent shadowing.
func (tr *turn) collectTools(ctx context.Context) error {
	if tr.index == nil {
		tr.index = make(map[string]Toolset)
	} else {
		clear(tr.index)
	}
	tr.defs = tr.defs[:0]
	add := func(d ToolDefinition, ts Toolset, owner string) error {
		if _, dup := tr.index[d.Name]; dup || tr.client[d.Name] {
			return fmt.Errorf("%w: %q (again from %s)", ErrToolConflict, d.Name, owner)
		}
		tr.index[d.Name] = ts
		tr.defs = append(tr.defs, d)
		return nil
	}
	for i, ts := range tr.toolsets {
		defs, err := ts.Tools(ctx)
		if err != nil {
			return fmt.Errorf("list tools of toolset %d: %w", i, err)
		}
		for _, d := range defs {
			if err := add(d, ts, fmt.Sprintf("toolset %d", i)); err != nil {
				return err
			}
		}
	}
	if len(tr.t.ClientTools) > 0 && tr.client == nil {
		tr.client = make(map[string]bool, len(tr.t.ClientTools))
	}
	for _, d := range tr.t.ClientTools {
		if _, dup := tr.index[d.Name]; dup {
			return fmt.Errorf("%w: %q (again from the client)", ErrToolConflict, d.Name)
		}
		tr.client[d.Name] = true
		d.Client = true
		tr.defs = append(tr.defs, d)
	}
	return nil
}

// callModel calls the model, retrying transient errors with backoff.
func (tr *turn) callModel(ctx context.Context, iter int, req *ModelRequest) (*ModelResponse, error) {
	l := tr.l
	deltas := 0
	tr.deltas = 0
	streamed := false // this attempt has sent the client something
	reasoningID := "" // the thought the model's reasoning of this attempt makes
	onDelta := func(d Delta) {
		if d.Content != "" {
			tr.emit(&ContentDelta{Header: Header{Kind: KindContentDelta}, Delta: d.Content, Index: deltas, Iteration: iter,
				Response: tr.responseName(iter)})
			deltas++
			tr.deltas = deltas
			streamed = true
		}
		if d.Thought != "" {
			streamed = true
			if reasoningID == "" {
				reasoningID = NewThoughtID()
			}
			tr.emit(&ThoughtStream{Header: Header{Kind: KindThoughtStream}, ThoughtID: reasoningID,
				ThoughtType: ThoughtReasoning, Verbosity: VerbosityNormal, Content: d.Thought,
				Metadata: map[string]any{"source": "model", "iteration": iter}})
		}
	}
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			// Tell the model which attempt this is (deterministic replays
			// of a scripted model depend on it); absent means the first.
			md := make(map[string]any, len(req.Metadata)+1)
			for k, v := range req.Metadata {
				md[k] = v
			}
			md["attempt"] = attempt
			req.Metadata = md
		}
		mctx, span := l.startSpan(ctx, "llm.call")
		if span.IsRecording() {
			span.SetAttributes(attribute.Int("looopy.attempt", attempt), attribute.Int("looopy.iteration", iter))
		}
		var began time.Time
		if l.metrics != nil {
			began = time.Now()
		}
		streamed, reasoningID = false, ""
		resp, err := safeGenerate(mctx, tr.model, req, onDelta)
		if err == nil && resp == nil {
			err = &ModelError{Code: "empty_response", Message: "the model returned no response"}
		}
		if l.metrics != nil {
			l.metrics.model(ctx, time.Since(began), resp, err)
		}
		if err == nil {
			if span.IsRecording() {
				span.SetAttributes(attribute.Int("gen_ai.usage.input_tokens", resp.Usage.PromptTokens),
					attribute.Int("gen_ai.usage.output_tokens", resp.Usage.CompletionTokens),
					attribute.String("gen_ai.response.finish_reasons", string(resp.FinishReason)),
					attribute.Int("looopy.tool_calls", len(resp.Message.ToolCalls)))
			}
			span.End()
			return resp, nil
		}
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.End()
		if ctx.Err() != nil || !Transient(err) {
			return nil, fmt.Errorf("model call: %w", err)
		}
		if streamed {
			return nil, fmt.Errorf("model call failed after streaming part of its answer; not retried, so that the client is not shown a second answer after the first: %w", err)
		}
		if attempt >= l.retry.Attempts {
			return nil, fmt.Errorf("model call failed after %d attempts: %w", attempt, err)
		}
		delay := backoff(l.retry, attempt)
		var me *ModelError
		if errors.As(err, &me) && me.RetryAfter > 0 {
			if me.RetryAfter > l.retry.MaxRetryAfter {
				return nil, fmt.Errorf("model call: the model asks to wait %s before a retry, longer than the host waits (%s): %w",
					me.RetryAfter, l.retry.MaxRetryAfter, err)
			}
			delay = max(delay, me.RetryAfter)
		}
		tr.retries++
		tr.emit(&InternalLLMRetry{Header: Header{Kind: KindInternalLLMRetry}, Iteration: iter,
			Attempt: attempt, Delay: delay, Error: err.Error()})
		tr.emit(&Warning{Header: Header{Kind: KindWarning}, Code: WarningModelRetry,
			Message: fmt.Sprintf("the model call failed (%s); trying again in %s (attempt %d of %d)",
				err, delay.Round(time.Millisecond), attempt+1, l.retry.Attempts)})
		l.log.LogAttrs(ctx, slog.LevelWarn, "retrying model call", slog.Int("attempt", attempt),
			slog.Duration("delay", delay), slog.String("error", err.Error()))
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("model call: %w", ctx.Err())
		case <-timer.C:
		}
	}
}

// backoff is BaseDelay·2^(attempt-1), capped, with "equal jitter": half
// fixed, half random, so retries spread out but never come too soon.
func backoff(p RetryPolicy, attempt int) time.Duration {
	d := p.BaseDelay << (attempt - 1)
	if d <= 0 || d > p.MaxDelay {
		d = p.MaxDelay
	}
	half := d / 2
	return half + rand.N(half+1)
}

func safeGenerate(ctx context.Context, m Model, req *ModelRequest, onDelta func(Delta)) (resp *ModelResponse, err error) {
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, &ModelError{Code: "panic", Message: fmt.Sprintf("model panicked: %v", r)}
		}
	}()
	return m.Generate(ctx, req, onDelta)
}

// runTools runs the calls of one model response, at most l.concurrency at a
// time, and returns their results in the order the model asked for them.
// Calls to client tools are not run: they are added to pending.
func (tr *turn) runTools(ctx context.Context, calls []ToolCall, pending *[]ToolCall, reqs *[]InputRequest) []Message {
	ctx, span := tr.l.startSpan(ctx, "tools.execute", attribute.Int("looopy.tool_calls", len(calls)))
	defer span.End()
	calls = append([]ToolCall(nil), calls...) // approved edits replace arguments
	results := make([]Message, len(calls))
	run := make([]int, 0, len(calls))
	settled := make([]bool, len(calls))
	for i, c := range calls {
		if a, ok := tr.t.Answers[c.ID]; ok && tr.continuing {
			if _, routed := tr.t.Routes[c.ID]; routed {
				// An answer to a request the call passed up: the call
				// runs again and hands the answer down.
				run = append(run, i)
				continue
			}
			// An answer settles this call: its result, or its approval.
			if res, given := answerResult(c, a); given {
				tr.emitComplete(c, res, 0)
				results[i], settled[i] = toolMessage(c, res), true
				continue
			}
			if len(a.Arguments) > 0 {
				calls[i].Arguments = a.Arguments
			}
			run = append(run, i)
			continue
		}
		if tr.client[c.Name] {
			if err := tr.checkClientArgs(c); err != nil {
				res := ToolResult{IsError: true, Content: fmt.Sprintf("the arguments of %s do not match its parameters: %v", c.Name, err)}
				tr.emitComplete(c, res, 0)
				results[i], settled[i] = toolMessage(c, res), true
				continue
			}
			*pending = append(*pending, c)
			req := clientToolRequest(c)
			req.ResultSchema = tr.t.ClientResultSchemas[c.Name]
			*reqs = append(*reqs, req)
			continue
		}
		if req := tr.gate(ctx, c); req != nil {
			*pending = append(*pending, c)
			*reqs = append(*reqs, *req)
			continue
		}
		run = append(run, i)
	}
	tr.toolDecision(calls, run, *pending)
	needs := make([]*InputRequest, len(calls))
	if len(run) == 1 { // the common case: no goroutine
		i := run[0]
		results[i], needs[i] = tr.runTool(ctx, calls[i])
	} else if len(run) > 1 {
		var wg sync.WaitGroup
		sem := make(chan struct{}, tr.l.concurrency)
		for _, i := range run {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				results[i], needs[i] = tr.runTool(ctx, calls[i])
			}()
		}
		wg.Wait()
	}
	// A call that asked for a credential, or passed a request up, waits
	// for the answer, as pending calls do.
	asked := 0
	for _, i := range run {
		if needs[i] != nil {
			*pending = append(*pending, calls[i])
			*reqs = append(*reqs, *needs[i])
			asked++
		}
	}
	// Pending calls leave no result yet: drop their empty slots.
	if len(run) < len(calls) || asked > 0 {
		for _, i := range run {
			settled[i] = needs[i] == nil
		}
		kept := results[:0]
		for i := range results {
			if settled[i] {
				kept = append(kept, results[i])
			}
		}
		results = kept
	}
	return results
}

// gate asks the loop's approval gate about a call; nil: it may run.
func (tr *turn) gate(ctx context.Context, c ToolCall) *InputRequest {
	if tr.l.approval == nil {
		return nil
	}
	if _, known := tr.index[c.Name]; !known {
		return nil // an unknown tool runs nothing: its error result is enough
	}
	req := tr.l.approval(ctx, tr.t, c)
	if req == nil {
		return nil
	}
	call := c
	req.InputID, req.InputType, req.Call = InputApproval+":"+c.ID, InputApproval, &call
	if req.Prompt == "" {
		req.Prompt = fmt.Sprintf("Approve %s with %s?", c.Name, string(c.Arguments))
	}
	return req
}

func (tr *turn) checkClientArgs(c ToolCall) error {
	if tr.l.checkArgs == nil {
		return nil
	}
	for _, d := range tr.t.ClientTools {
		if d.Name == c.Name && len(d.Parameters) > 0 {
			args := c.Arguments
			if len(args) == 0 {
				args = json.RawMessage("{}")
			}
			return tr.l.checkArgs(d.Parameters, args)
		}
	}
	return nil
}

func clientToolRequest(c ToolCall) InputRequest {
	call := c
	return InputRequest{InputID: InputClientTool + ":" + c.ID, InputType: InputClientTool, RequireUser: false,
		Prompt: fmt.Sprintf("Run the client tool %s with %s and send its result.", c.Name, string(c.Arguments)),
		Call:   &call}
}

// runTool runs one call and turns every failure (unknown tool, error, panic,
// timeout) into a tool result that tells the model what went wrong. With a
// journal, the call is recorded before it starts and when it ends; a call
// the journal shows completed (a resumed turn) is not run again.
func (tr *turn) runTool(ctx context.Context, call ToolCall) (Message, *InputRequest) {
	return tr.runToolFor(ctx, call, nil)
}

// runToolFor is runTool for a call of the turn (sub nil) or of one of its
// sub-agents: then its events carry the sub-task's id and it runs with the
// sub-agent's env. A call that stopped to ask for a credential returns
// what it needs instead of a message.
func (tr *turn) runToolFor(ctx context.Context, call ToolCall, sub *Subtask) (Message, *InputRequest) {
	emit := tr.emit
	if sub != nil {
		emit = sub.Emit
	}
	ctx, span := tr.l.startSpanf(ctx, "tool[%s]", call.Name, attribute.String("looopy.tool.name", call.Name),
		attribute.String("looopy.tool.call_id", call.ID))
	defer span.End()
	if res, replayed := tr.fromJournal(ctx, call, emit); replayed {
		span.SetAttributes(attribute.Bool("looopy.tool.replayed", true))
		return toolMessage(call, res), nil
	}
	attempts := tr.journaled[call.ID].Attempts + 1
	if j := tr.l.journal; j != nil {
		err := j.BeginCall(context.WithoutCancel(ctx), JournalEntry{TaskID: tr.t.TaskID, CallID: call.ID,
			Key: IdempotencyKey(tr.t.TaskID, call.ID), Tool: call.Name, Arguments: call.Arguments,
			State: CallStarted, Attempts: attempts, StartedAt: time.Now().UTC()})
		if err != nil && tr.refused(err) {
			// Not journaled, not run, and the turn is suspended: the
			// call runs when the turn resumes.
			return toolMessage(call, ToolResult{IsError: true, Content: err.Error()}), nil
		}
		if err != nil {
			// Not journaled, not run: running it could not be made safe.
			res := ToolResult{IsError: true, Content: fmt.Sprintf("tool %q was not run: the host could not record the call: %v", call.Name, err)}
			tr.emitCompleteTo(emit, call, res, 0)
			return toolMessage(call, res), nil
		}
	}
	emit(&ToolStart{Header: Header{Kind: KindToolStart}, ToolCallID: call.ID, ToolName: call.Name, Arguments: call.Arguments})
	start := time.Now()
	res, need := tr.callTool(ctx, call, sub)
	if Suspended(ctx) {
		// The host hands the turn on: the call stays "started" in the
		// journal, as a crash leaves it, and the next run settles it.
		return toolMessage(call, res), nil
	}
	if need != nil {
		// The call stopped before acting, to ask for a credential (or to
		// pass a sub-agent's request up): the journal says so (it runs
		// again once the answer is there), and the turn pauses for it.
		if need.Route != nil {
			res = routePauseResult(call, *need)
			span.SetAttributes(attribute.Bool("looopy.tool.input_required", true))
		} else {
			res = authPauseResult(call, *need.Auth)
			span.SetAttributes(attribute.Bool("looopy.tool.auth_required", true))
		}
		tr.endCall(ctx, call, res)
		tr.emitCompleteTo(emit, call, res, time.Since(start))
		return Message{}, need
	}
	res.ToolCallID = call.ID
	tr.toolCalls.Add(1)
	if tr.l.metrics != nil {
		name := call.Name
		if _, known := tr.index[name]; !known {
			name = "unknown" // a name the model made up must not mint a series
		}
		tr.l.metrics.tool(ctx, name, time.Since(start), !res.IsError)
	}
	if res.IsError {
		span.SetStatus(codes.Error, res.Content)
	}
	span.SetAttributes(attribute.Bool("looopy.tool.success", !res.IsError))
	tr.endCall(ctx, call, res)
	tr.emitCompleteTo(emit, call, res, time.Since(start))
	return toolMessage(call, res), nil
}

// fromJournal answers a call of a resumed turn from the journal: the result
// of a completed call, or, for a call cut off by the crash of a tool that is
// not idempotent, a result saying its outcome is unknown.
func (tr *turn) fromJournal(ctx context.Context, call ToolCall, emit func(Event)) (ToolResult, bool) {
	e, ok := tr.journaled[call.ID]
	if !ok {
		return ToolResult{}, false
	}
	switch {
	case e.State == CallCompleted && (isAuthPause(e.Result) || isPauseOf(e.Result, routePauseKey)):
		return ToolResult{}, false // it asked for a credential and did nothing: run it again
	case e.State == CallCompleted && e.Result != nil:
		return *e.Result, true
	case e.State == CallStarted && !tr.idempotent(call.Name) && !tr.resumes(call.Name):
		res := InterruptedResult(call)
		tr.endCutSubtask(ctx, call, res.Content)
		tr.endCall(ctx, call, res)
		tr.emitCompleteTo(emit, call, res, 0)
		return res, true
	}
	return ToolResult{}, false // idempotent and interrupted: run it again
}

// journalSettled records a call that is settled without running (a
// rejection) as completed with res.
func (tr *turn) journalSettled(ctx context.Context, call ToolCall, res ToolResult) {
	j := tr.l.journal
	if j == nil {
		return
	}
	wctx := context.WithoutCancel(ctx)
	if err := j.BeginCall(wctx, JournalEntry{TaskID: tr.t.TaskID, CallID: call.ID, Key: IdempotencyKey(tr.t.TaskID, call.ID),
		Tool: call.Name, Arguments: call.Arguments, State: CallStarted, Attempts: 1, StartedAt: time.Now().UTC()}); err != nil {
		tr.refused(err)
		return
	}
	tr.endCall(ctx, call, res)
}

func (tr *turn) endCall(ctx context.Context, call ToolCall, res ToolResult) {
	j := tr.l.journal
	if j == nil {
		return
	}
	if err := j.EndCall(context.WithoutCancel(ctx), tr.t.TaskID, call.ID, res); err != nil {
		tr.refused(err)
		// The call stays "started": after a crash it is treated as
		// interrupted, never silently run twice.
		tr.l.log.LogAttrs(ctx, slog.LevelError, "record tool result", slog.String("task_id", tr.t.TaskID),
			slog.String("call_id", call.ID), slog.String("error", err.Error()))
	}
}

// resumes says whether the tool's toolset takes up a call a crash cut off
// (CallResumer).
func (tr *turn) resumes(name string) bool { return tr.resumer(name) != nil }

// resumer is the toolset that takes up a cut-off call of the tool: the one
// offering it, or, when none offers it now (a remote agent not reachable
// yet), a toolset that says it resumes its calls.
func (tr *turn) resumer(name string) Toolset {
	if ts, ok := tr.index[name]; ok {
		if cr, ok := ts.(CallResumer); ok && cr.ResumesCalls(name) {
			return ts
		}
		return nil
	}
	for _, ts := range tr.toolsets {
		if cr, ok := ts.(CallResumer); ok && cr.ResumesCalls(name) {
			return ts
		}
	}
	return nil
}

func (tr *turn) idempotent(name string) bool {
	for _, d := range tr.defs {
		if d.Name == name {
			return d.Idempotent
		}
	}
	return false
}

func (tr *turn) emitComplete(call ToolCall, res ToolResult, d time.Duration) {
	tr.emitCompleteTo(tr.emit, call, res, d)
}

func (tr *turn) emitCompleteTo(emit func(Event), call ToolCall, res ToolResult, d time.Duration) {
	done := &ToolComplete{Header: Header{Kind: KindToolComplete}, ToolCallID: call.ID, ToolName: call.Name,
		Success: !res.IsError, Duration: d}
	if res.IsError {
		done.Error = res.Content
	} else {
		done.Result = res.Content
	}
	emit(done)
}

func toolMessage(call ToolCall, res ToolResult) Message {
	return Message{Role: RoleTool, Name: call.Name, ToolCallID: call.ID, Content: res.Content, Metadata: toolMeta(res)}
}

func toolMeta(r ToolResult) map[string]any {
	if !r.IsError && len(r.Data) == 0 {
		return nil
	}
	m := make(map[string]any, 2)
	if r.IsError {
		m["isError"] = true
	}
	if len(r.Data) > 0 {
		m["data"] = r.Data
	}
	return m
}

func (tr *turn) callTool(parent context.Context, call ToolCall, sub *Subtask) (res ToolResult, need *InputRequest) {
	ts, ok := tr.index[call.Name]
	if !ok && tr.journaled[call.ID].State == CallStarted {
		// A cut-off call whose toolset takes it up, offered or not now.
		ts = tr.resumer(call.Name)
		ok = ts != nil
	}
	if !ok {
		return ToolResult{IsError: true, Content: fmt.Sprintf("tool %q does not exist; available tools: %s", call.Name, tr.toolNames())}, nil
	}
	var (
		ctx    context.Context
		cancel context.CancelFunc
	)
	if st, ok := ts.(SelfTimed); ok && st.TimesCalls(call.Name) {
		ctx, cancel = context.WithCancel(parent)
	} else {
		ctx, cancel = context.WithTimeout(parent, tr.l.toolTimeout)
	}
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			res, need = ToolResult{IsError: true, Content: fmt.Sprintf("tool %q failed: it panicked: %v", call.Name, r)}, nil
		}
	}()
	env := tr.env // a copy per call
	if sub != nil {
		env = sub.env // a sub-agent's call runs one level deeper, as the sub-task
	}
	env.CallID = call.ID
	env.Resumed = tr.journaled[call.ID].State == CallStarted
	if sub != nil {
		// The answer the parent's client gave goes on down to the call
		// of the sub-agent whose request the sub-agent relayed (the same
		// tool, the same arguments), with its own request id; no other
		// call of the sub-agent sees it.
		env.Routed = nil
		if rt := sub.env.Routed; rt != nil && rt.Request.Route != nil && rt.Request.Route.SubtaskID == sub.ID {
			if _, ok := routedFor(&sub.env, call); ok {
				if in := rt.inner(); in != nil {
					if rt.taken != nil {
						rt.taken.Store(true)
					}
					env.Routed = in
					if in.Request.InputType == InputAuth && in.Request.Auth != nil {
						env.Credentials.Copy(sub.ID, in.Request.Route.SubtaskID, in.Request.Auth.Holder, in.Request.Auth.Provider)
					}
				}
			}
		}
	}
	if sub == nil {
		if rq, ok := tr.t.Routes[call.ID]; ok {
			if a, ok := tr.t.Answers[call.ID]; ok {
				env.Routed = &RoutedInput{Request: rq, Answer: a, taken: new(atomic.Bool)}
				if rq.InputType == InputAuth && rq.Auth != nil && rq.Route != nil {
					// The client's credential, kept for this task, goes
					// to the sub-task that asked for it.
					env.Credentials.Copy(tr.t.TaskID, rq.Route.SubtaskID, rq.Auth.Holder, rq.Auth.Provider)
				}
			}
		}
	}
	r, err := ts.Call(ctx, call, &env)
	if rd := env.Routed; rd != nil && rd.taken != nil && !rd.taken.Load() && rd.Request.Route != nil && rd.Request.Route.Inner != nil &&
		parent.Err() == nil && !Suspended(parent) {
		// The sub-agent ran again with the answer to a request it relayed
		// and went on without the call the request was about: what asked
		// below waits for an answer that will not come.
		tr.endNotTaken(ctx, rd.Request.Route)
	}
	if n, ok := AuthNeedOf(err); ok && err != nil && ctx.Err() == nil {
		if n.Holder == "" {
			n.Holder = "tool:" + call.Name
		}
		req := authRequest(call, *n)
		return ToolResult{}, &req
	}
	var ire *InputRequiredError
	if errors.As(err, &ire) && parent.Err() == nil {
		req := ire.Request
		c := call
		req.Call = &c
		if req.InputID == "" {
			req.InputID = "input:" + call.ID
		}
		return ToolResult{}, &req
	}
	switch {
	case err == nil:
		return r, nil
	case parent.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return ToolResult{IsError: true, Content: fmt.Sprintf("tool %q timed out after %s", call.Name, tr.l.toolTimeout)}, nil
	case errors.Is(err, context.Canceled) || ctx.Err() != nil:
		if cause := context.Cause(parent); parent.Err() != nil && !errors.Is(cause, context.Canceled) {
			// The host stopped the turn (its time limit, a shutdown).
			return ToolResult{IsError: true, Content: fmt.Sprintf("tool %q was stopped: %v", call.Name, cause)}, nil
		}
		return ToolResult{IsError: true, Content: fmt.Sprintf("tool %q was canceled", call.Name)}, nil
	default:
		return ToolResult{IsError: true, Content: fmt.Sprintf("tool %q failed: %v", call.Name, err)}, nil
	}
}

func (tr *turn) toolNames() string {
	if len(tr.defs) == 0 {
		return "none"
	}
	s := ""
	for i, d := range tr.defs {
		if i > 0 {
			s += ", "
		}
		s += d.Name
	}
	return s
}

// turnTools is the turn's merged toolset, lent to sub-agents.
type turnTools turn

func (t *turnTools) Tools(ctx context.Context) ([]ToolDefinition, error) {
	return append([]ToolDefinition(nil), t.defs...), nil
}

func (t *turnTools) Call(ctx context.Context, call ToolCall, env *ToolEnv) (ToolResult, error) {
	tr := (*turn)(t)
	if tr.client[call.Name] {
		return ToolResult{IsError: true, Content: fmt.Sprintf("tool %q runs on the client and cannot be called by a sub-agent", call.Name)}, nil
	}
	var sub *Subtask
	if env != nil && env.turn == tr {
		sub = env.sub
	}
	journalID := call.ID
	if env != nil && env.CallID != "" {
		journalID = env.CallID + ">" + call.ID
	}
	if e, done := tr.journaled[journalID]; done && e.State == CallCompleted && e.Result != nil && !isAuthPause(e.Result) &&
		!isPauseOf(e.Result, routePauseKey) {
		// A sub-agent run again (it had passed a request up): this call
		// was settled in an earlier run, and is answered from the journal
		// below, neither asked about nor run again.
	} else if req := tr.gate(ctx, call); req != nil {
		// A sub-agent's call that needs an approval: the answer passed
		// down from the parent's client, or the parent's model's when a
		// person need not answer; else the sub-agent stops and its
		// request goes up (it runs again once answered). Never run
		// unapproved.
		a, ok := routedFor(env, call)
		if !ok && sub == nil {
			return ToolResult{IsError: true, Content: fmt.Sprintf("tool %q needs an approval and cannot be called here", call.Name)}, nil
		}
		if !ok {
			c := call
			r := *req
			r.InputType, r.Call = InputApproval, &c
			r.InputID = InputApproval + ":" + call.ID
			if r.Prompt == "" {
				r.Prompt = fmt.Sprintf("Approve %s with %s?", call.Name, compactJSON(call.Arguments))
			}
			if r.RequireUser {
				sub.pauseFor(r)
				return ToolResult{IsError: true, Content: fmt.Sprintf("tool %q waits for an approval: stop here, the task goes on once it is given", call.Name)}, nil
			}
			var err error
			if a, err = sub.AnswerByModel(ctx, r); err != nil {
				return ToolResult{IsError: true, Content: fmt.Sprintf("tool %q needs an approval: %v", call.Name, err)}, nil
			}
		}
		if res, given := answerResult(call, a); given {
			// Rejected: journaled as settled, so that a later run of the
			// sub-agent does not ask again.
			c := call
			c.ID = journalID
			tr.journalSettled(ctx, c, res)
			return res, nil
		}
		if len(a.Arguments) > 0 {
			call.Arguments = a.Arguments
		}
	}
	if env != nil && env.CallID != "" {
		// A sub-agent's call is journaled under the call that runs the
		// sub-agent, so its ids never collide with the parent's.
		call.ID = env.CallID + ">" + call.ID
	}
	m, need := tr.runToolFor(ctx, call, sub)
	if need != nil {
		// A sub-agent's call that needs a credential, or input asked
		// further down (a remote agent's task, another sub-agent's call):
		// the sub-agent stops and the request goes up to the parent's
		// client, its route kept (Route.Inner) so that the answer comes
		// back down to the task that asked; the call runs again once it
		// is answered.
		if sub == nil {
			// No sub-task to pause: what waits below is ended, not left
			// waiting for an answer that cannot come.
			tr.endRelayed(ctx, *need, "the call that passed this request up cannot ask for input")
			return ToolResult{ToolCallID: call.ID, IsError: true, Content: fmt.Sprintf(
				"tool %q needs input (%s), which this call cannot ask for; what asked was canceled", call.Name, need.Prompt)}, nil
		}
		sub.pauseFor(*need)
		what := "a credential"
		if need.Route != nil {
			what = "input from further down"
		}
		return ToolResult{ToolCallID: call.ID, IsError: true, Content: fmt.Sprintf(
			"tool %q needs %s: stop here, the task goes on once the client supplies it", call.Name, what)}, nil
	}
	return ToolResult{ToolCallID: call.ID, Content: m.Content, IsError: m.Metadata["isError"] == true}, nil
}

var noSpan = trace.SpanFromContext(context.Background())

// startSpanf is startSpan with a formatted name, formatted only when traced.
func (l *Loop) startSpanf(ctx context.Context, format string, arg any, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if l.tracer == nil {
		return ctx, noSpan
	}
	return l.tracer.Start(ctx, fmt.Sprintf(format, arg), trace.WithAttributes(attrs...))
}

// startSpan starts a span when the loop has a tracer; without one it costs
// nothing (no context allocation).
func (l *Loop) startSpan(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if l.tracer == nil {
		return ctx, noSpan
	}
	return l.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// refused suspends the turn when err is a write the store refused for want
// of space (ErrStorageFull), and reports whether it did (or the turn was
// suspended already). From then on the turn writes nothing, as after a
// crash at that write: its task stays working with its last checkpoint, a
// tool call whose result was refused stays started in the journal.
func (tr *turn) refused(err error) bool {
	if !errors.Is(err, ErrStorageFull) {
		return false
	}
	tr.halted.Store(true)
	tr.suspend(&StopError{Reason: ReasonStorageFull, Suspend: true,
		Message: "the store refused a write of the turn for want of space (" + err.Error() + "); the task resumes from its last checkpoint once the store takes writes again"})
	return true
}
