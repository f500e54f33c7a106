package sse

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/looopy-go/looopy/loop"
)

// Item is one event of a stream as the log holds it.
type Item struct {
	ID     uint64         // sequence number in the stream's log: the SSE id
	Kind   loop.EventKind // the event's kind ("" when the record is not an event)
	TaskID string         // the event's task
	Data   []byte         // the event's JSON (loop.EncodeEvent); shared, never modify

	memo *memo // encodings shared by the subscribers reading it from the tail
	// client is the event as a client sees it (decodeForClient), kept
	// from its publishing for the kinds a model streams (content deltas)
	// so that the A2A mappings do not decode each one again; nil for
	// records read back from the log.
	client loop.Event
}

// Filter selects the events a subscription yields. Zero fields match
// everything except internal events.
type Filter struct {
	// TaskIDs keeps only the events of these tasks.
	TaskIDs []string
	// Kinds keeps only events of these kinds.
	Kinds []loop.EventKind
	// Internal lets "internal:" events through. Only for observers inside
	// the host: Serve never writes an internal event, whatever the filter.
	Internal bool
	// Verbosity bounds the thought-stream events kept: "" keeps them all,
	// "none" none, brief, normal or detailed those of that level or a
	// less detailed one (loop.VerbosityRank).
	Verbosity string
	// Debug lets internal:thought-process events through, and Serve write
	// them: only for the operator's (admin) streams.
	Debug bool
}

// Match reports whether the filter keeps it.
func (f *Filter) Match(it *Item) bool {
	if it.Kind == "" || (it.Kind.Internal() && !f.Internal && !(f.Debug && it.Kind == loop.KindInternalThoughtProcess)) {
		return false
	}
	if len(f.Kinds) > 0 && !slices.Contains(f.Kinds, it.Kind) {
		return false
	}
	if len(f.TaskIDs) > 0 && !slices.Contains(f.TaskIDs, it.TaskID) {
		return false
	}
	if it.Kind == loop.KindThoughtStream && f.Verbosity != "" && thoughtRank(it.Data) > loop.VerbosityRank(f.Verbosity) {
		return false
	}
	return true
}

// thoughtRank is the verbosity rank of a logged thought-stream event; one
// whose level cannot be read counts as the most detailed.
func thoughtRank(data []byte) int {
	var v struct {
		Verbosity string `json:"verbosity"`
	}
	if json.Unmarshal(data, &v) != nil {
		return loop.VerbosityRank(loop.VerbosityDetailed)
	}
	if r := loop.VerbosityRank(v.Verbosity); r > 0 {
		return r
	}
	return loop.VerbosityRank(loop.VerbosityDetailed)
}

// Subscription is a cursor over one stream: it yields the events with an id
// greater than where it started, first from the log (replay), then as they
// are published, with no gap and no duplicate. It is used by one goroutine
// at a time; Close may be called from any goroutine.
type Subscription struct {
	hub    *Hub
	st     *stream
	filter Filter
	wake   chan struct{} // size 1: "there may be something new"

	cursor uint64 // id of the last record read
	stopAt uint64 // > 0: the subscription ends after this id (see StopAt)
	buf    []Item
	pos    int
	// readLimit is how many records the next read of the log asks for
	// (0: ReadBatch), from the size of the last ones.
	readLimit int
	resets    uint64 // the stream's resets the subscription has seen

	closeOnce sync.Once
	closed    chan struct{}
	deleted   atomic.Bool // the stream was deleted under it (Hub.Delete)
}

// Subscribe opens a subscription to stream yielding the events with an id
// greater than after that the filter keeps. Close it when done.
func (h *Hub) Subscribe(ctx context.Context, streamName string, after uint64, filter Filter) (*Subscription, error) {
	if streamName == "" {
		return nil, fmt.Errorf("subscribe: empty stream name")
	}
	st, err := h.acquire(streamName)
	if err != nil {
		return nil, fmt.Errorf("subscribe to %q: %w", streamName, err)
	}
	if err := h.load(ctx, st); err != nil {
		h.release(st)
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	st.mu.RLock()
	last := st.last
	st.mu.RUnlock()
	if after > last && h.follow {
		// Another process may have appended since the stream was loaded.
		if last, err = h.log.Last(ctx, streamName); err != nil {
			h.release(st)
			return nil, fmt.Errorf("subscribe: last event of %q: %w", streamName, err)
		}
	}
	if after > last {
		h.release(st)
		return nil, fmt.Errorf("subscribe to %q after %d: %w (its last event is %d)", streamName, after, ErrAhead, last)
	}
	if err := h.kept(ctx, st, after, last); err != nil {
		h.release(st)
		return nil, err
	}
	s := &Subscription{
		hub:    h,
		st:     st,
		filter: filter,
		wake:   make(chan struct{}, 1),
		cursor: after,
		closed: make(chan struct{}),
	}
	st.mu.Lock()
	s.resets = st.resets
	if st.subs == nil {
		st.subs = make(map[*Subscription]struct{})
	}
	st.subs[s] = struct{}{}
	h.startFollow(st)
	st.mu.Unlock()
	return s, nil
}

// CheckResume returns the error Subscribe would for a subscriber resuming
// stream after an id: ErrAhead past its last event, ErrExpired when the
// events after it are gone. A server checks with it before it answers,
// so that the refusal is its answer's status rather than a stream that
// ends at once.
func (h *Hub) CheckResume(ctx context.Context, streamName string, after uint64) error {
	st, err := h.acquire(streamName)
	if err != nil {
		return fmt.Errorf("check resume of %q: %w", streamName, err)
	}
	defer h.release(st)
	if err := h.load(ctx, st); err != nil {
		return fmt.Errorf("check resume: %w", err)
	}
	st.mu.RLock()
	last := st.last
	st.mu.RUnlock()
	if after > last {
		if last, err = h.log.Last(ctx, streamName); err != nil {
			return fmt.Errorf("check resume: last event of %q: %w", streamName, err)
		}
	}
	if after > last {
		return fmt.Errorf("subscribe to %q after %d: %w (its last event is %d)", streamName, after, ErrAhead, last)
	}
	return h.kept(ctx, st, after, last)
}

// kept returns ErrExpired when the events right after after (0 < after <
// last) are no longer in the log: a subscriber resuming there would skip
// them. The in-memory tail answers when it covers after; else one record
// is read.
func (h *Hub) kept(ctx context.Context, st *stream, after, last uint64) error {
	if after == 0 || after >= last {
		return nil
	}
	st.mu.RLock()
	covered := after >= st.from && after < st.last
	st.mu.RUnlock()
	if covered {
		return nil
	}
	recs, err := h.log.Read(ctx, st.name, after, 1)
	if err != nil {
		return fmt.Errorf("subscribe: read %q after %d: %w", st.name, after, err)
	}
	if len(recs) == 0 || recs[0].Seq != after+1 {
		return expired(st.name, after)
	}
	return nil
}

// gone is the error of a subscription whose next events are not in the
// log: the stream was deleted under it (Hub.Delete), or they expired.
func (s *Subscription) gone() error {
	if s.deleted.Load() {
		return ErrDeleted
	}
	return expired(s.st.name, s.cursor)
}

func expired(stream string, after uint64) error {
	return fmt.Errorf("subscribe to %q after %d: %w", stream, after, ErrExpired)
}

// Close ends the subscription. It is safe to call more than once.
func (s *Subscription) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.st.mu.Lock()
		delete(s.st.subs, s)
		if len(s.st.subs) == 0 && s.st.unfollow != nil {
			s.st.unfollow()
			s.st.unfollow = nil
		}
		s.st.mu.Unlock()
		s.hub.release(s.st)
	})
	return nil
}

// Stream returns the name of the subscribed stream.
func (s *Subscription) Stream() string { return s.st.name }

// Cursor returns the id of the last record the subscription has read (also
// records the filter dropped). Resuming after it loses nothing.
func (s *Subscription) Cursor() uint64 { return s.cursor }

// StopAt makes the subscription end (Next returns ErrFinished) once it
// has read every record up to id: for a stream known to be complete (a
// finished task's, after a restart that forgot it was finished), so that a
// reader who already has its end is not kept waiting for more.
func (s *Subscription) StopAt(id uint64) { s.stopAt = id }

// Ready returns a channel that receives when new events may be available.
func (s *Subscription) Ready() <-chan struct{} { return s.wake }

func (s *Subscription) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Next returns the next event the filter keeps, waiting for it if needed.
// It returns ErrFinished when the stream was finished and everything has
// been read, ErrDeleted when it was deleted (Hub.Delete), ErrClosed when
// the subscription or the Hub was closed, and ctx's error when ctx is done.
func (s *Subscription) Next(ctx context.Context) (Item, error) {
	for {
		it, ok, err := s.TryNext(ctx)
		if err != nil || ok {
			return it, err
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			return Item{}, ctx.Err()
		case <-s.closed:
			return Item{}, ErrClosed
		case <-s.hub.done:
			return Item{}, ErrClosed
		}
	}
}

// TryNext returns the next event the filter keeps if one is available now
// (reading the log if needed), or ok false. Errors are those of Next.
func (s *Subscription) TryNext(ctx context.Context) (it Item, ok bool, err error) {
	for {
		for s.pos < len(s.buf) {
			it = s.buf[s.pos]
			s.buf[s.pos] = Item{}
			s.pos++
			s.cursor = it.ID
			if s.filter.Match(&it) {
				return it, true, nil
			}
		}
		if err := s.check(); err != nil {
			return Item{}, false, err
		}
		more, err := s.fill(ctx)
		if err != nil || !more {
			return Item{}, false, err
		}
	}
}

func (s *Subscription) check() error {
	if s.deleted.Load() {
		return ErrDeleted
	}
	select {
	case <-s.closed:
		return ErrClosed
	case <-s.hub.done:
		return ErrClosed
	default:
		return nil
	}
}

// fill loads the next batch of records after the cursor into buf. It
// reports false when there is nothing new, ErrFinished at the end of a
// finished stream.
func (s *Subscription) fill(ctx context.Context) (bool, error) {
	// Keep a small buffer between batches; let a big one go.
	if cap(s.buf) > 16 {
		s.buf = nil
	}
	s.buf, s.pos = s.buf[:0], 0
	if s.stopAt > 0 && s.cursor >= s.stopAt {
		return false, ErrFinished
	}
	st := s.st
	st.mu.RLock()
	if st.resets != s.resets {
		// The log's ids went back (published): a cursor past its new end
		// would wait for ids that name other events.
		if s.cursor > st.last {
			st.mu.RUnlock()
			return false, s.gone()
		}
		s.resets = st.resets
	}
	if s.cursor >= st.from {
		if s.cursor >= st.last {
			fin := st.finished
			st.mu.RUnlock()
			if fin {
				return false, ErrFinished
			}
			return false, nil
		}
		s.buf = st.tailAfter(s.buf, s.cursor, s.hub.batch, s.hub.readBytes)
		st.mu.RUnlock()
		return len(s.buf) > 0, nil
	}
	from, tn, tb := st.from, st.n, st.tbytes
	st.mu.RUnlock()

	// One subscriber of the stream reads the log at a time; the others
	// wait for it, then take what it read when that covers their cursor.
	h := s.hub
	h.logReadsWaiting.Add(1)
	st.rwait.Add(1)
	var stop error
	select {
	case st.rsem <- struct{}{}:
	case <-ctx.Done():
		stop = ctx.Err()
	case <-s.closed:
		stop = ErrClosed
	case <-h.done:
		stop = ErrClosed
	}
	st.rwait.Add(-1)
	h.logReadsWaiting.Add(-1)
	if stop != nil {
		return false, stop
	}
	defer func() {
		// The batch is kept only for the subscribers waiting for it, so
		// that a stream no one lags on holds none.
		if st.rwait.Load() == 0 {
			st.shared = nil
		}
		<-st.rsem
	}()
	if s.takeShared() {
		return true, nil
	}

	// A read asks for as many records as fit ReadBatchBytes at the mean
	// size of the last ones read (or of the tail's); the first, when
	// neither is known, for one.
	limit := s.readLimit
	if limit == 0 {
		limit = 1
		if tn > 0 {
			limit = int(min(max(h.readBytes/max(tb/int64(tn), 1), 1), int64(h.batch)))
		}
	}
	h.logReads.Add(1)
	recs, err := h.log.Read(ctx, st.name, s.cursor, limit)
	h.logReads.Add(-1)
	if err != nil {
		return false, fmt.Errorf("read %q after %d: %w", st.name, s.cursor, err)
	}
	// The next batch from the log is sized to ReadBatchBytes from this
	// one's mean record size (at most ReadBatch records, one at least).
	var n int64
	for _, r := range recs {
		n += int64(len(r.Data))
	}
	if len(recs) > 0 {
		mean := max(n/int64(len(recs)), 1)
		s.readLimit = int(min(max(h.readBytes/mean, 1), int64(h.batch)))
	}
	if s.cursor > 0 && (len(recs) == 0 || recs[0].Seq != s.cursor+1) {
		// What lay after the cursor has expired: going on would skip it
		// unsaid. (A subscriber from 0 takes whatever the log keeps.)
		return false, s.gone()
	}
	if len(recs) == 0 {
		// The log holds nothing the tail does not: the stream's records
		// before it expired. Continue from the tail.
		s.cursor = from
		return true, nil
	}
	batch := make([]Item, 0, len(recs))
	prev := s.cursor
	lastTask := ""
	for _, r := range recs {
		if r.Seq <= prev {
			return false, fmt.Errorf("read %q after %d: log returned seq %d after %d", st.name, s.cursor, r.Seq, prev)
		}
		prev = r.Seq
		// A memo: the subscribers taking this batch share its encodings.
		it := Item{ID: r.Seq, Data: r.Data, memo: new(memo)}
		var task []byte
		it.Kind, task = probe(r.Data)
		if string(task) != lastTask {
			lastTask = string(task)
		}
		it.TaskID = lastTask
		if it.Kind == "" {
			h.logger.Warn("skipping an event log record that is not an event", "stream", st.name, "seq", r.Seq)
		}
		batch = append(batch, it)
	}
	st.shared, st.sharedAfter = batch, s.cursor
	s.buf = append(s.buf, batch...)
	return true, nil
}

// takeShared fills buf from the batch another subscriber of the stream
// read from the log, when it holds the records right after the cursor.
// Caller holds the stream's read token.
func (s *Subscription) takeShared() bool {
	sh := s.st.shared
	if len(sh) == 0 || s.cursor < s.st.sharedAfter || s.cursor >= sh[len(sh)-1].ID {
		return false
	}
	i := sort.Search(len(sh), func(i int) bool { return sh[i].ID > s.cursor })
	if s.cursor > 0 && sh[i].ID != s.cursor+1 {
		return false // a gap: the subscriber's own read reports it
	}
	s.buf = append(s.buf, sh[i:]...)
	return true
}

// ParseFilter builds the filter of an external subscriber from request
// parameters (e.g. ?task=a,b&kind=content-delta&kind=task-status): each
// value may hold several comma-separated names. An unknown kind is an
// error, and so is an internal one: those never leave the host.
func ParseFilter(tasks, kinds []string) (Filter, error) {
	var f Filter
	for _, v := range tasks {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				f.TaskIDs = append(f.TaskIDs, t)
			}
		}
	}
	for _, v := range kinds {
		for k := range strings.SplitSeq(v, ",") {
			k = strings.TrimSpace(k)
			if k == "" {
				continue
			}
			kind, ok := knownKinds[k]
			if !ok {
				return Filter{}, fmt.Errorf("parse filter: unknown event kind %q", k)
			}
			if kind.Internal() {
				return Filter{}, fmt.Errorf("parse filter: event kind %q is internal and never leaves the host", k)
			}
			f.Kinds = append(f.Kinds, kind)
		}
	}
	return f, nil
}
