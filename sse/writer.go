package sse

import (
	"context"
	"errors"
	"fmt"
)

// maxAppend bounds the records of one append to the log.
const maxAppend = 256

// pending is an event waiting to be appended to a stream.
type pending struct {
	it    Item
	res   chan pubResult // buffered; nil when nobody waits
	onErr func(error)    // when nobody waits
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
	for len(st.queue) >= h.maxQueue {
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
		batch := st.queue
		if len(batch) > maxAppend {
			st.queue = append(st.spare[:0], batch[maxAppend:]...)
			batch = batch[:maxAppend]
		} else {
			st.queue = st.spare[:0]
		}
		st.qcond.Broadcast()
		st.qmu.Unlock()

		h.appendBatch(st, batch)
		clear(batch)
		st.qmu.Lock()
		st.spare = batch[:0]
		st.qmu.Unlock()
	}
}

// appendBatch appends batch to the log, then publishes it to the tail and
// wakes the subscribers, then answers the publishers.
func (h *Hub) appendBatch(st *stream, batch []pending) {
	first, err := h.appendLog(st, batch)
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
	data := make([][]byte, len(batch))
	for i := range batch {
		data[i] = batch[i].it.Data
	}
	// The append is not cancelled with any one publisher: it is theirs
	// together, and the Hub waits for it on Close.
	first, err := h.log.Append(context.Background(), st.name, data...)
	if err != nil {
		return 0, fmt.Errorf("publish to %q: append: %w", st.name, err)
	}

	st.mu.Lock()
	defer st.mu.Unlock()
	last := first + uint64(len(batch)) - 1
	if !st.loaded {
		// Every earlier append of this stream has completed (they hold
		// st.pub), so nothing lies between first-1 and first that is not
		// in the log: the tail covers (first-1, …].
		st.loaded = true
		st.from = first - 1
	} else if st.last != first-1 {
		// Another process appended to the stream (a log shared by several
		// hosts): the tail cannot hold records it never saw, so it starts
		// again after them; subscribers read the rest from the log.
		st.clearTail(max(st.last, last))
		st.notifyAll()
		return first, nil
	}
	if len(st.subs) > 0 {
		for i := range batch {
			it := batch[i].it
			it.ID = first + uint64(i)
			it.memo = new(memo)
			st.push(it, h.tailSize)
		}
	} else {
		// Nobody reads the tail: keep it empty (no memory for streams
		// without subscribers); it covers nothing up to last.
		if st.n > 0 {
			clear(st.tail)
		}
		st.head, st.n, st.from = 0, 0, last
	}
	st.last = last
	st.notifyAll()
	return first, nil
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
