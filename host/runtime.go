package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/looopy-go/looopy/host/taskrt"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
)

// Stores are the durable stores of a server. Messages, Agents, Tasks and
// Events are required; each other field, when nil, turns its feature off
// (see taskrt.Stores).
type Stores struct {
	Messages loop.MessageStore
	Agents   loop.AgentStore
	Tasks    loop.TaskStore
	Events   loop.EventLog
	// Commit saves a finished turn in one atomic write.
	Commit loop.TurnCommitter
	// Checkpoints and Journal make turns durable: a task left working by a
	// crash resumes when the host starts. Without them such a task fails.
	Checkpoints loop.CheckpointStore
	Journal     loop.Journal
	// Durable lists tasks with checkpoints or journals, for the cleanup.
	Durable loop.DurableLister
	// Leases own running tasks across processes.
	Leases loop.LeaseStore
	// TaskLeases, when set (the store of Tasks and Leases), saves a
	// starting task with its lease in one write.
	TaskLeases loop.LeasedTaskSaver
	// Cancels carry a cancel asked of this host to the host running the
	// turn (shared stores only).
	Cancels loop.CancelSignals
	// Counters, when set, keep the usage counters of principals for every
	// host sharing the stores (limits then hold for the service); KV is
	// then unused for them.
	Counters taskrt.UsageCounters
	// KV keeps the usage counters of principals (nil: in memory).
	KV taskrt.UsageKV
	// Shared says that other hosts use the same stores: the event Hub
	// then follows appends made by them.
	Shared bool
	// Conversations, when set (Badger, Redis, Memory), deletes idle conversations
	// (limits.conversationTTL).
	Conversations taskrt.ConversationExpirer
	// Space, when set (Badger), refuses new tasks while its disk is
	// nearly full and says when refused writes are taken again.
	Space StoreSpace
}

// StoreSpace is a store that watches its disk (store.Badger).
type StoreSpace interface {
	Admit() error
	Writable() error
	RefusedWrites() int64
}

func (st Stores) runtime() taskrt.Stores {
	return taskrt.Stores{Messages: st.Messages, Agents: st.Agents, Tasks: st.Tasks, Commit: st.Commit,
		Checkpoints: st.Checkpoints, Journal: st.Journal, Durable: st.Durable, Leases: st.Leases,
		TaskLeases: st.TaskLeases, Cancels: st.Cancels, Conversations: st.Conversations}
}

// hubEvents is the event log of the task runtime: the server's Hub, with
// the task and context streams it names.
type hubEvents struct {
	hub *sse.Hub
	log loop.EventLog
}

var (
	_ taskrt.Events        = hubEvents{}
	_ taskrt.EndEvents     = hubEvents{}
	_ taskrt.StreamDeleter = hubEvents{}
)

// DeleteTaskStream deletes a task's stream now, ending its subscribers
// here (sse.Hub.Delete).
func (h hubEvents) DeleteTaskStream(ctx context.Context, taskID string) error {
	return h.hub.Delete(ctx, sse.TaskStream(taskID))
}

// DeleteContextStream deletes a conversation's stream now, ending its
// subscribers here (their /events stream says why).
func (h hubEvents) DeleteContextStream(ctx context.Context, contextID string) error {
	return h.hub.Delete(ctx, sse.ContextStream(contextID))
}

func (h hubEvents) Sink(onErr func(loop.Event, error)) loop.EventSink { return h.hub.Sink(onErr) }

func (h hubEvents) Publish(ctx context.Context, e loop.Event) error {
	_, err := h.hub.PublishTask(ctx, e)
	return err
}

func (h hubEvents) Last(ctx context.Context, taskID string) (uint64, error) {
	return h.hub.Last(ctx, sse.TaskStream(taskID))
}

func (h hubEvents) LastEvent(ctx context.Context, taskID string) (loop.Event, error) {
	stream := sse.TaskStream(taskID)
	last, err := h.log.Last(ctx, stream)
	if err != nil || last == 0 {
		return nil, err
	}
	recs, err := h.log.Read(ctx, stream, last-1, 1)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, nil
	}
	e, err := loop.DecodeEvent(recs[0].Data)
	if err != nil {
		return nil, fmt.Errorf("last event of task %q: %w", taskID, err)
	}
	return e, nil
}

func (h hubEvents) Settle(ctx context.Context, taskID, contextID string, terminal bool) error {
	var errs []error
	for _, stream := range []string{sse.TaskStream(taskID), sse.ContextStream(contextID)} {
		if err := h.hub.Flush(ctx, stream); err != nil {
			errs = append(errs, err)
		}
	}
	if terminal {
		if err := h.hub.End(ctx, sse.TaskStream(taskID)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CommitEnd has the Hub write a turn's commit with the events that
// announce its end, when its log keeps the commit's store (Badger).
// The write gets the commit's span when tc traces its commits.
func (h hubEvents) CommitEnd(ctx context.Context, tc loop.TurnCommitter, c loop.TurnCommit, end []loop.Event, onDurable func()) (bool, error) {
	ts, ok := tc.(*tracedStore)
	if !ok || !h.hub.CommitsEnds(tc) {
		return h.hub.CommitEnd(ctx, tc, c, end, onDurable)
	}
	ctx, done := ts.startCommit(ctx, c)
	handled, err := h.hub.CommitEnd(ctx, tc, c, end, onDurable)
	if handled {
		done(err)
	} else {
		// Not written (a stream finished, the Hub closing): the commit
		// is made, in a span of its own, by CommitTurn.
		done(errEndNotWritten)
	}
	return handled, err
}

// errEndNotWritten marks the span of a turn's end the event log did not
// write: CommitTurn makes the commit after it.
var errEndNotWritten = errors.New("the event log did not write the turn's end; committed on its own")

func (h hubEvents) Retire(ctx context.Context, taskID string) error {
	return h.hub.Retire(ctx, sse.TaskStream(taskID))
}

func (h hubEvents) KeepContext(ctx context.Context, contextID string, ttl time.Duration) error {
	return h.log.Expire(ctx, sse.ContextStream(contextID), ttl)
}
