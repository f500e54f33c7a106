package taskrt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// What expires on its own and what the cleanup removes, once a task is
// finished:
//   - the task record: at ExpiresAt (TaskTTL after it ended), by the store;
//   - its event stream: the host's hub gives a finished stream the same
//     retention;
//   - its artifacts: ExpireTask when it ends, removed by the artifact sweep;
//   - its checkpoint: deleted with the turn's last write; one left behind
//     (a task failed because it could not resume, a task canceled while it
//     waited) is removed by the cleanup as soon as the task is finished;
//   - its journal: kept as long as the task record, so an operator can read
//     it; the cleanup removes it once the record is gone;
//   - its lease: released once its end is in its stream.

// Sweep removes the journal and checkpoint of every task whose record is
// gone (expired or deleted), and the checkpoint of every finished task. A
// task with a turn running here is left alone. It returns how many tasks
// it cleaned; a failure on one task does not stop the others. Without
// Stores.Durable (or checkpoints) there is nothing to sweep.
func (rt *Runtime) Sweep(ctx context.Context) (int, error) {
	if rt.st.Durable == nil || rt.st.Checkpoints == nil || rt.st.Journal == nil {
		return 0, nil
	}
	ids, err := rt.st.Durable.DurableTaskIDs(ctx)
	if err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for _, id := range ids {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		if rt.Running(id) != nil {
			continue
		}
		rec, err := rt.st.Tasks.LoadTask(ctx, id)
		gone := errors.Is(err, loop.ErrNotFound)
		switch {
		case err != nil && !gone:
			errs = append(errs, err)
			continue
		case !gone && !rec.Status.Terminal():
			continue // working, or waiting for its client: it still needs them
		}
		if !gone {
			// Finished: only a checkpoint left behind goes (the journal
			// stays as long as the record).
			if _, err := rt.st.Checkpoints.LoadCheckpoint(ctx, id); errors.Is(err, loop.ErrNotFound) {
				continue
			}
		}
		if err := rt.st.Checkpoints.DeleteCheckpoint(ctx, id); err != nil && !errors.Is(err, loop.ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		if gone {
			if err := rt.st.Journal.DeleteCalls(ctx, id); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		n++
	}
	return n, errors.Join(errs...)
}

// ExpireConversations deletes the conversations idle for longer than
// Config.ConversationTTL at now that have no unfinished task: first the
// agents of those kept in memory without a running turn (so that none is
// written back from memory), then, in the store, their agent records and
// histories. It returns how many the store deleted.
func (rt *Runtime) ExpireConversations(ctx context.Context, now time.Time) (int, error) {
	ttl := rt.cfg.ConversationTTL
	if ttl <= 0 || rt.st.Conversations == nil {
		return 0, nil
	}
	cutoff := now.Add(-ttl)
	idle := func(a *loop.Agent) bool {
		m := a.Metadata()
		last := m.LastActivity
		if m.CreatedAt.After(last) {
			last = m.CreatedAt
		}
		return last.Before(cutoff)
	}
	rt.mu.Lock()
	for id, a := range rt.agents {
		if _, busy := rt.busy[id]; !busy && idle(a) {
			rt.dropAgentLocked(id)
			rt.starting.Delete(id)
		}
	}
	rt.mu.Unlock()
	gone, err := rt.st.Conversations.ExpireConversations(ctx, cutoff)
	rt.convExpired.Add(int64(len(gone)))
	if len(gone) > 0 {
		// One loaded from the store while it was deleted goes too.
		rt.mu.Lock()
		for _, id := range gone {
			if _, busy := rt.busy[id]; !busy {
				rt.dropAgentLocked(id)
				rt.starting.Delete(id)
			}
		}
		rt.mu.Unlock()
	}
	return len(gone), err
}

// ExpiredConversations returns how many conversations ExpireConversations
// deleted since the runtime began.
func (rt *Runtime) ExpiredConversations() int64 { return rt.convExpired.Load() }

// SweepOrphans ends the orphans: the sub-tasks left working or waiting for
// input whose parent task has ended or is gone (a sub-task never runs
// without its parent's turn, so nothing else would end them). Each one is
// canceled, with what waits below it (a remote sub-agent's task is
// canceled through the recorded route). It is decided and done under the
// fence of the sub-task's top task (fenceTop): a sub-task whose top task
// has a turn running, here or on another host sharing the stores (its
// lease is held), is left to that turn, which takes it up again or ends
// it with the turn's end. It returns how many it ended.
func (rt *Runtime) SweepOrphans(ctx context.Context) (int, error) {
	if rt.cfg.Loop == nil {
		return 0, nil
	}
	recs, err := rt.st.Tasks.ListTasks(ctx, loop.TaskFilter{Statuses: loop.UnfinishedStatuses})
	if err != nil {
		return 0, fmt.Errorf("orphaned sub-tasks: %w", err)
	}
	var errs []error
	n := 0
	for _, rec := range recs {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		if rec.ParentTaskID == "" || rt.Running(rec.ParentTaskID) != nil {
			continue
		}
		if _, ok, err := rt.endedParent(ctx, rec); err != nil || !ok {
			errs = append(errs, err)
			continue
		}
		ended, err := rt.endOrphan(ctx, rec.ID)
		errs = append(errs, err)
		if ended {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// endedParent returns the parent of the sub-task rec when it has ended (ok;
// one that is gone is returned canceled).
func (rt *Runtime) endedParent(ctx context.Context, rec loop.TaskRecord) (loop.TaskRecord, bool, error) {
	parent, err := rt.st.Tasks.LoadTask(ctx, rec.ParentTaskID)
	switch {
	case errors.Is(err, loop.ErrNotFound):
		return loop.TaskRecord{ID: rec.ParentTaskID, Status: loop.TaskCanceled}, true, nil
	case err != nil:
		return parent, false, err
	}
	return parent, parent.Status.Terminal(), nil
}

// endOrphan ends the sub-task id, found unfinished under a parent that has
// ended, under the fence of its top task: read again there, it is ended
// only if it still is an orphan. It reports whether it ended it.
func (rt *Runtime) endOrphan(ctx context.Context, id string) (bool, error) {
	rec, err := rt.st.Tasks.LoadTask(ctx, id)
	if errors.Is(err, loop.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	release, err := rt.fenceTop(ctx, rec)
	if errors.Is(err, loop.ErrBusy) {
		return false, nil // a turn of its top task runs: it is that turn's
	}
	if err != nil {
		return false, fmt.Errorf("orphaned sub-task %q: %w", id, err)
	}
	defer release()
	if rec, err = rt.st.Tasks.LoadTask(ctx, id); err != nil || rec.Status.Terminal() {
		return false, nil
	}
	parent, ok, err := rt.endedParent(ctx, rec)
	if err != nil || !ok {
		return false, err
	}
	evs, err := rt.cfg.Loop.EndSubtask(ctx, rec, loop.TaskCanceled, OrphanReason(parent.ID, parent.Status))
	if perr := rt.publishSubEnds(ctx, rec.ContextID, evs); perr != nil {
		err = errors.Join(err, perr)
	}
	return len(evs) > 0, err
}
