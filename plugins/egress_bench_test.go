package plugins

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/looopy-go/looopy/pdk"
)

// BenchmarkEgress compares a small GET through the broker (allow-list check,
// header sanitizing, trace injection, guarded pooled dial, capped body) with
// a bare http.Client to the same loopback server, in one run.
//
//	go test -run '^$' -bench Egress -benchmem ./plugins/
func BenchmarkEgress(b *testing.B) {
	payload := strings.Repeat("x", 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, payload)
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	b.Run("broker", func(b *testing.B) {
		e := NewEgress(EgressConfig{Resolver: newEgressTestResolver(map[string][]string{"bench.test": {"127.0.0.1"}})})
		defer e.Close()
		req := &pdk.HTTPRequest{URL: "http://bench.test:" + strconv.Itoa(port) + "/", Headers: map[string]string{"Accept": "text/plain"}}
		grant := EgressGrant{AllowedHosts: []string{"bench.test"}, AllowPrivate: true}
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			resp, err := e.Do(b.Context(), req, grant)
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || n != int64(len(payload)) {
				b.Fatalf("read %d bytes: %v", n, err)
			}
		}
	})

	b.Run("bare_client", func(b *testing.B) {
		tr := &http.Transport{MaxIdleConnsPerHost: 16}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}
		url := srv.URL + "/"
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			req, err := http.NewRequestWithContext(b.Context(), http.MethodGet, url, nil)
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Accept", "text/plain")
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || n != int64(len(payload)) {
				b.Fatalf("read %d bytes: %v", n, err)
			}
		}
	})
}

// reportCPU adds the process's CPU time per operation (client and loopback
// server together, user and system) as "cpu-ns/op": on a busy machine it
// moves far less than wall time, which includes waiting for a core.
func reportCPU(b *testing.B) func() {
	start := processCPU()
	return func() {
		if n := b.N; n > 0 {
			b.ReportMetric(float64((processCPU()-start).Nanoseconds())/float64(n), "cpu-ns/op")
		}
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
