package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// MemoryEvents is the event log of a Memory store: each stream a slice of
// records, record i having seq floor+i+1. A stream whose records expired
// keeps its last seq (floor): the next append continues after it.
type MemoryEvents struct {
	limits  Limits
	mu      sync.RWMutex
	streams map[string]*memStream
	waiters waiters
}

type memStream struct {
	floor   uint64 // the records up to it are gone
	recs    [][]byte
	expires time.Time // zero: never
}

func (s *memStream) last() uint64 { return s.floor + uint64(len(s.recs)) }

// drop removes the stream's records, keeping its last seq.
func (s *memStream) drop() {
	s.floor, s.recs, s.expires = s.last(), nil, time.Time{}
}

var _ loop.EventLog = (*MemoryEvents)(nil)

// live returns the stream, its records dropped if they have expired (nil:
// never written). Callers hold mu for writing.
func (e *MemoryEvents) live(stream string, now time.Time) *memStream {
	s := e.streams[stream]
	if s != nil && expired(s.expires, now) {
		s.drop()
	}
	return s
}

// view returns the stream's last seq and its records not expired at now.
// Callers hold mu (read).
func (e *MemoryEvents) view(stream string, now time.Time) (floor uint64, recs [][]byte) {
	s := e.streams[stream]
	if s == nil {
		return 0, nil
	}
	if expired(s.expires, now) {
		return s.last(), nil
	}
	return s.floor, s.recs
}

// Append implements loop.EventLog.
func (e *MemoryEvents) Append(ctx context.Context, stream string, data ...[]byte) (uint64, error) {
	if err := e.limits.checkID("stream", stream); err != nil {
		return 0, fmt.Errorf("append events: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("append events: %w", err)
	}
	if len(data) == 0 {
		return 0, fmt.Errorf("append events: %w: no records", loop.ErrInvalid)
	}
	cp := make([][]byte, len(data))
	for i, d := range data {
		cp[i] = append([]byte{}, d...)
	}
	e.mu.Lock()
	s := e.live(stream, time.Now())
	if s == nil {
		s = &memStream{}
		e.streams[stream] = s
	}
	first := s.last() + 1
	s.recs = append(s.recs, cp...)
	s.expires = time.Time{} // an append cancels the expiry (see Expire)
	e.mu.Unlock()
	e.waiters.wake(stream)
	return first, nil
}

var _ loop.StreamSeeder = (*MemoryEvents)(nil)

// SeedStream implements loop.StreamSeeder.
func (e *MemoryEvents) SeedStream(ctx context.Context, stream string, last uint64) error {
	if err := e.limits.checkID("stream", stream); err != nil {
		return fmt.Errorf("seed events: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("seed events: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.live(stream, time.Now())
	switch {
	case s == nil:
		e.streams[stream] = &memStream{floor: last}
	case len(s.recs) == 0 && s.floor < last:
		s.floor = last
	}
	return nil
}

// Wait implements loop.EventLog.
func (e *MemoryEvents) Wait(ctx context.Context, stream string, after uint64) (uint64, error) {
	if err := e.limits.checkID("stream", stream); err != nil {
		return 0, fmt.Errorf("wait for events: %w", err)
	}
	return e.waiters.wait(ctx, stream, after, e.Last)
}

// Read implements loop.EventLog.
func (e *MemoryEvents) Read(ctx context.Context, stream string, after uint64, limit int) ([]loop.LogRecord, error) {
	if err := e.limits.checkID("stream", stream); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	floor, all := e.view(stream, time.Now())
	after = max(after, floor) // the records up to the floor are gone
	if after >= floor+uint64(len(all)) {
		return []loop.LogRecord{}, nil
	}
	recs := all[after-floor:]
	if limit > 0 && len(recs) > limit {
		recs = recs[:limit]
	}
	out := make([]loop.LogRecord, len(recs))
	for i, d := range recs {
		out[i] = loop.LogRecord{Seq: after + uint64(i) + 1, Data: append([]byte{}, d...)}
	}
	return out, nil
}

// Last implements loop.EventLog.
func (e *MemoryEvents) Last(ctx context.Context, stream string) (uint64, error) {
	if err := e.limits.checkID("stream", stream); err != nil {
		return 0, fmt.Errorf("last event: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("last event: %w", err)
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	floor, recs := e.view(stream, time.Now())
	return floor + uint64(len(recs)), nil
}

// Expire implements loop.EventLog. An append before the deadline cancels
// the expiry: the stream's writer sets it again when it is done. The
// stream's last seq outlives its records.
func (e *MemoryEvents) Expire(ctx context.Context, stream string, ttl time.Duration) error {
	if err := e.limits.checkID("stream", stream); err != nil {
		return fmt.Errorf("expire events: %w", err)
	}
	if err := checkTTL(ttl); err != nil {
		return fmt.Errorf("expire events: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("expire events: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	s := e.live(stream, now)
	if s == nil {
		return nil
	}
	if ttl == 0 {
		s.drop()
		return nil
	}
	s.expires = now.Add(ttl)
	return nil
}

func (e *MemoryEvents) sweep(now time.Time) {
	e.mu.Lock()
	for _, s := range e.streams {
		if expired(s.expires, now) {
			s.drop()
		}
	}
	e.mu.Unlock()
}
