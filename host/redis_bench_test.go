package host

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/looopy-go/looopy/artifacts"
	"github.com/looopy-go/looopy/store/redisstore"
	"github.com/looopy-go/looopy/store/redisstore/redistest"
)

// BenchmarkRedisRoundTrips counts the round trips to Redis (commands and
// pipelines the host sends) of one task: a blocking SendMessage whose turn
// is one model call, on a host whose every store is Redis.
//
//	go test -run '^$' -bench RedisRoundTrips -benchtime 200x ./host
func BenchmarkRedisRoundTrips(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	var trips atomic.Int64
	rs, err := redisstore.Open(context.Background(), redisstore.Options{Addr: srv.Addr, Prefix: "rt:",
		SweepInterval: -1, OnRoundTrip: func() { trips.Add(1) }})
	if err != nil {
		b.Fatal(err)
	}
	defer rs.Close()
	arts, err := artifacts.OpenKV(orderedKV{rs.OrderedKV("artifacts")}, nil, artifacts.Config{})
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewServer(Config{Limits: LimitsConfig{HostID: "bench"}}, Options{Model: doneModel{}, Artifacts: arts,
		Stores: Stores{Messages: rs, Agents: rs, Tasks: rs, Events: rs.Events(), Commit: rs, Checkpoints: rs,
			Journal: rs, Durable: rs, Leases: rs, Cancels: rs, Counters: rs, KV: rs, Shared: true}})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	}()
	url := "http://" + ln.Addr().String() + "/"
	send := func(i int) {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m%d","role":"ROLE_USER","parts":[{"text":"hi"}]}}}`, i)
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(out), "COMPLETED") {
			b.Fatalf("SendMessage: %d %s", resp.StatusCode, out)
		}
	}
	send(-1) // warm up
	time.Sleep(100 * time.Millisecond)
	before := trips.Load()
	b.ResetTimer()
	for i := range b.N {
		send(i)
	}
	b.StopTimer()
	// Work after the answer (lease release, stream expiry) is the task's too.
	time.Sleep(200 * time.Millisecond)
	b.ReportMetric(float64(trips.Load()-before)/float64(b.N), "round-trips/task")
}
