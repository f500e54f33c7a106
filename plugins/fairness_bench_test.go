package plugins

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// BenchmarkFairShare measures another principal's call while one principal
// saturates a plugin: alice keeps 8 calls of 50 ms (an upstream answering
// slowly) going at once on a plugin of 2 instances; bob makes one quick
// call at a time. It reports bob's median and 90th percentile latency, and
// alice's throughput. Under first come first served bob waited behind all
// of alice's queued calls (8 x 50 ms / 2 instances = about 200 ms); with a
// fair share he waits for one instance to free (at most 50 ms).
func BenchmarkFairShare(b *testing.B) {
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
	r := newRegistry(b, Config{Egress: eg, Policy: Policy{AllowedHosts: []string{"127.0.0.1"}, AllowPrivateNetwork: true}})
	if _, err := r.Load(context.Background(), install(b, b.TempDir(), "kitchen", guestWasm(b, "kitchen"), func(m map[string]any) {
		caps(m)["hostFunctions"] = []string{"log", "emit", "kv_get", "kv_set", "kv_delete", "http_request", "http_read", "http_close"}
		caps(m)["allowedHosts"] = []string{"127.0.0.1"}
		caps(m)["allowPrivateNetwork"] = true
		caps(m)["instances"] = 2
	})); err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(WithPrincipal(context.Background(), "alice"))
	var wg sync.WaitGroup
	var aliceCalls int64
	var mu sync.Mutex
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := r.Call(ctx, call("fetch", `{"url":"`+srv.URL+`"}`), &loop.ToolEnv{}); err == nil {
					mu.Lock()
					aliceCalls++
					mu.Unlock()
				}
			}
		}()
	}
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
	stop()
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "bob-p50-ms")
	b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds())/1000, "bob-p90-ms")
	b.ReportMetric(float64(aliceCalls)/elapsed.Seconds(), "alice-calls/s")
}
