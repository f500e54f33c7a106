package loop

import (
	"context"
	"time"
)

// Model is an LLM (an adapter plugin, or a scripted model in tests).
//
// Generate makes one call. When onDelta is not nil and the model streams, it
// is called with each piece of text as it arrives, on the calling goroutine,
// before Generate returns the whole response. Cancelling ctx must make
// Generate return promptly with an error that wraps ctx.Err().
// Errors that are worth retrying (rate limit, 5xx, timeout) are marked with
// Transient; anything else is permanent.
type Model interface {
	Generate(ctx context.Context, req *ModelRequest, onDelta func(Delta)) (*ModelResponse, error)
}

// Toolset is a source of tools: a plugin, the built-in artifact tools, a
// sub-agent, a set of Go functions.
//
// Tools lists the tools offered now; the loop asks again before each model
// call, so a toolset may change between calls (hot-loaded plugins).
// Call runs one tool call. A tool's own failure is a ToolResult with IsError;
// an error return means the call could not be made at all (the loop turns it
// into an error result too). Cancelling ctx must stop the call promptly.
type Toolset interface {
	Tools(ctx context.Context) ([]ToolDefinition, error)
	Call(ctx context.Context, call ToolCall, env *ToolEnv) (ToolResult, error)
}

// ToolEnv is what a tool call knows of the turn it runs in.
type ToolEnv struct {
	ContextID string
	TaskID    string
	AgentID   string
	Iteration int
	Auth      *AuthContext
	// Emit sends an event of the task (tool-progress, artifact writes,
	// sub-task events). It is safe for concurrent use.
	Emit func(Event)
	// Model and Tools are the turn's own model and merged toolset, lent to
	// sub-agents so that their calls go through the same machinery.
	Model Model
	Tools Toolset
	// Depth is 0 for a top-level turn and grows by one per sub-agent level.
	Depth int
	// CallID is the id of the tool call this env was made for. Calls a
	// sub-agent makes through Tools are journaled under it.
	CallID string
	// Credentials are those clients supplied for their tasks (nil: none).
	// A tool reads only its own: Get(TaskID, its holder name, provider).
	Credentials *Credentials
	// Resumed is set when the call was cut off by a restart of the host
	// and runs again because its toolset resumes calls (CallResumer): the
	// toolset takes up what the first run started instead of starting it
	// again.
	Resumed bool
	// Routed is, when the call runs again after its task paused for a
	// request it passed up (InputRequiredError), that request and the
	// client's answer; a sub-agent's env carries it down to its calls.
	Routed *RoutedInput

	turn *turn    // the turn the call runs in (nil: called outside a turn)
	sub  *Subtask // the sub-task this env is the sub-agent's env of
}

// SelfTimed is implemented by toolsets whose calls bound their own run
// (a plugin's call timeout, which starts once the call has an instance to
// run on): the loop's ToolTimeout does not apply to a tool for which
// TimesCalls reports true. Applied on top, it would count a call's wait
// for a free instance as its run and cut short a call its toolset allows
// longer. The turn's deadline and cancel still end such a call.
type SelfTimed interface {
	TimesCalls(tool string) bool
}

// CallResumer is implemented by toolsets whose calls can be taken up
// again after a crash without repeating their effect (a remote agent
// re-subscribes to the task the first run started). A call of such a tool
// the journal shows started but not ended is run again with
// ToolEnv.Resumed set, instead of being reported interrupted. The toolset
// must keep what it needs to resume durably (Subtask.Note) before its
// effect starts, and report the call interrupted itself when it cannot
// know.
type CallResumer interface {
	ResumesCalls(tool string) bool
}

// RemoteTaskCanceler is implemented by toolsets whose sub-agents' tasks
// live on another host (remote A2A agents). CancelRemoteTask cancels the
// task remoteTaskID of the sub-agent agentID when the agent is one of the
// toolset's (handled true), so that a parent ended while it waited on the
// remote task's passed-up request does not leave it open.
type RemoteTaskCanceler interface {
	CancelRemoteTask(ctx context.Context, agentID, remoteTaskID string) (handled bool, err error)
}

// RemoteTaskWatcher is implemented by toolsets whose sub-agents' tasks
// live on another host. The host watches the remote task behind a request
// a paused parent passed up by reading it now and then: RemoteWatchEvery
// says how often for the sub-agent agentID (handled false when agentID is
// not one of the toolset's), RemoteTaskMovedOn reads the task once and
// says whether it no longer waits for the request inputID (its own id for
// the request): it ended there, was answered there, asks for something
// else, or the agent no longer knows it. An error is a read that did not
// happen (the agent did not answer, ctx ended); the host reads again
// later. Each call returns within ctx.
type RemoteTaskWatcher interface {
	RemoteWatchEvery(agentID string) (every time.Duration, handled bool)
	RemoteTaskMovedOn(ctx context.Context, agentID, remoteTaskID, inputID string) (movedOn bool, err error)
}

// AnswerWithdrawn is the AgentID of the answer a host records for a
// request passed up from a remote sub-agent whose task moved on without
// it (RemoteTaskWatcher): the call runs again with it (ToolEnv.Routed)
// and takes the remote task's actual outcome instead of sending an
// answer.
const AnswerWithdrawn = "looopy:remote-task-moved-on"

// ToolsetPinner is implemented by toolsets whose contents change while the
// host runs (hot-loaded plugins). The loop calls PinToolset when a turn
// starts, uses the returned toolset for the whole turn, and calls release when
// the turn ends, so a running turn keeps the versions it started with.
type ToolsetPinner interface {
	PinToolset() (ts Toolset, release func())
}

// ModelPinner is the same for models.
type ModelPinner interface {
	PinModel() (m Model, release func())
}

// EventSink receives the events of a turn, in order. Emit is called from the
// loop's goroutines (tool progress may come from several at once) and must be
// safe for concurrent use; it must not block for long, since the turn waits.
type EventSink interface {
	Emit(Event)
}

// SinkFunc adapts a function to an EventSink.
type SinkFunc func(Event)

// Emit calls f(e).
func (f SinkFunc) Emit(e Event) { f(e) }

// EndSink is an EventSink that can publish the events that announce a
// turn's end in the write that saves the turn (its log keeps the turn's
// commit too): the end is then never out before the commit it announces,
// and the two cost one durable write instead of two. The loop uses it when
// the turn's sink offers it and the agent commits whole turns.
type EndSink interface {
	EventSink
	// CommitEnd saves c, as tc would, and publishes end after every event
	// emitted before, in one atomic write: both, or neither. It reports
	// false when it cannot: nothing was done, and the caller commits with
	// tc and emits end after. With true, err is the commit's refusal
	// (ErrLeaseLost, ErrConflict) or the write's failure: none of end was
	// published.
	CommitEnd(ctx context.Context, tc TurnCommitter, c TurnCommit, end []Event) (bool, error)
}

// MessageStore keeps the history of each conversation (contextId).
// Messages are ordered by the sequence Append gives them.
type MessageStore interface {
	// Append adds messages at the end of the history, atomically.
	Append(ctx context.Context, contextID string, msgs ...Message) error
	// Recent returns the last limit messages, oldest first (limit <= 0: all).
	Recent(ctx context.Context, contextID string, limit int) ([]Message, error)
	// Count returns the number of messages in the history.
	Count(ctx context.Context, contextID string) (int, error)
	// Replace swaps the whole history for msgs, atomically (compaction).
	Replace(ctx context.Context, contextID string, msgs []Message) error
	// Delete removes the history.
	Delete(ctx context.Context, contextID string) error
}

// AgentStatus is the lifecycle state of an Agent.
type AgentStatus string

// Agent lifecycle states.
const (
	AgentCreated  AgentStatus = "created"
	AgentReady    AgentStatus = "ready"
	AgentBusy     AgentStatus = "busy"
	AgentPaused   AgentStatus = "paused"
	AgentShutdown AgentStatus = "shutdown"
	AgentFailed   AgentStatus = "failed"
)

// AgentMetadata is what survives of an Agent between processes.
type AgentMetadata struct {
	ContextID    string         `json:"contextId"`
	AgentID      string         `json:"agentId,omitempty"`
	Owner        string         `json:"owner,omitempty"` // principal that created the context
	Status       AgentStatus    `json:"status"`
	TurnCount    int            `json:"turnCount"`
	CreatedAt    time.Time      `json:"createdAt"`
	LastActivity time.Time      `json:"lastActivity"`
	Usage        Usage          `json:"usage"`
	ToolCalls    int            `json:"toolCalls,omitempty"` // tool calls run for the conversation
	Error        string         `json:"error,omitempty"`
	Metadata     map[string]any `json:"metadata,omitempty"`
}

// AgentStore keeps agent metadata by contextId.
type AgentStore interface {
	SaveAgent(ctx context.Context, m AgentMetadata) error
	// LoadAgent returns ErrNotFound (wrapped) for an unknown context.
	LoadAgent(ctx context.Context, contextID string) (AgentMetadata, error)
	DeleteAgent(ctx context.Context, contextID string) error
}

// TaskRecord is the stored state of a task: one turn of an agent.
type TaskRecord struct {
	ID           string     `json:"id"`
	ContextID    string     `json:"contextId"`
	AgentID      string     `json:"agentId,omitempty"`
	ParentTaskID string     `json:"parentTaskId,omitempty"`
	Owner        string     `json:"owner,omitempty"` // principal
	Status       TaskStatus `json:"status"`
	Message      string     `json:"message,omitempty"`      // status message: failure reason, input prompt
	Reason       string     `json:"reason,omitempty"`       // why the turn ended
	FinishReason string     `json:"finishReason,omitempty"` // the model's last finish reason
	Retries      int        `json:"retries,omitempty"`      // model calls made again in the last turn
	Content      string     `json:"content,omitempty"`      // final assistant text
	Usage        Usage      `json:"usage"`
	Iterations   int        `json:"iterations,omitempty"`
	History      []Message  `json:"history,omitempty"`   // the turn's messages: its input, then what it produced
	TurnInput    int        `json:"turnInput,omitempty"` // while working: how many trailing History messages are the running turn's input
	PendingCalls []ToolCall `json:"pendingCalls,omitempty"`
	// Subtasks are the ids of the sub-tasks the task's turns started
	// (sub-agents), oldest first.
	Subtasks []string `json:"subtasks,omitempty"`
	// Requests are what a paused task waits for (approvals, client tool
	// results), with the answers recorded so far; a task that goes on
	// keeps them until its turn ends.
	Requests []InputRequest `json:"requests,omitempty"`
	// ClientTools are the tools the task's client offers (kept for the
	// rest of the task, across pauses and restarts).
	ClientTools []ClientTool   `json:"clientTools,omitempty"`
	CreatedAt   time.Time      `json:"createdAt"`
	UpdatedAt   time.Time      `json:"updatedAt"`
	ExpiresAt   time.Time      `json:"expiresAt,omitzero"` // zero: never
	Metadata    map[string]any `json:"metadata,omitempty"`
	// Broken is set by a store listing a task whose record does not
	// decode (the rest is what its index entry knows; Metadata holds
	// "broken": true for clients to see). It is never stored, so no
	// client's metadata can make a sound task look broken.
	Broken bool `json:"-"`
	// Version is the record's version in its store: 0 for a task not yet
	// stored, then 1, 2, ... one per write. SaveTask compares it.
	Version uint64 `json:"version,omitempty"`
}

// TaskFilter selects tasks for List. Zero fields match everything.
type TaskFilter struct {
	ContextID     string
	AgentID       string
	Owner         string
	Statuses      []TaskStatus
	UpdatedAfter  time.Time
	UpdatedBefore time.Time
	Limit         int    // <= 0: no limit
	After         string // page token: the ID of the last task of the previous page
}

// TaskStore keeps task records. A record whose ExpiresAt has passed is gone:
// Load returns ErrNotFound and List skips it.
//
// Writes are versioned (compare-and-set), so that writers in several
// processes never overwrite each other blindly: SaveTask stores t only if
// the stored record has version t.Version (0: no record stored, or one
// that expired), and then the stored version is t.Version+1. Otherwise it
// returns an error matching ErrConflict and stores nothing.
type TaskStore interface {
	SaveTask(ctx context.Context, t TaskRecord) error
	LoadTask(ctx context.Context, id string) (TaskRecord, error)
	// LoadTaskOf is LoadTask for one owner: a task of another owner is not
	// found, answered as fast as an unknown id (the owner is checked
	// before the record is read or decoded).
	LoadTaskOf(ctx context.Context, id, owner string) (TaskRecord, error)
	// ListTasks returns matching tasks, newest first (by CreatedAt, then ID).
	ListTasks(ctx context.Context, f TaskFilter) ([]TaskRecord, error)
	DeleteTask(ctx context.Context, id string) error
}

// TaskPresence is implemented by task stores that can tell whether a
// task is stored without reading or decoding its record (a stream's idle
// heartbeat asks it of a task that may be large). A task past its expiry
// may still answer true until the store removes it.
type TaskPresence interface {
	TaskExists(ctx context.Context, id string) (bool, error)
}

// LogRecord is one entry of a durable event log.
type LogRecord struct {
	Seq  uint64
	Data []byte
}

// EventLog is a set of append-only logs (streams), each with monotonic
// sequence numbers starting at 1 that never go back for the life of the
// stream's name, whatever expires: an id a reader holds never names
// another record. It is what makes replay possible: events are appended
// before they are sent to anyone. Appends may come from any
// number of goroutines and processes sharing the log; Wait wakes readers
// whoever appended.
type EventLog interface {
	// Append adds records to the end of a stream and returns the sequence
	// number of the first; they are durable when Append returns.
	Append(ctx context.Context, stream string, data ...[]byte) (first uint64, err error)
	// Read returns up to limit records with Seq > after, in order: those
	// the log keeps, so after an expiry the first may be above after+1.
	Read(ctx context.Context, stream string, after uint64, limit int) ([]LogRecord, error)
	// Last returns the sequence number of the last record ever appended,
	// also once it expired (0 when the stream was never written).
	Last(ctx context.Context, stream string) (uint64, error)
	// Expire makes the stream's records disappear after ttl (0: now);
	// its last sequence number stays, and the next Append continues after
	// it. An Append before then cancels it (the stream's writer sets it
	// again when done): a stream is never deleted under its writer.
	Expire(ctx context.Context, stream string, ttl time.Duration) error
	// Wait blocks until the stream's last sequence number is above after,
	// and returns it; it returns at once when it already is. It returns
	// ctx's error when ctx ends first. Appends made through any handle on
	// the same log (another process, for a shared backend) wake it.
	Wait(ctx context.Context, stream string, after uint64) (last uint64, err error)
}

// StreamSeeder is an EventLog that can have a stream never written start
// after a given sequence number: a stream that takes over from another
// name (a conversation started again under another id) continues the ids
// its clients hold.
type StreamSeeder interface {
	// SeedStream makes the next Append to stream continue after last when
	// the stream holds no records and its last sequence number is lower;
	// otherwise it does nothing.
	SeedStream(ctx context.Context, stream string, last uint64) error
}

// StreamAppend is one stream's records in an AppendStreams.
type StreamAppend struct {
	Stream string
	Data   [][]byte
}

// MultiStreamAppender is an EventLog that can append to several streams in
// one durable write (an event of a task goes to its task's stream and to
// its context's). The Hub uses it when the log offers it: one sync instead
// of one per stream.
type MultiStreamAppender interface {
	// AppendStreams appends each entry's records to its stream as Append
	// does, all of them in one write, durable together when it returns;
	// it returns each stream's first sequence number, in the order given.
	// The streams must be distinct and each entry must hold records.
	AppendStreams(ctx context.Context, appends []StreamAppend) (first []uint64, err error)
}

// CommitAppend is what an EventCommitter appends to one stream around a
// turn's commit: Before, the events queued ahead of the turn's end, and
// After, the events that announce that end.
type CommitAppend struct {
	Stream string
	Before [][]byte
	After  [][]byte
}

// EventCommitter is an EventLog kept in the same store as a turn's commit,
// which it can save in the write that appends the events announcing the
// turn's end: the end is never in the log without the commit it announces,
// and the commit costs no sync of its own.
type EventCommitter interface {
	// Commits reports whether a commit tc would make lands in this log's
	// store, so that AppendCommit may make it instead.
	Commits(tc TurnCommitter) bool
	// AppendCommit appends, in one durable write, each entry's Before
	// records to its stream, then saves c (as TurnCommitter.CommitTurn
	// does, its lease fence and task version checked first), then appends
	// each entry's After records after them. When c is refused (commitErr:
	// ErrLeaseLost, ErrConflict, ...) the Before records are still
	// appended and none of After. err: nothing was written. first holds each
	// stream's first sequence number, in the order given (0 for an entry
	// that had nothing appended). The streams must be distinct.
	AppendCommit(ctx context.Context, appends []CommitAppend, c TurnCommit) (first []uint64, commitErr, err error)
}

// CommitterUnwrapper is a TurnCommitter that passes its commits on to
// another (a wrapper adding telemetry): EventCommitter.Commits looks
// through it.
type CommitterUnwrapper interface {
	UnwrapCommitter() TurnCommitter
}

// Lease is the right of one owner (a host process) to work on something
// (a running task) until Expires. It is held by renewing it before it
// lapses; another owner may take it only after it has. Token grows with
// every acquisition (a change of owner, or its holder acquiring it again):
// a write fenced by an old token is refused.
type Lease struct {
	Key     string    `json:"key"`
	Owner   string    `json:"owner"`
	Token   uint64    `json:"token"`
	Expires time.Time `json:"expires"`
	// Data is what the owner keeps with the lease (the task's context).
	Data string `json:"data,omitempty"`
}

// LeaseStore keeps leases, shared by every process that may do the work.
// Times are the store's clock; ttl must be positive.
type LeaseStore interface {
	// AcquireLease takes the lease of key for owner for ttl: when no one
	// holds it, when it has lapsed, or when owner holds it already (then
	// with a new token: the earlier acquisition can no longer commit,
	// renew or release it). Otherwise it returns an error
	// matching ErrLeaseHeld.
	AcquireLease(ctx context.Context, key, owner, data string, ttl time.Duration) (Lease, error)
	// RenewLease extends a held lease by ttl from now. It returns an error
	// matching ErrLeaseLost when l is no longer held (lapsed and taken, or
	// released): the holder must stop.
	RenewLease(ctx context.Context, l Lease, ttl time.Duration) (Lease, error)
	// ReleaseLease gives a held lease up. Releasing a lease no longer held
	// is not an error.
	ReleaseLease(ctx context.Context, l Lease) error
	// ListLeases returns every lease stored, held or lapsed, by key. A
	// process starting up finds there the work that was under way.
	ListLeases(ctx context.Context) ([]Lease, error)
}

// LeasedTaskSaver saves a task together with its lease, in one atomic
// write: the lease of the task's id is acquired for owner as
// LeaseStore.AcquireLease would (an error matching ErrLeaseHeld when
// another holds it) and the task saved as TaskStore.SaveTask would (an
// error matching ErrConflict when its version is not the stored one). When
// either is refused nothing is written. agent, when not nil, is saved in
// the same write as AgentStore.SaveAgent would (the metadata of a new
// context, stored with its first task). A task that starts makes one
// synced write instead of two or three.
type LeasedTaskSaver interface {
	SaveTaskLeased(ctx context.Context, t TaskRecord, agent *AgentMetadata, owner, data string, ttl time.Duration) (Lease, error)
}

// LeasedTaskSubmitter is a LeasedTaskSaver that can queue the write of a
// new task (one whose lease nobody holds) and return before it is durable:
// SubmitTaskLeased returns the lease the write stores and wait, which
// returns the write's outcome once it is durable (as SaveTaskLeased would
// have; an error matching ErrLeaseHeld when a lease of the task's id is
// stored already). Every write the store takes after SubmitTaskLeased
// returns is applied after it, and the lease's token names this write
// alone: a write fenced by the lease (TurnCommit.Lease) is stored only if
// the task's write was, and once it is durable, so is the task's. A turn
// whose model answers before the task's write is out thus commits its end
// behind it, without waiting for it first.
type LeasedTaskSubmitter interface {
	SubmitTaskLeased(ctx context.Context, t TaskRecord, agent *AgentMetadata, owner, data string, ttl time.Duration) (l Lease, wait func() error, err error)
}

// TaskWriteDeferrer holds a new task's write (as LeasedTaskSubmitter
// queues it) back until the commit of its turn's end, for within at most:
// a write fenced by the returned lease takes it along, first, in one
// durable write, so that a turn that ends quickly makes one write, not
// two. flush sends it alone at once (before a tool runs); the deadline
// does the same. wait returns its outcome once it is durable. For a
// caller that tells its client nothing before the turn's end (a blocking
// SendMessage): until the write goes, the task is nowhere in the store.
type TaskWriteDeferrer interface {
	DeferTaskLeased(ctx context.Context, t TaskRecord, agent *AgentMetadata, owner, data string, ttl, within time.Duration) (l Lease, flush func(), wait func() error, err error)
}

// CancelSignals carry cancel requests between processes sharing the
// stores: a process asked to cancel a task whose turn runs elsewhere
// records the request; the process running the turn hears of it and
// cancels the turn. Only a store shared by several processes needs it.
type CancelSignals interface {
	// RequestCancel records that taskID's turn is to be canceled, for
	// ttl, and wakes the watchers of every process.
	RequestCancel(ctx context.Context, taskID string, ttl time.Duration) error
	// CancelRequested reports whether a cancel of taskID was requested
	// (and has not expired). A watcher that missed a wake-up (its
	// connection dropped) finds the request here.
	CancelRequested(ctx context.Context, taskID string) (bool, error)
	// WatchCancels calls fn with the task id of each request made from
	// now on, by any process, until ctx ends; then it returns ctx's error.
	WatchCancels(ctx context.Context, fn func(taskID string)) error
}

// TurnCommit is everything a finished turn saves.
type TurnCommit struct {
	ContextID string
	Messages  []Message     // appended to the history
	Agent     AgentMetadata // saved
	Task      *TaskRecord   // saved when not nil
	// DeleteCheckpoint names a task whose checkpoint has served; "" for none.
	DeleteCheckpoint string
	// Lease, when set, fences the commit: it is refused (ErrLeaseLost) and
	// nothing is saved unless the lease is still held with this token.
	Lease *Lease
}

// TurnCommitter saves a whole turn at once: atomically (a crash leaves all
// of it or none) and, for a durable store, with one sync. It must write to
// the same data as the message, agent, task and checkpoint stores it is
// configured with (AgentConfig.Commit). Task is versioned as SaveTask is.
type TurnCommitter interface {
	CommitTurn(ctx context.Context, c TurnCommit) error
}

// ArtifactSummary describes an artifact of a conversation.
type ArtifactSummary struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"` // file, data, dataset
	TaskID    string    `json:"taskId"`
	Name      string    `json:"name,omitempty"`
	MimeType  string    `json:"mimeType,omitempty"`
	Status    string    `json:"status"` // building, complete, failed
	Size      int64     `json:"size"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// ArtifactLister lists the artifacts of a conversation.
type ArtifactLister interface {
	ContextArtifacts(ctx context.Context, contextID string) ([]ArtifactSummary, error)
}
