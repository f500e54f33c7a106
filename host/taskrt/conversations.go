package taskrt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// DeleteConversation deletes the conversation contextID now: its agent
// record, its history, its finished tasks (records and artifacts) and the
// event streams (the context's and its tasks'; a client following one is
// told, where Events is a StreamDeleter). It returns the ids of the tasks
// it deleted.
//
// A conversation with an unfinished task (working, input-required,
// auth-required) is refused with ErrConversationBusy, unless cancel is
// set: then its tasks are canceled first (as CancelTask would, whoever
// owns them) and it is deleted once they are. The store decides again
// inside the write that deletes the conversation, so a task begun
// meanwhile keeps it (ErrConversationBusy). The agent record and history
// go in that write, before the tasks; where the store keeps the deletions
// to finish (ConversationPurges) it enters the conversation in the same
// write, and a host killed before the rest is deleted finishes it at its
// next start, before it serves anything (FinishConversationDeletes).
// Sent again, the delete finishes what is left too. A conversation with
// neither an agent record nor a task is not found.
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
	ids, err := rt.purgeConversation(ctx, contextID, time.Now())
	if err != nil {
		return ids, err
	}
	if notFound && len(ids) == 0 {
		return nil, &loop.NotFoundError{What: "conversation", ID: contextID}
	}
	return ids, nil
}

// purgeConversation deletes what is left of a deleted conversation (its
// agent record and history are gone): its finished tasks begun before
// the deletion (records, artifacts, event streams), then its own event
// stream unless a new conversation began under its id meanwhile, then its
// entry among the deletions to finish. It returns the ids of the tasks it
// deleted.
func (rt *Runtime) purgeConversation(ctx context.Context, contextID string, deletedAt time.Time) ([]string, error) {
	tasks, err := rt.contextTasks(ctx, contextID)
	if err != nil {
		return nil, err
	}
	sd, _ := rt.cfg.Events.(StreamDeleter)
	var ids []string
	for _, t := range tasks {
		if !t.Status.Terminal() || t.CreatedAt.After(deletedAt) {
			continue // begun after the delete: the start of a new conversation
		}
		rt.crashpoint(PointConversationPurging)
		if rt.cfg.Artifacts != nil {
			if err := rt.cfg.Artifacts.ExpireTask(ctx, t.ID, 0); err != nil {
				return ids, fmt.Errorf("delete conversation %q: artifacts of task %q: %w", contextID, t.ID, err)
			}
		}
		// The record last: while it is there, a delete sent again (or
		// the next start) finds the task and deletes what is left of it.
		if sd != nil {
			if err := sd.DeleteTaskStream(ctx, t.ID); err != nil {
				return ids, fmt.Errorf("delete conversation %q: events of task %q: %w", contextID, t.ID, err)
			}
		}
		if err := rt.st.Tasks.DeleteTask(ctx, t.ID); err != nil && !errors.Is(err, loop.ErrNotFound) {
			return ids, fmt.Errorf("delete conversation %q: task %q: %w", contextID, t.ID, err)
		}
		ids = append(ids, t.ID)
	}
	if sd != nil {
		_, err := rt.st.Agents.LoadAgent(ctx, contextID)
		switch {
		case errors.Is(err, loop.ErrNotFound):
			if err := sd.DeleteContextStream(ctx, contextID); err != nil {
				return ids, fmt.Errorf("delete conversation %q: its events: %w", contextID, err)
			}
		case err != nil:
			return ids, fmt.Errorf("delete conversation %q: %w", contextID, err)
		}
	}
	if p, ok := rt.st.Conversations.(ConversationPurges); ok {
		if err := p.ConversationDeleteDone(ctx, contextID); err != nil {
			return ids, fmt.Errorf("delete conversation %q: %w", contextID, err)
		}
	}
	return ids, nil
}

// FinishConversationDeletes finishes the deletions of conversations a
// stopped host left halfway (ConversationPurges): their finished tasks,
// artifacts and event streams are deleted. The host runs it at start,
// before it serves, and with the periodic cleanup. It returns how many
// it finished.
func (rt *Runtime) FinishConversationDeletes(ctx context.Context) (int, error) {
	p, ok := rt.st.Conversations.(ConversationPurges)
	if !ok {
		return 0, nil
	}
	pending, err := p.PendingConversationDeletes(ctx)
	if err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for id, at := range pending {
		if rt.dropIdleAgent(id) { // nothing of the old conversation kept in memory
			if _, err := rt.purgeConversation(ctx, id, at); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
		}
	}
	return n, errors.Join(errs...)
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
