package taskrt

import (
	"container/heap"
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

// DefaultMaxRemoteWatches is Config.MaxRemoteWatches's default.
const DefaultMaxRemoteWatches = 16

// maxWatchPause bounds the pause between two reads of a watched remote
// task while its agent does not answer (the pause doubles from its
// agent's watchEvery).
const maxWatchPause = time.Minute

// watchReadTimeout bounds one read of a watched remote task: a remote host
// that does not answer frees its reader's place for the others.
var watchReadTimeout = 30 * time.Second

// watches are the passed-up requests watched now. At most limit readers
// (Config.MaxRemoteWatches) read remote tasks at once, however many
// requests are watched: each reader takes the watch whose read is due the
// earliest, reads its remote task once and puts it back, due again after
// its agent's watchEvery. A watch waiting for a reader is due earlier than
// every watch read since, so all are read in turn (round robin) and none
// starves, whatever the number of paused tasks.
type watches struct {
	mu      sync.Mutex
	ctx     context.Context // ended by Shutdown
	stop    context.CancelFunc
	byKey   map[string]*watch // by task id + "\x00" + input id
	queue   watchQueue        // the watches waiting for their next read
	wake    chan struct{}     // a watch was queued
	readers int
	wg      sync.WaitGroup
	closed  bool
}

// watch is one watched request; a request whose agent no toolset watches
// keeps its (ended) watch, so that it is not tried again every rescan.
type watch struct {
	key, taskID string
	req         loop.InputRequest
	every       time.Duration
	read        func(ctx context.Context) (bool, error)
	due         time.Time
	pause       time.Duration
	ended       bool
}

// watchQueue is a heap of watches, the one due the earliest first.
type watchQueue []*watch

func (q watchQueue) Len() int           { return len(q) }
func (q watchQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q watchQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *watchQueue) Push(x any)        { *q = append(*q, x.(*watch)) }
func (q *watchQueue) Pop() any {
	old := *q
	n := len(old)
	x := old[n-1]
	old[n-1] = nil
	*q = old[:n-1]
	return x
}

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
		w.wake = make(chan struct{}, 1)
	}
	key := watchKey(taskID, req.InputID)
	if w.byKey[key] != nil {
		return
	}
	every, read, ok := rt.cfg.Loop.PassedUpWatch(req)
	if !ok {
		rt.log.LogAttrs(w.ctx, slog.LevelWarn, "a passed-up request's remote task is not watched: no remote agent of that name",
			slog.String("task_id", taskID), slog.String("agent", req.Route.Remote().AgentID))
		w.byKey[key] = &watch{key: key, ended: true}
		return
	}
	if every <= 0 {
		every = time.Second
	}
	// The first read waits too: the remote task has just paused (or this
	// host just started).
	me := &watch{key: key, taskID: taskID, req: req, every: every, read: read, due: time.Now().Add(every), pause: every}
	w.byKey[key] = me
	heap.Push(&w.queue, me)
	limit := rt.cfg.MaxRemoteWatches
	if limit <= 0 {
		limit = DefaultMaxRemoteWatches
	}
	if w.readers < limit && w.readers < len(w.byKey) {
		w.readers++
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			rt.watchReader(w.ctx)
		}()
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
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

// watchReader reads watched remote tasks, one at a time, until ctx ends.
func (rt *Runtime) watchReader(ctx context.Context) {
	for {
		me := rt.watch.next(ctx)
		if me == nil {
			return
		}
		rt.watch.put(me, rt.readWatch(ctx, me))
	}
}

// next takes the queued watch due the earliest, once it is due; nil when
// ctx ends.
func (w *watches) next(ctx context.Context) *watch {
	for {
		w.mu.Lock()
		wait := time.Duration(-1)
		if len(w.queue) > 0 {
			if wait = time.Until(w.queue[0].due); wait <= 0 {
				me := heap.Pop(&w.queue).(*watch)
				w.mu.Unlock()
				return me
			}
		}
		w.mu.Unlock()
		var t *time.Timer
		var timer <-chan time.Time
		if wait > 0 {
			t = time.NewTimer(wait)
			timer = t.C
		}
		select {
		case <-ctx.Done():
		case <-w.wake: // a watch was queued: its read may be due sooner
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// put queues me again after its read, or forgets it (ended).
func (w *watches) put(me *watch, ended bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ended {
		if w.byKey[me.key] == me {
			delete(w.byKey, me.key)
		}
		return
	}
	heap.Push(&w.queue, me)
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// readWatch reads the remote task of me once. When it moved on, the
// request is withdrawn. It reports whether the watch ended: the request
// is withdrawn, no longer open here, or the host shuts down. A read that
// failed doubles the pause before the next (up to a minute).
func (rt *Runtime) readWatch(ctx context.Context, me *watch) bool {
	if ctx.Err() != nil || !rt.stillOpen(ctx, me.taskID, me.req.InputID) {
		return true
	}
	rctx, cancel := context.WithTimeout(ctx, watchReadTimeout)
	moved, err := me.read(rctx)
	cancel()
	switch {
	case ctx.Err() != nil:
		return true
	case err != nil:
		me.pause = min(2*me.pause, max(maxWatchPause, me.every))
		me.due = time.Now().Add(me.pause)
		return false
	case !moved:
		me.pause = me.every
		me.due = time.Now().Add(me.every)
		return false
	}
	if err := rt.withdraw(ctx, me.taskID, me.req.InputID); err != nil && ctx.Err() == nil {
		rt.log.LogAttrs(ctx, slog.LevelWarn, "a passed-up request whose remote task moved on is not withdrawn",
			slog.String("task_id", me.taskID), slog.String("input_id", me.req.InputID), slog.String("error", err.Error()))
	}
	return true
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
