package taskrt

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/looopy-go/looopy/loop"
)

// DeleteConversation deletes the conversation contextID now: its agent
// record, its history and its finished tasks (records and artifacts). It
// returns the ids of the tasks it deleted, whose event streams (and the
// context's) are the caller's to delete.
//
// A conversation with an unfinished task (working, input-required,
// auth-required) is refused with ErrConversationBusy, unless cancel is
// set: then its tasks are canceled first (as CancelTask would, whoever
// owns them) and it is deleted once they are. The store decides again
// inside the write that deletes the conversation, so a task begun
// meanwhile keeps it (ErrConversationBusy). The agent record goes in that
// write, before the tasks: a crash after it leaves finished tasks that
// expire with their TTL, or that a second call deletes. A conversation
// with neither an agent record nor a task is not found.
func (rt *Runtime) DeleteConversation(ctx context.Context, contextID string, cancel bool) ([]string, error) {
	if contextID == "" {
		return nil, fmt.Errorf("%w: context id is required", loop.ErrInvalid)
	}
	dl, ok := rt.st.Conversations.(ConversationDeleter)
	if !ok {
		return nil, errors.New("this store cannot delete conversations")
	}
	tasks, err := rt.contextTasks(ctx, contextID)
	if err != nil {
		return nil, err
	}
	var open []string
	for _, t := range tasks {
		if t.Status.Terminal() {
			continue
		}
		if !cancel {
			open = append(open, t.ID)
			continue
		}
		if t.ParentTaskID != "" {
			continue // a sub-task ends with its parent
		}
		if _, err := rt.Cancel(ctx, t.Owner, t.ID); err != nil && !errors.Is(err, ErrNotCancelable) {
			return nil, fmt.Errorf("delete conversation %q: cancel task %q: %w", contextID, t.ID, err)
		}
	}
	if cancel {
		// A sub-task its parent's end left unfinished (an orphan) is
		// canceled now that the parents have ended; one its parent's end
		// took along is final already (ErrNotCancelable).
		for _, t := range tasks {
			if t.Status.Terminal() || t.ParentTaskID == "" {
				continue
			}
			if _, err := rt.Cancel(ctx, t.Owner, t.ID); err != nil && !errors.Is(err, ErrNotCancelable) {
				return nil, fmt.Errorf("delete conversation %q: cancel sub-task %q: %w", contextID, t.ID, err)
			}
		}
	}
	if len(open) > 0 {
		return nil, fmt.Errorf("%w: conversation %q: task %s is not finished; cancel it first, or ask with cancel=true",
			ErrConversationBusy, contextID, strings.Join(open, ", "))
	}
	if !rt.dropIdleAgent(contextID) {
		return nil, fmt.Errorf("%w: conversation %q: a turn runs", ErrConversationBusy, contextID)
	}
	deleted, err := dl.DeleteConversation(ctx, contextID)
	notFound := errors.Is(err, loop.ErrNotFound)
	if err != nil && !notFound {
		return nil, fmt.Errorf("delete conversation %q: %w", contextID, err)
	}
	if !deleted && !notFound {
		return nil, fmt.Errorf("%w: conversation %q: a task of it began meanwhile", ErrConversationBusy, contextID)
	}
	rt.dropIdleAgent(contextID) // one loaded from the store meanwhile
	if tasks, err = rt.contextTasks(ctx, contextID); err != nil {
		return nil, err
	}
	if notFound && len(tasks) == 0 {
		return nil, &loop.NotFoundError{What: "conversation", ID: contextID}
	}
	var ids []string
	for _, t := range tasks {
		if !t.Status.Terminal() {
			continue // begun after the delete: the start of a new conversation
		}
		if rt.cfg.Artifacts != nil {
			if err := rt.cfg.Artifacts.ExpireTask(ctx, t.ID, 0); err != nil {
				return ids, fmt.Errorf("delete conversation %q: artifacts of task %q: %w", contextID, t.ID, err)
			}
		}
		if err := rt.st.Tasks.DeleteTask(ctx, t.ID); err != nil && !errors.Is(err, loop.ErrNotFound) {
			return ids, fmt.Errorf("delete conversation %q: task %q: %w", contextID, t.ID, err)
		}
		ids = append(ids, t.ID)
	}
	return ids, nil
}

// contextTasks lists every task of a context, page by page.
func (rt *Runtime) contextTasks(ctx context.Context, contextID string) ([]loop.TaskRecord, error) {
	var out []loop.TaskRecord
	f := loop.TaskFilter{ContextID: contextID, Limit: 500}
	for {
		page, err := rt.st.Tasks.ListTasks(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("tasks of conversation %q: %w", contextID, err)
		}
		out = append(out, page...)
		if len(page) < f.Limit {
			return out, nil
		}
		f.After = page[len(page)-1].ID
	}
}

// dropIdleAgent takes the context's agent out of memory unless a turn of
// it runs (false), so that nothing writes it back.
func (rt *Runtime) dropIdleAgent(contextID string) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, busy := rt.busy[contextID]; busy {
		return false
	}
	rt.dropAgentLocked(contextID)
	rt.starting.Delete(contextID)
	return true
}
