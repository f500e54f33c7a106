package sse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
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
	// ErrAhead is returned by Subscribe for a start id beyond the last event
	// of the stream (a Last-Event-ID of a stream that expired, or made up).
	ErrAhead = errors.New("sse: event id beyond the end of the stream")
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
	// Retention is how long the log of a finished stream is kept before it
	// expires. Default 24h; negative keeps it forever.
	Retention time.Duration
	// Logger receives warnings (undecodable log records). Nil discards.
	Logger *slog.Logger
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
	logger    *slog.Logger
	done      chan struct{}

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

	pub sync.Mutex // serializes appends (and the first load of last)

	mu       sync.RWMutex
	loaded   bool   // last and from are known
	last     uint64 // seq of the last record of the log
	from     uint64 // the tail holds every record with from < seq <= last
	tail     []Item // ring buffer of the most recent records, oldest at head
	head     int
	n        int
	finished bool
	subs     map[*Subscription]struct{}
}

// New returns a Hub over cfg.Log.
func New(cfg Config) (*Hub, error) {
	if cfg.Log == nil {
		return nil, errors.New("new sse hub: Config.Log is required")
	}
	if cfg.TailSize < 0 || cfg.ReadBatch < 0 {
		return nil, fmt.Errorf("new sse hub: negative TailSize (%d) or ReadBatch (%d)", cfg.TailSize, cfg.ReadBatch)
	}
	h := &Hub{
		log:       cfg.Log,
		tailSize:  cfg.TailSize,
		batch:     cfg.ReadBatch,
		retention: cfg.Retention,
		logger:    cfg.Logger,
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
	if h.retention == 0 {
		h.retention = 24 * time.Hour
	}
	if h.logger == nil {
		h.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return h, nil
}

// Close ends every subscription (their Next returns ErrClosed) and refuses
// further publishing. It does not close the log, which the caller owns.
func (h *Hub) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.done)
	}
	return nil
}

// Publish appends e to stream and then wakes the stream's subscribers. It
// returns the event's id: its sequence number in the log. The event is
// durable when Publish returns.
func (h *Hub) Publish(ctx context.Context, streamName string, e loop.Event) (uint64, error) {
	it, err := itemOf(e)
	if err != nil {
		return 0, fmt.Errorf("publish to %q: %w", streamName, err)
	}
	return h.append(ctx, streamName, it)
}

// PublishTask publishes e to the stream of its task and then to the stream
// of its context (when the event names them), and returns the id in the
// task stream (0 when the event has no task). The task stream is written
// first: it is the one A2A clients rely on.
func (h *Hub) PublishTask(ctx context.Context, e loop.Event) (uint64, error) {
	it, err := itemOf(e)
	if err != nil {
		return 0, fmt.Errorf("publish event: %w", err)
	}
	hd := e.Head()
	if hd.TaskID == "" && hd.ContextID == "" {
		return 0, fmt.Errorf("publish %s event: it names neither a task nor a context", hd.Kind)
	}
	var id uint64
	if hd.TaskID != "" {
		if id, err = h.append(ctx, TaskStream(hd.TaskID), it); err != nil {
			return 0, err
		}
	}
	if hd.ContextID != "" {
		if _, err = h.append(ctx, ContextStream(hd.ContextID), it); err != nil {
			return id, err
		}
	}
	return id, nil
}

// Sink returns an EventSink for a turn that publishes every event with
// PublishTask. Publishing ignores the cancellation of ctx (a cancelled turn
// still records how it ended); errors go to onErr when it is not nil.
func (h *Hub) Sink(ctx context.Context, onErr func(loop.Event, error)) loop.EventSink {
	ctx = context.WithoutCancel(ctx)
	return loop.SinkFunc(func(e loop.Event) {
		if _, err := h.PublishTask(ctx, e); err != nil && onErr != nil {
			onErr(e, err)
		}
	})
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
	return Item{Kind: hd.Kind, TaskID: hd.TaskID, Data: data}, nil
}

func (h *Hub) append(ctx context.Context, name string, it Item) (uint64, error) {
	if name == "" {
		return 0, errors.New("publish: empty stream name")
	}
	st, err := h.acquire(name)
	if err != nil {
		return 0, fmt.Errorf("publish to %q: %w", name, err)
	}
	defer h.release(st)

	st.pub.Lock()
	defer st.pub.Unlock()
	st.mu.RLock()
	fin := st.finished
	st.mu.RUnlock()
	if fin {
		return 0, fmt.Errorf("publish to %q: %w", name, ErrFinished)
	}
	seq, err := h.log.Append(ctx, name, it.Data)
	if err != nil {
		return 0, fmt.Errorf("publish to %q: append: %w", name, err)
	}
	it.ID = seq

	st.mu.Lock()
	if !st.loaded {
		// Every earlier append of this stream has completed (they all hold
		// st.pub), so nothing lies between seq-1 and seq that is not in
		// the log: the tail covers (seq-1, seq].
		st.loaded = true
		st.from = seq - 1
	}
	if len(st.subs) > 0 {
		it.memo = new(memo)
		st.push(it, h.tailSize)
	} else {
		// Nobody reads the tail: keep it empty (no memory for streams
		// without subscribers); it covers nothing up to seq.
		if st.n > 0 {
			clear(st.tail)
		}
		st.head, st.n, st.from = 0, 0, seq
	}
	st.last = seq
	st.notifyAll()
	st.mu.Unlock()
	return seq, nil
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
func (h *Hub) Finish(ctx context.Context, streamName string) error {
	now := time.Now()
	h.mu.Lock()
	h.finished[streamName] = now
	if st := h.streams[streamName]; st != nil {
		st.mu.Lock()
		st.finished = true
		st.notifyAll()
		st.mu.Unlock()
	}
	h.pruneFinishedLocked(now)
	h.mu.Unlock()
	if h.retention >= 0 {
		if err := h.log.Expire(ctx, streamName, h.retention); err != nil {
			return fmt.Errorf("finish %q: expire log: %w", streamName, err)
		}
	}
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
		st = &stream{name: name}
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

// push adds it to the tail ring. Caller holds st.mu.
func (st *stream) push(it Item, size int) {
	if st.tail == nil {
		st.tail = make([]Item, size)
	}
	if st.n == len(st.tail) {
		st.from = st.tail[st.head].ID
		st.tail[st.head] = Item{}
		st.head = (st.head + 1) % len(st.tail)
		st.n--
	}
	st.tail[(st.head+st.n)%len(st.tail)] = it
	st.n++
}

// tailAfter appends to dst up to max items of the tail with ID > after.
// Caller holds st.mu (read) and has checked after >= st.from.
func (st *stream) tailAfter(dst []Item, after uint64, max int) []Item {
	at := func(i int) *Item { return &st.tail[(st.head+i)%len(st.tail)] }
	i := sort.Search(st.n, func(i int) bool { return at(i).ID > after })
	for ; i < st.n && max > 0; i, max = i+1, max-1 {
		dst = append(dst, *at(i))
	}
	return dst
}

// notifyAll wakes every subscriber; it never blocks. Caller holds st.mu.
func (st *stream) notifyAll() {
	for s := range st.subs {
		s.notify()
	}
}
