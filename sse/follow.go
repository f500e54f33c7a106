package sse

import (
	"context"
	"time"
)

// startFollow starts the follower of st when the Hub follows other
// processes' appends (Config.Follow) and none runs. Caller holds st.mu.
func (h *Hub) startFollow(st *stream) {
	if !h.follow || st.unfollow != nil {
		return
	}
	ctx, cancel := context.WithCancel(h.followCtx)
	st.unfollow = cancel
	h.followers.Add(1)
	go h.followStream(ctx, st)
}

// followStream waits for records appended to st's log by anyone and wakes
// the subscribers; it runs while st has subscribers.
func (h *Hub) followStream(ctx context.Context, st *stream) {
	defer h.followers.Done()
	backoff := 100 * time.Millisecond
	for {
		st.mu.RLock()
		after := st.last
		st.mu.RUnlock()
		n, err := h.log.Wait(ctx, st.name, after)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			h.logger.Warn("following the event log of another process", "stream", st.name, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		st.mu.Lock()
		if n > st.last {
			// Records this Hub did not append: its tail does not hold
			// them; subscribers read them from the log.
			st.clearTail(n)
			st.notifyAll()
		}
		st.mu.Unlock()
	}
}

// clearTail empties the tail: it covers nothing up to last, the stream's
// new last id. Caller holds st.mu.
func (st *stream) clearTail(last uint64) {
	if st.n > 0 {
		clear(st.tail)
	}
	st.head, st.n, st.from, st.last, st.tbytes = 0, 0, last, last, 0
}
