package sse_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// memLog is an in-memory loop.EventLog with the interface's contract:
// per-stream sequence numbers from 1, durable (visible) when Append returns,
// Read after a seq in order, Expire removing the whole stream after a ttl.
// It also records the Expire calls so retention can be checked.
type memLog struct {
	mu      sync.Mutex
	streams map[string]*memStream
	expires map[string]time.Duration
	reads   int
	now     func() time.Time
}

type memStream struct {
	recs     []loop.LogRecord
	next     uint64
	expireAt time.Time
}

var _ loop.EventLog = (*memLog)(nil)

func newMemLog() *memLog {
	return &memLog{streams: map[string]*memStream{}, expires: map[string]time.Duration{}, now: time.Now}
}

func (l *memLog) get(stream string) *memStream {
	s := l.streams[stream]
	if s != nil && !s.expireAt.IsZero() && !l.now().Before(s.expireAt) {
		delete(l.streams, stream)
		s = nil
	}
	return s
}

func (l *memLog) Append(ctx context.Context, stream string, data ...[]byte) (uint64, error) {
	if len(data) == 0 {
		return 0, errors.New("append: no records")
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.get(stream)
	if s == nil {
		s = &memStream{next: 1}
		l.streams[stream] = s
	}
	first := s.next
	for _, d := range data {
		s.recs = append(s.recs, loop.LogRecord{Seq: s.next, Data: append([]byte(nil), d...)})
		s.next++
	}
	return first, nil
}

func (l *memLog) Read(ctx context.Context, stream string, after uint64, limit int) ([]loop.LogRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("read: limit %d", limit)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads++
	s := l.get(stream)
	if s == nil {
		return nil, nil
	}
	i := sort.Search(len(s.recs), func(i int) bool { return s.recs[i].Seq > after })
	end := min(i+limit, len(s.recs))
	return append([]loop.LogRecord(nil), s.recs[i:end]...), nil
}

func (l *memLog) Last(ctx context.Context, stream string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.get(stream)
	if s == nil || len(s.recs) == 0 {
		return 0, nil
	}
	return s.recs[len(s.recs)-1].Seq, nil
}

func (l *memLog) Expire(ctx context.Context, stream string, ttl time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expires[stream] = ttl
	if s := l.get(stream); s != nil {
		s.expireAt = l.now().Add(ttl)
	}
	return nil
}

func (l *memLog) readCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reads
}
