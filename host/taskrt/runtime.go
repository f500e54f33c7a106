package taskrt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/looopy-go/looopy/loop"
)

// Errors of the runtime. The host maps them to protocol errors.
var (
	// ErrShuttingDown: the runtime no longer starts turns.
	ErrShuttingDown = errors.New("host is shutting down")
	// ErrNotCancelable: the task is finished.
	ErrNotCancelable = errors.New("task is not cancelable")
	// ErrConversationBusy: a conversation to delete has an unfinished
	// task (or a turn running).
	ErrConversationBusy = errors.New("the conversation has an unfinished task")
	// ErrQuota: the principal runs as many turns as the operator allows.
	ErrQuota = errors.New("too many running turns for this principal")
	// ErrHostBusy: the host runs as many turns as the operator allows,
	// all principals together.
	ErrHostBusy = errors.New("the host runs as many turns as it allows")
	// ErrTaskEnded: a message or an answer for a task that has ended
	// (canceled, completed, failed), such as an answer that lost the
	// race with a cancel. It also matches loop.ErrInvalid.
	ErrTaskEnded = errors.New("the task has ended")
)

// endedError refuses a message or an answer for rec, a task that has
// ended; raced: it ended while the message was being taken.
func endedError(rec loop.TaskRecord, raced bool) error {
	how := "is " + string(rec.Status)
	if raced {
		how = "was " + string(rec.Status) + " while this message was being taken"
		if rec.Status == loop.TaskCanceled {
			how = "was canceled first (a cancel came in at the same time as this message)"
		}
	}
	return fmt.Errorf("%w: task %q %s and takes no more messages; send without taskId to start a new task: %w",
		loop.ErrInvalid, rec.ID, how, ErrTaskEnded)
}

// The points between two writes of a task's life, for Config.Crashpoint.
const (
	// PointTaskStarting: a new turn is registered here, nothing of it
	// is stored yet (no client was told).
	PointTaskStarting = "task-starting"
	// PointLeaseTaken: a lease is held, the task not stored yet: the
	// task's lease on a store without Stores.TaskLeases, or the context's
	// lease of a turn on shared stores.
	PointLeaseTaken = "lease-taken"
	// PointTaskSaved: the task is stored; no client was told yet.
	PointTaskSaved = "task-saved"
	// PointTurnEnding: the turn's commit and the final events that
	// announce it are about to be written together (Events offers
	// EndEvents): nothing of either is stored yet.
	PointTurnEnding = "turn-ending"
	// PointTurnWaiting: a turn of a task waits for the task's previous
	// turn, whose end is out, to let go of it (its events settled, its
	// lease released): nothing of the new turn is stored yet.
	PointTurnWaiting = "turn-waiting"
	// PointTurnCommitted: the turn is saved; its final events are not
	// in the log yet. Only where the two are separate writes (the log
	// cannot save the turn's commit).
	PointTurnCommitted = "turn-committed"
	// PointTurnSettled: the final events are in the log; the lease is
	// still held.
	PointTurnSettled = "turn-settled"
	// PointEndSaved: the end of a task no turn runs (a cancel of a paused
	// task, an expired request, a task failed at recovery) is saved; its
	// final events are not in the log yet.
	PointEndSaved = "end-saved"
	// PointConversationPurging: a deleted conversation's agent record and
	// history are gone; one more of its finished tasks (record, artifacts,
	// event stream) is about to be deleted.
	PointConversationPurging = "conversation-purging"
)

func (rt *Runtime) crashpoint(p string) {
	if rt.cfg.Crashpoint != nil {
		rt.cfg.Crashpoint(p)
	}
}

// Stores are the durable stores the runtime works on. Messages, Agents and
// Tasks are required; each other field, when nil, turns its feature off.
type Stores struct {
	Messages loop.MessageStore
	Agents   loop.AgentStore
	Tasks    loop.TaskStore
	// Commit saves a finished turn in one atomic write (it must keep the
	// same data as the stores above and the checkpoints).
	Commit loop.TurnCommitter
	// Checkpoints and Journal make turns durable: a task left working by a
	// crash resumes where it was. Without them such a task fails.
	Checkpoints loop.CheckpointStore
	Journal     loop.Journal
	// Durable lists the tasks with a checkpoint or journal, for the
	// cleanup. Nil: they are not cleaned.
	Durable loop.DurableLister
	// Leases own running tasks across processes. Nil: one process owns
	// everything, and a process that dies leaves unannounced ends that
	// only the next start can repair for tasks still working.
	Leases loop.LeaseStore
	// TaskLeases, when set with Leases (the same store as Leases and
	// Tasks), stores a starting task and its lease in one write.
	TaskLeases loop.LeasedTaskSaver
	// Cancels carry a cancel asked of one process to the process running
	// the turn (with Config.Shared). Nil: a task running elsewhere is
	// canceled only once its owner's lease has lapsed.
	Cancels loop.CancelSignals
	// Conversations deletes idle conversations (Config.ConversationTTL).
	// Nil: conversations are kept for ever.
	Conversations ConversationExpirer
}

// ConversationExpirer deletes the conversations (agent record, history)
// idle since before a time that have no unfinished task, and returns their
// ids (store.Badger, store.Memory, redisstore.Store).
type ConversationExpirer interface {
	ExpireConversations(ctx context.Context, idleBefore time.Time) ([]string, error)
}

// ConversationDeleter deletes one conversation (agent record, history)
// now unless it has an unfinished task (then false, nothing deleted);
// without an agent record it returns a *loop.NotFoundError (store.Badger,
// store.Memory, redisstore.Store).
type ConversationDeleter interface {
	DeleteConversation(ctx context.Context, contextID string) (bool, error)
}

// ConversationPurges lists the deletions of conversations still to finish
// (store.Badger, store.Memory, redisstore.Store): ConversationDeleter's
// DeleteConversation enters a conversation in the write that deletes its
// agent record and history; the runtime removes the entry once the rest
// is deleted (its finished tasks, their artifacts, the event streams).
type ConversationPurges interface {
	// PendingConversationDeletes returns the conversations entered and
	// not done, each with the time of its DeleteConversation.
	PendingConversationDeletes(ctx context.Context) (map[string]time.Time, error)
	// ConversationDeleteDone removes a conversation's entry.
	ConversationDeleteDone(ctx context.Context, contextID string) error
}

// StreamDeleter is Events that deletes streams now (the host's Hub): the
// streams of a deleted conversation and of its tasks go with it, and a
// client following one is told.
type StreamDeleter interface {
	DeleteTaskStream(ctx context.Context, taskID string) error
	DeleteContextStream(ctx context.Context, contextID string) error
}

// Events is where the runtime publishes the events of tasks: the host's
// durable event log (its sse.Hub), per task and per context stream.
type Events interface {
	// Sink returns the EventSink of a turn: it queues events for their
	// streams without waiting; onErr hears of those that could not be
	// logged.
	Sink(onErr func(loop.Event, error)) loop.EventSink
	// Publish appends e to its task's and context's streams; it is durable
	// when Publish returns.
	Publish(ctx context.Context, e loop.Event) error
	// Last returns the id of the last event of a task's stream (0: none).
	Last(ctx context.Context, taskID string) (uint64, error)
	// LastEvent returns the last event of a task's stream, nil when it
	// has none.
	LastEvent(ctx context.Context, taskID string) (loop.Event, error)
	// Settle waits until the queued events of a task and its context are
	// in the log; for a finished task (terminal) it then ends the task's
	// stream: its subscribers end once they have read everything.
	Settle(ctx context.Context, taskID, contextID string, terminal bool) error
	// Retire has the stream of a finished (settled) task expire with its
	// retention.
	Retire(ctx context.Context, taskID string) error
	// KeepContext has a context's stream expire ttl after now.
	KeepContext(ctx context.Context, contextID string, ttl time.Duration) error
}

// EndEvents is Events whose log also keeps the turns' commits (the host's
// Hub over a Badger store): a turn's commit and the events that announce
// its end are then one write.
type EndEvents interface {
	// CommitEnd publishes end (events of one task) after the events queued
	// before, and saves c (as tc would) in the same write: both or
	// neither. onDurable runs once the write is durable, before anyone can
	// read the events. false: it cannot (nothing was done, the caller
	// commits and publishes as usual); with true, err is the commit's
	// refusal or the write's failure, and none of end is published.
	CommitEnd(ctx context.Context, tc loop.TurnCommitter, c loop.TurnCommit, end []loop.Event, onDurable func()) (bool, error)
}

// endSink is a turn's EventSink that also publishes its end with its
// commit (loop.EndSink).
type endSink struct {
	loop.SinkFunc
	end func(ctx context.Context, tc loop.TurnCommitter, c loop.TurnCommit, end []loop.Event) (bool, error)
}

func (s endSink) CommitEnd(ctx context.Context, tc loop.TurnCommitter, c loop.TurnCommit, end []loop.Event) (bool, error) {
	return s.end(ctx, tc, c, end)
}

// Artifacts is what the runtime needs of the artifact store: the
// artifacts of a finished task expire with it, those it left building end
// failed (nothing can complete them any more), and a conversation lists
// its own.
type Artifacts interface {
	loop.ArtifactLister
	ExpireTask(ctx context.Context, taskID string, ttl time.Duration) error
	AbandonTask(ctx context.Context, taskID, reason string) (int, error)
}

// AbandonedReason is the failure of an artifact its task left building.
const AbandonedReason = "abandoned: its task ended before it was complete"

// Config configures a Runtime. Zero fields take their defaults.
type Config struct {
	Loop   *loop.Loop // required
	Stores Stores
	Events Events // required
	// Artifacts, when set, have the artifacts of a finished task expire.
	Artifacts Artifacts
	// Usage, when set, is the loop's Budget: a turn is answered once its
	// principal's totals are saved (they are written beside its final
	// events).
	Usage *Usage
	// Credentials, when set, are the credentials clients supplied for
	// their tasks: a task's are forgotten when it ends.
	Credentials *loop.Credentials
	// Owner names this process in leases; two processes sharing stores
	// must never use the same one. A process restarted with the same name
	// takes its own leases back at once. Default: random per process.
	Owner string
	// LeaseTTL is how long a lease lasts without renewal: how soon another
	// process may take over the tasks of one that died. Default 30s.
	LeaseTTL time.Duration
	// DeferTaskWrite is how long a blocking send's new task's write may
	// wait for its turn's end (StartRequest.AnswerAtEnd). Default
	// deferTaskWrite (5ms).
	DeferTaskWrite time.Duration
	// TurnTimeout bounds one turn. Default 10 minutes.
	TurnTimeout time.Duration
	// TaskTTL is how long a finished task (and its stream) is kept.
	// Default 24h.
	TaskTTL time.Duration
	// HistoryLimit bounds the messages a turn hands the model.
	HistoryLimit int
	// HistoryBytes bounds the size of the history a turn hands the model
	// (loop.AgentConfig.HistoryBytes); 0: no bound.
	HistoryBytes int
	// MaxAgents bounds the conversations kept in memory. Default 10,000.
	MaxAgents int
	// MaxAgentBytes bounds the history the conversations kept in memory
	// hold together (loop.Agent.CachedBytes); 0: no bound.
	MaxAgentBytes int64
	// MaxRemoteWatches bounds the reads of watched remote tasks (the
	// tasks behind requests paused tasks passed up from remote sub-agents)
	// running at once; more watched tasks are read in turn. Default
	// DefaultMaxRemoteWatches.
	MaxRemoteWatches int
	// ResumeConcurrency bounds the turns resumed at once after a restart.
	// Default 8.
	ResumeConcurrency int
	// MaxRunningPerPrincipal bounds the turns one principal runs at once
	// (0: unbounded), so that one principal's slow turns cannot take every
	// turn slot of the host.
	MaxRunningPerPrincipal int
	// MaxRunning bounds the turns the runtime runs at once, all
	// principals together (0: unbounded), so that a flood of turns cannot
	// fill the host's memory. A new turn past either bound is refused
	// (ErrHostBusy, ErrQuota) before anything of it is stored; a task
	// resumed after a restart, or going on after its requests expired, is
	// never refused (it was acknowledged) but counts.
	MaxRunning int
	// Admit, when set, is asked before a new turn is admitted (before the
	// bounds above, so a full disk is what the client is told, not that
	// turns hold the places): an error refuses the turn before anything
	// of it is stored, e.g. the store's disk is nearly full
	// (store.ErrNoSpace). It is not called under the runtime's lock.
	Admit func() error
	// RecoverWhen, when set, is asked every RecoverCheckEvery: true runs
	// Recover again, for the tasks whose turn ended while the store
	// refused its writes (a full disk): their end was not written, and
	// once the store takes writes again Recover resumes or fails them.
	RecoverWhen func() bool
	// ConversationTTL: a conversation idle (no new turn) for longer, with
	// no unfinished task, is deleted by the cleanup (with
	// Stores.Conversations). Zero or negative: kept for ever.
	ConversationTTL time.Duration
	// SweepEvery is how often the cleanup runs. Default: TaskTTL/10
	// within [1s, 10m].
	SweepEvery time.Duration
	// KeepDebugThoughts logs internal:thought-process events (the event
	// log's readers never send them to clients; the admin reads them).
	KeepDebugThoughts bool
	// ExpireEvery, when positive, is how often paused tasks are searched
	// for requests past their expiry, which OnTimeout resolves.
	ExpireEvery time.Duration
	// OnTimeout is what an expired request becomes: "reject" (the task
	// goes on: an approval is rejected, a client tool call ends in an
	// error result) or "fail" (the task fails). Default reject.
	OnTimeout string
	// TakeoverEvery, when positive (and there are leases), is how often
	// Recover runs again to take over the tasks of processes that died:
	// for stores shared by several processes. Zero: only at startup (one
	// process owns the stores, and a pass would scan every task).
	TakeoverEvery time.Duration
	// Shared says that other processes use the same stores (needs
	// Leases): a turn then also holds its context's lease (ContextLeaseKey),
	// so that no two processes run turns of one context at once, and with
	// Stores.Cancels a cancel asked of any process reaches the turn.
	// False: the per-context exclusion is in memory (one process).
	Shared bool
	// Crashpoint, when set, is called at each point between two writes
	// of a task's life (see the Point constants). Crash tests make the
	// process die there; nothing else should set it.
	Crashpoint func(point string)
	// OnSuspend, when set, is called once a shutdown's grace ran out and
	// the turns still running are suspended (StopError.Suspend). Stop
	// tests hold a turn at a Crashpoint until then; nothing else should
	// set it.
	OnSuspend func()
	// TurnContext, when set, derives a turn's context (which the runtime
	// owns) from the request that started it: e.g. to continue its trace.
	TurnContext func(turn, request context.Context) context.Context
	Logger      *slog.Logger
}

// Runtime runs the tasks of the host. It is safe for concurrent use.
type Runtime struct {
	cfg Config
	st  Stores
	ev  Events
	// convExpired counts the conversations ExpireConversations deleted.
	convExpired atomic.Int64
	log         *slog.Logger

	base      context.Context // parent of every turn; cancelled at the end of a shutdown
	cancelAll context.CancelCauseFunc
	stopSweep context.CancelFunc
	sweepDone chan struct{}

	mu          sync.Mutex
	agents      map[string]*loop.Agent
	agentBytes  atomic.Int64             // CachedBytes over agents (loop.AgentConfig.CacheTally)
	running     map[string]*Run          // by task id
	busy        map[string]*Run          // by context id
	perOwner    map[string]int           // running turns by principal, not ended
	ended       int                      // runs in running whose end is out (Run.ended)
	ending      map[string]chan struct{} // tasks whose end is written here, no turn of theirs running (holdEnd)
	closing     bool
	wg          sync.WaitGroup
	starting    sync.Map // contextId -> *sync.Mutex: one agent start per context at a time
	recoverOnce sync.Mutex
	// watch: the requests paused tasks passed up from remote sub-agents,
	// watched for their remote tasks moving on (watch.go).
	watch watches
}

// Run is a turn in progress.
type Run struct {
	TaskID, ContextID, Owner string
	// After: the turn's events have ids above it in the task's stream.
	After   uint64
	Created time.Time

	ctx    context.Context
	cancel func(cause error)
	done   chan struct{}
	lease  *loop.Lease
	// ctxLease holds the context for this turn (Config.Shared); it is
	// released once, when the turn's end goes out or the run is dropped.
	ctxLease *loop.Lease
	ctxOnce  sync.Once
	// ended (under Runtime.mu): the turn's end is out (or being
	// written): its client may read it and go on, though the run still
	// lets go of the task. It no longer counts against MaxRunning and
	// MaxRunningPerPrincipal, and the task's next turn waits for it.
	ended   bool
	outcome loop.Outcome
	err     error
	// saved is the task as the turn's end saved it; set before done
	// closes, nil when the turn saved no end of its own.
	saved *loop.TaskRecord
	// subs are the sub-tasks whose end went out during the turn: their
	// streams are settled with the turn's.
	subMu sync.Mutex
	subs  []string
}

// Done is closed when the turn has ended and its events are in the log.
func (r *Run) Done() <-chan struct{} { return r.done }

// Saved returns the task as the turn's end saved it, once Done is closed:
// what loading the task returns then, without the read. False while the
// turn runs and when it saved no end of its own (it did not start, its
// save failed, or another process owns the task now): load the task.
func (r *Run) Saved() (loop.TaskRecord, bool) {
	select {
	case <-r.done:
	default:
		return loop.TaskRecord{}, false
	}
	if r.saved == nil {
		return loop.TaskRecord{}, false
	}
	return *r.saved, true
}

// lost reports that the run's lease was lost: another process owns the
// task now.
func (r *Run) lost() bool { return errors.Is(context.Cause(r.ctx), loop.ErrLeaseLost) }

// handedOn reports that the turn was suspended (the shutdown's grace ran
// out): it writes nothing more, and its task resumes elsewhere or at the
// next start.
func (r *Run) handedOn() bool { return loop.Suspended(r.ctx) }

// New returns a runtime; StartBackground begins its background work.
func New(cfg Config) (*Runtime, error) {
	switch {
	case cfg.Loop == nil:
		return nil, fmt.Errorf("new task runtime: %w: no loop", loop.ErrInvalid)
	case cfg.Events == nil:
		return nil, fmt.Errorf("new task runtime: %w: no events", loop.ErrInvalid)
	case cfg.Stores.Messages == nil || cfg.Stores.Agents == nil || cfg.Stores.Tasks == nil:
		return nil, fmt.Errorf("new task runtime: %w: messages, agents and tasks stores are required", loop.ErrInvalid)
	}
	if cfg.Owner == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.Owner = "host-" + hex.EncodeToString(b[:])
	}
	if cfg.DeferTaskWrite <= 0 {
		cfg.DeferTaskWrite = deferTaskWrite
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 30 * time.Second
	}
	if cfg.TurnTimeout <= 0 {
		cfg.TurnTimeout = 10 * time.Minute
	}
	if cfg.TaskTTL <= 0 {
		cfg.TaskTTL = 24 * time.Hour
	}
	if cfg.MaxAgents <= 0 {
		cfg.MaxAgents = 10000
	}
	if cfg.ResumeConcurrency <= 0 {
		cfg.ResumeConcurrency = 8
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = min(max(cfg.TaskTTL/10, time.Second), 10*time.Minute)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base, cancel := context.WithCancelCause(context.Background())
	return &Runtime{cfg: cfg, st: cfg.Stores, ev: cfg.Events, log: log, base: base, cancelAll: cancel,
		agents: map[string]*loop.Agent{}, running: map[string]*Run{}, busy: map[string]*Run{},
		perOwner: map[string]int{}, ending: map[string]chan struct{}{}}, nil
}

// Owner returns the name of this process in leases.
func (rt *Runtime) Owner() string { return rt.cfg.Owner }

// Stats returns the number of running turns and of conversations in memory.
func (rt *Runtime) Stats() (running, agents int) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return len(rt.running), len(rt.agents)
}

// StartRequest asks for a turn.
type StartRequest struct {
	Auth *loop.AuthContext // required: the principal
	// ContextID names the conversation; "" starts a new one.
	ContextID string
	// TaskID continues a task that waits on its client; "" starts a new
	// task.
	TaskID  string
	Message loop.Message
	// Answers answer the open requests of the task TaskID names (approvals,
	// client tool results); with them Message is not used. When they
	// leave requests open the task stays paused (Started.Run is nil).
	Answers []loop.InputAnswer
	// CheckAnswers, when set, checks the answers further (schemas) before
	// anything is recorded.
	CheckAnswers func(rec loop.TaskRecord, answers []loop.InputAnswer) error
	// OnAnswered, when set, is called with the task once the answers are
	// accepted, before the task is saved or goes on (the host keeps the
	// credentials they carried). The func it returns, when not nil, is
	// called when Start then fails (a turn bound refuses the continuation,
	// the task cannot be stored...): what it kept goes at once, not when
	// the task ends.
	OnAnswered func(rec loop.TaskRecord) (undo func())
	Metadata   map[string]any
	// NewTaskID and NewContextID make ids; nil: random.
	NewID func() string
	// ClientTools, when not nil, are the tools the client offers for the
	// rest of the task (replacing those it offered before).
	ClientTools []loop.ClientTool
	// AnswerAtEnd says the caller tells its client nothing of a new task
	// before its turn ends (a blocking SendMessage): the task's write may
	// then wait, deferTaskWrite at most, for the commit of that end, and
	// go with it as one write (loop.TaskWriteDeferrer). Start still
	// returns once the task is durable.
	AnswerAtEnd bool
	// answered: the task, its requests all answered (expiry), to go on.
	answered *loop.TaskRecord
}

// deferTaskWrite is how long a new task's write waits for its turn's end
// when the client hears of the task only at that end
// (StartRequest.AnswerAtEnd): a turn whose model answers within it makes
// one synced write instead of two. A longer turn's task is stored after
// it, and a tool never runs before (the turn flushes the write first);
// meanwhile the task is not in the store, which matters to no one: its
// client was not told of it yet, and a crash then loses a task nobody
// knew of, as a crash just before Start would.
const deferTaskWrite = 5 * time.Millisecond

// Started is a turn that has begun: its task is durable, working.
type Started struct {
	Run  *Run
	Task loop.TaskRecord
}

// Start begins a turn and returns once its task and input are durable (a
// client told about the task can always find it, across a crash); the
// turn runs on in the background.
func (rt *Runtime) Start(ctx context.Context, req StartRequest) (_ *Started, err error) {
	var undo func()
	defer func() {
		if err != nil && undo != nil {
			undo() // refused: nothing the answers carried stays behind
		}
	}()
	if req.Auth == nil || req.Auth.Principal == "" {
		return nil, fmt.Errorf("start task: %w: no principal", loop.ErrInvalid)
	}
	newID := req.NewID
	if newID == nil {
		newID = randomID
	}
	principal := req.Auth.Principal
	contextID, taskID := req.ContextID, req.TaskID
	var prev *loop.TaskRecord
	if req.answered != nil {
		// Expired requests resolved by the runtime itself.
		rec := *req.answered
		contextID, prev = rec.ContextID, &rec
	} else if taskID != "" {
		rec, err := rt.Load(ctx, principal, taskID)
		if err != nil {
			return nil, err
		}
		if contextID != "" && contextID != rec.ContextID {
			return nil, fmt.Errorf("%w: task %q belongs to another context", loop.ErrInvalid, taskID)
		}
		if rec.ParentTaskID != "" {
			// A sub-task runs under its parent's call only: a request it
			// waits for is passed up and answered on the parent, where
			// the decision is recorded once. An answer or a message here
			// would be a second route to the same call (run twice, or
			// run though the parent rejects it).
			return nil, fmt.Errorf("%w: task %q is a sub-task of %q and takes no messages of its own; "+
				"its requests are passed up: answer them on task %q", loop.ErrInvalid, taskID, rec.ParentTaskID, rec.ParentTaskID)
		}
		if rec.Status.Terminal() {
			return nil, endedError(rec, false)
		}
		if !rec.Status.Interrupted() {
			return nil, fmt.Errorf("%w: task %q is %s and takes no more messages; send without taskId to start a new task",
				loop.ErrInvalid, taskID, rec.Status)
		}
		open := rec.OpenRequests()
		switch {
		case len(req.Answers) > 0:
			// Checked whole before anything changes.
			if req.CheckAnswers != nil {
				if err := req.CheckAnswers(rec, req.Answers); err != nil {
					return nil, err
				}
			}
			complete, err := rec.Answer(req.Answers, time.Now().UTC())
			if err != nil {
				return nil, err
			}
			if req.OnAnswered != nil {
				undo = req.OnAnswered(rec)
			}
			if !complete {
				return rt.recordAnswers(ctx, rec, req.Answers)
			}
		case len(open) > 0:
			return nil, fmt.Errorf("%w: task %q waits for responses to its requests (%d open, first %q); "+
				"answer them with a data part (docs/A2A_EXTENSION.md) or cancel the task", loop.ErrInvalid, taskID, len(open), open[0].InputID)
		}
		contextID, prev = rec.ContextID, &rec
	}
	// An id made here is new: nothing stored names it, so nothing is read
	// for it (a read waits for the commit in flight, such as the previous
	// turn's last writes, on a store that syncs).
	freshContext := contextID == ""
	if freshContext {
		contextID = newID()
	}
	if len(contextID) > maxContextID {
		return nil, fmt.Errorf("%w: contextId longer than %d bytes", loop.ErrInvalid, maxContextID)
	}
	admit := req.answered == nil
	if admit {
		// Refused before the conversation is loaded: a refusal costs the
		// host next to nothing. The disk first (registerRun asks again):
		// a full disk is what the client is told, not HOST_BUSY because
		// turns the full disk is stopping still hold their places.
		if rt.cfg.Admit != nil {
			if err := rt.cfg.Admit(); err != nil {
				return nil, err
			}
		}
		rt.mu.Lock()
		err := rt.admitsLocked(principal)
		rt.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	agent, err := rt.agentOf(ctx, contextID, principal, rt.leasedSave(), freshContext)
	if err != nil {
		return nil, err
	}
	freshTask := taskID == ""
	if freshTask {
		taskID = newID()
	}
	r, err := rt.registerRun(ctx, taskID, contextID, principal, freshTask, admit)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	rec := loop.TaskRecord{ID: taskID, ContextID: contextID, Owner: principal, Status: loop.TaskWorking,
		History: []loop.Message{req.Message}, TurnInput: 1, CreatedAt: now, UpdatedAt: now, Metadata: req.Metadata}
	if prev != nil {
		rec = *prev
		rec.Status, rec.UpdatedAt, rec.Message, rec.Reason = loop.TaskWorking, now, "", ""
		rec.History = append(append([]loop.Message(nil), prev.History...), req.Message)
		rec.TurnInput, rec.PendingCalls = 1, nil
		if len(req.Answers) > 0 || req.answered != nil {
			// The answers are the turn's input: no message joins the
			// history; the answered calls settle first.
			rec.History, rec.TurnInput = prev.History, 0
		}
		if req.Metadata != nil {
			rec.Metadata = keepCallChain(prev.Metadata, req.Metadata)
		}
	}
	if req.ClientTools != nil {
		rec.ClientTools = req.ClientTools
	}
	r.Created = rec.CreatedAt
	rt.crashpoint(PointTaskStarting)
	if prev == nil && rt.leasedSave() {
		return rt.startStoring(ctx, r, rec, agent, req.Auth, req.AnswerAtEnd)
	}
	if err := rt.save(ctx, r, rec, agent); err != nil {
		rt.unregister(r)
		if prev != nil && errors.Is(err, loop.ErrBusy) {
			// Refused because the task changed since it was read: one
			// that has ended since (a cancel that came in at the same
			// time) says so, not busy.
			if cur, lerr := rt.st.Tasks.LoadTask(ctx, taskID); lerr == nil && cur.Status.Terminal() {
				return nil, endedError(cur, true)
			}
		}
		return nil, err
	}
	rec.Version++
	rt.crashpoint(PointTaskSaved)
	rt.launch(r, rec, nil, func(ctx context.Context, sink loop.EventSink) (loop.Outcome, error) {
		return agent.RunTask(ctx, loop.RunInput{TaskID: taskID, Auth: req.Auth, Sink: sink, Lease: r.lease})
	})
	return &Started{Run: r, Task: rec}, nil
}

// startStoring starts the turn of a new task while its record is being
// stored (one synced write, with its lease and a new context's record), so
// that the model is already called while that write syncs. Nothing of the
// turn is out before the write is: its events are held until then (a
// client learns of the task from its stream, or from the answer, both
// after), and the loop runs no tool and writes nothing before it
// (loop.RunInput.Stored). If the write fails, the turn is stopped, its
// events are dropped and Start answers the error, as without the overlap.
// Only a new task's turn starts this way: it begins with its model call,
// which has no effect a failed write would have to undo.
func (rt *Runtime) startStoring(ctx context.Context, r *Run, rec loop.TaskRecord, agent *loop.Agent, auth *loop.AuthContext, atEnd bool) (*Started, error) {
	g := &startGate{decided: make(chan struct{}), queued: make(chan struct{}), atEnd: atEnd}
	run := rec
	run.Version++ // as it will be stored
	in := loop.RunInput{TaskID: rec.ID, Auth: auth, Task: &run,
		Stored: func() (*loop.Lease, error) {
			<-g.queued
			if g.flush != nil {
				g.flush() // a held task write goes now: a tool is to run
			}
			<-g.decided
			return r.lease, g.err
		}}
	if _, ok := rt.st.TaskLeases.(loop.LeasedTaskSubmitter); ok {
		in.Queued = func() (*loop.Lease, error) {
			<-g.queued
			return g.lease, g.qerr
		}
	}
	rt.launch(r, rec, g, func(ctx context.Context, sink loop.EventSink) (loop.Outcome, error) {
		in.Sink = sink
		return agent.RunTask(ctx, in)
	})
	err := rt.saveQueued(ctx, r, rec, agent, g)
	if err == nil {
		rt.crashpoint(PointTaskSaved)
		g.stopRenew = rt.renew(r)
	} else {
		r.cancel(err)
	}
	g.decide(err)
	if err != nil {
		<-r.done // the turn has ended, nothing of it written or published
		return nil, err
	}
	rec.Version++
	return &Started{Run: r, Task: rec}, nil
}

// startGate holds a turn's events until its task is stored (startStoring).
type startGate struct {
	decided   chan struct{} // closed once the write is done
	err       error         // the write's error; set before decided closes
	stopRenew func()        // the lease's renewal, when stored; set before decided closes

	// queued is closed once the task's write is queued in the store
	// (loop.LeasedTaskSubmitter) or could not be: lease is the lease it
	// stores, qerr why it could not be queued. Set before queued closes.
	queued chan struct{}
	lease  *loop.Lease
	qerr   error
	// atEnd: the task's write may wait for the turn's end
	// (StartRequest.AnswerAtEnd); flush, when it does, sends it at once.
	// Set before queued closes.
	atEnd bool
	flush func()
	// keep says whether the turn's sink passes an event on to the log
	// (launch sets it): the held events a merged end carries are those.
	keep func(loop.Event) bool

	mu      sync.Mutex
	settled bool
	held    []loop.Event
	emit    loop.EventSink
}

// queue records that the task's write is queued with lease l, or could
// not be (err).
func (g *startGate) queue(l *loop.Lease, err error) {
	g.lease, g.qerr = l, err
	close(g.queued)
}

// maxMergedHeld bounds the held events a turn's end carries in its own
// write (startGate.mergeEnd): a turn that emitted more waits for its
// task's write, and its end is written as usual. A fast model's turn
// holds a handful.
const maxMergedHeld = 64

// sink holds events until the task is stored, then passes them on (or
// drops them all when it could not be).
func (g *startGate) sink(next loop.EventSink) loop.EventSink {
	g.emit = next
	f := loop.SinkFunc(func(e loop.Event) {
		g.mu.Lock()
		if !g.settled {
			g.held = append(g.held, e)
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		if g.err == nil {
			next.Emit(e)
		}
	})
	es, ok := next.(loop.EndSink)
	if !ok {
		return f
	}
	return endSink{SinkFunc: f, end: func(ctx context.Context, tc loop.TurnCommitter, c loop.TurnCommit, end []loop.Event) (bool, error) {
		g.mu.Lock()
		if !g.settled {
			if held, ok := g.mergeable(); ok {
				g.held = nil
				g.mu.Unlock()
				return g.mergeEnd(ctx, es, tc, c, held, end)
			}
		}
		// Not waited for here: the turn commits its end holding its
		// agent, which the task's write, once done, updates
		// (Agent.MetadataSaved). Unmerged, the commit goes alone (behind
		// the task's write, fenced by its lease) and the end's events
		// after what the gate holds.
		open := g.settled && g.err == nil && len(g.held) == 0
		g.mu.Unlock()
		if !open {
			return false, nil // the end goes after what the gate holds
		}
		return es.CommitEnd(ctx, tc, c, end)
	}}
}

// mergeable returns the held events a turn's end may carry in its own
// write while the task's write is still under way (g.mu held): those the
// sink passes on, when the task's write is queued and none of them is
// one the sink treats apart (an end of a task), and they are few.
func (g *startGate) mergeable() ([]loop.Event, bool) {
	select {
	case <-g.queued:
	default:
		return nil, false
	}
	if g.qerr != nil || g.lease == nil || g.keep == nil || len(g.held) > maxMergedHeld {
		return nil, false
	}
	held := make([]loop.Event, 0, len(g.held))
	for _, e := range g.held {
		if !g.keep(e) {
			continue
		}
		if _, ok := e.(*loop.TaskComplete); ok {
			return nil, false
		}
		if st, ok := e.(*loop.TaskStatusEvent); ok && st.Status != loop.TaskWorking && st.Status != loop.TaskSubmitted {
			return nil, false
		}
		held = append(held, e)
	}
	return held, true
}

// mergeEnd writes the end of a turn that ended before its task's write was
// out, behind that write: the held events and the end in one write with
// the turn's commit, fenced by the task's lease, so that all of it is
// stored (and published) only if the task is, and once it is. If that
// write is not made or is refused, the held events go back ahead of
// whatever comes later, and are let out (or dropped) with the task's
// write's outcome as before.
func (g *startGate) mergeEnd(ctx context.Context, es loop.EndSink, tc loop.TurnCommitter, c loop.TurnCommit, held, end []loop.Event) (bool, error) {
	all := make([]loop.Event, 0, len(held)+len(end))
	all = append(append(all, held...), end...)
	handled, err := es.CommitEnd(ctx, tc, c, all)
	if handled && err == nil {
		return true, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.settled {
		g.held = append(held, g.held...)
	} else if g.err == nil {
		for _, e := range held {
			g.emit.Emit(e)
		}
	}
	return handled, err
}

// decide records the write's outcome and lets the held events out (in
// order, before any later one), or drops them.
func (g *startGate) decide(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.err = err
	if err == nil {
		for _, e := range g.held {
			g.emit.Emit(e)
		}
	}
	g.held, g.settled = nil, true
	close(g.decided)
}

func randomID() string { return uuid.NewString() }

// recordAnswers stores the answers of a task that stays paused (some of its
// requests are still open) and announces them. The write is versioned: of
// two answers racing, one is refused.
func (rt *Runtime) recordAnswers(ctx context.Context, rec loop.TaskRecord, answers []loop.InputAnswer) (*Started, error) {
	rec.UpdatedAt = time.Now().UTC()
	rec.Message = loop.RequestsPrompt(rec.Requests)
	// auth-required while a credential is still asked for, input-required
	// otherwise.
	rec.Status = loop.TaskWaitingInput
	for _, r := range rec.OpenRequests() {
		if r.InputType == loop.InputAuth {
			rec.Status = loop.TaskWaitingAuth
		}
	}
	if err := rt.st.Tasks.SaveTask(ctx, rec); err != nil {
		if errors.Is(err, loop.ErrConflict) {
			return nil, fmt.Errorf("task %q: %w", rec.ID, loop.ErrBusy)
		}
		return nil, fmt.Errorf("record answers of task %q: %w", rec.ID, err)
	}
	rec.Version++
	h := loop.Header{Kind: loop.KindInputReceived, ContextID: rec.ContextID, TaskID: rec.ID, Timestamp: rec.UpdatedAt}
	for _, a := range answers {
		by := a.ProvidedBy
		if by == "" {
			by = "user"
		}
		if err := rt.ev.Publish(ctx, &loop.InputReceived{Header: h, InputID: a.InputID, ProvidedBy: by,
			UserID: a.UserID, AgentID: a.AgentID}); err != nil {
			rt.log.LogAttrs(ctx, slog.LevelWarn, "input-received not published",
				slog.String("task_id", rec.ID), slog.String("error", err.Error()))
		}
	}
	return &Started{Task: rec}, nil
}

// maxContextID bounds a context id as the runtime gets it: a client's
// (200 bytes at most, the host checks) behind its principal's scope.
const maxContextID = 256

// ContextLeasePrefix begins the keys of context leases (Config.Shared);
// every other lease is a task's, keyed by the task id.
const ContextLeasePrefix = "context/"

// ContextLeaseKey is the key of the lease a turn holds on its context
// while it runs, when several processes share the stores.
func ContextLeaseKey(contextID string) string { return ContextLeasePrefix + contextID }

// leasedSave says a starting task is stored with its lease in one write
// (Stores.TaskLeases): the metadata of a new context goes in it too.
func (rt *Runtime) leasedSave() bool { return rt.st.Leases != nil && rt.st.TaskLeases != nil }

// save makes a starting task durable before anyone hears of it: its lease
// (with leases) and the task with its input, in one write when the store
// has it (Stores.TaskLeases), with the metadata of a new context. On error
// nothing is held and nothing is written.
func (rt *Runtime) save(ctx context.Context, r *Run, rec loop.TaskRecord, agent *loop.Agent) error {
	if rt.st.Leases == nil || rt.st.TaskLeases == nil {
		if err := rt.own(ctx, r, true); err != nil {
			return err
		}
		rt.crashpoint(PointLeaseTaken)
		if err := rt.st.Tasks.SaveTask(ctx, rec); err != nil {
			rt.disown(r)
			return startWriteErr(rec, err)
		}
		return nil
	}
	meta, err := rt.beforeLeasedSave(ctx, r, agent)
	if err != nil {
		return err
	}
	l, err := rt.st.TaskLeases.SaveTaskLeased(ctx, rec, meta, rt.cfg.Owner, r.ContextID, rt.cfg.LeaseTTL)
	if err != nil {
		return rt.leasedSaveErr(r, rec, err)
	}
	rt.leasedSaved(r, agent, meta, l)
	return nil
}

// beforeLeasedSave takes the context's lease when the stores are shared
// and returns the metadata of a new context, to go with the task's write.
func (rt *Runtime) beforeLeasedSave(ctx context.Context, r *Run, agent *loop.Agent) (*loop.AgentMetadata, error) {
	if rt.cfg.Shared {
		if err := rt.ownContext(ctx, r); err != nil {
			return nil, err
		}
		rt.crashpoint(PointLeaseTaken)
	}
	if m, ok := agent.PendingMetadata(); ok {
		return &m, nil
	}
	return nil, nil
}

// leasedSaved records that a starting task is stored with its lease l
// (and a new context's metadata, when meta is not nil).
func (rt *Runtime) leasedSaved(r *Run, agent *loop.Agent, meta *loop.AgentMetadata, l loop.Lease) {
	if meta != nil {
		agent.MetadataSaved()
	}
	r.lease = &l
}

// leasedSaveErr lets go of what a starting task held and says why its
// write with its lease was refused: busy when another host holds the
// lease or the task changed meanwhile.
func (rt *Runtime) leasedSaveErr(r *Run, rec loop.TaskRecord, err error) error {
	rt.releaseContextLease(r)
	if errors.Is(err, loop.ErrLeaseHeld) {
		return fmt.Errorf("task %q runs on another host: %w", r.TaskID, loop.ErrBusy)
	}
	return startWriteErr(rec, err)
}

// startWriteErr says why a starting task's write was refused: busy when
// the task changed meanwhile.
func startWriteErr(rec loop.TaskRecord, err error) error {
	if errors.Is(err, loop.ErrConflict) {
		return fmt.Errorf("task %q: %w", rec.ID, loop.ErrBusy)
	}
	return fmt.Errorf("start task %q: %w", rec.ID, err)
}

// saveQueued is save for a new task's first turn (startStoring), whose
// write is queued with the store's LeasedTaskSubmitter when it has one: g
// learns when it is queued, with its lease (g.queue, called once whatever
// happens, so that the turn never waits for it in vain), and saveQueued
// returns once it is durable.
func (rt *Runtime) saveQueued(ctx context.Context, r *Run, rec loop.TaskRecord, agent *loop.Agent, g *startGate) (err error) {
	sub, ok := rt.st.TaskLeases.(loop.LeasedTaskSubmitter)
	if !ok || rt.st.Leases == nil {
		err = rt.save(ctx, r, rec, agent)
		g.queue(nil, errNotQueued)
		return err
	}
	queued := false
	defer func() {
		if !queued {
			g.queue(nil, err)
		}
	}()
	meta, err := rt.beforeLeasedSave(ctx, r, agent)
	if err != nil {
		return err
	}
	var l loop.Lease
	var wait func() error
	if d, ok := sub.(loop.TaskWriteDeferrer); ok && g.atEnd {
		l, g.flush, wait, err = d.DeferTaskLeased(ctx, rec, meta, rt.cfg.Owner, r.ContextID, rt.cfg.LeaseTTL, rt.cfg.DeferTaskWrite)
	} else {
		l, wait, err = sub.SubmitTaskLeased(ctx, rec, meta, rt.cfg.Owner, r.ContextID, rt.cfg.LeaseTTL)
	}
	if err == nil {
		queued = true
		g.queue(&l, nil)
		err = wait()
	}
	if err != nil {
		return rt.leasedSaveErr(r, rec, err)
	}
	rt.leasedSaved(r, agent, meta, l)
	return nil
}

// errNotQueued is what Queued answers when the store queues no task's
// write (it is not a LeasedTaskSubmitter): Queued is not offered then.
var errNotQueued = errors.New("the store does not queue a task's write")

// ownContext takes the lease of r's context (stores shared by several
// processes): a context whose turn runs on another process answers busy,
// as one running here does.
func (rt *Runtime) ownContext(ctx context.Context, r *Run) error {
	l, err := rt.st.Leases.AcquireLease(ctx, ContextLeaseKey(r.ContextID), rt.cfg.Owner, r.TaskID, rt.cfg.LeaseTTL)
	if errors.Is(err, loop.ErrLeaseHeld) {
		return fmt.Errorf("context %q runs a turn on another host: %w", loop.ClientContextID(r.ContextID), loop.ErrBusy)
	}
	if err != nil {
		return fmt.Errorf("own context %q: %w", loop.ClientContextID(r.ContextID), err)
	}
	r.ctxLease = &l
	return nil
}

// own takes the lease of r's task (when the runtime has leases). A turn
// (withContext) first takes its context's lease, when the stores are
// shared: a context whose turn runs on another process answers busy, as
// one running here does.
func (rt *Runtime) own(ctx context.Context, r *Run, withContext bool) error {
	if rt.st.Leases == nil {
		return nil
	}
	if withContext && rt.cfg.Shared {
		if err := rt.ownContext(ctx, r); err != nil {
			return err
		}
	}
	l, err := rt.st.Leases.AcquireLease(ctx, r.TaskID, rt.cfg.Owner, r.ContextID, rt.cfg.LeaseTTL)
	if err != nil {
		rt.releaseContextLease(r)
	}
	if errors.Is(err, loop.ErrLeaseHeld) {
		return fmt.Errorf("task %q runs on another host: %w", r.TaskID, loop.ErrBusy)
	}
	if err != nil {
		return fmt.Errorf("own task %q: %w", r.TaskID, err)
	}
	r.lease = &l
	return nil
}

// releaseContextLease gives r's context lease up (once): the context
// takes its next turn, on any process.
func (rt *Runtime) releaseContextLease(r *Run) {
	if r.ctxLease == nil {
		return
	}
	r.ctxOnce.Do(func() {
		if err := rt.st.Leases.ReleaseLease(context.Background(), *r.ctxLease); err != nil {
			rt.log.LogAttrs(context.Background(), slog.LevelWarn, "context lease not released",
				slog.String("task_id", r.TaskID), slog.String("error", err.Error()))
		}
	})
}

// disown releases r's leases.
func (rt *Runtime) disown(r *Run) {
	rt.releaseContextLease(r)
	if r.lease == nil {
		return
	}
	if err := rt.st.Leases.ReleaseLease(context.Background(), *r.lease); err != nil {
		rt.log.LogAttrs(context.Background(), slog.LevelWarn, "lease not released",
			slog.String("task_id", r.TaskID), slog.String("error", err.Error()))
	}
}

// admitsLocked says whether a new turn of owner fits within MaxRunning and
// MaxRunningPerPrincipal.
func (rt *Runtime) admitsLocked(owner string) error {
	if q := rt.cfg.MaxRunning; q > 0 && len(rt.running)-rt.ended >= q {
		return fmt.Errorf("%w: %d turns running, the limit is %d; retry shortly", ErrHostBusy, len(rt.running)-rt.ended, q)
	}
	if q := rt.cfg.MaxRunningPerPrincipal; q > 0 && rt.perOwner[owner] >= q {
		return fmt.Errorf("%w: %d running, the limit is %d; retry when one ends", ErrQuota, rt.perOwner[owner], q)
	}
	return nil
}

// register marks a task as running on its context: one turn per context;
// a new turn (admit) only within MaxRunning and MaxRunningPerPrincipal.
func (rt *Runtime) register(ctx context.Context, taskID, contextID, owner string, admit bool) (*Run, error) {
	return rt.registerRun(ctx, taskID, contextID, owner, false, admit)
}

// registerRun is register; fresh says the task's id was just made (its
// stream is empty: not read).
func (rt *Runtime) registerRun(ctx context.Context, taskID, contextID, owner string, fresh, admit bool) (*Run, error) {
	var after uint64
	if !fresh {
		if _, err := rt.awaitEnded(ctx, taskID); err != nil {
			return nil, err
		}
		var err error
		if after, err = rt.ev.Last(ctx, taskID); err != nil {
			return nil, err
		}
	}
	if admit && rt.cfg.Admit != nil {
		// The store's refusal first, outside the lock (it measures the
		// disk): a client of a host whose disk is full is told
		// STORAGE_FULL, which says what is wrong, not HOST_BUSY because
		// turns that the full disk is stopping still hold their places.
		if err := rt.cfg.Admit(); err != nil {
			return nil, err
		}
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if ch, ok := rt.ending[taskID]; ok {
		// Its end is being written here (awaitEnded waited, and the
		// hold came since): it is awaited, then the caller's write finds
		// the task changed.
		rt.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			rt.mu.Lock()
			return nil, ctx.Err()
		}
		rt.mu.Lock()
	}
	if rt.closing {
		return nil, ErrShuttingDown
	}
	if _, ok := rt.busy[contextID]; ok {
		return nil, fmt.Errorf("context %q: %w", loop.ClientContextID(contextID), loop.ErrBusy)
	}
	if _, ok := rt.running[taskID]; ok {
		return nil, fmt.Errorf("task %q: %w", taskID, loop.ErrBusy)
	}
	if admit {
		if err := rt.admitsLocked(owner); err != nil {
			return nil, err
		}
	}
	causeCtx, cancelCause := context.WithCancelCause(rt.base)
	// The turn's time limit is the host stopping it, not a cancel: the
	// turn ends failed and says which limit.
	runCtx, cancelTimeout := context.WithTimeoutCause(causeCtx, rt.cfg.TurnTimeout, &loop.StopError{Reason: loop.ReasonTimeout,
		Message: fmt.Sprintf("the turn ran past the host's turn timeout (limits.turnTimeout, %s)", rt.cfg.TurnTimeout)})
	cancel := func(cause error) { cancelCause(cause); cancelTimeout() }
	if rt.cfg.TurnContext != nil {
		runCtx = rt.cfg.TurnContext(runCtx, ctx)
	}
	r := &Run{TaskID: taskID, ContextID: contextID, Owner: owner, After: after, ctx: runCtx, cancel: cancel,
		done: make(chan struct{})}
	rt.busy[contextID], rt.running[taskID] = r, r
	rt.perOwner[owner]++
	return r, nil
}

// awaitEnded waits while the task's previous turn, whose end is out, lets
// go of the task (its events settled, its lease released): a client that
// read the task paused and answers at once was told the turn ended, and
// is not refused busy for the moment the runtime takes to finish it.
// It reports whether it waited.
func (rt *Runtime) awaitEnded(ctx context.Context, taskID string) (bool, error) {
	waited := false
	for {
		rt.mu.Lock()
		prev := rt.running[taskID]
		ended := prev != nil && prev.ended
		hold, holding := rt.ending[taskID]
		rt.mu.Unlock()
		var done <-chan struct{}
		switch {
		case ended:
			done = prev.done
		case holding:
			done = hold // its end is being written here (holdEnd)
		default:
			return waited, nil
		}
		waited = true
		rt.crashpoint(PointTurnWaiting)
		select {
		case <-done:
		case <-ctx.Done():
			return waited, ctx.Err()
		}
	}
}

// holdEnd marks the task taskID as ended here while its end is written,
// no turn of it running here: a turn of it (an answer) waits until
// release (the first call; later ones do nothing), then finds the task
// changed. ok is false when a turn of it is registered here already (the
// caller cancels that turn instead).
func (rt *Runtime) holdEnd(ctx context.Context, taskID string) (release func(), ok bool, err error) {
	for {
		rt.mu.Lock()
		if rt.running[taskID] != nil {
			rt.mu.Unlock()
			return nil, false, nil
		}
		ch, held := rt.ending[taskID]
		if !held {
			ch = make(chan struct{})
			rt.ending[taskID] = ch
			rt.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					rt.mu.Lock()
					delete(rt.ending, taskID)
					rt.mu.Unlock()
					close(ch)
				})
			}, true, nil
		}
		rt.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// hasEnded reports whether r's end is out (releaseContext).
func (rt *Runtime) hasEnded(r *Run) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return r.ended
}

// releaseContext frees r's context for the next turn, here and (with a
// context lease) on every process: r's end is out. Its turn no longer
// counts as running (MaxRunning, MaxRunningPerPrincipal), and the next
// turn of its task waits for it to let go (awaitEnded).
func (rt *Runtime) releaseContext(r *Run) {
	rt.releaseContextLease(r)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.busy[r.ContextID] == r {
		delete(rt.busy, r.ContextID)
	}
	if rt.running[r.TaskID] == r && !r.ended {
		r.ended = true
		rt.ended++
		rt.uncountLocked(r.Owner)
	}
}

// uncountLocked takes a turn of owner off perOwner.
func (rt *Runtime) uncountLocked(owner string) {
	if rt.perOwner[owner]--; rt.perOwner[owner] <= 0 {
		delete(rt.perOwner, owner)
	}
}

// unregister forgets r entirely.
func (rt *Runtime) unregister(r *Run) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.busy[r.ContextID] == r {
		delete(rt.busy, r.ContextID)
	}
	if rt.running[r.TaskID] == r {
		delete(rt.running, r.TaskID)
		if r.ended {
			rt.ended--
		} else {
			rt.uncountLocked(r.Owner)
		}
	}
	r.cancel(nil)
}

// endOf reports whether e announces the end of a task whose record says so
// already: a final (or paused) status or a task-complete, of r's task or
// of one of its sub-tasks, and the requests its turn's end announces. Such
// events pass even once r is suspended: they follow a write the stop did
// not cut, and without them that task's stream would never end.
func endOf(r *Run, e loop.Event) bool {
	switch ev := e.(type) {
	case *loop.TaskComplete:
		return true
	case *loop.TaskStatusEvent:
		return ev.Status != loop.TaskWorking && ev.Status != loop.TaskSubmitted && ev.Status != loop.TaskWaitingSubtask
	case *loop.InputRequired:
		return ev.TaskID == r.TaskID
	case *loop.AuthRequired:
		return ev.TaskID == r.TaskID
	}
	return false
}

// handedOn reports whether r's turn was handed on by the shutdown: it
// stopped (suspended) or never started, and wrote nothing of its end. A
// turn the stop reached after it had decided to end (its commit written or
// being written) is not: it ends as any other, its final events out before
// its lease goes.
func handedOn(r *Run, out loop.Outcome, err error) bool {
	if !r.handedOn() {
		return false
	}
	if err != nil {
		return true // not started: nothing of it was written
	}
	var se *loop.StopError
	return out.Status == loop.TaskWorking && errors.As(out.Err, &se) && se.Suspend
}

// isFinal reports whether e is the status that ends r's turn.
func isFinal(r *Run, e loop.Event) bool {
	st, ok := e.(*loop.TaskStatusEvent)
	return ok && st.TaskID == r.TaskID && st.Status != loop.TaskWorking && st.Status != loop.TaskSubmitted &&
		st.Status != loop.TaskWaitingSubtask
}

// launch runs a turn of r on the runtime's context, in a goroutine the
// runtime owns; rec is the task as stored, for when the turn cannot start.
//
// With a gate (startStoring) the task is being stored while the turn
// starts: the turn's events wait for the write, and when it fails the turn
// leaves nothing behind (Start answers the error).
func (rt *Runtime) launch(r *Run, rec loop.TaskRecord, g *startGate, turn func(ctx context.Context, sink loop.EventSink) (loop.Outcome, error)) {
	taskID, contextID := r.TaskID, r.ContextID
	pub := rt.ev.Sink(func(e loop.Event, err error) {
		if errors.Is(err, loop.ErrStorageFull) {
			// The event log refuses the turn's events for want of space:
			// a turn is never run on with effects its stream does not
			// show. It is suspended, as by a graceful stop, and resumes
			// from its last checkpoint once the store takes writes again.
			if !r.handedOn() {
				rt.log.LogAttrs(context.Background(), slog.LevelWarn, "turn suspended: the store refuses its events for want of space",
					slog.String("task_id", taskID), slog.String("error", err.Error()))
			}
			r.cancel(errStorageFull)
			return
		}
		rt.log.LogAttrs(context.Background(), slog.LevelError, "event not logged",
			slog.String("task_id", taskID), slog.String("kind", string(e.Head().Kind)), slog.String("error", err.Error()))
	})
	keep := func(e loop.Event) bool {
		// Internal events are for tracing, not for the log clients read.
		k := e.Head().Kind
		return !k.Internal() || (rt.cfg.KeepDebugThoughts && k == loop.KindInternalThoughtProcess)
	}
	emit := loop.SinkFunc(func(e loop.Event) {
		if !keep(e) {
			return
		}
		final := isFinal(r, e)
		if final && !r.lost() {
			// The turn is saved (the loop announces its end only after
			// that); nothing of its end is in the log yet.
			rt.crashpoint(PointTurnCommitted)
		}
		if r.lost() || (r.handedOn() && !endOf(r, e)) {
			// The task is another process's now (or will be, or the next
			// start's): its stream is theirs. A turn's end is never cut:
			// the loop announces it only once its record is written (a
			// suspended turn writes and announces no end), so a stop that
			// comes between the two must not leave that record final with
			// a stream that never says so.
			return
		}
		if final {
			// The context takes the next turn before anyone can see this
			// one end.
			rt.releaseContext(r)
		}
		tc, subEnd := e.(*loop.TaskComplete)
		subEnd = subEnd && tc.TaskID != r.TaskID && tc.ParentTaskID != ""
		if subEnd {
			r.subMu.Lock()
			r.subs = append(r.subs, tc.TaskID)
			r.subMu.Unlock()
		}
		pub.Emit(e)
		if subEnd {
			// A sub-task's stream ends with its own task-complete, not
			// with its parent's turn: its followers stop there.
			rt.wg.Add(1)
			go func(id string) {
				defer rt.wg.Done()
				if err := rt.ev.Settle(context.Background(), id, contextID, true); err != nil {
					rt.log.LogAttrs(context.Background(), slog.LevelWarn, "sub-task events not settled",
						slog.String("task_id", id), slog.String("error", err.Error()))
				}
			}(tc.TaskID)
		}
	})
	var sink loop.EventSink = emit
	if ee, ok := rt.ev.(EndEvents); ok {
		sink = endSink{SinkFunc: emit, end: func(ctx context.Context, tc loop.TurnCommitter, c loop.TurnCommit, end []loop.Event) (bool, error) {
			return rt.commitEnd(ctx, ee, r, tc, c, end)
		}}
	}
	var run loop.EventSink = sink
	var stopRenew func()
	if g == nil {
		stopRenew = rt.renew(r)
	} else {
		g.keep = keep
		run = g.sink(sink)
	}
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		out, err := turn(r.ctx, run)
		var subs []string
		if g != nil {
			<-g.decided
			if g.err != nil {
				// Not stored: nothing was written or published, and
				// Start answers the error. The agent stays (it saved
				// nothing of the turn) for the next one.
				rt.unregister(r)
				close(r.done)
				return
			}
			stopRenew = g.stopRenew
		}
		stopRenew()
		if se := (&loop.StopError{}); errors.As(out.Err, &se) && se.Suspend {
			// The loop suspended the turn itself (the store refused one
			// of its writes for want of space): it is handed on as below.
			r.cancel(se)
		}
		if handedOn(r, out, err) && !r.lost() {
			// Suspended by the shutdown: nothing of the turn's end was
			// written or published, as in a crash at this moment. The
			// leases go at once, so that another host (or the next start)
			// takes the task up without waiting for them to lapse.
			rt.mu.Lock()
			rt.dropAgentLocked(contextID)
			rt.starting.Delete(contextID)
			rt.mu.Unlock()
			rt.unregister(r)
			close(r.done)
			rt.disown(r)
			rt.log.LogAttrs(context.Background(), slog.LevelInfo, "turn handed on: its task resumes at the next start, on another host or once the store takes writes again",
				slog.String("task_id", taskID), slog.String("reason", context.Cause(r.ctx).Error()))
			return
		}
		if r.lost() {
			// Nothing of the turn was saved (its commit is fenced by the
			// lease) and its end belongs to the new owner.
			rt.mu.Lock()
			rt.dropAgentLocked(contextID)
			rt.starting.Delete(contextID)
			rt.mu.Unlock()
			rt.releaseContextLease(r)
			rt.unregister(r)
			close(r.done)
			return
		}
		if err != nil {
			// The turn did not start: the task fails, and says why; or a
			// client's cancel (CancelTask, here or asked of another
			// process: the cause context.Canceled) came first, and the
			// turn stopped on it before it read its task. That is no
			// failure: the task ends canceled, as the client asked.
			st := loop.TaskFailed
			why := err.Error()
			var stop *loop.StopError
			if r.ctx.Err() != nil && !errors.As(context.Cause(r.ctx), &stop) && !errors.Is(context.Cause(r.ctx), context.DeadlineExceeded) {
				st = loop.TaskCanceled // a client's cancel
			}
			if st == loop.TaskCanceled && errors.Is(context.Cause(r.ctx), context.Canceled) && errors.Is(err, context.Canceled) {
				why = "canceled by the client"
				rt.log.LogAttrs(context.Background(), slog.LevelInfo, "turn canceled by its client before it started",
					slog.String("task_id", taskID))
			} else {
				rt.log.LogAttrs(context.Background(), slog.LevelError, "turn not started",
					slog.String("task_id", taskID), slog.String("error", err.Error()))
			}
			if cur, lerr := rt.st.Tasks.LoadTask(context.Background(), taskID); lerr == nil {
				rec = cur
			}
			if !rec.Status.Terminal() && rec.Version > 0 {
				rt.releaseContext(r)
				if ferr := rt.finishStored(context.Background(), rec, st, why); ferr != nil {
					rt.log.LogAttrs(context.Background(), slog.LevelError, "task not finished",
						slog.String("task_id", taskID), slog.String("error", ferr.Error()))
				}
			}
		} else {
			r.subMu.Lock()
			subs = r.subs
			r.subMu.Unlock()
			for _, id := range subs {
				// A sub-task's stream ends with it (its task-complete is out).
				if err := rt.ev.Settle(context.Background(), id, contextID, true); err != nil {
					rt.log.LogAttrs(context.Background(), slog.LevelWarn, "sub-task events not settled",
						slog.String("task_id", id), slog.String("error", err.Error()))
				}
			}
			rt.settle(taskID, contextID, out.Status)
			rt.cfg.Usage.Saved(context.Background(), r.Owner)
			if out.Err == nil && out.Saved != nil && out.Saved.ID == taskID {
				// Nothing writes the task after its turn's end.
				r.saved = out.Saved
			}
			if out.Status.Terminal() {
				// A sub-task the turn left unfinished (an answer resumed
				// the chain while a cancel ended the turn) ends with it,
				// before the turn lets go of the task (a cancel that
				// waits for the turn returns after) and before its lease
				// goes: a crash first leaves it to the next start.
				var saved loop.TaskRecord
				ok := r.saved != nil
				if ok {
					saved = *r.saved
				} else {
					saved, ok = rt.loadFinal(taskID)
				}
				if ok {
					if oerr := rt.endOrphans(context.Background(), saved); oerr != nil {
						rt.log.LogAttrs(context.Background(), slog.LevelWarn, "orphaned sub-tasks not ended",
							slog.String("task_id", taskID), slog.String("error", oerr.Error()))
					}
				}
			}
		}
		rt.mu.Lock()
		r.outcome, r.err = out, err
		a := rt.agents[contextID]
		rt.mu.Unlock()
		// The agent's status is read without rt.mu: the context is free
		// since this turn's end was written, so the next turn may already
		// hold the agent's lock while its own end waits for rt.mu
		// (releaseContext from the event Hub's writer).
		if a != nil && a.Status() == loop.AgentFailed {
			rt.mu.Lock()
			if rt.agents[contextID] == a {
				// Its state could not be saved (or its lease was lost):
				// the next turn starts it again from the stores.
				rt.dropAgentLocked(contextID)
				rt.starting.Delete(contextID)
			}
			rt.mu.Unlock()
		}
		rt.unregister(r)
		close(r.done)
		if err == nil {
			// The expiries are for the retention, nothing a client
			// reads: they are written once the end is out. The lease
			// still marks the task until they are, so that a crash
			// before them is repaired at the next start.
			rt.retire(taskID, contextID, out.Status, subs...)
		}
		// The end is in the log: the lease, which also marks a task whose
		// end may be unannounced, goes last.
		rt.crashpoint(PointTurnSettled)
		rt.disown(r)
		if err == nil && out.Status.Interrupted() {
			// Paused: the requests it passed up from remote sub-agents
			// are watched for their remote tasks moving on.
			if rec, ok := r.Saved(); ok {
				rt.watchPaused(rec)
			} else if rec, lerr := rt.st.Tasks.LoadTask(context.Background(), taskID); lerr == nil {
				rt.watchPaused(rec)
			}
		}
	}()
}

// commitEnd saves r's turn (c) and publishes the events that announce its
// end in one write, as the sink would publish them one by one after the
// commit: the turn's context is released before anyone can read its end.
// It reports false when the events are not the sink's to publish that way
// (the task is another process's now, or one of them would not pass a
// stop): the loop then commits and emits them as usual.
func (rt *Runtime) commitEnd(ctx context.Context, ee EndEvents, r *Run, tc loop.TurnCommitter, c loop.TurnCommit, end []loop.Event) (bool, error) {
	if r.lost() {
		return false, nil
	}
	final := false
	for _, e := range end {
		if k := e.Head().Kind; k.Internal() || (r.handedOn() && !endOf(r, e)) {
			return false, nil
		}
		final = final || isFinal(r, e)
	}
	// Nothing of the turn's end is stored yet.
	rt.crashpoint(PointTurnEnding)
	var onDurable func()
	if final {
		// The context takes the next turn before anyone can see this
		// one end.
		onDurable = func() { rt.releaseContext(r) }
	}
	return ee.CommitEnd(ctx, tc, c, end, onDurable)
}

// renew keeps r's lease while its turn runs; a lost lease cancels the
// turn (another process owns the task now). It returns the stop func.
func (rt *Runtime) renew(r *Run) func() {
	if r.lease == nil {
		return func() {}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	held := *r.lease
	var heldCtx *loop.Lease
	if r.ctxLease != nil {
		c := *r.ctxLease
		heldCtx = &c
	}
	go func() {
		defer close(done)
		t := time.NewTicker(rt.cfg.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			// The turn's commit reads *r.lease as its fence while this
			// runs: renew from a copy and leave it alone (the token, all
			// the fence compares, does not change on renewal).
			if rt.cancels() != nil && r.ctx.Err() == nil {
				// A cancel asked of another process whose wake-up this
				// one missed.
				if yes, err := rt.st.Cancels.CancelRequested(context.Background(), r.TaskID); err == nil && yes {
					r.cancel(context.Canceled)
				}
			}
			_, err := rt.st.Leases.RenewLease(context.Background(), held, rt.cfg.LeaseTTL)
			if err == nil && heldCtx != nil {
				// The context's lease is renewed while the turn runs,
				// until its end released it (then: nothing to renew).
				_, err = rt.st.Leases.RenewLease(context.Background(), *heldCtx, rt.cfg.LeaseTTL)
				if errors.Is(err, loop.ErrLeaseLost) && rt.contextReleased(r) {
					heldCtx, err = nil, nil
				}
			}
			switch {
			case err == nil:
			case errors.Is(err, loop.ErrLeaseLost):
				rt.log.LogAttrs(context.Background(), slog.LevelError, "lease lost: the task runs elsewhere now",
					slog.String("task_id", r.TaskID))
				r.cancel(err)
				return
			default:
				rt.log.LogAttrs(context.Background(), slog.LevelWarn, "lease not renewed",
					slog.String("task_id", r.TaskID), slog.String("error", err.Error()))
			}
		}
	}()
	return func() { close(stop); <-done }
}

// contextReleased reports whether r gave its context up already (its
// end went out).
func (rt *Runtime) contextReleased(r *Run) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.busy[r.ContextID] != r
}

// agent returns the started Agent of a context, creating it for owner
// when the context is new. Another principal's context is not found.
func (rt *Runtime) agent(ctx context.Context, contextID, owner string, deferNew bool) (*loop.Agent, error) {
	return rt.agentOf(ctx, contextID, owner, deferNew, false)
}

// agentOf is agent; fresh says contextID was just made (a new context for
// certain: nothing is read for it).
func (rt *Runtime) agentOf(ctx context.Context, contextID, owner string, deferNew, fresh bool) (*loop.Agent, error) {
	rt.mu.Lock()
	a, ok := rt.agents[contextID]
	rt.mu.Unlock()
	if !ok {
		lk, _ := rt.starting.LoadOrStore(contextID, &sync.Mutex{})
		mu := lk.(*sync.Mutex)
		mu.Lock()
		defer mu.Unlock()
		rt.mu.Lock()
		a, ok = rt.agents[contextID]
		rt.mu.Unlock()
		if !ok {
			if fresh {
				// Nothing to check: no one stored this context.
			} else if meta, err := rt.st.Agents.LoadAgent(ctx, contextID); err == nil && meta.Owner != owner {
				return nil, &loop.NotFoundError{What: "context", ID: loop.ClientContextID(contextID)}
			} else if err != nil && !errors.Is(err, loop.ErrNotFound) {
				return nil, fmt.Errorf("load context %q: %w", contextID, err)
			}
			cfg := loop.AgentConfig{ContextID: contextID, Owner: owner, Loop: rt.cfg.Loop,
				Messages: rt.st.Messages, Agents: rt.st.Agents, Tasks: rt.st.Tasks, Commit: rt.st.Commit,
				HistoryLimit: rt.cfg.HistoryLimit, HistoryBytes: rt.cfg.HistoryBytes, TaskTTL: rt.cfg.TaskTTL, Logger: rt.log,
				CacheTally: &rt.agentBytes, DeferNewMetadata: deferNew, Fresh: fresh}
			if rt.cfg.Artifacts != nil {
				cfg.Artifacts = rt.cfg.Artifacts
			}
			var err error
			a, err = loop.NewAgent(cfg)
			if err != nil {
				return nil, fmt.Errorf("agent of %q: %w", contextID, err)
			}
			if err := a.Start(ctx); err != nil {
				a.Untally()
				return nil, fmt.Errorf("agent of %q: %w", contextID, err)
			}
			rt.mu.Lock()
			rt.evictLocked()
			rt.dropAgentLocked(contextID)
			rt.agents[contextID] = a
			rt.mu.Unlock()
		}
	}
	if a.Metadata().Owner != owner {
		return nil, &loop.NotFoundError{What: "context", ID: loop.ClientContextID(contextID)}
	}
	if m, ok := a.PendingMetadata(); ok && !deferNew {
		// A new context whose first task was not stored (refused): a
		// caller that does not store it with its task stores it now.
		if err := rt.st.Agents.SaveAgent(ctx, m); err != nil {
			return nil, fmt.Errorf("agent of %q: %w", contextID, err)
		}
		a.MetadataSaved()
	}
	return a, nil
}

// evictLocked keeps the agent cache under MaxAgents and MaxAgentBytes: it
// drops agents without a running turn (their state is in the stores
// already; the next message starts them again). rt.mu is held. The bytes
// the agents hold are a running total (rt.agentBytes), so that a cache
// under its bounds costs nothing to check, however many agents it holds.
func (rt *Runtime) evictLocked() {
	under := func() bool {
		return len(rt.agents) < rt.cfg.MaxAgents &&
			(rt.cfg.MaxAgentBytes <= 0 || rt.agentBytes.Load() <= rt.cfg.MaxAgentBytes)
	}
	if under() {
		return
	}
	for id := range rt.agents {
		if _, busy := rt.busy[id]; busy {
			continue
		}
		rt.dropAgentLocked(id)
		rt.starting.Delete(id)
		if under() {
			return
		}
	}
}

// dropAgentLocked takes the context's agent out of the cache and its bytes
// out of the total. rt.mu is held.
func (rt *Runtime) dropAgentLocked(contextID string) {
	if a := rt.agents[contextID]; a != nil {
		a.Untally()
		delete(rt.agents, contextID)
	}
}

// Load returns the record of a task the principal owns. A task of another
// principal is not found, exactly as a task that does not exist.
func (rt *Runtime) Load(ctx context.Context, principal, taskID string) (loop.TaskRecord, error) {
	if taskID == "" {
		return loop.TaskRecord{}, fmt.Errorf("%w: task id is required", loop.ErrInvalid)
	}
	rec, err := rt.st.Tasks.LoadTaskOf(ctx, taskID, principal)
	if errors.Is(err, loop.ErrNotFound) {
		return loop.TaskRecord{}, &loop.NotFoundError{What: "task", ID: taskID}
	}
	if err != nil {
		return loop.TaskRecord{}, fmt.Errorf("load task %q: %w", taskID, err)
	}
	return rec, nil
}

// Running returns the running turn of a task, or nil.
func (rt *Runtime) Running(taskID string) *Run {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.running[taskID]
}

// Wait blocks until the turn of r ends or ctx does.
func (rt *Runtime) Wait(ctx context.Context, r *Run) error {
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Cancel stops a task: a running turn is cancelled and awaited; a task
// waiting on its client is closed as canceled. A finished task is not
// cancelable (ErrNotCancelable).
func (rt *Runtime) Cancel(ctx context.Context, principal, taskID string) (loop.TaskRecord, error) {
	for attempt := 0; ; attempt++ {
		rec, err, again := rt.cancelOnce(ctx, principal, taskID)
		if !again {
			return rec, err
		}
		// The task changed since it was read (an answer resumed it, or
		// its turn here ended meanwhile): read again.
		if attempt >= 8 {
			return rec, fmt.Errorf("task %q changed while it was being canceled, again and again; cancel it again: %w", taskID, loop.ErrBusy)
		}
	}
}

// cancelOnce is one attempt of Cancel; again: the task changed under it
// (its end's write was refused as a concurrent modification), so the
// cancel starts over from what is stored now.
func (rt *Runtime) cancelOnce(ctx context.Context, principal, taskID string) (_ loop.TaskRecord, _ error, again bool) {
	rec, err := rt.Load(ctx, principal, taskID)
	if err != nil {
		return rec, err, false
	}
	if r := rt.Running(taskID); r != nil && !rt.hasEnded(r) {
		r.cancel(context.Canceled)
		if err := rt.Wait(ctx, r); err != nil {
			return rec, err, false
		}
		rec, err := rt.Load(ctx, principal, taskID)
		switch {
		case err != nil || rec.Status == loop.TaskCanceled:
			return rec, err, false
		case rec.Status.Terminal():
			// Its turn's end was being written when the cancel came: the
			// task ended as it says, not canceled.
			return rec, fmt.Errorf("task %q is %s: it ended before the cancel reached it: %w", taskID, rec.Status, ErrNotCancelable), false
		}
		// It paused (or was handed on) instead: what it left is canceled.
		return rec, nil, true
	}
	// A turn whose end is out (its client may have read the task paused)
	// is not cancelled: the task it left is, once the turn let go of it.
	if waited, err := rt.awaitEnded(ctx, taskID); err != nil {
		return rec, err, false
	} else if waited {
		if rec, err = rt.Load(ctx, principal, taskID); err != nil {
			return rec, err, false
		}
	}
	if rec.Status.Terminal() {
		return rec, fmt.Errorf("task %q is %s: %w", taskID, rec.Status, ErrNotCancelable), false
	}
	if rec.ParentTaskID != "" {
		rec, err := rt.cancelOrphan(ctx, principal, rec)
		return rec, err, false
	}
	// No turn of it runs here, and none starts here (an answer waits)
	// while its end is written.
	release, ok, err := rt.holdEnd(ctx, taskID)
	if err != nil {
		return rec, err, false
	}
	if !ok {
		return rec, nil, true // a turn of it began here since: it is cancelled
	}
	defer release()
	if rec, err = rt.Load(ctx, principal, taskID); err != nil {
		return rec, err, false
	}
	if rec.Status.Terminal() {
		return rec, fmt.Errorf("task %q is %s: %w", taskID, rec.Status, ErrNotCancelable), false
	}
	if rec.Status == loop.TaskWorking && rt.st.Leases != nil {
		// Not running here: another host may run it (stores shared by
		// several hosts). Only the holder of its lease may end it; a
		// lapsed lease is taken, so that the owner, if it comes back,
		// is fenced.
		l, err := rt.st.Leases.AcquireLease(ctx, taskID, rt.cfg.Owner, rec.ContextID, rt.cfg.LeaseTTL)
		if errors.Is(err, loop.ErrLeaseHeld) {
			if rt.cancels() != nil {
				release()
				rec, err := rt.cancelElsewhere(ctx, principal, rec)
				return rec, err, false
			}
			return rec, fmt.Errorf("task %q runs on another host (%v); cancel it through that host: %w", taskID, err, ErrNotCancelable), false
		}
		if err != nil {
			return rec, fmt.Errorf("cancel task %q: %w", taskID, err), false
		}
		defer func() { _ = rt.st.Leases.ReleaseLease(context.WithoutCancel(ctx), l) }()
	}
	finish := rt.finishStored // a working task's lease is held (above)
	if rec.Status != loop.TaskWorking {
		finish = rt.finishOwned // a paused task's is taken for its end
	}
	if err := finish(ctx, rec, loop.TaskCanceled, "canceled by the client"); err != nil {
		return rec, err, errors.Is(err, loop.ErrConflict)
	}
	rec, err = rt.Load(ctx, principal, taskID)
	return rec, err, false
}

// cancelOrphan cancels rec, a sub-task: a sub-task runs inside its
// parent's turn and ends with it, so only one whose parent has ended (an
// orphan) is canceled here, under the fence of its top task (fenceTop).
func (rt *Runtime) cancelOrphan(ctx context.Context, principal string, rec loop.TaskRecord) (loop.TaskRecord, error) {
	taskID := rec.ID
	parent, perr := rt.st.Tasks.LoadTask(ctx, rec.ParentTaskID)
	if perr != nil && !errors.Is(perr, loop.ErrNotFound) {
		return rec, perr
	}
	if perr == nil && !parent.Status.Terminal() {
		return rec, fmt.Errorf("task %q is a sub-task of %q: cancel the parent task: %w", taskID, rec.ParentTaskID, ErrNotCancelable)
	}
	release, err := rt.fenceTop(ctx, rec)
	if err != nil {
		return rec, fmt.Errorf("task %q is a sub-task of %q, whose turn is ending: %w", taskID, rec.ParentTaskID, err)
	}
	defer release()
	// Read again under the fence: what a turn did before it is seen.
	if rec, err = rt.st.Tasks.LoadTask(ctx, taskID); err != nil {
		return rec, err
	}
	if rec.Status.Terminal() {
		return rec, fmt.Errorf("task %q is %s: %w", taskID, rec.Status, ErrNotCancelable)
	}
	evs, err := rt.cfg.Loop.EndSubtask(ctx, rec, loop.TaskCanceled, "canceled by the client")
	if err != nil {
		rt.log.LogAttrs(ctx, slog.LevelWarn, "sub-task not all ended", slog.String("task_id", taskID),
			slog.String("error", err.Error()))
	}
	if err := rt.publishSubEnds(ctx, rec.ContextID, evs); err != nil {
		return rec, err
	}
	return rt.Load(ctx, principal, taskID)
}

// fenceTop keeps every turn of the top task above the sub-task sub (its
// parent's parent..., the task a client started) from starting, here and
// on any process sharing the stores, until release: the top task is held
// here (holdEnd) and its lease taken. A sub-task runs only inside its top
// task's turn (a turn resumed after a crash, or with an answer, takes its
// sub-tasks up again), so what is read of sub and its parent under the
// fence stays true while it is ended. loop.ErrBusy: a turn of the top task
// runs (here or elsewhere: it ends what it leaves itself).
func (rt *Runtime) fenceTop(ctx context.Context, sub loop.TaskRecord) (release func(), err error) {
	top := sub
	for i := 0; top.ParentTaskID != "" && i <= loop.MaxSubAgentDepth+1; i++ {
		up, err := rt.st.Tasks.LoadTask(ctx, top.ParentTaskID)
		if errors.Is(err, loop.ErrNotFound) {
			top = loop.TaskRecord{ID: top.ParentTaskID, ContextID: sub.ContextID}
			break
		}
		if err != nil {
			return nil, err
		}
		top = up
	}
	hold, ok, err := rt.holdEnd(ctx, top.ID)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("a turn of its top task %q runs here: %w", top.ID, loop.ErrBusy)
	}
	if rt.st.Leases == nil {
		return hold, nil
	}
	l, err := rt.st.Leases.AcquireLease(ctx, top.ID, rt.cfg.Owner, top.ContextID, rt.cfg.LeaseTTL)
	if err != nil {
		hold()
		if errors.Is(err, loop.ErrLeaseHeld) {
			return nil, fmt.Errorf("its top task %q is held by another host: %w", top.ID, loop.ErrBusy)
		}
		return nil, err
	}
	return func() {
		_ = rt.st.Leases.ReleaseLease(context.Background(), l)
		hold()
	}, nil
}

// finishOwned is finishStored under the task's lease, taken here and
// released once the end is announced: a process that dies between the
// record's write and its final events leaves the lease behind, and
// recovery (the next start, or another host once it lapses) announces
// that end (settleEnded). Without the lease nothing would mark the task,
// final but unannounced. ErrBusy: another process holds the task.
func (rt *Runtime) finishOwned(ctx context.Context, rec loop.TaskRecord, st loop.TaskStatus, why string) error {
	r := &Run{TaskID: rec.ID, ContextID: rec.ContextID}
	if err := rt.own(ctx, r, false); err != nil {
		return err
	}
	defer rt.disown(r)
	return rt.finishStored(ctx, rec, st, why)
}

// cancels returns the cancel signals when they are in use.
func (rt *Runtime) cancels() loop.CancelSignals {
	if !rt.cfg.Shared {
		return nil
	}
	return rt.st.Cancels
}

// cancelElsewhere cancels a task whose turn runs on another process: it
// asks through the store and waits for the turn's end, which the owner
// records and announces as for a cancel asked of it. An owner that dies
// meanwhile leaves its lease to lapse: then this process takes it and
// ends the task itself.
func (rt *Runtime) cancelElsewhere(ctx context.Context, principal string, rec loop.TaskRecord) (loop.TaskRecord, error) {
	taskID := rec.ID
	if err := rt.st.Cancels.RequestCancel(ctx, taskID, rt.cfg.TurnTimeout); err != nil {
		return rec, fmt.Errorf("cancel task %q: %w", taskID, err)
	}
	// The owner hears at once (or at its next renewal, a third of the
	// lease); a dead owner's lease lapses within a lease.
	limit := time.NewTimer(2*rt.cfg.LeaseTTL + 10*time.Second)
	defer limit.Stop()
	pause := 10 * time.Millisecond
	for {
		cur, err := rt.Load(ctx, principal, taskID)
		if err != nil {
			return rec, err
		}
		if cur.Status != loop.TaskWorking {
			return cur, nil
		}
		l, err := rt.st.Leases.AcquireLease(ctx, taskID, rt.cfg.Owner, rec.ContextID, rt.cfg.LeaseTTL)
		switch {
		case err == nil:
			return rt.cancelTaken(ctx, principal, l)
		case !errors.Is(err, loop.ErrLeaseHeld):
			return cur, fmt.Errorf("cancel task %q: %w", taskID, err)
		}
		select {
		case <-ctx.Done():
			return cur, ctx.Err()
		case <-limit.C:
			return cur, fmt.Errorf("task %q: cancel asked, but the host running it has not ended the turn yet: %w", taskID, loop.ErrBusy)
		case <-time.After(pause):
		}
		pause = min(2*pause, 200*time.Millisecond)
	}
}

// cancelTaken ends a task whose lease l this process took while
// canceling it: still working, it is canceled here.
func (rt *Runtime) cancelTaken(ctx context.Context, principal string, l loop.Lease) (loop.TaskRecord, error) {
	defer func() { _ = rt.st.Leases.ReleaseLease(context.WithoutCancel(ctx), l) }()
	cur, err := rt.Load(ctx, principal, l.Key)
	if err != nil || cur.Status != loop.TaskWorking {
		return cur, err
	}
	if err := rt.finishStored(ctx, cur, loop.TaskCanceled, "canceled by the client"); err != nil {
		return cur, err
	}
	return rt.Load(ctx, principal, l.Key)
}

// watchCancels cancels the turns running here that another process was
// asked to cancel, until ctx ends.
func (rt *Runtime) watchCancels(ctx context.Context) {
	for ctx.Err() == nil {
		err := rt.st.Cancels.WatchCancels(ctx, func(taskID string) {
			if r := rt.Running(taskID); r != nil {
				r.cancel(context.Canceled)
			}
		})
		if ctx.Err() != nil {
			return
		}
		rt.log.LogAttrs(ctx, slog.LevelWarn, "watching cancel requests", slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// Retry runs a failed task again. Precisely: it starts a new task (new id)
// in the same context, as the task's owner, whose input is the task's
// original input, the user messages that opened it (the leading user
// messages of its history). The failed task stays failed, with its
// journal: nothing it did is undone or replayed. Only a failed task can be
// retried, and only when no turn runs on its context. It returns the new
// task's id.
func (rt *Runtime) Retry(ctx context.Context, rec loop.TaskRecord) (string, error) {
	if rec.Status != loop.TaskFailed {
		return "", fmt.Errorf("%w: task %q is %s; only a failed task can be retried", loop.ErrInvalid, rec.ID, rec.Status)
	}
	var input []loop.Message
	for _, msg := range rec.History {
		if msg.Role != loop.RoleUser {
			break
		}
		input = append(input, msg)
	}
	if len(input) == 0 {
		return "", fmt.Errorf("%w: task %q has no user input to run again", loop.ErrInvalid, rec.ID)
	}
	agent, err := rt.agent(ctx, rec.ContextID, rec.Owner, false)
	if err != nil {
		return "", err
	}
	taskID := randomID()
	r, err := rt.register(ctx, taskID, rec.ContextID, rec.Owner, true)
	if err != nil {
		return "", err
	}
	now := time.Now().UTC()
	next := loop.TaskRecord{ID: taskID, ContextID: rec.ContextID, Owner: rec.Owner, Status: loop.TaskWorking,
		History: input, TurnInput: len(input), CreatedAt: now, UpdatedAt: now, Metadata: map[string]any{"retryOf": rec.ID}}
	r.Created = now
	if err := rt.own(ctx, r, true); err != nil {
		rt.unregister(r)
		return "", err
	}
	if err := rt.st.Tasks.SaveTask(ctx, next); err != nil {
		rt.disown(r)
		rt.unregister(r)
		return "", fmt.Errorf("retry task %q: %w", rec.ID, err)
	}
	next.Version++
	auth := &loop.AuthContext{Principal: rec.Owner}
	rt.launch(r, next, nil, func(ctx context.Context, sink loop.EventSink) (loop.Outcome, error) {
		return agent.RunTask(ctx, loop.RunInput{TaskID: taskID, Auth: auth, Sink: sink, Lease: r.lease})
	})
	return taskID, nil
}

// turnEnded settles the task's streams when its turn is over, then has
// them expire (settle, then retire).
func (rt *Runtime) turnEnded(taskID, contextID string, st loop.TaskStatus) {
	rt.settle(taskID, contextID, st)
	rt.retire(taskID, contextID, st)
}

// settle waits until the task's events are in the log (once Wait returns,
// a client reads them), and a finished task's stream ends.
func (rt *Runtime) settle(taskID, contextID string, st loop.TaskStatus) {
	ctx := context.Background()
	if err := rt.ev.Settle(ctx, taskID, contextID, st.Terminal()); err != nil {
		rt.log.LogAttrs(ctx, slog.LevelError, "events not settled",
			slog.String("task_id", taskID), slog.String("error", err.Error()))
	}
	if st.Terminal() {
		rt.cfg.Credentials.Forget(taskID)
	}
}

// retire sets the expiries that follow a turn: a finished task's stream
// and artifacts, the streams of the sub-tasks it ran, and the context's stream for the retention time after
// its last turn. The writes are made at once, so that they share a
// commit.
func (rt *Runtime) retire(taskID, contextID string, st loop.TaskStatus, subTasks ...string) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for _, id := range subTasks {
		// A sub-task's stream ended with it.
		wg.Go(func() {
			if err := rt.ev.Retire(ctx, id); err != nil {
				rt.log.LogAttrs(ctx, slog.LevelWarn, "sub-task stream expiry not set",
					slog.String("task_id", id), slog.String("error", err.Error()))
			}
		})
	}
	if st.Terminal() {
		wg.Go(func() {
			if err := rt.ev.Retire(ctx, taskID); err != nil {
				rt.log.LogAttrs(ctx, slog.LevelWarn, "task stream expiry not set",
					slog.String("task_id", taskID), slog.String("error", err.Error()))
			}
		})
		if rt.cfg.Artifacts != nil {
			wg.Go(func() {
				if _, err := rt.cfg.Artifacts.AbandonTask(ctx, taskID, AbandonedReason); err != nil {
					rt.log.LogAttrs(ctx, slog.LevelWarn, "artifacts left building not ended",
						slog.String("task_id", taskID), slog.String("error", err.Error()))
				}
				if err := rt.cfg.Artifacts.ExpireTask(ctx, taskID, rt.cfg.TaskTTL); err != nil {
					rt.log.LogAttrs(ctx, slog.LevelWarn, "artifact expiry not set",
						slog.String("task_id", taskID), slog.String("error", err.Error()))
				}
			})
		}
	}
	// The context's stream expires ttl after its last turn: every turn's
	// end sets the deadline (two small records, whatever the stream's
	// length), and the next turn's first append cancels it, so a stream is
	// never deleted under a running turn. A turn of the context already
	// running again (its end comes later) sets it itself.
	ttl := rt.cfg.TaskTTL
	rt.mu.Lock()
	if rt.cfg.MaxAgentBytes > 0 {
		rt.evictLocked() // the turn's messages grew the cache
	}
	_, busy := rt.busy[contextID]
	rt.mu.Unlock()
	if !busy {
		if err := rt.ev.KeepContext(ctx, contextID, ttl); err != nil {
			rt.log.LogAttrs(ctx, slog.LevelWarn, "context stream expiry not set",
				slog.String("context_id", contextID), slog.String("error", err.Error()))
		}
	}
	wg.Wait()
}

// finishStored ends a task that has no running turn: it records the final
// status and publishes it, so that open streams of the task end too.
func (rt *Runtime) finishStored(ctx context.Context, rec loop.TaskRecord, st loop.TaskStatus, why string) error {
	rec.Status, rec.Message, rec.UpdatedAt = st, why, time.Now().UTC()
	rec.TurnInput = 0
	if st.Terminal() {
		rec.ExpiresAt = rec.UpdatedAt.Add(rt.cfg.TaskTTL)
	}
	reason := loop.ReasonError
	if st == loop.TaskCanceled {
		reason = loop.ReasonCanceled
	}
	rec.Reason = reason
	if err := rt.st.Tasks.SaveTask(ctx, rec); err != nil {
		return fmt.Errorf("finish task %q: %w", rec.ID, err)
	}
	rt.crashpoint(PointEndSaved)
	// Its sub-agents' requests it passed up will not be answered: the
	// sub-tasks behind them end as it does (a remote one's task is
	// canceled), before its own end is announced.
	evs, err := rt.cfg.Loop.EndPassedUp(ctx, rec, st, why)
	if err != nil {
		rt.log.LogAttrs(ctx, slog.LevelWarn, "sub-tasks not ended", slog.String("task_id", rec.ID),
			slog.String("error", err.Error()))
	}
	for _, e := range evs {
		if err := rt.ev.Publish(ctx, e); err != nil {
			return fmt.Errorf("announce the end of sub-task %q: %w", e.Head().TaskID, err)
		}
	}
	// Any other sub-task left unfinished (one an answer resumed while
	// this end was written) is an orphan now: it ends too.
	if err := rt.endOrphans(ctx, rec); err != nil {
		return err
	}
	if err := rt.announce(ctx, rec, nil); err != nil {
		return err
	}
	rt.turnEnded(rec.ID, rec.ContextID, st)
	return nil
}

// OrphanReason is why a sub-task left unfinished under a parent that has
// ended is ended (canceled).
func OrphanReason(parentID string, st loop.TaskStatus) string {
	return fmt.Sprintf("its parent task %q is %s", parentID, st)
}

// endOrphans ends the unfinished sub-tasks of rec, a final task
// (loop.EndOrphans: canceled, their remote tasks canceled through the
// recorded routes), and publishes their ends.
func (rt *Runtime) endOrphans(ctx context.Context, rec loop.TaskRecord) error {
	if rt.cfg.Loop == nil || !rec.Status.Terminal() {
		return nil
	}
	evs, err := rt.cfg.Loop.EndOrphans(ctx, rec, loop.TaskCanceled, OrphanReason(rec.ID, rec.Status))
	if err != nil {
		rt.log.LogAttrs(ctx, slog.LevelWarn, "orphaned sub-tasks not all ended", slog.String("task_id", rec.ID),
			slog.String("error", err.Error()))
	}
	return rt.publishSubEnds(ctx, rec.ContextID, evs)
}

// publishSubEnds publishes the final events of sub-tasks ended outside
// their parent's turn; each one's stream ends there.
func (rt *Runtime) publishSubEnds(ctx context.Context, contextID string, evs []loop.Event) error {
	ended := []string{}
	for _, e := range evs {
		if err := rt.ev.Publish(ctx, e); err != nil {
			return fmt.Errorf("announce the end of sub-task %q: %w", e.Head().TaskID, err)
		}
		if _, ok := e.(*loop.TaskComplete); ok {
			ended = append(ended, e.Head().TaskID)
		}
	}
	for _, id := range ended {
		if err := rt.ev.Settle(ctx, id, contextID, true); err != nil {
			rt.log.LogAttrs(ctx, slog.LevelWarn, "sub-task events not settled", slog.String("task_id", id),
				slog.String("error", err.Error()))
		}
		if err := rt.ev.Retire(ctx, id); err != nil {
			rt.log.LogAttrs(ctx, slog.LevelWarn, "sub-task stream expiry not set", slog.String("task_id", id),
				slog.String("error", err.Error()))
		}
	}
	return nil
}

// announce publishes the final events of a stored, finished (or
// interrupted) task: those its stream lacks after last, its last event.
func (rt *Runtime) announce(ctx context.Context, rec loop.TaskRecord, last loop.Event) error {
	h := loop.Header{ContextID: rec.ContextID, TaskID: rec.ID, Timestamp: rec.UpdatedAt}
	if _, had := last.(*loop.TaskStatusEvent); !had || last.(*loop.TaskStatusEvent).Status != rec.Status {
		h.Kind = loop.KindTaskStatus
		se := &loop.TaskStatusEvent{Header: h, Status: rec.Status, Message: rec.Message}
		if rec.Status == loop.TaskWaitingInput && rec.Message == "" {
			se.Message = rec.Content
		}
		if len(rec.PendingCalls) > 0 {
			se.Metadata = map[string]any{"pendingCalls": rec.PendingCalls}
		}
		if open := rec.OpenRequests(); len(open) > 0 && rec.Status.Interrupted() {
			if se.Metadata == nil {
				se.Metadata = map[string]any{}
			}
			se.Metadata["requests"] = open
			se.Message = loop.RequestsPrompt(open)
		}
		if err := rt.ev.Publish(ctx, se); err != nil {
			return fmt.Errorf("announce the end of task %q: %w", rec.ID, err)
		}
	}
	h.Kind = loop.KindTaskComplete
	tc := &loop.TaskComplete{Header: h, Status: rec.Status, Content: rec.Content, Reason: rec.Reason, Usage: rec.Usage}
	if err := rt.ev.Publish(ctx, tc); err != nil {
		return fmt.Errorf("announce the end of task %q: %w", rec.ID, err)
	}
	return nil
}

// Shutdown stops new turns, lets running ones finish until ctx ends, then
// suspends the rest (loop.StopError.Suspend) and waits for them to stop:
// their tasks stay working, their leases released, and resume from their
// last checkpoint at the next start or on another host, as after a crash.
func (rt *Runtime) Shutdown(ctx context.Context) {
	rt.mu.Lock()
	rt.closing = true
	stop := rt.stopSweep
	rt.mu.Unlock()
	rt.stopWatches()
	if stop != nil {
		stop()
		<-rt.sweepDone
	}
	done := make(chan struct{})
	go func() { rt.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		rt.cancelAll(errShutdown)
		if rt.cfg.OnSuspend != nil {
			rt.cfg.OnSuspend()
		}
		<-done
	}
	rt.cancelAll(errShutdown)
}

// errStorageFull suspends a turn whose events the store refuses for want
// of space (loop.ErrStorageFull): like a turn suspended by a graceful
// stop, it writes nothing more, its task stays working and its leases are
// released; Config.RecoverWhen resumes it once the store takes writes.
var errStorageFull = &loop.StopError{Reason: loop.ReasonStorageFull, Suspend: true,
	Message: "the store refuses writes for want of space; the task resumes from its last checkpoint once it takes them again"}

// errShutdown stops the turns still running when a shutdown's grace ran
// out. It suspends them: a graceful stop is never worse than a crash, so
// such a turn writes nothing more and its task stays working, its leases
// released, for the next start or another host to resume from its last
// checkpoint (never failed, never as if a client cancelled it).
var errShutdown = &loop.StopError{Reason: loop.ReasonShutdown, Suspend: true,
	Message: "the host shut down before the turn ended (limits.shutdownGrace ran out); the task resumes on the next start or on another host"}

// keepCallChain is next, the metadata of a task's next message, with the
// task's call chain (loop.CallChainKey) kept: a later message may make the
// chain deeper, never shallower or gone.
func keepCallChain(prev, next map[string]any) map[string]any {
	was, err := loop.CallChainOf(prev)
	if err != nil || (was.Depth == 0 && len(was.Hosts) == 0) {
		return next
	}
	now, _ := loop.CallChainOf(next) // checked by the host before Start
	out := maps.Clone(next)
	out[loop.CallChainKey] = was.Merge(now).Value()
	return out
}

// loadFinal loads the task taskID when its record is final.
func (rt *Runtime) loadFinal(taskID string) (loop.TaskRecord, bool) {
	rec, err := rt.st.Tasks.LoadTask(context.Background(), taskID)
	return rec, err == nil && rec.Status.Terminal()
}
