package plugins

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// BenchmarkFairShare measures another principal's call while one principal
// saturates a plugin: alice keeps 8 calls of 50 ms (an upstream answering
// slowly) going at once on a plugin of 4 instances; bob makes one quick
// call at a time. It reports bob's median and 90th percentile latency,
// alice's throughput alone (2 s before bob calls) and beside
// bob, with no reserved instance and with one (plugins.reservedInstances).
// Without a reserve bob waits for one of alice's calls to end (up to
// 50 ms; up to a whole call timeout when her calls hang); with one he is
// served at once, and alice, alone, runs on 3 instances of 4.
func BenchmarkFairShare(b *testing.B) {
	for _, c := range []struct {
		name    string
		reserve int
	}{{"reserve=none", -1}, {"reserve=1", 1}} {
		b.Run(c.name, func(b *testing.B) { benchFairShare(b, c.reserve) })
	}
}

func benchFairShare(b *testing.B, reserve int) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(50 * time.Millisecond):
		case <-r.Context().Done():
		}
		w.Write([]byte("slow"))
	}))
	defer srv.Close()
	eg := NewEgress(EgressConfig{})
	defer eg.Close()
	r := newRegistry(b, Config{Egress: eg, Policy: Policy{AllowedHosts: []string{"127.0.0.1"}, AllowPrivateNetwork: true, ReservedInstances: reserve}})
	if _, err := r.Load(context.Background(), install(b, b.TempDir(), "kitchen", guestWasm(b, "kitchen"), func(m map[string]any) {
		caps(m)["hostFunctions"] = []string{"log", "emit", "kv_get", "kv_set", "kv_delete", "http_request", "http_read", "http_close"}
		caps(m)["allowedHosts"] = []string{"127.0.0.1"}
		caps(m)["allowPrivateNetwork"] = true
		caps(m)["instances"] = 4
	})); err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(WithPrincipal(context.Background(), "alice"))
	var wg sync.WaitGroup
	var aliceCalls atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := r.Call(ctx, call("fetch", `{"url":"`+srv.URL+`"}`), &loop.ToolEnv{}); err == nil {
					aliceCalls.Add(1)
				}
			}
		}()
	}
	// alice alone: after half a second to make the instances, over 2 s.
	time.Sleep(500 * time.Millisecond)
	from := aliceCalls.Load()
	time.Sleep(2 * time.Second)
	alone := aliceCalls.Load()
	bob := WithPrincipal(context.Background(), "bob")
	var lat []time.Duration
	began := time.Now()
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		res, err := r.Call(bob, call("settings", `{}`), &loop.ToolEnv{})
		if err != nil || res.IsError {
			b.Fatal(res, err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	elapsed := time.Since(began)
	beside := aliceCalls.Load() - alone
	stop()
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "bob-p50-ms")
	b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds())/1000, "bob-p90-ms")
	b.ReportMetric(float64(alone-from)/2, "alice-alone-calls/s")
	b.ReportMetric(float64(beside)/elapsed.Seconds(), "alice-calls/s")
}
