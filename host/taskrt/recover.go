package taskrt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/looopy-go/looopy/loop"
)

// Recover takes over the tasks that no live process owns: at startup,
// those a previous process left; later (StartBackground runs it every
// Config.TakeoverEvery, for stores shared by several processes), those of
// a process that died. For each:
//   - a working task resumes from its last checkpoint (its stream goes on
//     under the same ids); without checkpoints, or when it cannot resume,
//     it fails with the reason, so no task ever stays working;
//   - a finished or interrupted task whose end is not in its stream (the
//     process died between the turn's commit and its final events) gets
//     its final events, so that every stream of it ends.
//
// A task is taken only with its lease: never while another live process
// holds it. Recover returns once every task is taken over; resumed turns
// run on in the background, at most ResumeConcurrency at a time.
func (rt *Runtime) Recover(ctx context.Context) error {
	rt.recoverOnce.Lock()
	defer rt.recoverOnce.Unlock()
	recs, err := rt.st.Tasks.ListTasks(ctx, loop.TaskFilter{Statuses: []loop.TaskStatus{loop.TaskSubmitted, loop.TaskWorking}})
	if err != nil {
		return fmt.Errorf("recover tasks: %w", err)
	}
	leases := map[string]loop.Lease{}
	if rt.st.Leases != nil {
		ls, err := rt.st.Leases.ListLeases(ctx)
		if err != nil {
			return fmt.Errorf("recover tasks: %w", err)
		}
		for _, l := range ls {
			if strings.HasPrefix(l.Key, ContextLeasePrefix) {
				continue // a context's, held by a turn (or lapsed with it)
			}
			leases[l.Key] = l
		}
	}
	now := time.Now()
	// held reports a task another live process owns, or one running here.
	held := func(id string) bool {
		if rt.Running(id) != nil {
			return true
		}
		l, ok := leases[id]
		return ok && l.Owner != rt.cfg.Owner && now.Before(l.Expires)
	}
	var todo, orphans []loop.TaskRecord
	for _, rec := range recs {
		switch {
		case rec.ParentTaskID != "":
			// A sub-task runs inside its parent's turn, never on its own:
			// left working with its parent not running, it was cut off
			// (a resumed parent runs its call again, or reports it
			// interrupted).
			if !held(rec.ParentTaskID) {
				orphans = append(orphans, rec)
			}
		case !held(rec.ID):
			todo = append(todo, rec)
		}
		delete(leases, rec.ID)
	}
	durable := rt.st.Checkpoints != nil && rt.st.Journal != nil
	if durable {
		// A sub-task whose parent resumes here is left to the parent's
		// resumed turn: its call is taken up again (a remote agent
		// follows its task) or reported interrupted, which ends the
		// sub-task; failing it now would end its stream under the call.
		resumes := map[string]bool{}
		for _, rec := range todo {
			resumes[rec.ID] = rec.Status == loop.TaskWorking
		}
		kept := orphans[:0]
		for _, rec := range orphans {
			if !resumes[rec.ParentTaskID] {
				kept = append(kept, rec)
			}
		}
		orphans = kept
	}
	// What remains are leases of tasks no longer working: ended, but
	// maybe not announced.
	var ended []loop.Lease
	for _, l := range leases {
		if !held(l.Key) {
			ended = append(ended, l)
		}
	}

	sem := make(chan struct{}, rt.cfg.ResumeConcurrency)
	// Tasks are taken over in parallel: each costs synced writes, which
	// the store commits in groups only when they come together. Their
	// turns wait until all are taken over (gate): the host is ready soon
	// after a crash however many tasks were in flight.
	gate := make(chan struct{})
	defer close(gate)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(rt.cfg.ResumeConcurrency)
	for _, l := range ended {
		g.Go(func() error {
			if err := rt.settleEnded(gctx, l); err != nil {
				rt.log.LogAttrs(gctx, slog.LevelError, "end of task not announced", slog.String("task_id", l.Key),
					slog.String("error", err.Error()))
			}
			return nil
		})
	}
	for _, rec := range orphans {
		g.Go(func() error {
			return rt.failTaken(gctx, rec, "interrupted: the host restarted during its parent task's turn")
		})
	}
	for _, rec := range todo {
		g.Go(func() error {
			if rec.Broken {
				rt.log.LogAttrs(gctx, slog.LevelError, "task record does not decode; the task is failed", slog.String("task_id", rec.ID))
				return rt.failBroken(gctx, rec)
			}
			if !durable || rec.Status != loop.TaskWorking {
				rt.log.LogAttrs(gctx, slog.LevelWarn, "task interrupted by a restart", slog.String("task_id", rec.ID))
				return rt.failTaken(gctx, rec, "interrupted: the host restarted during the turn")
			}
			err := rt.resume(gctx, rec, gate, sem)
			switch {
			case err == nil:
				return nil
			case errors.Is(err, loop.ErrBusy):
				return nil // taken by another process meanwhile
			}
			rt.log.LogAttrs(gctx, slog.LevelError, "task not resumed", slog.String("task_id", rec.ID), slog.String("error", err.Error()))
			return rt.failTaken(gctx, rec, "cannot be resumed after a restart: "+err.Error())
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	// Sub-tasks left unfinished under a parent that has ended (a crash
	// between the parent's end and theirs) end now.
	if n, err := rt.SweepOrphans(ctx); err != nil {
		rt.log.LogAttrs(ctx, slog.LevelWarn, "orphaned sub-tasks not all ended", slog.String("error", err.Error()))
	} else if n > 0 {
		rt.log.LogAttrs(ctx, slog.LevelInfo, "orphaned sub-tasks ended", slog.Int("tasks", n))
	}
	if n := len(todo) + len(ended) + len(orphans); n > 0 {
		rt.log.LogAttrs(ctx, slog.LevelInfo, "tasks taken over", slog.Int("tasks", len(todo)), slog.Int("ends", len(ended)))
	}
	return nil
}

// failTaken fails a task no one runs, under its lease.
func (rt *Runtime) failTaken(ctx context.Context, rec loop.TaskRecord, why string) error {
	r := &Run{TaskID: rec.ID, ContextID: rec.ContextID}
	if err := rt.own(ctx, r, false); err != nil {
		if errors.Is(err, loop.ErrBusy) {
			return nil
		}
		return err
	}
	defer rt.disown(r)
	err := rt.finishStored(ctx, rec, loop.TaskFailed, why)
	if errors.Is(err, loop.ErrConflict) {
		return nil // changed meanwhile by its owner
	}
	return err
}

// failBroken settles a task whose record does not decode (rec is what its
// list entry knows): the damaged record is replaced by a failed one that
// says why, and its end is announced. What the record held is lost.
func (rt *Runtime) failBroken(ctx context.Context, rec loop.TaskRecord) error {
	r := &Run{TaskID: rec.ID, ContextID: rec.ContextID}
	if err := rt.own(ctx, r, false); err != nil {
		if errors.Is(err, loop.ErrBusy) {
			return nil
		}
		return err
	}
	defer rt.disown(r)
	if err := rt.st.Tasks.DeleteTask(ctx, rec.ID); err != nil {
		return fmt.Errorf("replace the damaged record of task %q: %w", rec.ID, err)
	}
	rec.Version = 0
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = time.Now().UTC()
	}
	return rt.finishStored(ctx, rec, loop.TaskFailed, "the task's stored record could not be read back: "+rec.Message)
}

// settleEnded announces the end of a task whose lease outlived its turn,
// then releases the lease.
func (rt *Runtime) settleEnded(ctx context.Context, l loop.Lease) error {
	r := &Run{TaskID: l.Key, ContextID: l.Data}
	if err := rt.own(ctx, r, false); err != nil {
		if errors.Is(err, loop.ErrBusy) {
			return nil
		}
		return err
	}
	rec, err := rt.st.Tasks.LoadTask(ctx, l.Key)
	switch {
	case errors.Is(err, loop.ErrNotFound):
		rt.disown(r)
		return nil
	case errors.Is(err, loop.ErrCorrupt):
		// A record that does not decode is settled as failed from what
		// its list entry knows, not met again at every pass.
		rt.disown(r)
		recs, lerr := rt.st.Tasks.ListTasks(ctx, loop.TaskFilter{ContextID: l.Data})
		if lerr != nil {
			return err
		}
		for _, b := range recs {
			if b.ID == l.Key && b.Broken {
				rt.log.LogAttrs(ctx, slog.LevelError, "task record does not decode; the task is failed", slog.String("task_id", b.ID))
				return rt.failBroken(ctx, b)
			}
		}
		return err
	case err != nil:
		return err // the lease stays: the next pass tries again
	case rec.Status == loop.TaskWorking || rec.Status == loop.TaskSubmitted:
		// Working again (started anew between the listings): not ended.
		rt.disown(r)
		return nil
	}
	last, err := rt.ev.LastEvent(ctx, rec.ID)
	if err != nil {
		return err
	}
	if tc, ok := last.(*loop.TaskComplete); !ok || tc.Status != rec.Status {
		rt.log.LogAttrs(ctx, slog.LevelWarn, "announcing the end of a task a stopped process left unannounced",
			slog.String("task_id", rec.ID), slog.String("status", string(rec.Status)))
		if err := rt.announce(ctx, rec, last); err != nil {
			return err
		}
	}
	rt.turnEnded(rec.ID, rec.ContextID, rec.Status)
	rt.disown(r)
	return nil
}

// resume registers a task left working as running here and resumes its
// turn in the background once gate is closed and sem has room.
func (rt *Runtime) resume(ctx context.Context, rec loop.TaskRecord, gate <-chan struct{}, sem chan struct{}) error {
	agent, err := rt.agent(ctx, rec.ContextID, rec.Owner, false)
	if err != nil {
		return err
	}
	r, err := rt.register(ctx, rec.ID, rec.ContextID, rec.Owner, false)
	if err != nil {
		return err
	}
	r.Created = rec.CreatedAt
	if err := rt.own(ctx, r, true); err != nil {
		rt.unregister(r)
		return err
	}
	// A task whose stream is empty died before its turn said anything:
	// it starts, rather than resumes, so that its stream opens as usual.
	resumed := r.After > 0
	rt.launch(r, rec, nil, func(ctx context.Context, sink loop.EventSink) (loop.Outcome, error) {
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
		rt.log.LogAttrs(ctx, slog.LevelInfo, "resuming task", slog.String("task_id", rec.ID))
		return agent.RunTask(ctx, loop.RunInput{TaskID: rec.ID, Sink: sink, Lease: r.lease, Resumed: resumed})
	})
	return nil
}

// RecoverCheckEvery is how often Config.RecoverWhen is asked.
const RecoverCheckEvery = 2 * time.Second

// StartBackground begins the runtime's background work: the cleanup of what
// finished tasks leave behind and, with leases and Config.TakeoverEvery,
// the periodic takeover of tasks whose owner died. Shutdown stops it.
func (rt *Runtime) StartBackground() {
	ctx, cancel := context.WithCancel(context.Background())
	rt.mu.Lock()
	rt.stopSweep, rt.sweepDone = cancel, make(chan struct{})
	rt.mu.Unlock()
	var watching sync.WaitGroup
	if rt.cancels() != nil {
		watching.Add(1)
		go func() { defer watching.Done(); rt.watchCancels(ctx) }()
	}
	watching.Add(1)
	go func() {
		// The tasks a restart (or another host) left paused on remote
		// sub-agents' requests: their remote tasks are watched again.
		defer watching.Done()
		tick := time.NewTicker(WatchRescanEvery)
		defer tick.Stop()
		for {
			rt.watchAllPaused(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	go func() {
		defer close(rt.sweepDone)
		defer watching.Wait()
		tick := time.NewTicker(rt.cfg.SweepEvery)
		defer tick.Stop()
		var expire <-chan time.Time
		if rt.cfg.ExpireEvery > 0 {
			t := time.NewTicker(rt.cfg.ExpireEvery)
			defer t.Stop()
			expire = t.C
		}
		var recheck <-chan time.Time
		if rt.cfg.RecoverWhen != nil {
			t := time.NewTicker(RecoverCheckEvery)
			defer t.Stop()
			recheck = t.C
		}
		var takeover <-chan time.Time
		if rt.st.Leases != nil && rt.cfg.TakeoverEvery > 0 {
			t := time.NewTicker(rt.cfg.TakeoverEvery)
			defer t.Stop()
			takeover = t.C
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-recheck:
				if rt.cfg.RecoverWhen() {
					rt.log.LogAttrs(ctx, slog.LevelInfo, "the store takes writes again: recovering the tasks whose end it refused")
					if err := rt.Recover(ctx); err != nil && ctx.Err() == nil {
						rt.log.LogAttrs(ctx, slog.LevelWarn, "recovery after refused writes", slog.String("error", err.Error()))
					}
				}
			case <-tick.C:
				if n, err := rt.Sweep(ctx); err != nil && ctx.Err() == nil {
					rt.log.LogAttrs(ctx, slog.LevelWarn, "cleanup of finished tasks", slog.String("error", err.Error()))
				} else if n > 0 {
					rt.log.LogAttrs(ctx, slog.LevelDebug, "cleanup of finished tasks", slog.Int("tasks", n))
				}
				if n, err := rt.SweepOrphans(ctx); err != nil && ctx.Err() == nil {
					rt.log.LogAttrs(ctx, slog.LevelWarn, "orphaned sub-tasks", slog.String("error", err.Error()))
				} else if n > 0 {
					rt.log.LogAttrs(ctx, slog.LevelInfo, "orphaned sub-tasks ended", slog.Int("tasks", n))
				}
				if n, err := rt.FinishConversationDeletes(ctx); err != nil && ctx.Err() == nil {
					rt.log.LogAttrs(ctx, slog.LevelWarn, "deletions of conversations", slog.String("error", err.Error()))
				} else if n > 0 {
					rt.log.LogAttrs(ctx, slog.LevelInfo, "deletions of conversations finished", slog.Int("conversations", n))
				}
				if n, err := rt.ExpireConversations(ctx, time.Now()); err != nil && ctx.Err() == nil {
					rt.log.LogAttrs(ctx, slog.LevelWarn, "expiry of idle conversations", slog.String("error", err.Error()))
				} else if n > 0 {
					rt.log.LogAttrs(ctx, slog.LevelInfo, "idle conversations expired", slog.Int("conversations", n))
				}
			case <-expire:
				if n, err := rt.ExpireRequests(ctx, time.Now().UTC()); err != nil && ctx.Err() == nil {
					rt.log.LogAttrs(ctx, slog.LevelWarn, "expiry of unanswered requests", slog.String("error", err.Error()))
				} else if n > 0 {
					rt.log.LogAttrs(ctx, slog.LevelInfo, "unanswered requests expired", slog.Int("tasks", n))
				}
			case <-takeover:
				if err := rt.Recover(ctx); err != nil && ctx.Err() == nil {
					rt.log.LogAttrs(ctx, slog.LevelWarn, "takeover of lapsed tasks", slog.String("error", err.Error()))
				}
			}
		}
	}()
}
