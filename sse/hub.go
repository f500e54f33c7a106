package sse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// Errors of the package.
var (
	// ErrClosed is returned once the Hub is closed.
	ErrClosed = errors.New("sse: hub closed")
	// ErrFinished is returned by Subscription.Next when the stream was
	// finished and every event of it has been read; and by Publish to a
	// finished stream.
	ErrFinished = errors.New("sse: stream finished")
	// ErrStalled is returned by Serve when one write or flush blocked longer
	// than the write timeout.
	ErrStalled = errors.New("sse: subscriber stalled")
	// ErrClientWrite is returned (wrapped, with the writer's own error) by
	// Serve when a write or flush to the client failed: the client left.
	// What the writer answers then depends on the server (a closed pipe, a
	// reset connection), so this says it once for all of them.
	ErrClientWrite = errors.New("sse: write to the client failed")
	// ErrAhead is returned by Subscribe for a start id beyond the last event
	// of the stream (a Last-Event-ID of a stream that expired, or made up).
	ErrAhead = errors.New("sse: event id beyond the end of the stream")
	// ErrDeleted is returned by Subscription.Next (and Serve) when the
	// stream was deleted under the subscription (Hub.Delete): nothing more
	// of it will come.
	ErrDeleted = errors.New("sse: stream deleted")
	// ErrExpired is returned by Subscribe, and by Subscription.Next, when
	// events after the subscriber's id are no longer in the log: they
	// expired (a stream's records go limits.taskTTL after its writer is
	// done; its ids never go back), or the log was started again below the
	// id (a stream of an earlier version). Resuming would skip them
	// silently: the client must read the stream again from its start.
	ErrExpired = errors.New("sse: events after the id have expired")
)

// TaskStream names the event stream of one task: every event of the task,
// A2A subscribers read it.
func TaskStream(taskID string) string { return "task/" + taskID }

// ContextStream names the event stream of one conversation (contextId): the
// events of all its tasks, in the order they were published, for Looopy's
// own event stream.
func ContextStream(contextID string) string { return "ctx/" + contextID }

// Config configures a Hub. Zero fields take their defaults.
type Config struct {
	// Log is the durable event log. Required. The Hub must be the only
	// writer of the streams it publishes to: it serializes the appends of
	// each stream so that ids become visible in order.
	Log loop.EventLog
	// TailSize is how many recent events of each stream with subscribers are
	// kept in memory, so live subscribers do not read the log. Default 256.
	TailSize int
	// ReadBatch is how many records a catching-up subscriber reads from the
	// log at once. Default 128.
	ReadBatch int
	// MaxPending is how many events of one stream may wait to be appended
	// before publishers block. Default 4096.
	MaxPending int
	// MaxPendingBytes bounds the same queue by the events' size: past it
	// publishers block too (a turn's Sink waits), so a task emitting large
	// events faster than the log takes them cannot make the host hold
	// MaxPending of them. One event is always taken when nothing of the
	// stream waits, whatever its size. Default 16 MiB.
	MaxPendingBytes int64
	// TailBytes bounds the in-memory tail of a stream by size as TailSize
	// does by count: the oldest events leave it first (subscribers read
	// them back from the log; nothing is lost). The newest event always
	// stays. Default 4 MiB.
	TailBytes int64
	// ReadBatchBytes bounds what a subscriber holds at once by size: a
	// batch from the tail stops past it, and a batch read back from the
	// log asks for as many records as fit it at the mean size of the last
	// ones read (of the tail's at first, or one record when neither is
	// known), at most ReadBatch. Default 1 MiB.
	ReadBatchBytes int64
	// Retention is how long the log of a finished stream is kept before it
	// expires. Default 24h; negative keeps it forever.
	Retention time.Duration
	// Logger receives warnings (undecodable log records). Nil discards.
	Logger *slog.Logger
	// Follow says that other processes append to the same log (a backend
	// shared by several hosts): the Hub then follows every stream that has
	// subscribers with EventLog.Wait, so that they get events whichever
	// host published them. Off for a log only this process writes.
	Follow bool
}

// The defaults of the Hub's bounds by size (Config).
const (
	DefaultMaxPendingBytes = 16 << 20
	DefaultTailBytes       = 4 << 20
	DefaultReadBatchBytes  = 1 << 20
)

// Pending returns how many events of stream wait to be appended to the log
// and their bytes (with those of an append under way).
func (h *Hub) Pending(streamName string) (events int, bytes int64) {
	h.mu.Lock()
	st := h.streams[streamName]
	h.mu.Unlock()
	if st == nil {
		return 0, 0
	}
	st.qmu.Lock()
	defer st.qmu.Unlock()
	return len(st.queue), st.qbytes
}

// TailLen returns how many events of stream the in-memory tail holds and
// their bytes.
func (h *Hub) TailLen(streamName string) (events int, bytes int64) {
	h.mu.Lock()
	st := h.streams[streamName]
	h.mu.Unlock()
	if st == nil {
		return 0, 0
	}
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.n, st.tbytes
}

// LogReads returns how many subscribers read the log back now (records
// older than their stream's in-memory tail) and how many wait for their
// turn: one subscriber of a stream reads the log at a time, and the others
// take what it read.
func (h *Hub) LogReads() (reading, waiting int64) {
	return h.logReads.Load(), h.logReadsWaiting.Load()
}

// Hub appends events to the durable log and wakes the subscribers of each
// stream. Subscribers are never pushed events: they are woken and read from
// the log (or its in-memory tail) from their own cursor, so a slow
// subscriber never blocks a publisher or another subscriber, and replay and
// the live tail are one sequence with no gap and no duplicate.
//
// A Hub is safe for concurrent use.
type Hub struct {
	log       loop.EventLog
	tailSize  int
	batch     int
	retention time.Duration
	maxQueue  int
	maxQBytes int64
	tailBytes int64
	readBytes int64
	logger    *slog.Logger
	done      chan struct{}
	writers   sync.WaitGroup // one per stream with events waiting

	follow     bool
	followCtx  context.Context // ends with Close
	stopFollow context.CancelFunc
	followers  sync.WaitGroup

	logReads        atomic.Int64 // reads of the log by lagging subscribers under way
	logReadsWaiting atomic.Int64 // lagging subscribers waiting for their stream's reader

	mu        sync.Mutex
	closed    bool
	streams   map[string]*stream
	finished  map[string]time.Time // finished streams, remembered for markTTL
	lastPrune time.Time
}

// stream is the in-memory state of a stream that has subscribers or a
// publish in flight. It is dropped when neither remains.
type stream struct {
	name string
	refs int // guarded by Hub.mu

	pub sync.Mutex // held by the writer while appending, and by the first load of last

	qmu     sync.Mutex
	qcond   sync.Cond // L is &qmu: the queue shrank, or the writer stopped
	queue   []pending // events waiting to be appended, in order
	qbytes  int64     // bytes of the queue and of the batch being appended
	spare   []pending
	writing bool    // a writer goroutine owns the queue
	partner *stream // the other stream of a writer that owns both queues (writePair)

	mu       sync.RWMutex
	loaded   bool   // last and from are known
	last     uint64 // seq of the last record of the log
	from     uint64 // the tail holds every record with from < seq <= last
	tail     []Item // ring buffer of the most recent records, oldest at head
	head     int
	n        int
	tbytes   int64 // bytes of the tail's records
	finished bool
	resets   uint64 // times the log's ids went back (see published)
	subs     map[*Subscription]struct{}
	unfollow context.CancelFunc // stops the follower (Config.Follow); nil when none runs

	// The read-back of records older than the tail: one subscriber of the
	// stream reads the log at a time (rsem holds its token), and the batch
	// it read is kept (shared, guarded by the token) for the others, which
	// lag at about the same place. So a stream's lagging subscribers cost
	// the log one reader, not one each, whatever their number.
	rsem        chan struct{}
	shared      []Item
	sharedAfter uint64       // shared holds every record after it, up to its last
	rwait       atomic.Int32 // subscribers waiting for rsem
}

// New returns a Hub over cfg.Log.
func New(cfg Config) (*Hub, error) {
	if cfg.Log == nil {
		return nil, errors.New("new sse hub: Config.Log is required")
	}
	if cfg.TailSize < 0 || cfg.ReadBatch < 0 || cfg.MaxPending < 0 {
		return nil, fmt.Errorf("new sse hub: negative TailSize (%d), ReadBatch (%d) or MaxPending (%d)", cfg.TailSize, cfg.ReadBatch, cfg.MaxPending)
	}
	if cfg.MaxPendingBytes < 0 || cfg.TailBytes < 0 || cfg.ReadBatchBytes < 0 {
		return nil, fmt.Errorf("new sse hub: negative MaxPendingBytes (%d), TailBytes (%d) or ReadBatchBytes (%d)",
			cfg.MaxPendingBytes, cfg.TailBytes, cfg.ReadBatchBytes)
	}
	h := &Hub{
		log:       cfg.Log,
		tailSize:  cfg.TailSize,
		batch:     cfg.ReadBatch,
		retention: cfg.Retention,
		maxQueue:  cfg.MaxPending,
		maxQBytes: cfg.MaxPendingBytes,
		tailBytes: cfg.TailBytes,
		readBytes: cfg.ReadBatchBytes,
		logger:    cfg.Logger,
		follow:    cfg.Follow,
		done:      make(chan struct{}),
		streams:   make(map[string]*stream),
		finished:  make(map[string]time.Time),
	}
	if h.tailSize == 0 {
		h.tailSize = 256
	}
	if h.batch == 0 {
		h.batch = 128
	}
	if h.maxQueue == 0 {
		h.maxQueue = 4096
	}
	if h.maxQBytes == 0 {
		h.maxQBytes = DefaultMaxPendingBytes
	}
	if h.tailBytes == 0 {
		h.tailBytes = DefaultTailBytes
	}
	if h.readBytes == 0 {
		h.readBytes = DefaultReadBatchBytes
	}
	if h.retention == 0 {
		h.retention = 24 * time.Hour
	}
	if h.logger == nil {
		h.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	h.followCtx, h.stopFollow = context.WithCancel(context.Background())
	return h, nil
}

// Close ends every subscription (their Next returns ErrClosed), refuses
// further publishing, and waits until the events already accepted are in
// the log. It does not close the log, which the caller owns.
func (h *Hub) Close() error {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.done)
	}
	h.mu.Unlock()
	h.stopFollow()
	h.followers.Wait()
	h.writers.Wait()
	return nil
}

// Publish appends e to stream and then wakes the stream's subscribers. It
// returns the event's id: its sequence number in the log. The event is
// durable when Publish returns. Concurrent publishes to one stream are
// appended together (one write to the log). If ctx ends first, Publish
// returns ctx's error and the event may still be published.
func (h *Hub) Publish(ctx context.Context, streamName string, e loop.Event) (uint64, error) {
	it, err := itemOf(e)
	if err != nil {
		return 0, fmt.Errorf("publish to %q: %w", streamName, err)
	}
	res := make(chan pubResult, 1)
	if err := h.enqueue(streamName, pending{it: it, res: res}); err != nil {
		return 0, err
	}
	return wait(ctx, res)
}

// PublishTask publishes e to the stream of its task and to the stream of
// its context (those the event names), appended side by side, and returns
// the id in the task stream (0 when the event has no task).
func (h *Hub) PublishTask(ctx context.Context, e loop.Event) (uint64, error) {
	it, err := itemOf(e)
	if err != nil {
		return 0, fmt.Errorf("publish event: %w", err)
	}
	hd := e.Head()
	if hd.TaskID == "" && hd.ContextID == "" {
		return 0, fmt.Errorf("publish %s event: it names neither a task nor a context", hd.Kind)
	}
	var taskRes, ctxRes chan pubResult
	switch {
	case hd.TaskID != "" && hd.ContextID != "":
		taskRes, ctxRes = make(chan pubResult, 1), make(chan pubResult, 1)
		if err := h.enqueuePair(TaskStream(hd.TaskID), pending{it: it, res: taskRes},
			ContextStream(hd.ContextID), pending{it: it, res: ctxRes}); err != nil {
			return 0, err
		}
	case hd.TaskID != "":
		taskRes = make(chan pubResult, 1)
		if err := h.enqueue(TaskStream(hd.TaskID), pending{it: it, res: taskRes}); err != nil {
			return 0, err
		}
	default:
		ctxRes = make(chan pubResult, 1)
		if err := h.enqueue(ContextStream(hd.ContextID), pending{it: it, res: ctxRes}); err != nil {
			return 0, err
		}
	}
	var id uint64
	if taskRes != nil {
		if id, err = wait(ctx, taskRes); err != nil {
			return 0, err
		}
	}
	if ctxRes != nil {
		if _, err = wait(ctx, ctxRes); err != nil {
			return id, err
		}
	}
	return id, nil
}

// Sink returns the EventSink of a turn: it queues every event for its task
// and context streams and returns without waiting for the log, so a turn
// is not slowed by synced writes (it blocks only when Config.MaxPending
// events of a stream are waiting). The events are in the log before any
// subscriber sees them, in the order they were emitted. Errors go to onErr
// when it is not nil, from the goroutine that appends. Call Finish (or
// Flush) before relying on the events being in the log.
func (h *Hub) Sink(onErr func(loop.Event, error)) loop.EventSink {
	return loop.SinkFunc(func(e loop.Event) {
		report := func(err error) {
			if onErr != nil {
				onErr(e, err)
			} else {
				h.logger.Warn("event not published", "error", err)
			}
		}
		it, err := itemOf(e)
		if err != nil {
			report(fmt.Errorf("publish event: %w", err))
			return
		}
		hd := e.Head()
		if hd.TaskID == "" && hd.ContextID == "" {
			report(fmt.Errorf("publish %s event: it names neither a task nor a context", hd.Kind))
			return
		}
		switch {
		case hd.TaskID != "" && hd.ContextID != "":
			if err := h.enqueuePair(TaskStream(hd.TaskID), pending{it: it, onErr: report},
				ContextStream(hd.ContextID), pending{it: it, onErr: report}); err != nil {
				report(err)
			}
		case hd.TaskID != "":
			if err := h.enqueue(TaskStream(hd.TaskID), pending{it: it, onErr: report}); err != nil {
				report(err)
			}
		default:
			if err := h.enqueue(ContextStream(hd.ContextID), pending{it: it, onErr: report}); err != nil {
				report(err)
			}
		}
	})
}

// endCommit is a turn's commit queued with the events that announce the
// turn's end (Hub.CommitEnd).
type endCommit struct {
	c         loop.TurnCommit
	items     []Item
	onDurable func()
	res       chan endResult // buffered
}

type endResult struct {
	handled bool
	err     error
}

// CommitsEnds reports whether the Hub's log keeps the commits tc makes, so
// that CommitEnd can write one with the end it announces.
func (h *Hub) CommitsEnds(tc loop.TurnCommitter) bool {
	el, ok := h.log.(loop.EventCommitter)
	_, ok2 := h.log.(loop.MultiStreamAppender)
	return ok && ok2 && el.Commits(tc)
}

// CommitEnd publishes events, the last ones of a turn (of one task, in one
// context), after everything queued for their task's and context's streams
// before them, and has the log save c in the same write: the end is never
// in the log without the commit it announces, and the commit takes no sync
// of its own. onDurable, when set, runs once the write is durable, before
// any subscriber can see the events.
//
// It reports false when it cannot (the log is not an EventCommitter of
// tc's store, the events do not all name the same task and context, a
// stream is finished, the Hub is closed): then nothing was done, and the
// caller commits with tc and publishes the events after. With true, err is
// the commit's refusal (loop.ErrLeaseLost, loop.ErrConflict, ...) or the
// write's failure: none of the events is published then; the events
// queued before them are.
func (h *Hub) CommitEnd(ctx context.Context, tc loop.TurnCommitter, c loop.TurnCommit, events []loop.Event, onDurable func()) (bool, error) {
	el, ok := h.log.(loop.EventCommitter)
	ml, ok2 := h.log.(loop.MultiStreamAppender)
	if !ok || !ok2 || len(events) == 0 || !el.Commits(tc) {
		return false, nil
	}
	items := make([]Item, len(events))
	var taskID, contextID string
	for i, e := range events {
		it, err := itemOf(e)
		if err != nil {
			return false, nil // the usual path reports it
		}
		hd := e.Head()
		if i == 0 {
			taskID, contextID = hd.TaskID, hd.ContextID
		}
		if hd.TaskID == "" || hd.ContextID == "" || hd.TaskID != taskID || hd.ContextID != contextID {
			return false, nil
		}
		items[i] = it
	}
	ec := &endCommit{c: c, items: items, onDurable: onDurable, res: make(chan endResult, 1)}
	an, bn := TaskStream(taskID), ContextStream(contextID)
	for {
		queued, err := h.queueEnd(ml, an, bn, ec)
		if err != nil {
			return false, nil
		}
		if queued {
			break
		}
		// A stream has a writer of its own (or shares one with another
		// stream): the commit waits until neither is written.
		for _, n := range []string{an, bn} {
			if err := h.Flush(ctx, n); err != nil {
				return false, nil
			}
		}
	}
	// The write completes whatever ctx does (the Hub waits for it on
	// Close): its outcome is the caller's to know.
	r := <-ec.res
	return r.handled, r.err
}

// queueEnd queues ec in the streams an and bn when one writer owns both or
// neither has one (then it starts one); it reports whether it did.
func (h *Hub) queueEnd(ml loop.MultiStreamAppender, an, bn string, ec *endCommit) (bool, error) {
	a, err := h.acquire(an)
	if err != nil {
		return false, err
	}
	defer h.release(a)
	b, err := h.acquire(bn)
	if err != nil {
		return false, err
	}
	defer h.release(b)
	unlock := lockQueues(a, b)
	defer unlock()
	switch {
	case a.writing && b.writing && a.partner == b && b.partner == a:
	case !a.writing && !b.writing:
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return false, ErrClosed
		}
		a.refs++ // the writer's
		b.refs++
		h.writers.Add(1)
		h.mu.Unlock()
		a.writing, b.writing = true, true
		a.partner, b.partner = b, a
		go h.writePair(ml, a, b)
	default:
		return false, nil
	}
	a.queue = append(a.queue, pending{end: ec})
	b.queue = append(b.queue, pending{end: ec})
	return true, nil
}

// Flush waits until every event queued for stream is in the log.
func (h *Hub) Flush(ctx context.Context, streamName string) error {
	st, err := h.acquire(streamName)
	if err != nil {
		return fmt.Errorf("flush %q: %w", streamName, err)
	}
	defer h.release(st)
	return st.idle(ctx)
}

func itemOf(e loop.Event) (Item, error) {
	if e == nil {
		return Item{}, errors.New("nil event")
	}
	hd := e.Head()
	if hd.Kind == "" {
		return Item{}, errors.New("event without kind")
	}
	data, err := loop.EncodeEvent(e)
	if err != nil {
		return Item{}, fmt.Errorf("encode %s event: %w", hd.Kind, err)
	}
	it := Item{Kind: hd.Kind, TaskID: hd.TaskID, Data: data}
	if cd, ok := e.(*loop.ContentDelta); ok {
		// A copy: the publisher's event is left as it was.
		c := *cd
		c.ContextID = loop.ClientContextID(c.ContextID)
		it.client = &c
	}
	return it, nil
}

// Last returns the id of the last event of stream (0 when it is empty).
func (h *Hub) Last(ctx context.Context, streamName string) (uint64, error) {
	seq, err := h.log.Last(ctx, streamName)
	if err != nil {
		return 0, fmt.Errorf("last event of %q: %w", streamName, err)
	}
	return seq, nil
}

// Finish marks stream as finished (its task reached a terminal state):
// subscribers end once they have read everything, later publishing is
// refused, and the log expires after the configured retention. The mark is
// kept in memory; after a restart, subscribers of a finished stream end on
// their encoder's last frame (the final task status) or their context.
// Finish is End then Retire.
func (h *Hub) Finish(ctx context.Context, streamName string) error {
	if err := h.End(ctx, streamName); err != nil {
		return err
	}
	return h.Retire(ctx, streamName)
}

// End marks stream as finished, as Finish does, without setting the
// expiry of its log (Retire does, for instance once the client heard the
// end).
func (h *Hub) End(ctx context.Context, streamName string) error {
	st, err := h.acquire(streamName)
	if err != nil {
		return fmt.Errorf("finish %q: %w", streamName, err)
	}
	defer h.release(st)
	// What was published before End goes into the log first.
	st.qmu.Lock()
	for st.writing {
		st.qcond.Wait()
	}
	now := time.Now()
	h.mu.Lock()
	h.finished[streamName] = now
	h.pruneFinishedLocked(now)
	h.mu.Unlock()
	st.mu.Lock()
	st.finished = true
	st.notifyAll()
	st.mu.Unlock()
	st.qmu.Unlock()
	return nil
}

// Retire has the log of a finished stream expire after the configured
// retention (no retention: nothing to do).
func (h *Hub) Retire(ctx context.Context, streamName string) error {
	if h.retention >= 0 {
		if err := h.log.Expire(ctx, streamName, h.retention); err != nil {
			return fmt.Errorf("finish %q: expire log: %w", streamName, err)
		}
	}
	return nil
}

// Delete deletes the log of stream now and ends its subscribers in this
// process: their Next (and Serve) returns ErrDeleted once they have read
// what they hold. What is published to the stream afterwards continues
// after its last id, as the log does (its ids never go back). Subscribers in other processes
// (Config.Follow) are not reached: theirs is to notice what they follow is
// gone (ServeOptions.Alive).
func (h *Hub) Delete(ctx context.Context, streamName string) error {
	st, err := h.acquire(streamName)
	if err != nil {
		return fmt.Errorf("delete %q: %w", streamName, err)
	}
	defer h.release(st)
	// What was published before goes into the log first, and nothing is
	// appended until the log and the state are reset (an append waits for
	// qmu to queue).
	st.qmu.Lock()
	defer st.qmu.Unlock()
	for st.writing {
		st.qcond.Wait()
	}
	st.pub.Lock() // no first load of the stream's last seq meanwhile
	defer st.pub.Unlock()
	// The subscribers are marked first: one that reads the log after the
	// expiry below and finds its next events gone ends as deleted.
	st.mu.Lock()
	for s := range st.subs {
		s.deleted.Store(true)
	}
	st.mu.Unlock()
	if err := h.log.Expire(ctx, streamName, 0); err != nil {
		return fmt.Errorf("delete %q: %w", streamName, err)
	}
	h.mu.Lock()
	delete(h.finished, streamName)
	h.mu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	st.loaded, st.last, st.from, st.finished = false, 0, 0, false
	if st.n > 0 {
		clear(st.tail)
	}
	st.head, st.n, st.tbytes = 0, 0, 0
	for s := range st.subs {
		s.deleted.Store(true)
		s.notify()
	}
	return nil
}

// Seed has a stream without records continue after last (the ids its
// clients hold under another name: a conversation started again under
// another id), when the log can (loop.StreamSeeder); otherwise it does
// nothing.
func (h *Hub) Seed(ctx context.Context, streamName string, last uint64) error {
	sd, ok := h.log.(loop.StreamSeeder)
	if !ok {
		return nil
	}
	st, err := h.acquire(streamName)
	if err != nil {
		return fmt.Errorf("seed %q: %w", streamName, err)
	}
	defer h.release(st)
	// As Delete: nothing is appended until the log and the state agree.
	st.qmu.Lock()
	defer st.qmu.Unlock()
	for st.writing {
		st.qcond.Wait()
	}
	st.pub.Lock()
	defer st.pub.Unlock()
	if err := sd.SeedStream(ctx, streamName, last); err != nil {
		return fmt.Errorf("seed %q: %w", streamName, err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.n > 0 {
		clear(st.tail)
	}
	st.loaded, st.last, st.from, st.head, st.n, st.tbytes = false, 0, 0, 0, 0, 0
	st.notifyAll()
	return nil
}

// markTTL is how long the in-memory mark of a finished stream is kept.
func (h *Hub) markTTL() time.Duration {
	if h.retention > 0 {
		return h.retention
	}
	return time.Hour
}

func (h *Hub) pruneFinishedLocked(now time.Time) {
	if now.Sub(h.lastPrune) < time.Minute {
		return
	}
	h.lastPrune = now
	ttl := h.markTTL()
	for name, at := range h.finished {
		if now.Sub(at) > ttl {
			delete(h.finished, name)
		}
	}
}

// acquire returns the state of a stream, creating it, with a reference.
func (h *Hub) acquire(name string) (*stream, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	st := h.streams[name]
	if st == nil {
		st = &stream{name: name, rsem: make(chan struct{}, 1)}
		st.qcond.L = &st.qmu
		if at, ok := h.finished[name]; ok && time.Since(at) <= h.markTTL() {
			st.finished = true
		}
		h.streams[name] = st
	}
	st.refs++
	return st, nil
}

func (h *Hub) release(st *stream) {
	h.mu.Lock()
	st.refs--
	if st.refs == 0 && h.streams[st.name] == st {
		delete(h.streams, st.name)
	}
	h.mu.Unlock()
}

// load makes sure st knows the last seq of its log.
func (h *Hub) load(ctx context.Context, st *stream) error {
	st.pub.Lock()
	defer st.pub.Unlock()
	st.mu.RLock()
	loaded := st.loaded
	st.mu.RUnlock()
	if loaded {
		return nil
	}
	last, err := h.log.Last(ctx, st.name)
	if err != nil {
		return fmt.Errorf("last event of %q: %w", st.name, err)
	}
	st.mu.Lock()
	st.loaded, st.last, st.from = true, last, last
	st.mu.Unlock()
	return nil
}

// push adds it to the tail ring, which keeps at most size records and,
// past the newest, maxBytes of them. Caller holds st.mu.
func (st *stream) push(it Item, size int, maxBytes int64) {
	if st.tail == nil {
		st.tail = make([]Item, size)
	}
	if st.n == len(st.tail) {
		st.dropOldest()
	}
	st.tail[(st.head+st.n)%len(st.tail)] = it
	st.n++
	st.tbytes += int64(len(it.Data))
	for st.n > 1 && st.tbytes > maxBytes {
		st.dropOldest()
	}
}

// dropOldest removes the oldest record of the tail: it is read back from
// the log. Caller holds st.mu.
func (st *stream) dropOldest() {
	old := &st.tail[st.head]
	st.from = old.ID
	st.tbytes -= int64(len(old.Data))
	*old = Item{}
	st.head = (st.head + 1) % len(st.tail)
	st.n--
}

// tailAfter appends to dst up to max items of the tail with ID > after,
// stopping once they hold maxBytes (one at least). Caller holds st.mu
// (read) and has checked after >= st.from.
func (st *stream) tailAfter(dst []Item, after uint64, max int, maxBytes int64) []Item {
	at := func(i int) *Item { return &st.tail[(st.head+i)%len(st.tail)] }
	i := sort.Search(st.n, func(i int) bool { return at(i).ID > after })
	var n int64
	for ; i < st.n && max > 0 && (n == 0 || n < maxBytes); i, max = i+1, max-1 {
		dst = append(dst, *at(i))
		n += int64(len(at(i).Data))
	}
	return dst
}

// notifyAll wakes every subscriber; it never blocks. Caller holds st.mu.
func (st *stream) notifyAll() {
	for s := range st.subs {
		s.notify()
	}
}
