package store_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// Each benchmark runs against Memory and against Badger on disk (synced
// writes, as in production).

// cpuClock measures the process's CPU time (user + system) over a
// benchmark: on a shared machine it moves much less than wall time. It is
// reported as cpu-ns/op.
type cpuClock struct{ start time.Duration }

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU() cpuClock { return cpuClock{processCPU()} }

func (c cpuClock) report(b *testing.B) {
	if b.N > 0 {
		b.ReportMetric(float64(processCPU()-c.start)/float64(b.N), "cpu-ns/op")
	}
}

type benchStores interface {
	loop.MessageStore
	loop.TaskStore
	events() loop.EventLog
}

type memBench struct{ *store.Memory }

func (m memBench) events() loop.EventLog { return m.Events() }

type badgerBench struct{ *store.Badger }

func (b badgerBench) events() loop.EventLog { return b.Events() }

func forEachStore(b *testing.B, fn func(b *testing.B, s benchStores)) {
	b.Run("store=memory", func(b *testing.B) {
		m := store.NewMemory(store.MemoryOptions{})
		b.Cleanup(func() { m.Close() })
		fn(b, memBench{m})
	})
	b.Run("store=badger", func(b *testing.B) {
		s, err := store.Open(store.Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		fn(b, badgerBench{s})
	})
}

func benchMessage(i int) loop.Message {
	return loop.Message{Role: loop.RoleAssistant, Content: "message number " + strconv.Itoa(i) + " of a conversation about the weather in Lisbon"}
}

func prefill(b *testing.B, s loop.MessageStore, ctxID string, n int) {
	b.Helper()
	const chunk = 1000
	batch := make([]loop.Message, 0, chunk)
	for i := range n {
		batch = append(batch, benchMessage(i))
		if len(batch) == chunk || i == n-1 {
			if err := s.Append(context.Background(), ctxID, batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

var historySizes = []int{10, 1000, 100000}

// runs makes every run's context ids fresh: with -count, sub-benchmarks run
// again against the same store.
var runs atomic.Int64

// BenchmarkAppend appends one message to a history of 10, 1,000 and
// 100,000 messages: the cost must not grow with the history.
func BenchmarkAppend(b *testing.B) {
	forEachStore(b, func(b *testing.B, s benchStores) {
		for _, n := range historySizes {
			b.Run(fmt.Sprintf("history=%d", n), func(b *testing.B) {
				id := fmt.Sprintf("append-%d-%d", n, runs.Add(1))
				prefill(b, s, id, n)
				m := benchMessage(n)
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				cpu := startCPU()
				for b.Loop() {
					if err := s.Append(ctx, id, m); err != nil {
						b.Fatal(err)
					}
				}
				cpu.report(b)
			})
		}
	})
}

// BenchmarkRecent50 reads the last 50 messages of a history of 10, 1,000
// and 100,000 messages: the cost must not grow with the history.
func BenchmarkRecent50(b *testing.B) {
	forEachStore(b, func(b *testing.B, s benchStores) {
		for _, n := range historySizes {
			b.Run(fmt.Sprintf("history=%d", n), func(b *testing.B) {
				id := fmt.Sprintf("recent-%d-%d", n, runs.Add(1))
				prefill(b, s, id, n)
				ctx := context.Background()
				want := min(n, 50)
				b.ReportAllocs()
				b.ResetTimer()
				cpu := startCPU()
				for b.Loop() {
					ms, err := s.Recent(ctx, id, 50)
					if err != nil || len(ms) != want {
						b.Fatalf("Recent = %d messages, %v", len(ms), err)
					}
				}
				cpu.report(b)
			})
		}
	})
}

// BenchmarkAppendParallel appends one message at a time to 64 contexts at
// once (what 64 concurrent durable turns do): concurrent synced writes
// share commits.
func BenchmarkAppendParallel(b *testing.B) {
	forEachStore(b, func(b *testing.B, s benchStores) {
		var next atomic.Int64
		runs.Add(1)
		m := benchMessage(1)
		b.ReportAllocs()
		b.ResetTimer()
		b.SetParallelism(32) // 64 goroutines on 2 CPUs
		cpu := startCPU()
		b.RunParallel(func(pb *testing.PB) {
			id := fmt.Sprintf("ctx-%d-%d", runs.Load(), next.Add(1))
			for pb.Next() {
				if err := s.Append(context.Background(), id, m); err != nil {
					b.Fatal(err)
				}
			}
		})
		cpu.report(b)
	})
}

// BenchmarkEventAppend appends one event record to 1 stream (one writer)
// and to 64 streams (64 concurrent writers, one per stream).
func BenchmarkEventAppend(b *testing.B) {
	data := []byte(`{"kind":"content-delta","contextId":"c","taskId":"t","delta":"Hello, wor"}`)
	forEachStore(b, func(b *testing.B, s benchStores) {
		l := s.events()
		b.Run("streams=1", func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				if _, err := l.Append(ctx, "one", data); err != nil {
					b.Fatal(err)
				}
			}
			cpu.report(b)
		})
		b.Run("streams=64", func(b *testing.B) {
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(32)
			cpu := startCPU()
			b.RunParallel(func(pb *testing.PB) {
				stream := fmt.Sprintf("stream-%d", next.Add(1))
				for pb.Next() {
					if _, err := l.Append(context.Background(), stream, data); err != nil {
						b.Fatal(err)
					}
				}
			})
			cpu.report(b)
		})
	})
}

func benchTask(id string) loop.TaskRecord {
	now := time.Now()
	return loop.TaskRecord{
		ID: id, ContextID: "ctx-" + id, AgentID: "assistant", Owner: "alice", Status: loop.TaskCompleted,
		Content: "It is sunny in Lisbon.", Usage: loop.Usage{PromptTokens: 120, CompletionTokens: 30, TotalTokens: 150},
		History: []loop.Message{
			{Role: loop.RoleUser, Content: "What is the weather in Lisbon?"},
			{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{{ID: "call_1", Name: "weather", Arguments: []byte(`{"city":"Lisbon"}`)}}},
			{Role: loop.RoleTool, Name: "weather", ToolCallID: "call_1", Content: `{"sky":"clear","temp":24}`},
			{Role: loop.RoleAssistant, Content: "It is sunny in Lisbon."},
		},
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour),
	}
}

// BenchmarkSaveTask saves a finished task record (four messages of
// history, TTL) from one writer and from 64 concurrent writers.
func BenchmarkSaveTask(b *testing.B) {
	forEachStore(b, func(b *testing.B, s benchStores) {
		b.Run("writers=1", func(b *testing.B) {
			ctx := context.Background()
			i := 0
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				i++
				if err := s.SaveTask(ctx, benchTask(strconv.Itoa(i%1000))); err != nil {
					b.Fatal(err)
				}
			}
			cpu.report(b)
		})
		b.Run("writers=64", func(b *testing.B) {
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(32)
			cpu := startCPU()
			b.RunParallel(func(pb *testing.PB) {
				id := strconv.Itoa(int(next.Add(1)))
				for pb.Next() {
					if err := s.SaveTask(context.Background(), benchTask(id)); err != nil {
						b.Fatal(err)
					}
				}
			})
			cpu.report(b)
		})
	})
}

// BenchmarkLoadTaskOf: loading a large task (1 MiB of history) as its
// owner, as another principal, and an unknown id. The foreign load must
// cost what the unknown one does: the owner is checked before the record
// is read.
func BenchmarkLoadTaskOf(b *testing.B) {
	db, err := store.Open(store.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	hist := make([]loop.Message, 256)
	for i := range hist {
		hist[i] = loop.Message{Role: loop.RoleUser, Content: strings.Repeat("x", 4096)}
	}
	now := time.Now().UTC()
	if err := db.SaveTask(ctx, loop.TaskRecord{ID: "big", ContextID: "c", Owner: "alice", Status: loop.TaskCompleted,
		History: hist, CreatedAt: now, UpdatedAt: now}); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, id, owner string }{
		{"owner", "big", "alice"}, {"foreign", "big", "mallory"}, {"unknown", "nope", "mallory"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, err := db.LoadTaskOf(ctx, c.id, c.owner)
				if (err == nil) != (c.name == "owner") {
					b.Fatalf("LoadTaskOf(%s, %s): %v", c.id, c.owner, err)
				}
			}
		})
	}
}
