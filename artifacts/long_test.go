//go:build long

package artifacts

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// heapWatch samples the heap (HeapInuse and HeapAlloc) until stopped and
// keeps the highest values seen.
type heapWatch struct {
	stop         chan struct{}
	wg           sync.WaitGroup
	mu           sync.Mutex
	inuse, alloc uint64
}

func watchHeap() *heapWatch {
	h := &heapWatch{stop: make(chan struct{})}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			h.sample()
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
		}
	}()
	return h
}

func (h *heapWatch) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h.mu.Lock()
	h.inuse = max(h.inuse, ms.HeapInuse)
	h.alloc = max(h.alloc, ms.HeapAlloc)
	h.mu.Unlock()
}

func (h *heapWatch) done() (inuse, alloc uint64) {
	close(h.stop)
	h.wg.Wait()
	return h.inuse, h.alloc
}

// fillChunk writes chunk i's deterministic content into buf.
func fillChunk(buf []byte, i int) {
	x := uint64(i)*0x9E3779B97F4A7C15 + 1
	for j := 0; j+8 <= len(buf); j += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(buf[j:], x)
	}
}

// longBadger opens Badger the way a host that wants a small heap does:
// small memtables and caches, values over 1 KiB in the value log.
func longBadger(t *testing.T, dir string) *badger.DB {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).
		WithMemTableSize(8 << 20).WithNumMemtables(2).
		WithBlockCacheSize(4 << 20).WithIndexCacheSize(4 << 20).
		WithValueThreshold(1 << 10).WithNumLevelZeroTables(2).WithNumLevelZeroTablesStall(4))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

const (
	gib       = 1 << 30
	heapBound = 64 << 20
)

// TestLongGiBFile writes a 1 GiB binary file artifact in chunks and reads
// it back in chunks, on Badger on disk, while the heap stays under 64 MiB.
// Chunks of 64 KiB stay inline in Badger; chunks of 2 MiB go to the blob
// folder.
func TestLongGiBFile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chunk int
	}{{"inline-64KiB", 64 << 10}, {"blobs-2MiB", 2 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db := longBadger(t, dir+"/badger")
			defer db.Close()
			s, err := Open(db, nil, Config{})
			if err != nil {
				t.Fatal(err)
			}
			w := NewWriter(s, Scope{ContextID: "c", TaskID: "t"}, nil)
			info, err := w.Create(ctxb, Spec{Kind: KindFile, Binary: true, Name: "big.bin"})
			if err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			h := watchHeap()
			buf := make([]byte, tc.chunk)
			n := gib / tc.chunk
			wrote := sha256.New()
			for i := range n {
				fillChunk(buf, i)
				wrote.Write(buf)
				if _, err := w.AppendChunk(ctxb, info.ID, buf, i == n-1); err != nil {
					t.Fatalf("chunk %d: %v", i, err)
				}
			}
			got, err := s.Get(ctxb, info.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Size != gib || got.Status != StatusComplete || got.Parts != n {
				t.Fatalf("after writing: %+v", got)
			}
			rc, _, err := s.Open(ctxb, info.ID)
			if err != nil {
				t.Fatal(err)
			}
			read := sha256.New()
			var total int64
			rbuf := make([]byte, 64<<10)
			for {
				k, err := rc.Read(rbuf)
				read.Write(rbuf[:k])
				total += int64(k)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("read at %d: %v", total, err)
				}
			}
			_ = rc.Close()
			inuse, alloc := h.done()
			t.Logf("%s: peak HeapInuse %.1f MiB, peak HeapAlloc %.1f MiB", tc.name, float64(inuse)/(1<<20), float64(alloc)/(1<<20))
			if total != gib || string(read.Sum(nil)) != string(wrote.Sum(nil)) {
				t.Fatalf("read back %d bytes, hashes equal: %v", total, string(read.Sum(nil)) == string(wrote.Sum(nil)))
			}
			if inuse >= heapBound || alloc >= heapBound {
				t.Fatalf("heap went over 64 MiB: HeapInuse %d, HeapAlloc %d", inuse, alloc)
			}
			if err := s.Delete(ctxb, info.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
}
