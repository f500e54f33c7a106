package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/looopy-go/looopy/loop"
)

// Events is the event log on Redis Streams: one stream per log stream,
// entry 0-N holding record N (field d). Wait is served by one blocking
// XREAD per process (see waker), woken by appends from any host.
type Events struct {
	s *Store
	w *waker
}

var _ loop.EventLog = (*Events)(nil)

func newEvents(s *Store) *Events {
	return &Events{s: s, w: newWaker(s)}
}

func (e *Events) close() { e.w.close() }

func seqID(seq uint64) string { return "0-" + strconv.FormatUint(seq, 10) }

// parseSeq reads the sequence of an entry id 0-N.
func parseSeq(key, id string) (uint64, error) {
	ms, seq, ok := strings.Cut(id, "-")
	if !ok || ms != "0" {
		return 0, corrupt(key, fmt.Errorf("stream entry id %q is not 0-<seq>", id))
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		return 0, corrupt(key, fmt.Errorf("stream entry id %q: %w", id, err))
	}
	return n, nil
}

// Append implements loop.EventLog: every record of the batch in one script,
// so they get consecutive ids.
func (e *Events) Append(ctx context.Context, stream string, data ...[]byte) (uint64, error) {
	if err := e.s.checkID("stream name", stream); err != nil {
		return 0, fmt.Errorf("append events: %w", err)
	}
	if len(data) == 0 {
		return 0, fmt.Errorf("append events: %w: no records", loop.ErrInvalid)
	}
	if err := ctxErr(ctx, "append events"); err != nil {
		return 0, err
	}
	args := make([]any, len(data))
	for i, d := range data {
		if d == nil {
			d = []byte{}
		}
		args[i] = d
	}
	key := e.s.evtKey(stream)
	id, err := appendEventsScript.Run(ctx, e.s.rdb, []string{key, e.s.evtLastKey(stream)}, args...).Text()
	if err != nil {
		return 0, wrap(fmt.Sprintf("append events to %q", stream), err)
	}
	return parseSeq(key, id)
}

// Read implements loop.EventLog (XRANGE from after+1).
func (e *Events) Read(ctx context.Context, stream string, after uint64, limit int) ([]loop.LogRecord, error) {
	if err := e.s.checkID("stream name", stream); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	if err := ctxErr(ctx, "read events"); err != nil {
		return nil, err
	}
	key := e.s.evtKey(stream)
	var msgs []redis.XMessage
	var err error
	if limit > 0 {
		msgs, err = e.s.rdb.XRangeN(ctx, key, seqID(after+1), "+", int64(limit)).Result()
	} else {
		msgs, err = e.s.rdb.XRange(ctx, key, seqID(after+1), "+").Result()
	}
	if err != nil {
		return nil, wrap(fmt.Sprintf("read events of %q", stream), err)
	}
	out := make([]loop.LogRecord, len(msgs))
	for i, m := range msgs {
		seq, err := parseSeq(key, m.ID)
		if err != nil {
			return nil, err
		}
		d, ok := m.Values["d"].(string)
		if !ok {
			return nil, corrupt(key, fmt.Errorf("entry %s has no field d", m.ID))
		}
		out[i] = loop.LogRecord{Seq: seq, Data: []byte(d)}
	}
	return out, nil
}

// Last implements loop.EventLog.
func (e *Events) Last(ctx context.Context, stream string) (uint64, error) {
	if err := e.s.checkID("stream name", stream); err != nil {
		return 0, fmt.Errorf("last event: %w", err)
	}
	if err := ctxErr(ctx, "last event"); err != nil {
		return 0, err
	}
	return e.last(ctx, e.s.rdb, stream)
}

// last reads the stream's last id, or the one kept when its records
// expired, in one round trip.
func (e *Events) last(ctx context.Context, c redis.Cmdable, stream string) (uint64, error) {
	key, lkey := e.s.evtKey(stream), e.s.evtLastKey(stream)
	var msgs *redis.XMessageSliceCmd
	var kept *redis.StringCmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		msgs = p.XRevRangeN(ctx, key, "+", "-", 1)
		kept = p.Get(ctx, lkey)
		return nil
	})
	if err != nil && !isNil(err) {
		return 0, wrap(fmt.Sprintf("last event of %q", stream), err)
	}
	if m := msgs.Val(); len(m) > 0 {
		return parseSeq(key, m[0].ID)
	}
	v, err := kept.Result()
	if isNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, wrap(fmt.Sprintf("last event of %q", stream), err)
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, corrupt(lkey, fmt.Errorf("last id %q: %w", v, err))
	}
	return n, nil
}

// Expire implements loop.EventLog: the stream key expires with its records
// (a Redis key TTL); its last id is kept under its own key, for ever, so the
// next append continues after it.
func (e *Events) Expire(ctx context.Context, stream string, ttl time.Duration) error {
	if err := e.s.checkID("stream name", stream); err != nil {
		return fmt.Errorf("expire events: %w", err)
	}
	if ttl < 0 {
		return fmt.Errorf("expire events: %w: negative ttl %v", loop.ErrInvalid, ttl)
	}
	if err := ctxErr(ctx, "expire events"); err != nil {
		return err
	}
	ms := ttl.Milliseconds()
	if ttl > 0 && ms < 1 {
		ms = 1
	}
	keys := []string{e.s.evtKey(stream), e.s.evtLastKey(stream)}
	return wrap("expire events", expireEventsScript.Run(ctx, e.s.rdb, keys, strconv.FormatInt(ms, 10)).Err())
}

var _ loop.StreamSeeder = (*Events)(nil)

// SeedStream implements loop.StreamSeeder: a stream whose key does not exist
// (no records) gets last as its kept last id when that is higher.
func (e *Events) SeedStream(ctx context.Context, stream string, last uint64) error {
	if err := e.s.checkID("stream name", stream); err != nil {
		return fmt.Errorf("seed events: %w", err)
	}
	if err := ctxErr(ctx, "seed events"); err != nil {
		return err
	}
	keys := []string{e.s.evtKey(stream), e.s.evtLastKey(stream)}
	return wrap("seed events", seedEvents.Run(ctx, e.s.rdb, keys, strconv.FormatUint(last, 10)).Err())
}

// Wait implements loop.EventLog: it registers with the process's blocking
// reader, then checks the stream, then waits to be woken; an append by any
// host after the check wakes it.
func (e *Events) Wait(ctx context.Context, stream string, after uint64) (uint64, error) {
	if err := e.s.checkID("stream name", stream); err != nil {
		return 0, fmt.Errorf("wait for events: %w", err)
	}
	for {
		if err := ctxErr(ctx, "wait for events"); err != nil {
			return 0, err
		}
		ch, release, err := e.w.watch(ctx, stream, after)
		if err != nil {
			return 0, err
		}
		n, err := e.Last(ctx, stream)
		if err != nil || n > after {
			release()
			return n, err
		}
		select {
		case <-ch:
			release()
		case <-ctx.Done():
			release()
			return n, fmt.Errorf("wait for events: %w", ctx.Err())
		}
	}
}

// waker is the one blocking reader of a process: a goroutine that runs
// XREAD BLOCK over every stream someone waits on, on its own connection,
// and wakes the waiters of the streams that grew. Its set of streams
// changes through a control stream of its own: a waiter that needs a
// stream added appends to it, which ends the XREAD under way.
type waker struct {
	s   *Store
	ctl string // the control stream

	mu      sync.Mutex
	streams map[string]*watched
	running bool
	closed  bool
	done    chan struct{}
	cancel  context.CancelFunc
}

type watched struct {
	cursor  uint64        // XREAD from here: at most every waiter's after
	ch      chan struct{} // closed when the stream grows past cursor
	waiters int
}

// wakeBlock bounds one XREAD; the loop goes on after it.
const wakeBlock = 10 * time.Second

func newWaker(s *Store) *waker {
	return &waker{s: s, ctl: s.p + "w:" + randomID(), streams: map[string]*watched{}}
}

// watch registers a waiter of stream that has read up to after; the
// channel is closed when the stream may have grown past it. release must
// be called once.
func (w *waker) watch(ctx context.Context, stream string, after uint64) (<-chan struct{}, func(), error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil, nil, fmt.Errorf("wait for events: %w", errClosed)
	}
	if !w.running {
		w.running = true
		w.done = make(chan struct{})
		rctx, cancel := context.WithCancel(context.Background())
		w.cancel = cancel
		go w.run(rctx)
	}
	st := w.streams[stream]
	poke := false
	if st == nil {
		st = &watched{cursor: after, ch: make(chan struct{})}
		w.streams[stream] = st
		poke = true
	} else if after < st.cursor {
		st.cursor = after
		poke = true
	}
	st.waiters++
	ch := st.ch
	w.mu.Unlock()
	release := func() {
		w.mu.Lock()
		st.waiters--
		if st.waiters == 0 && w.streams[stream] == st {
			delete(w.streams, stream)
		}
		w.mu.Unlock()
	}
	if poke {
		// End the XREAD under way so that the next one includes stream
		// from its cursor. The control stream keeps one entry and
		// disappears an hour after the process stops poking it.
		_, err := w.s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.XAdd(ctx, &redis.XAddArgs{Stream: w.ctl, MaxLen: 1, Values: []any{"w", "1"}})
			p.Expire(ctx, w.ctl, time.Hour)
			return nil
		})
		if err != nil {
			release()
			return nil, nil, wrap("wait for events", err)
		}
	}
	return ch, release, nil
}

var errClosed = errors.New("store is closed")

func (w *waker) close() {
	w.mu.Lock()
	w.closed = true
	running, cancel, done := w.running, w.cancel, w.done
	for _, st := range w.streams {
		close(st.ch)
		st.ch = make(chan struct{})
	}
	w.mu.Unlock()
	if running {
		cancel()
		// End the XREAD under way at once.
		_ = w.s.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: w.ctl, MaxLen: 1, Values: []any{"w", "1"}}).Err()
		<-done
		_ = w.s.rdb.Del(context.Background(), w.ctl).Err()
	}
}

// wakeAll wakes every waiter (they check their stream again).
func (w *waker) wakeAll() {
	w.mu.Lock()
	for _, st := range w.streams {
		close(st.ch)
		st.ch = make(chan struct{})
	}
	w.mu.Unlock()
}

func (w *waker) run(ctx context.Context) {
	defer close(w.done)
	// The blocking reads have a connection of their own (a blocked XREAD
	// holds it for up to wakeBlock). A connection that failed once (Redis
	// restarted, the network dropped it) stays failed: go-redis marks a
	// dedicated connection bad for good, so every error swaps it for a
	// new one, and the wake-ups come back with Redis.
	conn := w.s.rdb.Conn()
	defer func() { conn.Close() }()
	ctlID := "0-0"
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		w.mu.Lock()
		keys := []string{w.ctl}
		ids := []string{ctlID}
		names := map[string]string{}
		for name, st := range w.streams {
			k := w.s.evtKey(name)
			keys = append(keys, k)
			ids = append(ids, seqID(st.cursor))
			names[k] = name
		}
		w.mu.Unlock()
		res, err := conn.XRead(ctx, &redis.XReadArgs{Streams: append(keys, ids...), Count: 1, Block: wakeBlock}).Result()
		if isNil(err) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.s.log.Warn("event log wake-ups: blocking read failed; waiters poll again", "err", err)
			_ = conn.Close()
			conn = w.s.rdb.Conn()
			w.wakeAll()
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		var grown []string
		for _, xs := range res {
			if xs.Stream == w.ctl {
				if n := len(xs.Messages); n > 0 {
					ctlID = xs.Messages[n-1].ID
				}
				continue
			}
			if name, ok := names[xs.Stream]; ok {
				grown = append(grown, name)
			}
		}
		if len(grown) == 0 {
			continue
		}
		// Move each grown stream's cursor to its last entry, so that the
		// next XREAD blocks until it grows again, then wake its waiters.
		cmds := make([]*redis.XMessageSliceCmd, len(grown))
		_, err = conn.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, name := range grown {
				cmds[i] = p.XRevRangeN(ctx, w.s.evtKey(name), "+", "-", 1)
			}
			return nil
		})
		if err != nil && ctx.Err() == nil {
			// The waiters are woken below all the same; the next read
			// goes over a new connection.
			_ = conn.Close()
			conn = w.s.rdb.Conn()
		}
		w.mu.Lock()
		for i, name := range grown {
			st := w.streams[name]
			if st == nil {
				continue
			}
			if err == nil {
				if msgs := cmds[i].Val(); len(msgs) > 0 {
					if seq, perr := parseSeq("", msgs[0].ID); perr == nil && seq > st.cursor {
						st.cursor = seq
					}
				}
			}
			close(st.ch)
			st.ch = make(chan struct{})
		}
		w.mu.Unlock()
	}
}
