package store_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// BenchmarkExpireTaskStream: the expiry of a finished task's stream (96
// records of 300 bytes, about a streamed answer's), which the next write
// on the commit goroutine waits behind. One stream per iteration, written
// before the timer runs.
func BenchmarkExpireTaskStream(b *testing.B) {
	st, err := store.Open(store.Options{Dir: b.TempDir(), SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	rec := []byte(strings.Repeat("x", 300))
	recs := make([][]byte, 96)
	for i := range recs {
		recs[i] = rec
	}
	for i := range b.N {
		if _, err := st.Events().Append(ctx, "task/"+strconv.Itoa(i), recs...); err != nil {
			b.Fatal(err)
		}
	}
	cpu := startCPU()
	b.ResetTimer()
	for i := range b.N {
		if err := st.Events().Expire(ctx, "task/"+strconv.Itoa(i), 24*time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cpu.report(b)
}

// BenchmarkSweepTaskStreams: what the sweeper spends, per stream, to
// delete expired task streams of 96 records (all due at once; writes of
// at most 1,024 keys through the group commit).
func BenchmarkSweepTaskStreams(b *testing.B) {
	st, err := store.Open(store.Options{Dir: b.TempDir(), SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	rec := []byte(strings.Repeat("x", 300))
	recs := make([][]byte, 96)
	for i := range recs {
		recs[i] = rec
	}
	for i := range b.N {
		s := "task/" + strconv.Itoa(i)
		if _, err := st.Events().Append(ctx, s, recs...); err != nil {
			b.Fatal(err)
		}
		if err := st.Events().Expire(ctx, s, 0); err != nil {
			b.Fatal(err)
		}
	}
	commits := st.Commits()
	cpu := startCPU()
	b.ResetTimer()
	n, err := st.SweepStreams(ctx)
	b.StopTimer()
	if err != nil || n != 96*b.N {
		b.Fatalf("swept %d keys, %v; want %d", n, err, 96*b.N)
	}
	cpu.report(b)
	b.ReportMetric(float64(st.Commits()-commits)/float64(b.N), "commits/op")
}

// BenchmarkExpireConversationsScan: one sweep of the conversation expiry
// over 10,000 conversations none of which is idle yet, what every cleanup
// pays (the scan of the agent records) before anything expires.
func BenchmarkExpireConversationsScan(b *testing.B) {
	st, err := store.Open(store.Options{Dir: b.TempDir(), SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	now := time.Now()
	for i := range 10000 {
		if err := st.SaveAgent(ctx, loop.AgentMetadata{ContextID: "conv-" + strconv.Itoa(i), CreatedAt: now, LastActivity: now}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		gone, err := st.ExpireConversations(ctx, now.Add(-time.Hour))
		if err != nil || len(gone) != 0 {
			b.Fatalf("%v, %v", gone, err)
		}
	}
}
