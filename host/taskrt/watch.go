package taskrt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// A paused task waits on requests it passed up from remote sub-agents
// (InputRequest.Route.Remote: directly, or relayed by local sub-agents).
// The remote task may move on without
// the answer: answered on its own host, canceled, failed or expired there.
// Each such request is watched (loop.Loop.WatchPassedUp) while it is open:
// when its remote task moved on, the request is withdrawn (answered with
// loop.AnswerWithdrawn) and the task goes on at once, its call taking the
// remote task's actual outcome. Watches start when a turn ends paused and,
// for the tasks a restart (or another host of shared stores) left paused,
// at StartBackground and every WatchRescanEvery after.

// WatchRescanEvery is how often the paused tasks are listed again for
// passed-up requests nobody here watches yet (paused by another host on
// shared stores, or a watch that ended on an error).
var WatchRescanEvery = 30 * time.Second

// watchCheckEvery is how often a watch checks that its request is still
// open on the paused task (answered by its client, the task canceled:
// the watch ends).
var watchCheckEvery = 5 * time.Second

// watches are the passed-up requests watched now.
type watches struct {
	mu     sync.Mutex
	ctx    context.Context // ended by Shutdown
	stop   context.CancelFunc
	byKey  map[string]*watch // by task id + "\x00" + input id
	wg     sync.WaitGroup
	closed bool
}

// watch is one watched request; a request whose agent no toolset watches
// keeps its (ended) watch, so that it is not tried again every rescan.
type watch struct{ cancel context.CancelFunc }

func watchKey(taskID, inputID string) string { return taskID + "\x00" + inputID }

// watchPaused starts a watch for each open request of rec passed up from a
// remote sub-agent that nobody here watches yet. A sub-task's requests are
// its parent's to watch.
func (rt *Runtime) watchPaused(rec loop.TaskRecord) {
	if !rec.Status.Interrupted() || rec.ParentTaskID != "" {
		return
	}
	for _, r := range rec.OpenRequests() {
		if r.Route.Remote() == nil {
			continue
		}
		rt.startWatch(rec.ID, r)
	}
}

func (rt *Runtime) startWatch(taskID string, req loop.InputRequest) {
	w := &rt.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if w.ctx == nil {
		w.ctx, w.stop = context.WithCancel(context.Background())
		w.byKey = map[string]*watch{}
	}
	key := watchKey(taskID, req.InputID)
	if w.byKey[key] != nil {
		return
	}
	ctx, cancel := context.WithCancel(w.ctx)
	me := &watch{cancel: cancel}
	w.byKey[key] = me
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		handled := rt.runWatch(ctx, taskID, req)
		cancel()
		if handled {
			w.mu.Lock()
			if w.byKey[key] == me {
				delete(w.byKey, key)
			}
			w.mu.Unlock()
		}
	}()
}

// stopWatches ends every watch (the shutdown) and waits for them.
func (rt *Runtime) stopWatches() {
	w := &rt.watch
	w.mu.Lock()
	w.closed = true
	if w.stop != nil {
		w.stop()
	}
	w.mu.Unlock()
	w.wg.Wait()
}

// runWatch watches req of the paused task taskID until its remote task
// moved on (then it withdraws the request), the request is no longer open
// here, or ctx ends.
// It reports false when no toolset watches the request's agent.
func (rt *Runtime) runWatch(ctx context.Context, taskID string, req loop.InputRequest) bool {
	type result struct {
		handled bool
		err     error
	}
	moved := make(chan result, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		h, err := rt.cfg.Loop.WatchPassedUp(wctx, req)
		moved <- result{h, err}
	}()
	tick := time.NewTicker(watchCheckEvery)
	defer tick.Stop()
	for {
		select {
		case res := <-moved:
			if !res.handled {
				rt.log.LogAttrs(ctx, slog.LevelWarn, "a passed-up request's remote task is not watched: no remote agent of that name",
					slog.String("task_id", taskID), slog.String("agent", req.Route.Remote().AgentID))
				return false
			}
			if res.err != nil {
				return true
			}
			if err := rt.withdraw(ctx, taskID, req.InputID); err != nil && ctx.Err() == nil {
				rt.log.LogAttrs(ctx, slog.LevelWarn, "a passed-up request whose remote task moved on is not withdrawn",
					slog.String("task_id", taskID), slog.String("input_id", req.InputID), slog.String("error", err.Error()))
			}
			return true
		case <-tick.C:
			if !rt.stillOpen(ctx, taskID, req.InputID) {
				cancel()
				<-moved
				return true
			}
		case <-ctx.Done():
			<-moved
			return true
		}
	}
}

// stillOpen says the paused task taskID still waits for inputID (a store
// that does not answer: assumed so).
func (rt *Runtime) stillOpen(ctx context.Context, taskID, inputID string) bool {
	rec, err := rt.st.Tasks.LoadTask(ctx, taskID)
	if err != nil {
		return !errors.Is(err, loop.ErrNotFound)
	}
	_, open := openRequest(rec, inputID)
	return open
}

// openRequest returns the index of the open request inputID of the paused
// task rec.
func openRequest(rec loop.TaskRecord, inputID string) (int, bool) {
	if !rec.Status.Interrupted() {
		return 0, false
	}
	for i, r := range rec.Requests {
		if r.InputID == inputID && r.Answer == nil {
			return i, true
		}
	}
	return 0, false
}

// withdraw answers the open request inputID of the paused task taskID with
// loop.AnswerWithdrawn: its remote task moved on without it. Once no
// request of the task is open the task goes on (its call takes the remote
// task's outcome); else it stays paused for the others. A task answered,
// continued or ended meanwhile is left as it is (versioned writes: the
// write that loses reads the task again).
func (rt *Runtime) withdraw(ctx context.Context, taskID, inputID string) error {
	for attempt := 0; ; attempt++ {
		rec, err := rt.st.Tasks.LoadTask(ctx, taskID)
		if errors.Is(err, loop.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("load task %q: %w", taskID, err)
		}
		i, open := openRequest(rec, inputID)
		if !open || rt.Running(taskID) != nil {
			return nil
		}
		now := time.Now().UTC()
		reqs := append([]loop.InputRequest(nil), rec.Requests...)
		reqs[i].Answer = &loop.InputAnswer{InputID: inputID, ProvidedBy: "agent", AgentID: loop.AnswerWithdrawn, At: now}
		rec.Requests = reqs
		rt.log.LogAttrs(ctx, slog.LevelInfo, "passed-up request withdrawn: its remote task moved on without it",
			slog.String("task_id", taskID), slog.String("input_id", inputID))
		if len(rec.OpenRequests()) > 0 {
			_, err = rt.recordAnswers(ctx, rec, []loop.InputAnswer{*reqs[i].Answer})
		} else {
			// The runtime goes on by itself, as for an expired request:
			// the client's credentials are not here.
			_, err = rt.Start(ctx, StartRequest{Auth: &loop.AuthContext{Principal: rec.Owner, Lost: true}, TaskID: rec.ID, answered: &rec})
		}
		if err == nil || attempt >= 20 || !(errors.Is(err, loop.ErrConflict) || errors.Is(err, loop.ErrBusy)) {
			return err
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// watchAllPaused starts the watches of every paused task's passed-up
// requests (at start, and every WatchRescanEvery).
func (rt *Runtime) watchAllPaused(ctx context.Context) {
	waiting, err := rt.st.Tasks.ListTasks(ctx, loop.TaskFilter{Statuses: []loop.TaskStatus{loop.TaskWaitingInput, loop.TaskWaitingAuth}})
	if err != nil {
		if ctx.Err() == nil {
			rt.log.LogAttrs(ctx, slog.LevelWarn, "paused tasks not listed for their remote sub-agents' tasks", slog.String("error", err.Error()))
		}
		return
	}
	for _, rec := range waiting {
		rt.watchPaused(rec)
	}
}
