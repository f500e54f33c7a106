package plugins

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/looopy-go/looopy/pdk"
)

// egressTestResolver resolves test host names from a table; anything else does
// not exist.
type egressTestResolver struct {
	mu    sync.Mutex
	hosts map[string][]string
	calls map[string]int
}

func newEgressTestResolver(hosts map[string][]string) *egressTestResolver {
	return &egressTestResolver{hosts: hosts, calls: map[string]int{}}
}

func (r *egressTestResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[host]++
	addrs, ok := r.hosts[strings.TrimSuffix(strings.ToLower(host), ".")]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	out := make([]net.IPAddr, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, net.IPAddr{IP: net.ParseIP(a)})
	}
	return out, nil
}

func (r *egressTestResolver) lookups(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[host]
}

// egressTestServer is a loopback HTTP server that counts the connections it
// accepted and the requests it served.
type egressTestServer struct {
	*httptest.Server
	conns atomic.Int64
	reqs  atomic.Int64
	done  chan struct{} // closed at the end of the test: handlers that wait give up
}

func newEgressTestServer(t *testing.T, tls bool, h http.HandlerFunc) *egressTestServer {
	t.Helper()
	s := &egressTestServer{done: make(chan struct{})}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.reqs.Add(1)
		h(w, r)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	if tls {
		s.EnableHTTP2 = true
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(s.done) }) // runs before Close
	return s
}

// url is the server's URL under a test host name.
func (s *egressTestServer) url(host, path string) string {
	scheme := "http"
	if s.TLS != nil {
		scheme = "https"
	}
	port := s.Listener.Addr().(*net.TCPAddr).Port
	return fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, fmt.Sprint(port)), path)
}

func (s *egressTestServer) port() int { return s.Listener.Addr().(*net.TCPAddr).Port }

var egressTestHosts = map[string][]string{
	"allowed.test":       {"127.0.0.1"},
	"api.allowed.test":   {"127.0.0.1"},
	"other.test":         {"127.0.0.1"},
	"forbidden.test":     {"127.0.0.1"},
	"secure.example.com": {"127.0.0.1"},
	"loop.test":          {"127.0.0.1"},
	"ten.test":           {"10.0.0.1"},
	"linklocal.test":     {"169.254.169.254"},
	"v6loop.test":        {"::1"},
	"cgnat.test":         {"100.64.0.1"},
	"mapped.test":        {"::ffff:127.0.0.1"},
	"nat64.test":         {"64:ff9b::7f00:1"},
	"zero.test":          {"0.0.0.0"},
	"ula.test":           {"fd00::1"},
	"mixed.test":         {"10.0.0.1", "127.0.0.1"},
}

func newTestEgress(t *testing.T, cfg EgressConfig) (*Egress, *egressTestResolver) {
	t.Helper()
	r := newEgressTestResolver(egressTestHosts)
	if cfg.Resolver == nil {
		cfg.Resolver = r
	}
	e := NewEgress(cfg)
	t.Cleanup(func() { _ = e.Close() })
	return e, r
}

func egressLoopbackGrant(hosts ...string) EgressGrant {
	return EgressGrant{AllowedHosts: hosts, AllowPrivate: true}
}

func egressReadAll(t *testing.T, resp *EgressResponse) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return string(b)
}

func TestEgressAllowedHostStreams(t *testing.T) {
	release := make(chan struct{})
	var gotMethod, gotBody, gotHeader string
	srv := newEgressTestServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotMethod, gotBody, gotHeader = r.Method, string(b), r.Header.Get("X-Plugin")
		w.Header().Set("X-Answer", "42")
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "first|")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "second")
	})
	e, _ := newTestEgress(t, EgressConfig{})
	resp, err := e.Do(t.Context(), &pdk.HTTPRequest{
		Method:  "POST",
		URL:     srv.url("allowed.test", "/stream?q=1"),
		Headers: map[string]string{"X-Plugin": "calc", "Content-Type": "text/plain"},
		Body:    "hello",
	}, egressLoopbackGrant("allowed.test"))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	defer resp.Body.Close()
	if resp.Status != http.StatusAccepted || resp.Header["X-Answer"][0] != "42" {
		t.Fatalf("head = %d %v", resp.Status, resp.Header)
	}
	if resp.URL != srv.url("allowed.test", "/stream?q=1") {
		t.Errorf("URL = %q", resp.URL)
	}
	// The first part arrives while the server still holds the second back:
	// the body streams.
	first := make([]byte, len("first|"))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first|" {
		t.Fatalf("first part = %q, %v", first, err)
	}
	close(release)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "second" {
		t.Fatalf("rest = %q, %v", rest, err)
	}
	if gotMethod != "POST" || gotBody != "hello" || gotHeader != "calc" {
		t.Errorf("server saw %s %q X-Plugin=%q", gotMethod, gotBody, gotHeader)
	}
}

func TestEgressHostMatching(t *testing.T) {
	srv := newEgressTestServer(t, false, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	port := fmt.Sprint(srv.port())
	e, _ := newTestEgress(t, EgressConfig{})
	for _, tc := range []struct {
		name, host string
		allowed    []string
	}{
		{"exact", "allowed.test", []string{"allowed.test"}},
		{"case-insensitive URL", "ALLOWED.Test", []string{"allowed.test"}},
		{"case-insensitive pattern", "allowed.test", []string{"Allowed.TEST"}},
		{"trailing dot", "allowed.test.", []string{"allowed.test"}},
		{"wildcard", "api.allowed.test", []string{"*.allowed.test"}},
		{"with port", "allowed.test", []string{"allowed.test:" + port}},
		{"any name", "other.test", []string{"*"}},
		{"IP literal listed", "127.0.0.1", []string{"127.0.0.1"}},
		{"one of several", "other.test", []string{"nothing.test", "other.test"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url(tc.host, "/")}, egressLoopbackGrant(tc.allowed...))
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if got := egressReadAll(t, resp); got != "ok" {
				t.Fatalf("body = %q", got)
			}
		})
	}
}

func TestEgressHostNotAllowed(t *testing.T) {
	srv := newEgressTestServer(t, false, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "reached") })
	e, r := newTestEgress(t, EgressConfig{})
	for _, tc := range []struct {
		name, host string
		allowed    []string
		want       string
	}{
		{"not listed", "forbidden.test", []string{"allowed.test"}, `host "forbidden.test" on port `},
		{"empty list", "allowed.test", nil, `is not in the plugin's allowed hosts (it has none)`},
		{"suffix is not a subdomain", "evilallowed.test", []string{"*.allowed.test"}, `host "evilallowed.test" on port `},
		{"wildcard excludes apex", "allowed.test", []string{"*.allowed.test"}, `host "allowed.test" on port `},
		{"allowed name as prefix", "allowed.test.forbidden.test", []string{"allowed.test"}, `host "allowed.test.forbidden.test"`},
		{"other port", "allowed.test", []string{"allowed.test:1"}, `host "allowed.test" is in the plugin's allowed hosts only on other ports than port `},
		{"IP literal not listed", "127.0.0.1", []string{"allowed.test", "*"}, `an IP address is reached only when listed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url(tc.host, "/")}, egressLoopbackGrant(tc.allowed...))
			if !errors.Is(err, ErrEgressDenied) {
				t.Fatalf("err = %v, want ErrEgressDenied", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q, want it to contain %q", err, tc.want)
			}
			if u, _ := url.Parse(srv.url(tc.host, "/")); !strings.Contains(err.Error(), "port "+u.Port()) {
				t.Errorf("err = %q, want it to name the port %s", err, u.Port())
			}
			if r.lookups(tc.host) != 0 {
				t.Errorf("%q was resolved before being refused", tc.host)
			}
		})
	}
	if n := srv.conns.Load(); n != 0 {
		t.Fatalf("server accepted %d connections for refused hosts", n)
	}
}

func TestEgressRedirectToForbiddenHost(t *testing.T) {
	forbidden := newEgressTestServer(t, false, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "secret") })
	allowed := newEgressTestServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	e, _ := newTestEgress(t, EgressConfig{})
	for _, tc := range []struct{ name, to, want string }{
		{"other host", forbidden.url("forbidden.test", "/secret"),
			`refused: host "forbidden.test" on port `},
		{"IP literal", forbidden.url("127.0.0.1", "/secret"),
			`is not in the plugin's allowed hosts (an IP address is reached only when listed itself)`},
		{"file scheme", "file:///etc/passwd", `to scheme "file" refused`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := allowed.reqs.Load()
			_, err := e.Do(t.Context(), &pdk.HTTPRequest{URL: allowed.url("allowed.test", "/?to="+url.QueryEscape(tc.to))},
				egressLoopbackGrant("allowed.test"))
			if !errors.Is(err, ErrEgressDenied) {
				t.Fatalf("err = %v, want ErrEgressDenied", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "egress: redirect from \"allowed.test:") {
				t.Errorf("err = %q, want it to name the redirect and contain %q", err, tc.want)
			}
			if n := allowed.reqs.Load() - before; n != 1 {
				t.Errorf("allowed server saw %d requests, want 1", n)
			}
		})
	}
	if n := forbidden.conns.Load(); n != 0 {
		t.Fatalf("forbidden server accepted %d connections", n)
	}
}

func TestEgressRedirectLoopCapped(t *testing.T) {
	srv := newEgressTestServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/again", http.StatusTemporaryRedirect)
	})
	e, _ := newTestEgress(t, EgressConfig{MaxRedirects: 3})
	_, err := e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url("loop.test", "/")}, egressLoopbackGrant("loop.test"))
	if !errors.Is(err, ErrEgressTooManyRedirects) {
		t.Fatalf("err = %v, want ErrEgressTooManyRedirects", err)
	}
	if !strings.Contains(err.Error(), "after 3 redirects") || !strings.Contains(err.Error(), "loop.test") {
		t.Errorf("err = %q", err)
	}
	if n := srv.reqs.Load(); n != 4 {
		t.Errorf("server saw %d requests, want 4 (the first and 3 redirects)", n)
	}
}

func TestEgressRedirectNotFollowedWhenDisabled(t *testing.T) {
	srv := newEgressTestServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	})
	e, _ := newTestEgress(t, EgressConfig{MaxRedirects: -1})
	resp, err := e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url("allowed.test", "/")}, egressLoopbackGrant("allowed.test"))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	resp.Body.Close()
	if resp.Status != http.StatusFound || resp.Header["Location"][0] != "/elsewhere" || srv.reqs.Load() != 1 {
		t.Fatalf("status %d, location %v, %d requests", resp.Status, resp.Header["Location"], srv.reqs.Load())
	}
}

func TestEgressRedirectFollowed(t *testing.T) {
	type seen struct{ method, body, auth, trace string }
	var mu sync.Mutex
	var hops []seen
	record := func(r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		hops = append(hops, seen{r.Method, string(b), r.Header.Get("Authorization"), r.Header.Get("Traceparent")})
		mu.Unlock()
	}
	other := newEgressTestServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		record(r)
		io.WriteString(w, "landed")
	})
	srv := newEgressTestServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		record(r)
		switch r.URL.Path {
		case "/307":
			http.Redirect(w, r, "/302", http.StatusTemporaryRedirect) // same host: method, body and credentials kept
		case "/302":
			http.Redirect(w, r, other.url("other.test", "/end"), http.StatusFound) // POST becomes GET, other host
		}
	})
	e, _ := newTestEgress(t, EgressConfig{})
	ctx := trace.ContextWithSpanContext(t.Context(), egressSpanContext(t))
	resp, err := e.Do(ctx, &pdk.HTTPRequest{
		Method:  "POST",
		URL:     srv.url("allowed.test", "/307"),
		Headers: map[string]string{"Authorization": "Bearer token"},
		Body:    "payload",
	}, egressLoopbackGrant("allowed.test", "other.test"))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if got := egressReadAll(t, resp); got != "landed" {
		t.Fatalf("body = %q", got)
	}
	if resp.URL != other.url("other.test", "/end") {
		t.Errorf("URL = %q", resp.URL)
	}
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	want := []seen{
		{"POST", "payload", "Bearer token", tp},
		{"POST", "payload", "Bearer token", tp},
		{"GET", "", "", tp},
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(hops) != fmt.Sprint(want) {
		t.Fatalf("hops = %+v\nwant   %+v", hops, want)
	}
}

func TestEgressTLSAndDowngradeRefused(t *testing.T) {
	plain := newEgressTestServer(t, false, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "plain") })
	secure := newEgressTestServer(t, true, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/down" {
			http.Redirect(w, r, plain.url("allowed.test", "/"), http.StatusFound)
			return
		}
		fmt.Fprintf(w, "secure over HTTP/%d", r.ProtoMajor)
	})
	roots := x509.NewCertPool()
	roots.AddCert(secure.Certificate())
	e, _ := newTestEgress(t, EgressConfig{RootCAs: roots})
	grant := egressLoopbackGrant("secure.example.com", "allowed.test")

	resp, err := e.Do(t.Context(), &pdk.HTTPRequest{URL: secure.url("secure.example.com", "/")}, grant)
	if err != nil {
		t.Fatalf("Do over TLS: %v", err)
	}
	if got := egressReadAll(t, resp); got != "secure over HTTP/2" {
		t.Fatalf("body = %q", got)
	}

	_, err = e.Do(t.Context(), &pdk.HTTPRequest{URL: secure.url("secure.example.com", "/down")}, grant)
	if !errors.Is(err, ErrEgressDenied) || !strings.Contains(err.Error(), "downgrade from https to http") {
		t.Fatalf("err = %v, want a refused downgrade", err)
	}
	if n := plain.conns.Load(); n != 0 {
		t.Fatalf("plain server accepted %d connections", n)
	}
}

func TestEgressPrivateAddressRefused(t *testing.T) {
	srv := newEgressTestServer(t, false, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "internal") })
	port := srv.port()
	e, r := newTestEgress(t, EgressConfig{})
	for _, tc := range []struct {
		host, addr, kind string
	}{
		{"allowed.test", "127.0.0.1", "loopback"},
		{"ten.test", "10.0.0.1", "private network"},
		{"linklocal.test", "169.254.169.254", "link-local"},
		{"v6loop.test", "::1", "loopback"},
		{"cgnat.test", "100.64.0.1", "CGNAT"},
		{"mapped.test", "127.0.0.1", "loopback"},
		{"nat64.test", "64:ff9b::7f00:1", "NAT64 of loopback"},
		{"zero.test", "0.0.0.0", "unspecified"},
		{"ula.test", "fd00::1", "private network"},
		{"mixed.test", "10.0.0.1", "private network"},
		{"127.0.0.1", "127.0.0.1", "loopback"},
		{"::1", "::1", "loopback"},
		{"0.0.0.0", "0.0.0.0", "unspecified"},
		{"::ffff:10.0.0.1", "10.0.0.1", "private network"},
		{"169.254.169.254", "169.254.169.254", "link-local"},
	} {
		t.Run(tc.host, func(t *testing.T) {
			host := tc.host
			pattern := host
			if strings.Contains(host, ":") {
				pattern = "[" + host + "]"
			}
			target := fmt.Sprintf("http://%s/", net.JoinHostPort(host, fmt.Sprint(port)))
			_, err := e.Do(t.Context(), &pdk.HTTPRequest{URL: target}, EgressGrant{AllowedHosts: []string{pattern}})
			if !errors.Is(err, ErrEgressPrivateAddress) || !errors.Is(err, ErrEgressDenied) {
				t.Fatalf("err = %v, want ErrEgressPrivateAddress", err)
			}
			want := fmt.Sprintf("address %s of %q (port %d) is private", tc.addr, host, port)
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tc.kind) {
				t.Errorf("err = %q, want it to contain %q and %q", err, want, tc.kind)
			}
		})
	}
	if n := srv.conns.Load(); n != 0 {
		t.Fatalf("server accepted %d connections to refused addresses", n)
	}
	// The names were resolved (the check is on the resolved address).
	if r.lookups("ten.test") == 0 {
		t.Errorf("ten.test was never resolved")
	}

	// The same request is served once the grant allows private addresses:
	// the refusal above was the policy, not the network.
	resp, err := e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url("allowed.test", "/")}, egressLoopbackGrant("allowed.test"))
	if err != nil {
		t.Fatalf("Do with AllowPrivate: %v", err)
	}
	if got := egressReadAll(t, resp); got != "internal" {
		t.Fatalf("body = %q", got)
	}
	// And a connection pooled for that grant is not lent to one without it.
	_, err = e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url("allowed.test", "/")}, EgressGrant{AllowedHosts: []string{"allowed.test"}})
	if !errors.Is(err, ErrEgressPrivateAddress) {
		t.Fatalf("after a private grant pooled a connection: err = %v, want ErrEgressPrivateAddress", err)
	}
	if n := srv.reqs.Load(); n != 1 {
		t.Fatalf("server served %d requests, want 1", n)
	}
}

func TestEgressDialGuard(t *testing.T) {
	guard := dialGuard("x.test", false)
	for _, addr := range []string{"127.0.0.1:80", "[::1]:443", "10.1.2.3:80", "[fe80::1%eth0]:80", "224.0.0.1:80", "[::ffff:192.168.1.1]:80"} {
		err := guard("tcp", addr, nil)
		_, p, _ := net.SplitHostPort(addr)
		if !errors.Is(err, ErrEgressPrivateAddress) || !strings.Contains(err.Error(), `of "x.test" (port `+p+`) is private`) {
			t.Errorf("guard(%s) = %v, want a private-address refusal", addr, err)
		}
	}
	for _, addr := range []string{"93.184.216.34:80", "[2606:4700:4700::1111]:443"} {
		if err := guard("tcp", addr, nil); err != nil {
			t.Errorf("guard(%s) = %v, want nil", addr, err)
		}
	}
	if err := dialGuard("x.test", true)("tcp", "127.0.0.1:80", nil); err != nil {
		t.Errorf("guard with AllowPrivate refused loopback: %v", err)
	}
}

func TestEgressAddressKind(t *testing.T) {
	for addr, want := range map[string]string{
		"8.8.8.8":                  "",
		"1.1.1.1":                  "",
		"2606:4700:4700::1111":     "",
		"2002:808:808::1":          "", // 6to4 of 8.8.8.8
		"127.0.0.53":               "loopback",
		"10.0.0.1":                 "private network",
		"172.16.0.1":               "private network",
		"192.168.0.1":              "private network",
		"169.254.169.254":          "link-local",
		"100.64.0.1":               "shared address space (CGNAT)",
		"0.0.0.0":                  "unspecified",
		"0.1.2.3":                  "this network",
		"224.0.0.251":              "multicast",
		"255.255.255.255":          "reserved",
		"::":                       "unspecified",
		"::1":                      "loopback",
		"fe80::1":                  "link-local",
		"fc00::1":                  "private network",
		"ff02::1":                  "multicast",
		"::ffff:127.0.0.1":         "loopback",
		"::127.0.0.1":              "IPv4-compatible",
		"64:ff9b::a00:1":           "NAT64 of private network",
		"2002:a00:1::1":            "6to4 of private network",
		"2001:db8::1":              "documentation",
		"fec0::1":                  "site-local",
		"2001:0:4136:e378::1":      "Teredo",
		"198.18.0.1":               "benchmarking",
		"203.0.113.9":              "documentation",
		"2a00:1450:4001:80b::200e": "",
	} {
		if got := addressKind(netip.MustParseAddr(addr)); got != want {
			t.Errorf("addressKind(%s) = %q, want %q", addr, got, want)
		}
	}
}

// forEachEgressProtocol runs f against a fresh server and broker over
// plain HTTP/1.1 and over TLS with HTTP/2.
func forEachEgressProtocol(t *testing.T, h http.HandlerFunc, f func(t *testing.T, srv *egressTestServer, e *Egress, host string)) {
	for _, tls := range []bool{false, true} {
		name, host := "HTTP/1.1", "allowed.test"
		if tls {
			name, host = "HTTP/2", "secure.example.com"
		}
		t.Run(name, func(t *testing.T) {
			srv := newEgressTestServer(t, tls, h)
			var cfg EgressConfig
			if tls {
				cfg.RootCAs = x509.NewCertPool()
				cfg.RootCAs.AddCert(srv.Certificate())
			}
			e, _ := newTestEgress(t, cfg)
			f(t, srv, e, host)
		})
	}
}

func TestEgressSlowBodyTimeout(t *testing.T) {
	forEachEgressProtocol(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/nohead" {
			<-r.Context().Done()
			return
		}
		io.WriteString(w, "a trickle that never ends")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}, func(t *testing.T, srv *egressTestServer, e *Egress, host string) {
		grant := egressLoopbackGrant(host)
		grant.Timeout = 300 * time.Millisecond

		resp, err := e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url(host, "/body")}, grant)
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if string(got) != "a trickle that never ends" {
			t.Errorf("read %q before the timeout", got)
		}
		if !errors.Is(err, ErrEgressTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want ErrEgressTimeout", err)
		}
		if want := fmt.Sprintf("response body of %q not finished within the timeout of 300ms", host+":"+fmt.Sprint(srv.port())); err.Error() != "egress: "+want {
			t.Errorf("err = %q, want %q", err, want)
		}

		_, err = e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url(host, "/nohead")}, grant)
		if !errors.Is(err, ErrEgressTimeout) || !strings.Contains(err.Error(), "no response within the timeout of 300ms") {
			t.Fatalf("err = %v, want a timeout waiting for the head", err)
		}
	})
}

func TestEgressResponseTooLarge(t *testing.T) {
	const limit = 10_000
	srv := newEgressTestServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("x"), 1000)
		switch r.URL.Path {
		case "/declared":
			w.Header().Set("Content-Length", fmt.Sprint(limit+1))
			w.Write(bytes.Repeat([]byte("y"), limit+1))
		case "/exact":
			w.Write(bytes.Repeat([]byte("z"), limit))
		default: // chunked, no length up front
			for i := 0; i < 64; i++ {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		}
	})
	e, _ := newTestEgress(t, EgressConfig{})
	grant := egressLoopbackGrant("allowed.test")
	grant.MaxResponseBytes = limit

	resp, err := e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url("allowed.test", "/chunked")}, grant)
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !errors.Is(err, ErrEgressTooLarge) || !strings.Contains(err.Error(), "over the limit of 10000 bytes") {
		t.Fatalf("err = %v, want ErrEgressTooLarge", err)
	}
	if len(got) != limit {
		t.Errorf("read %d bytes before the error, want exactly %d", len(got), limit)
	}

	_, err = e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url("allowed.test", "/declared")}, grant)
	if !errors.Is(err, ErrEgressTooLarge) || !strings.Contains(err.Error(), "10001 bytes (Content-Length)") {
		t.Fatalf("err = %v, want ErrEgressTooLarge from Content-Length", err)
	}

	resp, err = e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url("allowed.test", "/exact")}, grant)
	if err != nil {
		t.Fatalf("Do exact: %v", err)
	}
	if got := egressReadAll(t, resp); len(got) != limit {
		t.Fatalf("exactly the limit: read %d bytes", len(got))
	}
}

func TestEgressDecompressedSizeCapped(t *testing.T) {
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write(make([]byte, 1<<20)) // 1 MiB of zeros, about 1 KiB compressed
	zw.Close()
	srv := newEgressTestServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Length", fmt.Sprint(zipped.Len()))
		w.Write(zipped.Bytes())
	})
	e, _ := newTestEgress(t, EgressConfig{})
	grant := egressLoopbackGrant("allowed.test")
	grant.MaxResponseBytes = 64 << 10
	resp, err := e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url("allowed.test", "/")}, grant)
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if !errors.Is(err, ErrEgressTooLarge) || len(got) != 64<<10 {
		t.Fatalf("read %d bytes, err = %v; want the cap to count decompressed bytes", len(got), err)
	}
}

func egressSpanContext(t *testing.T) trace.SpanContext {
	t.Helper()
	tid, err := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	if err != nil {
		t.Fatal(err)
	}
	sid, err := trace.SpanIDFromHex("00f067aa0ba902b7")
	if err != nil {
		t.Fatal(err)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled,
		TraceState: egressTraceState(t, "vendor=abc"),
	})
}

func egressTraceState(t *testing.T, s string) trace.TraceState {
	ts, err := trace.ParseTraceState(s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestEgressTraceparentPropagated(t *testing.T) {
	var mu sync.Mutex
	var parent, state []string
	srv := newEgressTestServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		parent = append(parent, r.Header.Get("Traceparent"))
		state = append(state, r.Header.Get("Tracestate"))
		mu.Unlock()
	})
	e, _ := newTestEgress(t, EgressConfig{})
	forged := map[string]string{"traceparent": "00-11111111111111111111111111111111-2222222222222222-01", "tracestate": "forged=1"}

	ctx := trace.ContextWithSpanContext(t.Context(), egressSpanContext(t))
	resp, err := e.Do(ctx, &pdk.HTTPRequest{URL: srv.url("allowed.test", "/"), Headers: forged}, egressLoopbackGrant("allowed.test"))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	egressReadAll(t, resp)
	// Without a trace in ctx the plugin cannot forge one either.
	resp, err = e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url("allowed.test", "/"), Headers: forged}, egressLoopbackGrant("allowed.test"))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	egressReadAll(t, resp)

	mu.Lock()
	defer mu.Unlock()
	want := []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""}
	if fmt.Sprint(parent) != fmt.Sprint(want) {
		t.Errorf("traceparent = %q, want %q", parent, want)
	}
	if fmt.Sprint(state) != fmt.Sprint([]string{"vendor=abc", ""}) {
		t.Errorf("tracestate = %q", state)
	}
}

func TestEgressHeadersSanitized(t *testing.T) {
	var got http.Header
	var host string
	srv := newEgressTestServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		got, host = r.Header.Clone(), r.Host
	})
	e, _ := newTestEgress(t, EgressConfig{UserAgent: "looopy-test/1"})
	resp, err := e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url("allowed.test", "/"), Headers: map[string]string{
		"Host":                "forbidden.test",
		"Connection":          "close, X-Named-Hop",
		"X-Named-Hop":         "gone",
		"Keep-Alive":          "timeout=5",
		"Upgrade":             "websocket",
		"Proxy-Authorization": "Basic Zm9vOmJhcg==",
		"Te":                  "trailers",
		"Transfer-Encoding":   "chunked",
		"X-Kept":              "yes",
	}}, egressLoopbackGrant("allowed.test"))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	egressReadAll(t, resp)
	if want := fmt.Sprintf("allowed.test:%d", srv.port()); host != want {
		t.Errorf("Host = %q, want %q", host, want)
	}
	for _, k := range []string{"X-Named-Hop", "Keep-Alive", "Upgrade", "Proxy-Authorization", "Te"} {
		if v := got.Get(k); v != "" {
			t.Errorf("%s reached the server: %q", k, v)
		}
	}
	if got.Get("X-Kept") != "yes" || got.Get("User-Agent") != "looopy-test/1" {
		t.Errorf("X-Kept = %q, User-Agent = %q", got.Get("X-Kept"), got.Get("User-Agent"))
	}

	// A plugin's own User-Agent wins over the default.
	resp, err = e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url("allowed.test", "/"), Headers: map[string]string{"user-agent": "calc/2"}},
		egressLoopbackGrant("allowed.test"))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	egressReadAll(t, resp)
	if got.Get("User-Agent") != "calc/2" {
		t.Errorf("User-Agent = %q", got.Get("User-Agent"))
	}
}

func TestEgressCancelEndsRead(t *testing.T) {
	forEachEgressProtocol(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "start")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}, func(t *testing.T, srv *egressTestServer, e *Egress, host string) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		resp, err := e.Do(ctx, &pdk.HTTPRequest{URL: srv.url(host, "/")}, egressLoopbackGrant(host))
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		defer resp.Body.Close()
		buf := make([]byte, 5)
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			t.Fatalf("first read: %v", err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := resp.Body.Read(make([]byte, 64))
			done <- err
		}()
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), host) {
				t.Fatalf("read after cancel: %v, want context.Canceled naming the host", err)
			}
		case <-time.After(10 * time.Second): // a hang guard, not a measurement
			t.Fatal("read did not return after ctx was cancelled")
		}
	})
}

func TestEgressConnectionReused(t *testing.T) {
	srv := newEgressTestServer(t, false, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pong") })
	e, _ := newTestEgress(t, EgressConfig{})
	for i := 0; i < 3; i++ {
		resp, err := e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url("allowed.test", "/")}, egressLoopbackGrant("allowed.test"))
		if err != nil {
			t.Fatalf("Do %d: %v", i, err)
		}
		egressReadAll(t, resp)
	}
	if n := srv.conns.Load(); n != 1 {
		t.Fatalf("server accepted %d connections for 3 sequential requests, want 1 (pooled)", n)
	}
}

// TestEgressConcurrent drives one broker from many goroutines at once, with
// allowed, refused and private requests mixed, under -race.
func TestEgressConcurrent(t *testing.T) {
	srv := newEgressTestServer(t, false, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Path) })
	e, _ := newTestEgress(t, EgressConfig{})
	const workers, each = 8, 25
	errs := make(chan error, workers*each)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				path := fmt.Sprintf("/w%d/%d", w, i)
				switch i % 3 {
				case 0: // allowed, loopback granted
					resp, err := e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url("allowed.test", path)}, egressLoopbackGrant("allowed.test"))
					if err != nil {
						errs <- err
						continue
					}
					b, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil || string(b) != path {
						errs <- fmt.Errorf("%s: got %q, %v", path, b, err)
					}
				case 1: // not in the list
					if _, err := e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url("forbidden.test", path)}, egressLoopbackGrant("allowed.test")); !errors.Is(err, ErrEgressDenied) {
						errs <- fmt.Errorf("%s to forbidden.test: %v", path, err)
					}
				case 2: // loopback not granted
					if _, err := e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url("allowed.test", path)}, EgressGrant{AllowedHosts: []string{"allowed.test"}}); !errors.Is(err, ErrEgressPrivateAddress) {
						errs <- fmt.Errorf("%s without private grant: %v", path, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	want := int64(workers * ((each + 2) / 3))
	if n := srv.reqs.Load(); n != want {
		t.Errorf("server served %d requests, want %d", n, want)
	}
}

func TestEgressUnreachable(t *testing.T) {
	e, _ := newTestEgress(t, EgressConfig{})
	_, err := e.Do(t.Context(), &pdk.HTTPRequest{URL: "http://nowhere.test/"}, egressLoopbackGrant("nowhere.test"))
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || err.Error() != `egress: GET "nowhere.test": resolve "nowhere.test": lookup nowhere.test: no such host` {
		t.Fatalf("err = %v, want a DNS error naming the host", err)
	}
}

func TestEgressReadAfterClose(t *testing.T) {
	srv := newEgressTestServer(t, false, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "some body") })
	e, _ := newTestEgress(t, EgressConfig{})
	resp, err := e.Do(t.Context(), &pdk.HTTPRequest{URL: srv.url("allowed.test", "/")}, egressLoopbackGrant("allowed.test"))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	n, err := resp.Body.Read(make([]byte, 8))
	if n != 0 || !strings.Contains(fmt.Sprint(err), "read after it was closed") {
		t.Fatalf("Read after Close = %d, %v", n, err)
	}
}

func TestEgressBadInput(t *testing.T) {
	e, _ := newTestEgress(t, EgressConfig{})
	ok := []string{"allowed.test"}
	for _, tc := range []struct {
		name    string
		req     *pdk.HTTPRequest
		allowed []string
		kind    error
		want    string
	}{
		{"nil request", nil, ok, ErrEgressBadRequest, "no request"},
		{"empty URL", &pdk.HTTPRequest{}, ok, ErrEgressBadRequest, "empty URL"},
		{"relative URL", &pdk.HTTPRequest{URL: "/etc/passwd"}, ok, ErrEgressBadRequest, "not absolute"},
		{"file scheme", &pdk.HTTPRequest{URL: "file:///etc/passwd"}, ok, ErrEgressDenied, `scheme "file"`},
		{"ftp scheme", &pdk.HTTPRequest{URL: "ftp://allowed.test/x"}, ok, ErrEgressDenied, `scheme "ftp"`},
		{"no host", &pdk.HTTPRequest{URL: "http:///path"}, ok, ErrEgressBadRequest, "has no host"},
		{"garbage", &pdk.HTTPRequest{URL: "http://[::1"}, ok, ErrEgressBadRequest, "does not parse"},
		{"unicode host", &pdk.HTTPRequest{URL: "http://allowéd.test/"}, ok, ErrEgressBadRequest, "punycode"},
		{"bad port", &pdk.HTTPRequest{URL: "http://allowed.test:99999/"}, ok, ErrEgressBadRequest, "port"},
		{"bad method", &pdk.HTTPRequest{Method: "GE T", URL: "http://allowed.test/"}, ok, ErrEgressBadRequest, `method "GE T"`},
		{"connect", &pdk.HTTPRequest{Method: "CONNECT", URL: "http://allowed.test/"}, ok, ErrEgressDenied, "CONNECT"},
		{"two bodies", &pdk.HTTPRequest{URL: "http://allowed.test/", Body: "a", BodyBase64: "YQ=="}, ok, ErrEgressBadRequest, "both body"},
		{"bad base64", &pdk.HTTPRequest{URL: "http://allowed.test/", BodyBase64: "!!"}, ok, ErrEgressBadRequest, "bodyBase64"},
		{"URL as pattern", &pdk.HTTPRequest{URL: "http://allowed.test/"}, []string{"https://allowed.test"}, ErrEgressBadRequest, "not a URL"},
		{"inner wildcard", &pdk.HTTPRequest{URL: "http://allowed.test/"}, []string{"a*.test"}, ErrEgressBadRequest, "* is allowed only"},
		{"empty pattern", &pdk.HTTPRequest{URL: "http://allowed.test/"}, []string{""}, ErrEgressBadRequest, "empty"},
		{"header injection", &pdk.HTTPRequest{URL: "http://allowed.test/", Headers: map[string]string{"X-A": "1\r\nX-Injected: 1"}}, ok, ErrEgressBadRequest, `header "X-A" holds a control character`},
		{"bad header name", &pdk.HTTPRequest{URL: "http://allowed.test/", Headers: map[string]string{"X Bad": "1"}}, ok, ErrEgressBadRequest, `header name "X Bad"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Do(t.Context(), tc.req, EgressGrant{AllowedHosts: tc.allowed, AllowPrivate: true})
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %v containing %q", err, tc.kind, tc.want)
			}
		})
	}
}

func TestValidateEgressHost(t *testing.T) {
	for _, good := range []string{"example.com", "*.example.com", "*", "api.example.com:8443", "203.0.113.7", "[2001:db8::1]", "[2001:db8::1]:443", "2001:db8::1", "EXAMPLE.com."} {
		if err := ValidateEgressHost(good); err != nil {
			t.Errorf("ValidateEgressHost(%q) = %v", good, err)
		}
	}
	for _, bad := range []string{"", "http://example.com", "example.com/path", "*.*.example.com", "ex*ample.com", "example.com:0", "example.com:http", "[::1", "[::1]x", "-bad.com", "a..b", "exa mple.com", "user@example.com", "[fe80::1%eth0]", "*.", "example.com:"} {
		if err := ValidateEgressHost(bad); err == nil {
			t.Errorf("ValidateEgressHost(%q) = nil, want an error", bad)
		}
	}
}

// FuzzEgressHostPattern checks the allowed-host matching: no panic, a name
// pattern matches its own name in any case, a wildcard only ever matches
// strict subdomains, and IP literals are matched only by IP patterns.
func FuzzEgressHostPattern(f *testing.F) {
	for _, seed := range [][2]string{
		{"example.com", "example.com"},
		{"*.example.com", "api.example.com"},
		{"*.example.com", "example.com"},
		{"*", "anything.test"},
		{"127.0.0.1", "127.0.0.1"},
		{"[::1]:8080", "[::1]:8080"},
		{"Example.COM:443", "example.com:443"},
		{"*.a.b", "x.a.b:1"},
		{"evil.com", "evil.com.example.com"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, pattern, host string) {
		p, err := parseHostPattern(pattern)
		if err != nil {
			return
		}
		u, err := parseEgressURL("http://" + host + "/")
		if err != nil {
			return
		}
		name, ip, port := normalizeHost(u)
		got := p.match(name, ip, port)
		if uu, err := parseEgressURL("http://" + strings.ToUpper(host) + "/"); err == nil {
			if upper, uip, uport := normalizeHost(uu); got != p.match(upper, uip, uport) {
				t.Fatalf("pattern %q: match of %q depends on case", pattern, host)
			}
		}
		if !got {
			return
		}
		switch {
		case ip.IsValid() && !p.ip.IsValid():
			t.Fatalf("pattern %q matched IP literal %q", pattern, host)
		case p.wildcard && !strings.HasSuffix(name, "."+p.name):
			t.Fatalf("wildcard %q matched %q, not a subdomain", pattern, host)
		case !p.any && !p.wildcard && !ip.IsValid() && name != p.name:
			t.Fatalf("exact %q matched %q", pattern, host)
		case p.port != "" && p.port != port:
			t.Fatalf("pattern %q with port matched port %q", pattern, port)
		}
		allow, err := compileAllowedHosts([]string{pattern})
		if err != nil {
			t.Fatalf("pattern %q parsed once, not twice: %v", pattern, err)
		}
		if err := allow.check(u); err != nil {
			t.Fatalf("pattern %q matched %q but check refused: %v", pattern, host, err)
		}
	})
}

// The broker refuses before any connection: a host outside the grant, and
// the cloud metadata address even when the grant lists it.
func ExampleEgress_Do() {
	e := NewEgress(EgressConfig{})
	defer e.Close()
	grant := EgressGrant{AllowedHosts: []string{"api.example.com", "169.254.169.254"}}

	_, err := e.Do(context.Background(), &pdk.HTTPRequest{URL: "https://evil.test/steal"}, grant)
	fmt.Println(err)
	_, err = e.Do(context.Background(), &pdk.HTTPRequest{URL: "http://169.254.169.254/latest/meta-data/"}, grant)
	fmt.Println(err)
	// Output:
	// egress: host "evil.test" on port 443 is not in the plugin's allowed hosts
	// egress: address 169.254.169.254 of "169.254.169.254" (port 80) is private (link-local) and the plugin is not granted private addresses
}
