package sse_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// spyLog is a real event log that also counts what the Hub asks of it.
type spyLog struct {
	loop.EventLog
	mu      sync.Mutex
	expires map[string]time.Duration
	reads   int
	readMax int64 // the most bytes one Read returned
	appends int
	gate    chan struct{} // when set, Append waits for it to close
}

func (s *spyLog) Append(ctx context.Context, stream string, data ...[]byte) (uint64, error) {
	s.mu.Lock()
	s.appends++
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return s.EventLog.Append(ctx, stream, data...)
}

func (s *spyLog) appendCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appends
}

var _ loop.EventLog = (*spyLog)(nil)

func spy(l loop.EventLog) *spyLog {
	return &spyLog{EventLog: l, expires: map[string]time.Duration{}}
}

func (s *spyLog) Read(ctx context.Context, stream string, after uint64, limit int) ([]loop.LogRecord, error) {
	recs, err := s.EventLog.Read(ctx, stream, after, limit)
	var n int64
	for _, r := range recs {
		n += int64(len(r.Data))
	}
	s.mu.Lock()
	s.reads++
	s.readMax = max(s.readMax, n)
	s.mu.Unlock()
	return recs, err
}

func (s *spyLog) largestRead() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readMax
}

func (s *spyLog) Expire(ctx context.Context, stream string, ttl time.Duration) error {
	s.mu.Lock()
	s.expires[stream] = ttl
	s.mu.Unlock()
	return s.EventLog.Expire(ctx, stream, ttl)
}

func (s *spyLog) readCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

func (s *spyLog) expiry(stream string) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.expires[stream]
	return d, ok
}

// memoryLog is the event log of a store.Memory.
func memoryLog(t testing.TB) *spyLog {
	t.Helper()
	m := store.NewMemory(store.MemoryOptions{})
	t.Cleanup(func() { _ = m.Close() })
	return spy(m.Events())
}

// openBadger opens (or reopens) a Badger store in dir.
func openBadger(t testing.TB, dir string) *store.Badger {
	t.Helper()
	b, err := store.Open(store.Options{Dir: dir})
	if err != nil {
		t.Fatalf("open badger: %v", err)
	}
	return b
}

// badgerLog is the event log of a Badger store on disk.
func badgerLog(t testing.TB) *spyLog {
	t.Helper()
	b := openBadger(t, t.TempDir())
	t.Cleanup(func() { _ = b.Close() })
	return spy(b.Events())
}

// eachLog runs f against every event log implementation.
func eachLog(t *testing.T, f func(t *testing.T, newLog func(testing.TB) *spyLog)) {
	t.Run("memory", func(t *testing.T) { f(t, memoryLog) })
	t.Run("badger", func(t *testing.T) { f(t, badgerLog) })
}

// multiSpyLog is a spyLog over a log that appends to several streams in one
// write (Badger's): it counts those writes, and can make them fail.
type multiSpyLog struct {
	*spyLog
	multi loop.MultiStreamAppender
	mu    sync.Mutex
	pairs int
	fail  error
}

var _ loop.MultiStreamAppender = (*multiSpyLog)(nil)

func (s *multiSpyLog) AppendStreams(ctx context.Context, appends []loop.StreamAppend) ([]uint64, error) {
	s.mu.Lock()
	s.pairs++
	fail := s.fail
	s.mu.Unlock()
	if fail != nil {
		return nil, fail
	}
	return s.multi.AppendStreams(ctx, appends)
}

func (s *multiSpyLog) pairCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pairs
}

// badgerMultiLog is Badger's event log seen through a multiSpyLog, with the
// store (for its commit count).
func badgerMultiLog(t testing.TB) (*multiSpyLog, *store.Badger) {
	t.Helper()
	b := openBadger(t, t.TempDir())
	t.Cleanup(func() { _ = b.Close() })
	return &multiSpyLog{spyLog: spy(b.Events()), multi: b.Events()}, b
}

// SeedStream passes a seed on to the log (loop.StreamSeeder).
func (s *spyLog) SeedStream(ctx context.Context, stream string, last uint64) error {
	sd, ok := s.EventLog.(loop.StreamSeeder)
	if !ok {
		return errors.New("the log is no loop.StreamSeeder")
	}
	return sd.SeedStream(ctx, stream, last)
}
