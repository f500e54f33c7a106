package store

import (
	"context"
	"sync"
)

// waiters wakes the readers waiting for new records of a stream. A reader
// takes the stream's channel before it reads the stream's last seq; an
// append closes the channel after its records are stored, so no append
// between the read and the wait goes unnoticed.
type waiters struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

// next returns a channel closed by the next append to stream.
func (w *waiters) next(stream string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(map[string]chan struct{})
	}
	c := w.ch[stream]
	if c == nil {
		c = make(chan struct{})
		w.ch[stream] = c
	}
	return c
}

// wake wakes every reader waiting on stream.
func (w *waiters) wake(stream string) {
	w.mu.Lock()
	c := w.ch[stream]
	delete(w.ch, stream)
	w.mu.Unlock()
	if c != nil {
		close(c)
	}
}

// wait implements loop.EventLog.Wait over last, the stream's last seq.
func (w *waiters) wait(ctx context.Context, stream string, after uint64, last func(context.Context, string) (uint64, error)) (uint64, error) {
	for {
		c := w.next(stream)
		n, err := last(ctx, stream)
		if err != nil || n > after {
			return n, err
		}
		select {
		case <-c:
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
}
