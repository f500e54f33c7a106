package sse

import (
	"context"
	"errors"
	"fmt"

	"github.com/looopy-go/looopy/loop"
)

// maxAppend bounds the records of one append to the log.
const maxAppend = 256

// pending is an event waiting to be appended to a stream.
type pending struct {
	it    Item
	res   chan pubResult // buffered; nil when nobody waits
	onErr func(error)    // when nobody waits
	end   *endCommit     // a turn's commit with its end (Hub.CommitEnd): no event of its own
}

type pubResult struct {
	id  uint64
	err error
}

func wait(ctx context.Context, res <-chan pubResult) (uint64, error) {
	select {
	case r := <-res:
		return r.id, r.err
	case <-ctx.Done():
		return 0, fmt.Errorf("publish: %w (the event may still be published)", ctx.Err())
	}
}

// enqueue queues p for its stream and makes sure a writer runs. Each stream
// has at most one writer goroutine, which appends everything queued so far
// in one call to the log: publishers that arrive while a synced append is
// under way share the next one.
func (h *Hub) enqueue(name string, p pending) error {
	if name == "" {
		return errors.New("publish: empty stream name")
	}
	st, err := h.acquire(name)
	if err != nil {
		return fmt.Errorf("publish to %q: %w", name, err)
	}
	defer h.release(st)
	st.qmu.Lock()
	defer st.qmu.Unlock()
	size := int64(len(p.it.Data))
	for h.full(st, size) {
		st.qcond.Wait()
	}
	if !st.writing {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return fmt.Errorf("publish to %q: %w", name, ErrClosed)
		}
		st.refs++ // the writer's
		h.writers.Add(1)
		h.mu.Unlock()
		st.writing = true
		go h.write(st)
	}
	st.queue = append(st.queue, p)
	st.qbytes += size
	return nil
}

// write appends the queue of st until it is empty.
func (h *Hub) write(st *stream) {
	defer h.writers.Done()
	for {
		st.qmu.Lock()
		if len(st.queue) == 0 {
			st.writing = false
			st.queue, st.spare = nil, nil
			st.qcond.Broadcast()
			st.qmu.Unlock()
			h.release(st)
			return
		}
		batch := st.take()
		st.qcond.Broadcast()
		st.qmu.Unlock()

		h.appendBatch(st, batch)
		st.giveBack(batch)
	}
}

// take removes up to maxAppend events from the head of the queue and
// returns them. Caller holds st.qmu.
func (st *stream) take() []pending {
	batch := st.queue
	if len(batch) > maxAppend {
		st.queue = append(st.spare[:0], batch[maxAppend:]...)
		batch = batch[:maxAppend]
	} else {
		st.queue = st.spare[:0]
	}
	return batch
}

// giveBack keeps the memory of an appended batch for the next queue; its
// bytes leave the bound (Config.MaxPendingBytes), and the publishers it
// held go on.
func (st *stream) giveBack(batch []pending) {
	if batch == nil {
		return
	}
	var n int64
	for i := range batch {
		n += int64(len(batch[i].it.Data))
	}
	clear(batch)
	st.qmu.Lock()
	st.spare = batch[:0]
	st.qbytes -= n
	st.qcond.Broadcast()
	st.qmu.Unlock()
}

// full reports whether st's queue has no room for an event of size bytes:
// MaxPending events, or MaxPendingBytes with one event at least waiting.
// Caller holds st.qmu.
func (h *Hub) full(st *stream, size int64) bool {
	return len(st.queue) >= h.maxQueue || (st.qbytes > 0 && st.qbytes+size > h.maxQBytes)
}

// enqueuePair queues p for stream a and q for stream b (an event of a task,
// for its task's stream and its context's). On a log that appends to
// several streams in one write (loop.MultiStreamAppender), when neither
// stream has a writer, one writer takes both: it appends what both queues
// hold in one write to the log, one sync for the two instead of one each.
// Otherwise each is queued for its own stream's writer.
func (h *Hub) enqueuePair(an string, p pending, bn string, q pending) error {
	ml, ok := h.log.(loop.MultiStreamAppender)
	if ok && an != "" && bn != "" && an != bn {
		started, err := h.startPair(ml, an, p, bn, q)
		if started || err != nil {
			return err
		}
	}
	if err := h.enqueue(an, p); err != nil {
		return err
	}
	return h.enqueue(bn, q)
}

// startPair queues p and q when neither queue is full and both streams
// have a writer, or neither has one: then it starts one writer for the two.
// It reports whether it queued them.
func (h *Hub) startPair(ml loop.MultiStreamAppender, an string, p pending, bn string, q pending) (bool, error) {
	a, err := h.acquire(an)
	if err != nil {
		return false, fmt.Errorf("publish to %q: %w", an, err)
	}
	defer h.release(a)
	b, err := h.acquire(bn)
	if err != nil {
		return false, fmt.Errorf("publish to %q: %w", bn, err)
	}
	defer h.release(b)
	unlock := lockQueues(a, b)
	defer unlock()
	ps, qs := int64(len(p.it.Data)), int64(len(q.it.Data))
	if h.full(a, ps) || h.full(b, qs) || a.writing != b.writing {
		return false, nil // enqueue waits for room
	}
	a.qbytes += ps
	b.qbytes += qs
	if a.writing {
		// Both have writers (most often one for the two): whoever
		// writes a stream appends everything its queue holds.
		a.queue = append(a.queue, p)
		b.queue = append(b.queue, q)
		return true, nil
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		a.qbytes -= ps
		b.qbytes -= qs
		return false, fmt.Errorf("publish to %q: %w", an, ErrClosed)
	}
	a.refs++ // the writer's
	b.refs++
	h.writers.Add(1)
	h.mu.Unlock()
	a.writing, b.writing = true, true
	a.partner, b.partner = b, a
	a.queue = append(a.queue, p)
	b.queue = append(b.queue, q)
	go h.writePair(ml, a, b)
	return true, nil
}

// lockQueues locks the queues of two streams, always in the same order
// (by name), and returns the unlock.
func lockQueues(a, b *stream) func() {
	if b.name < a.name {
		a, b = b, a
	}
	a.qmu.Lock()
	b.qmu.Lock()
	return func() {
		b.qmu.Unlock()
		a.qmu.Unlock()
	}
}

// writePair appends the queues of a and b, together, until both are empty.
// A turn's commit queued in both (Hub.CommitEnd) is written with what the
// queues hold before it and the events that announce the turn's end, in
// one write to the log.
func (h *Hub) writePair(ml loop.MultiStreamAppender, a, b *stream) {
	defer h.writers.Done()
	for {
		unlock := lockQueues(a, b)
		if len(a.queue) == 0 && len(b.queue) == 0 {
			for _, st := range []*stream{a, b} {
				st.writing = false
				st.partner = nil
				st.queue, st.spare = nil, nil
				st.qcond.Broadcast()
			}
			unlock()
			h.release(a)
			h.release(b)
			return
		}
		var ba, bb []pending
		var ec *endCommit
		ia, ib := endAt(a.queue), endAt(b.queue)
		switch {
		case ia >= 0 && ib >= 0 && a.queue[ia].end == b.queue[ib].end && fitsBeforeEnd(a.queue[:ia]) && fitsBeforeEnd(b.queue[:ib]):
			ec = a.queue[ia].end
			ba, bb = a.takeN(ia+1), b.takeN(ib+1)
		case ia == 0 && ib == 0 && a.queue[0].end != b.queue[0].end, ia == 0 && ib < 0, ib == 0 && ia < 0:
			// A commit queued in one stream only (never made so): it
			// goes back to its caller undone.
			if ia == 0 {
				ba = a.takeN(1)
			}
			if ib == 0 {
				bb = b.takeN(1)
			}
		default:
			// The events queued before a commit go first when there are
			// too many of them to share its write.
			ba, bb = a.takeN(cutAt(a.queue, ia)), b.takeN(cutAt(b.queue, ib))
		}
		a.qcond.Broadcast()
		b.qcond.Broadcast()
		unlock()

		switch {
		case ec != nil:
			h.appendEnd(ml, a, ba, b, bb, ec)
		case len(ba) > 0 && ba[0].end != nil || len(bb) > 0 && bb[0].end != nil:
			for _, p := range append(ba, bb...) {
				if p.end != nil {
					p.end.res <- endResult{}
				}
			}
		case len(ba) == 0:
			h.appendBatch(b, bb)
		case len(bb) == 0:
			h.appendBatch(a, ba)
		default:
			h.appendPair(ml, a, ba, b, bb)
		}
		a.giveBack(ba)
		b.giveBack(bb)
	}
}

// maxBeforeEnd and maxBytesBeforeEnd bound the events queued before a
// turn's commit that share its write: more go in a write of their own
// first, so that the commit's write stays small.
const (
	maxBeforeEnd      = 64
	maxBytesBeforeEnd = 1 << 20
)

func fitsBeforeEnd(q []pending) bool {
	if len(q) > maxBeforeEnd {
		return false
	}
	var n int
	for i := range q {
		n += len(q[i].it.Data)
	}
	return n <= maxBytesBeforeEnd
}

// endAt returns the index of the first commit in q, -1 when it holds none.
func endAt(q []pending) int {
	for i := range q {
		if q[i].end != nil {
			return i
		}
	}
	return -1
}

// cutAt is how many events of q to append now: those before its first
// commit (at end, -1: none), at most maxAppend.
func cutAt(q []pending, end int) int {
	n := len(q)
	if end >= 0 {
		n = end
	}
	return min(n, maxAppend)
}

// takeN removes the first n entries of the queue and returns them (nil
// for none). Caller holds st.qmu.
func (st *stream) takeN(n int) []pending {
	if n == 0 {
		return nil
	}
	batch := st.queue
	if len(batch) > n {
		st.queue = append(st.spare[:0], batch[n:]...)
		batch = batch[:n]
	} else {
		st.queue = st.spare[:0]
	}
	return batch
}

// appendPair appends ba to a and bb to b in one write to the log, then
// publishes each to its tail and wakes the subscribers, then answers the
// publishers. A finished stream is appended alone (its batch refused).
func (h *Hub) appendPair(ml loop.MultiStreamAppender, a *stream, ba []pending, b *stream, bb []pending) {
	locked, fin := lockPair(a, b)
	if fin {
		locked.unlock()
		h.appendBatch(a, ba)
		h.appendBatch(b, bb)
		return
	}
	ids, err := ml.AppendStreams(context.Background(), []loop.StreamAppend{
		{Stream: a.name, Data: records(ba)}, {Stream: b.name, Data: records(bb)}})
	if err == nil && len(ids) != 2 {
		err = fmt.Errorf("the log answered %d first ids for 2 streams", len(ids))
	}
	if err != nil {
		locked.unlock()
		answer(ba, 0, fmt.Errorf("publish to %q: append: %w", a.name, err))
		answer(bb, 0, fmt.Errorf("publish to %q: append: %w", b.name, err))
		return
	}
	h.published(a, ba, ids[0])
	h.published(b, bb, ids[1])
	locked.unlock()
	answer(ba, ids[0], nil)
	answer(bb, ids[1], nil)
}

// lockedPair holds the publish locks of two streams (see lockPair).
type lockedPair struct{ first, second *stream }

// lockPair takes the publish locks of a and b in name order (so two
// writers pairing the same streams never wait on each other) and tells
// whether either stream is finished. A value, not a closure: the pair
// path runs for every event of a sub-task and must not allocate for it.
func lockPair(a, b *stream) (lp lockedPair, finished bool) {
	lp = lockedPair{a, b}
	if b.name < a.name {
		lp = lockedPair{b, a}
	}
	lp.first.pub.Lock()
	lp.second.pub.Lock()
	a.mu.RLock()
	finished = a.finished
	a.mu.RUnlock()
	b.mu.RLock()
	finished = finished || b.finished
	b.mu.RUnlock()
	return lp, finished
}

// unlock gives back both publish locks.
func (lp lockedPair) unlock() {
	lp.second.pub.Unlock()
	lp.first.pub.Unlock()
}

// appendEnd writes a turn's commit (ec) in one write to the log with ba
// and bb, the events queued before it in a and b (each ending with the
// commit's entry), and the events that announce the turn's end after them
// in both streams. A refused commit leaves ba and bb appended alone; a
// failed write appends them as any batch.
func (h *Hub) appendEnd(ml loop.MultiStreamAppender, a *stream, ba []pending, b *stream, bb []pending, ec *endCommit) {
	ba, bb = ba[:len(ba)-1], bb[:len(bb)-1]
	el := h.log.(loop.EventCommitter) // CommitEnd queues a commit only then
	locked, fin := lockPair(a, b)
	var ids []uint64
	var commitErr, err error
	if !fin {
		ends := make([][]byte, len(ec.items))
		for i := range ec.items {
			ends[i] = ec.items[i].Data
		}
		ids, commitErr, err = el.AppendCommit(context.Background(), []loop.CommitAppend{
			{Stream: a.name, Before: records(ba), After: ends}, {Stream: b.name, Before: records(bb), After: ends}}, ec.c)
		if err == nil && len(ids) != 2 {
			err = fmt.Errorf("the log answered %d first ids for 2 streams", len(ids))
		}
	}
	if fin || err != nil {
		// Nothing was written: the events before the commit go as any
		// others. A finished stream takes no end: the caller commits
		// and publishes it the usual way (and hears it refused).
		locked.unlock()
		switch {
		case len(ba) > 0 && len(bb) > 0:
			h.appendPair(ml, a, ba, b, bb)
		case len(ba) > 0:
			h.appendBatch(a, ba)
		case len(bb) > 0:
			h.appendBatch(b, bb)
		}
		if fin {
			ec.res <- endResult{}
		} else {
			ec.res <- endResult{handled: true, err: fmt.Errorf("publish the end of a turn of %q: %w", ec.c.ContextID, err)}
		}
		return
	}
	fa, fb := ba, bb
	if commitErr == nil {
		if ec.onDurable != nil {
			ec.onDurable()
		}
		fa = make([]pending, 0, len(ba)+len(ec.items))
		fa = append(fa, ba...)
		fb = make([]pending, 0, len(bb)+len(ec.items))
		fb = append(fb, bb...)
		for _, it := range ec.items {
			fa = append(fa, pending{it: it})
			fb = append(fb, pending{it: it})
		}
	}
	if len(fa) > 0 {
		h.published(a, fa, ids[0])
	}
	if len(fb) > 0 {
		h.published(b, fb, ids[1])
	}
	locked.unlock()
	answer(ba, ids[0], nil)
	answer(bb, ids[1], nil)
	ec.res <- endResult{handled: true, err: commitErr}
}

// appendBatch appends batch to the log, then publishes it to the tail and
// wakes the subscribers, then answers the publishers.
func (h *Hub) appendBatch(st *stream, batch []pending) {
	first, err := h.appendLog(st, batch)
	answer(batch, first, err)
}

// answer tells the publishers of batch their ids (from first) or err.
func answer(batch []pending, first uint64, err error) {
	for i, p := range batch {
		var r pubResult
		if err != nil {
			r.err = err
		} else {
			r.id = first + uint64(i)
		}
		switch {
		case p.res != nil:
			p.res <- r
		case err != nil && p.onErr != nil:
			p.onErr(err)
		}
	}
}

func (h *Hub) appendLog(st *stream, batch []pending) (uint64, error) {
	st.pub.Lock()
	defer st.pub.Unlock()
	st.mu.RLock()
	fin := st.finished
	st.mu.RUnlock()
	if fin {
		return 0, fmt.Errorf("publish to %q: %w", st.name, ErrFinished)
	}
	// The append is not cancelled with any one publisher: it is theirs
	// together, and the Hub waits for it on Close.
	first, err := h.log.Append(context.Background(), st.name, records(batch)...)
	if err != nil {
		return 0, fmt.Errorf("publish to %q: append: %w", st.name, err)
	}
	h.published(st, batch, first)
	return first, nil
}

func records(batch []pending) [][]byte {
	data := make([][]byte, len(batch))
	for i := range batch {
		data[i] = batch[i].it.Data
	}
	return data
}

// published puts batch, appended to the log from seq first on, in the tail
// of st and wakes its subscribers. Caller holds st.pub.
func (h *Hub) published(st *stream, batch []pending, first uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	last := first + uint64(len(batch)) - 1
	if !st.loaded {
		// Every earlier append of this stream has completed (they hold
		// st.pub), so nothing lies between first-1 and first that is not
		// in the log: the tail covers (first-1, …].
		st.loaded = true
		st.from = first - 1
	} else if first <= st.last && !h.follow {
		// The log's ids went back (a stream of an earlier version whose
		// head expired started again at 1): the tail follows the log, and
		// a subscriber past its new end is told (ErrExpired), never left
		// waiting for ids that now name other events. (With Follow, the
		// follower may have seen later appends of other processes first.)
		st.clearTail(last)
		st.resets++
		st.notifyAll()
		return
	} else if st.last != first-1 {
		// Another process appended to the stream (a log shared by several
		// hosts): the tail cannot hold records it never saw, so it starts
		// again after them; subscribers read the rest from the log.
		st.clearTail(max(st.last, last))
		st.notifyAll()
		return
	}
	if len(st.subs) > 0 {
		for i := range batch {
			it := batch[i].it
			it.ID = first + uint64(i)
			it.memo = new(memo)
			st.push(it, h.tailSize, h.tailBytes)
		}
	} else {
		// Nobody reads the tail: keep it empty (no memory for streams
		// without subscribers); it covers nothing up to last.
		if st.n > 0 {
			clear(st.tail)
		}
		st.head, st.n, st.from, st.tbytes = 0, 0, last, 0
	}
	st.last = last
	st.notifyAll()
}

// idle waits until no events of st wait to be appended.
func (st *stream) idle(ctx context.Context) error {
	st.qmu.Lock()
	defer st.qmu.Unlock()
	for st.writing {
		if err := ctx.Err(); err != nil {
			return err
		}
		st.qcond.Wait()
	}
	return nil
}
