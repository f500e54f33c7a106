package plugins

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/looopy-go/looopy/pdk"
)

// Defaults of EgressConfig.
const (
	DefaultEgressTimeout          = 30 * time.Second
	DefaultEgressMaxResponseBytes = 10 << 20
	DefaultEgressMaxRedirects     = 5
)

// Errors of the egress broker. Every error Egress returns for a refusal or a
// limit matches one of these with errors.Is, and its message names the host
// and the reason.
var (
	// ErrEgressDenied: the request was refused by policy (scheme, host not in
	// the allowed hosts, IP literal, https to http downgrade, private address).
	ErrEgressDenied = errors.New("egress denied")
	// ErrEgressPrivateAddress: the host resolved to a loopback, private,
	// link-local, multicast, unspecified or otherwise non-public address and
	// the grant does not allow private addresses. It also matches
	// ErrEgressDenied.
	ErrEgressPrivateAddress = errors.New("private address refused")
	// ErrEgressTooLarge: the response body is larger than the grant allows.
	ErrEgressTooLarge = errors.New("response too large")
	// ErrEgressTimeout: the exchange, body included, outlived the grant's
	// timeout. It also matches context.DeadlineExceeded.
	ErrEgressTimeout = errors.New("egress timeout")
	// ErrEgressTooManyRedirects: more redirects than EgressConfig.MaxRedirects.
	ErrEgressTooManyRedirects = errors.New("too many redirects")
	// ErrEgressBadRequest: the request itself is malformed (URL, method).
	ErrEgressBadRequest = errors.New("bad egress request")
)

// EgressResolver resolves host names for the egress broker; *net.Resolver
// implements it.
type EgressResolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

var _ EgressResolver = (*net.Resolver)(nil)

// EgressConfig configures an Egress. A zero field means its default.
type EgressConfig struct {
	Logger                  *slog.Logger   // nil: discard
	DefaultTimeout          time.Duration  // default 30s
	DefaultMaxResponseBytes int64          // default 10 MiB
	MaxRedirects            int            // default 5; negative: redirects are returned, not followed
	Resolver                EgressResolver // nil: net.DefaultResolver
	UserAgent               string         // sent when the plugin sets none; empty: Go's default
	RootCAs                 *x509.CertPool // nil: the system's roots
}

// EgressGrant is what one plugin may reach. The zero grant reaches nothing.
type EgressGrant struct {
	// AllowedHosts are exact host names ("api.example.com"), wildcards that
	// match any subdomain but not the name itself ("*.example.com"), "*" for
	// any host name, or IP literals ("203.0.113.7", "[2001:db8::1]"), each
	// with an optional ":port" (none: any port). Matching is
	// case-insensitive. An IP literal in a URL is reached only when the same
	// literal is listed; "*" does not cover IP literals. Empty: nothing.
	AllowedHosts []string
	// AllowPrivate allows loopback, private, link-local, unique-local, CGNAT,
	// unspecified and other non-public addresses. Without it they are refused
	// at dial time, on the address actually dialed.
	AllowPrivate bool
	// MaxResponseBytes caps the response body; 0: the config's default.
	MaxResponseBytes int64
	// Timeout caps the whole exchange, redirects and body read included;
	// 0: the config's default.
	Timeout time.Duration
}

// EgressResponse is the head of a response and its streaming body.
type EgressResponse struct {
	Status int
	Header map[string][]string
	// URL is the URL that answered, after redirects.
	URL string
	// Body streams the response. Reading past the grant's MaxResponseBytes
	// returns an error matching ErrEgressTooLarge; the grant's timeout and
	// the caller's ctx still apply while reading. Close releases the
	// connection and must always be called.
	Body io.ReadCloser
}

// Egress is the host's outbound HTTP broker for plugins: allow-listed hosts
// re-checked on every redirect, private addresses refused at dial time,
// response size and time capped, the caller's trace propagated. One Egress
// is shared by all plugins and safe for concurrent use; its connections are
// pooled.
type Egress struct {
	log          *slog.Logger
	timeout      time.Duration
	maxBytes     int64
	maxRedirects int
	userAgent    string
	resolver     EgressResolver
	prop         propagation.TraceContext

	// Two pools, so that a connection dialed for a grant that allows
	// private addresses is never reused by one that does not.
	public  *http.Transport
	private *http.Transport
}

// NewEgress returns a broker with cfg's settings.
func NewEgress(cfg EgressConfig) *Egress {
	e := &Egress{
		log:          cfg.Logger,
		timeout:      cfg.DefaultTimeout,
		maxBytes:     cfg.DefaultMaxResponseBytes,
		maxRedirects: cfg.MaxRedirects,
		userAgent:    cfg.UserAgent,
		resolver:     cfg.Resolver,
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.timeout <= 0 {
		e.timeout = DefaultEgressTimeout
	}
	if e.maxBytes <= 0 {
		e.maxBytes = DefaultEgressMaxResponseBytes
	}
	if e.maxRedirects == 0 {
		e.maxRedirects = DefaultEgressMaxRedirects
	}
	if e.resolver == nil {
		e.resolver = net.DefaultResolver
	}
	e.public = e.newTransport(false, cfg.RootCAs)
	e.private = e.newTransport(true, cfg.RootCAs)
	return e
}

func (e *Egress) newTransport(allowPrivate bool, roots *x509.CertPool) *http.Transport {
	return &http.Transport{
		Proxy:                  nil, // never: the dial checks must see the real peer
		DialContext:            e.dialer(allowPrivate),
		TLSClientConfig:        &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    16,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 1 << 20,
	}
}

// Transport returns a transport that dials as the broker does: the address
// each connection reaches is checked in the socket, so a private or
// loopback address is refused unless allowPrivate (whatever name resolved
// to it, and after every redirect). The host's own outbound clients (remote
// agents) use it.
func (e *Egress) Transport(allowPrivate bool) http.RoundTripper {
	if allowPrivate {
		return e.private
	}
	return e.public
}

// Close closes idle pooled connections. Responses still open keep working
// until their bodies are closed.
func (e *Egress) Close() error {
	e.public.CloseIdleConnections()
	e.private.CloseIdleConnections()
	return nil
}

// errExchangeTimeout is the cause of the exchange context when the grant's
// timeout fires, to tell it from the caller's own cancellation or deadline.
var errExchangeTimeout = errors.New("egress exchange timeout")

// Do sends req within grant. It follows redirects itself, re-checking the
// scheme and the allowed hosts on every hop and refusing https to http. The
// plugin's hop-by-hop, Host, Content-Length and trace headers are dropped;
// the trace of ctx is sent instead. A response whose Content-Length already
// exceeds the cap is refused here; one that turns out larger fails while
// being read. On success the caller owns resp.Body and must close it.
// Cancelling ctx aborts the exchange, including a body read in progress.
func (e *Egress) Do(ctx context.Context, req *pdk.HTTPRequest, grant EgressGrant) (*EgressResponse, error) {
	if req == nil {
		return nil, newEgressError("egress: no request", nil, ErrEgressBadRequest)
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	if !validToken(method) {
		return nil, newEgressError(fmt.Sprintf("egress: method %q is not a valid HTTP method", method), nil, ErrEgressBadRequest)
	}
	if method == http.MethodConnect {
		return nil, newEgressError("egress: method CONNECT is not allowed", nil, ErrEgressDenied)
	}
	body, err := req.BodyBytes()
	if err != nil {
		return nil, newEgressError("egress: "+err.Error(), nil, ErrEgressBadRequest)
	}
	u, err := parseEgressURL(req.URL)
	if err != nil {
		return nil, err
	}
	allow, err := compileAllowedHosts(grant.AllowedHosts)
	if err != nil {
		return nil, err
	}
	if err := allow.check(u); err != nil {
		return nil, err
	}

	timeout := grant.Timeout
	if timeout <= 0 {
		timeout = e.timeout
	}
	maxBytes := grant.MaxResponseBytes
	if maxBytes <= 0 {
		maxBytes = e.maxBytes
	}
	transport := e.public
	if grant.AllowPrivate {
		transport = e.private
	}

	header, err := e.outboundHeader(ctx, req.Headers)
	if err != nil {
		return nil, err
	}
	xctx, cancel := context.WithTimeoutCause(ctx, timeout, errExchangeTimeout)
	resp, final, err := e.exchange(xctx, transport, allow, method, u, header, body, timeout)
	if err != nil {
		cancel()
		return nil, err
	}
	host := final.Host
	if resp.ContentLength > maxBytes {
		resp.Body.Close()
		cancel()
		return nil, newEgressError(fmt.Sprintf("egress: response of %q is %d bytes (Content-Length), over the limit of %d bytes",
			host, resp.ContentLength, maxBytes), nil, ErrEgressTooLarge)
	}
	e.log.DebugContext(ctx, "egress", "method", method, "host", host, "status", resp.StatusCode)
	return &EgressResponse{
		Status: resp.StatusCode,
		Header: resp.Header,
		URL:    final.String(),
		Body: &egressBody{
			rc:      resp.Body,
			max:     maxBytes,
			host:    host,
			timeout: timeout,
			cause:   func() error { return context.Cause(xctx) },
			cancel:  cancel,
		},
	}, nil
}

// exchange sends the request and follows redirects. On success the returned
// response's body is open; every intermediate body is closed.
func (e *Egress) exchange(ctx context.Context, rt http.RoundTripper, allow allowedHosts, method string, u *url.URL,
	header http.Header, body []byte, timeout time.Duration) (*http.Response, *url.URL, error) {
	for hop := 0; ; hop++ {
		hreq := newOutboundRequest(ctx, method, u, header, body)
		resp, err := rt.RoundTrip(hreq)
		if err != nil {
			return nil, nil, roundTripError(ctx, method, u.Host, err, timeout)
		}
		loc := resp.Header.Get("Location")
		if !isRedirect(resp.StatusCode) || loc == "" || e.maxRedirects < 0 {
			return resp, u, nil
		}
		drainAndClose(resp.Body)
		if hop >= e.maxRedirects {
			return nil, nil, newEgressError(fmt.Sprintf("egress: stopped after %d redirects (last from %q to %q)",
				e.maxRedirects, u.Host, loc), nil, ErrEgressTooManyRedirects)
		}
		next, err := u.Parse(loc)
		if err != nil {
			return nil, nil, newEgressError(fmt.Sprintf("egress: redirect from %q: bad Location %q", u.Host, loc), err, ErrEgressBadRequest)
		}
		next.Fragment, next.RawFragment = "", ""
		if err := checkRedirect(allow, u, next); err != nil {
			return nil, nil, err
		}
		switch resp.StatusCode {
		case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther:
			// As browsers and net/http do: the next hop is a GET (or HEAD)
			// without the body. 307 and 308 resend method and body.
			if method != http.MethodHead {
				method = http.MethodGet
			}
			body = nil
			header = withoutContentHeaders(header)
		}
		if !strings.EqualFold(u.Hostname(), next.Hostname()) {
			header = withoutCredentials(header)
		}
		u = next
	}
}

// roundTripError words an error of one hop: a refusal by the dialer stands
// alone, and a timeout of the grant or a cancellation by the caller names
// itself rather than the transport's words.
func roundTripError(xctx context.Context, method, host string, err error, timeout time.Duration) error {
	switch cause := context.Cause(xctx); {
	case cause == errExchangeTimeout:
		return newEgressError(fmt.Sprintf("egress: %s %q: no response within the timeout of %s", method, host, timeout),
			nil, ErrEgressTimeout, context.DeadlineExceeded)
	case cause != nil:
		return fmt.Errorf("egress: %s %q: %w", method, host, cause)
	}
	var ee *egressError
	if errors.As(err, &ee) {
		return ee
	}
	return fmt.Errorf("egress: %s %q: %w", method, host, err)
}

func checkRedirect(allow allowedHosts, from, to *url.URL) error {
	if to.Scheme != "http" && to.Scheme != "https" {
		return newEgressError(fmt.Sprintf("egress: redirect from %q to scheme %q refused: only http and https are allowed",
			from.Host, to.Scheme), nil, ErrEgressDenied)
	}
	if from.Scheme == "https" && to.Scheme == "http" {
		return newEgressError(fmt.Sprintf("egress: redirect from %q to %q refused: downgrade from https to http",
			from.Host, to.Host), nil, ErrEgressDenied)
	}
	if err := checkURLShape(to); err != nil {
		return err.onRedirect(from, to)
	}
	if err := allow.check(to); err != nil {
		return err.onRedirect(from, to)
	}
	return nil
}

// parseEgressURL parses and checks a plugin's URL: absolute, http or https,
// a host, ASCII only.
func parseEgressURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, newEgressError("egress: empty URL", nil, ErrEgressBadRequest)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, newEgressError(fmt.Sprintf("egress: URL %q does not parse", raw), err, ErrEgressBadRequest)
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		if scheme == "" {
			return nil, newEgressError(fmt.Sprintf("egress: URL %q is not absolute (want http:// or https://)", raw), nil, ErrEgressBadRequest)
		}
		return nil, newEgressError(fmt.Sprintf("egress: scheme %q of %q is not allowed: only http and https", u.Scheme, raw), nil, ErrEgressDenied)
	}
	u.Scheme = scheme
	u.Fragment, u.RawFragment = "", ""
	if err := checkURLShape(u); err != nil {
		return nil, err
	}
	return u, nil
}

func checkURLShape(u *url.URL) *egressError {
	if u.Host == "" || u.Hostname() == "" {
		return newEgressError(fmt.Sprintf("egress: URL %q has no host", u.Redacted()), nil, ErrEgressBadRequest)
	}
	for i := 0; i < len(u.Host); i++ {
		if c := u.Host[i]; c >= 0x80 || c <= ' ' {
			return newEgressError(fmt.Sprintf("egress: host %q is not plain ASCII (use its punycode form)", u.Host), nil, ErrEgressBadRequest)
		}
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return newEgressError(fmt.Sprintf("egress: port %q of %q is not valid", p, u.Host), nil, ErrEgressBadRequest)
		}
	}
	// The pool and the dialer work on the lower-case name.
	u.Host = strings.ToLower(u.Host)
	return nil
}

// newOutboundRequest builds one hop's request. The URL and header are
// shared, not copied: a RoundTripper must not modify its request.
func newOutboundRequest(ctx context.Context, method string, u *url.URL, header http.Header, body []byte) *http.Request {
	hreq := &http.Request{
		Method: method, URL: u, Host: u.Host, Header: header,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
	}
	if len(body) > 0 {
		hreq.ContentLength = int64(len(body))
		hreq.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		hreq.Body, _ = hreq.GetBody()
	}
	return hreq.WithContext(ctx)
}

// outboundHeader is the plugin's headers minus hop-by-hop headers, Host and
// trace headers, plus the caller's trace context and the default user agent.
func (e *Egress) outboundHeader(ctx context.Context, in map[string]string) (http.Header, error) {
	h := make(http.Header, len(in)+2)
	var connTokens []string
	for k, v := range in {
		if !validToken(k) {
			return nil, newEgressError(fmt.Sprintf("egress: header name %q is not valid", k), nil, ErrEgressBadRequest)
		}
		if !validHeaderValue(v) {
			return nil, newEgressError(fmt.Sprintf("egress: value of header %q holds a control character", k), nil, ErrEgressBadRequest)
		}
		if strings.EqualFold(k, "Connection") {
			connTokens = append(connTokens, strings.Split(v, ",")...)
		}
	}
	for k, v := range in {
		ck := http.CanonicalHeaderKey(k)
		if dropOutbound(ck) {
			continue
		}
		named := false
		for _, t := range connTokens {
			if strings.EqualFold(strings.TrimSpace(t), ck) {
				named = true
				break
			}
		}
		if !named {
			h[ck] = append(h[ck], v)
		}
	}
	if e.userAgent != "" && h.Get("User-Agent") == "" {
		h.Set("User-Agent", e.userAgent)
	}
	e.prop.Inject(ctx, propagation.HeaderCarrier(h))
	return h, nil
}

func dropOutbound(canonical string) bool {
	switch canonical {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Host", "Content-Length",
		"Traceparent", "Tracestate":
		return true
	}
	return false
}

func withoutContentHeaders(h http.Header) http.Header {
	out := h.Clone()
	for k := range out {
		if strings.HasPrefix(k, "Content-") {
			delete(out, k)
		}
	}
	return out
}

func withoutCredentials(h http.Header) http.Header {
	out := h.Clone()
	for _, k := range []string{"Authorization", "Cookie", "Cookie2", "Www-Authenticate"} {
		delete(out, k)
	}
	return out
}

func isRedirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// validToken reports whether s is an HTTP token (a method or a header name).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}

// validHeaderValue refuses control characters other than tab (CR and LF
// above all: no header injection).
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// drainAndClose reads a little of a redirect's body so the connection can
// be reused, then closes it.
func drainAndClose(rc io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, rc, 4<<10)
	_ = rc.Close()
}

// --- the body ---

// egressBody caps and words the reads of a response body.
type egressBody struct {
	rc      io.ReadCloser
	max     int64
	n       int64
	host    string
	timeout time.Duration
	cause   func() error // context.Cause of the exchange
	cancel  context.CancelFunc
	once    sync.Once
	tooBig  bool
	closed  atomic.Bool
}

func (b *egressBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, newEgressError(fmt.Sprintf("egress: response body of %q read after it was closed", b.host), nil, ErrEgressBadRequest)
	}
	if b.tooBig {
		return 0, b.tooLarge()
	}
	if room := b.max - b.n + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	if b.n > b.max {
		// Stop the download here; Close stays the caller's to call.
		b.tooBig = true
		n -= int(b.n - b.max)
		b.n = b.max
		_ = b.rc.Close()
		b.release()
		return n, b.tooLarge()
	}
	switch {
	case err == io.EOF:
		b.release()
	case err != nil && b.closed.Load():
		err = newEgressError(fmt.Sprintf("egress: response body of %q was closed during the read", b.host), nil, ErrEgressBadRequest)
	case err != nil:
		err = b.readError(err)
	}
	return n, err
}

func (b *egressBody) tooLarge() error {
	return newEgressError(fmt.Sprintf("egress: response body of %q is over the limit of %d bytes", b.host, b.max), nil, ErrEgressTooLarge)
}

func (b *egressBody) readError(err error) error {
	switch cause := b.cause(); {
	case cause == errExchangeTimeout:
		return newEgressError(fmt.Sprintf("egress: response body of %q not finished within the timeout of %s", b.host, b.timeout),
			nil, ErrEgressTimeout, context.DeadlineExceeded)
	case cause != nil:
		return fmt.Errorf("egress: read response body of %q: %w", b.host, cause)
	}
	return fmt.Errorf("egress: read response body of %q: %w", b.host, err)
}

func (b *egressBody) release() { b.once.Do(b.cancel) }

func (b *egressBody) Close() error {
	b.closed.Store(true)
	err := b.rc.Close()
	b.release()
	return err
}

// --- errors ---

// egressError is a refusal or limit: its message stands alone and it
// matches its kinds (and its cause, if any) with errors.Is.
type egressError struct {
	msg   string
	cause error
	kinds []error
}

func newEgressError(msg string, cause error, kinds ...error) *egressError {
	return &egressError{msg: msg, cause: cause, kinds: kinds}
}

func (e *egressError) Error() string {
	if e.cause != nil {
		return e.msg + ": " + e.cause.Error()
	}
	return e.msg
}

// onRedirect rewords a refusal of a redirect's target to name both hops.
func (e *egressError) onRedirect(from, to *url.URL) *egressError {
	return &egressError{
		msg:   fmt.Sprintf("egress: redirect from %q to %q refused: %s", from.Host, to.Host, strings.TrimPrefix(e.msg, "egress: ")),
		cause: e.cause,
		kinds: e.kinds,
	}
}

func (e *egressError) Unwrap() []error {
	if e.cause == nil {
		return e.kinds
	}
	return append(append([]error(nil), e.kinds...), e.cause)
}

// --- dialing ---

// dialer resolves with the configured resolver and dials each address only
// after checking it, in the socket's Control hook, so the address checked is
// the address connected to (a name that changes its answer between checks
// cannot slip through).
func (e *Egress) dialer(allowPrivate bool) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("dial %q: %w", addr, err)
		}
		ips, err := e.resolve(ctx, host)
		if err != nil {
			return nil, err
		}
		var firstErr error
		for _, ip := range ips {
			if !allowPrivate {
				if kind := addressKind(ip); kind != "" {
					if firstErr == nil {
						firstErr = privateAddressError(ip, host, port, kind)
					}
					continue
				}
			}
			d := net.Dialer{KeepAlive: 30 * time.Second, Control: dialGuard(host, allowPrivate)}
			c, err := d.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
			if err == nil {
				return c, nil
			}
			if firstErr == nil || errors.Is(firstErr, ErrEgressPrivateAddress) {
				firstErr = err
			}
			if ctx.Err() != nil {
				break
			}
		}
		return nil, firstErr
	}
}

func (e *Egress) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if ip, err := parseIP(host); err == nil {
		return []netip.Addr{ip.Unmap()}, nil
	}
	addrs, err := e.resolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("resolve %q: %w", host, err)
	}
	ips := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ips = append(ips, ip.Unmap().WithZone(a.Zone))
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("resolve %q: no addresses", host)
	}
	return ips, nil
}

// dialGuard refuses, just before connect, an address that is not public
// unless allowPrivate.
func dialGuard(host string, allowPrivate bool) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		if allowPrivate {
			return nil
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return newEgressError(fmt.Sprintf("egress: address %q of %q does not parse", address, host), err, ErrEgressDenied)
		}
		if kind := addressKind(ap.Addr()); kind != "" {
			return privateAddressError(ap.Addr(), host, strconv.Itoa(int(ap.Port())), kind)
		}
		return nil
	}
}

func privateAddressError(ip netip.Addr, host, port, kind string) error {
	return newEgressError(fmt.Sprintf("egress: address %s of %q (port %s) is private (%s) and the plugin is not granted private addresses",
		ip, host, port, kind), nil, ErrEgressPrivateAddress, ErrEgressDenied)
}

type addressRange struct {
	prefix netip.Prefix
	kind   string
}

// nonPublic lists what netip's predicates do not already cover.
var nonPublic = []addressRange{
	{netip.MustParsePrefix("0.0.0.0/8"), "this network"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (CGNAT)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local NAT64"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},
	{netip.MustParsePrefix("2001::/32"), "Teredo"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
}

var (
	nat64   = netip.MustParsePrefix("64:ff9b::/96")
	sixToFo = netip.MustParsePrefix("2002::/16")
)

// addressKind says why ip is not a public unicast address, or "" if it is.
func addressKind(ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	switch {
	case !ip.IsValid():
		return "invalid"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsPrivate():
		return "private network"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsMulticast():
		return "multicast"
	}
	for _, r := range nonPublic {
		if r.prefix.Contains(ip) {
			return r.kind
		}
	}
	// IPv6 forms that carry an IPv4 address reach that address.
	b := ip.As16()
	switch {
	case ip.Is6() && nat64.Contains(ip):
		if k := addressKind(netip.AddrFrom4([4]byte(b[12:16]))); k != "" {
			return "NAT64 of " + k
		}
	case ip.Is6() && sixToFo.Contains(ip):
		if k := addressKind(netip.AddrFrom4([4]byte(b[2:6]))); k != "" {
			return "6to4 of " + k
		}
	}
	return ""
}

// --- allowed hosts ---

// hostPattern is one parsed entry of EgressGrant.AllowedHosts.
type hostPattern struct {
	name     string     // exact name, or the suffix after "*." of a wildcard
	wildcard bool       // "*.name"
	any      bool       // "*"
	ip       netip.Addr // an IP literal
	port     string     // "" = any
}

// ValidateEgressHost checks one allowed-host pattern as EgressGrant takes
// it, for manifest and config validation.
func ValidateEgressHost(pattern string) error {
	_, err := parseHostPattern(pattern)
	return err
}

func parseHostPattern(s string) (hostPattern, error) {
	bad := func(why string) (hostPattern, error) {
		return hostPattern{}, newEgressError(fmt.Sprintf("egress: allowed host %q: %s", s, why), nil, ErrEgressBadRequest)
	}
	if s == "" {
		return bad("empty")
	}
	if strings.Contains(s, "://") || strings.ContainsAny(s, "/?#@") {
		return bad("want a host name, not a URL")
	}
	var p hostPattern
	host := s
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return bad("missing ]")
		}
		host = s[1:end]
		rest := s[end+1:]
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return bad("junk after ]")
			}
			p.port = rest[1:]
			if p.port == "" {
				return bad("empty port")
			}
		}
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Is6() {
			return bad("not an IPv6 address in brackets")
		}
		p.ip = ip
	case strings.Count(s, ":") == 1:
		i := strings.IndexByte(s, ':')
		host, p.port = s[:i], s[i+1:]
		if p.port == "" {
			return bad("empty port")
		}
	case strings.Count(s, ":") > 1:
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return bad("not a host name or an IP address")
		}
		p.ip = ip
	}
	if p.port != "" {
		n, err := strconv.Atoi(p.port)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p.port {
			return bad("port must be a number from 1 to 65535")
		}
	}
	if p.ip.IsValid() {
		if p.ip.Zone() != "" {
			return bad("IPv6 zones are not allowed")
		}
		p.ip = p.ip.Unmap()
		return p, nil
	}
	if ip, err := parseIP(host); err == nil {
		if ip.Zone() != "" {
			return bad("IPv6 zones are not allowed")
		}
		p.ip = ip.Unmap()
		return p, nil
	}
	host = strings.ToLower(host)
	switch {
	case host == "*":
		p.any = true
		return p, nil
	case strings.HasPrefix(host, "*."):
		p.wildcard = true
		host = host[2:]
	}
	host = strings.TrimSuffix(host, ".")
	if err := checkHostName(host); err != "" {
		return bad(err)
	}
	p.name = host
	return p, nil
}

// checkHostName returns why name is not a host name, or "".
func checkHostName(name string) string {
	if name == "" {
		return "empty host name"
	}
	if len(name) > 253 {
		return "host name longer than 253 characters"
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" {
			return "empty label"
		}
		if len(label) > 63 {
			return "label longer than 63 characters"
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			switch {
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			case c == '*':
				return "* is allowed only as the whole first label (*.example.com)"
			default:
				return fmt.Sprintf("character %q not allowed in a host name", c)
			}
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "label starts or ends with -"
		}
	}
	return ""
}

// match reports whether the pattern covers host (lower case, no trailing
// dot; ip valid when host is an IP literal) on port.
func (p hostPattern) match(host string, ip netip.Addr, port string) bool {
	if p.port != "" && p.port != port {
		return false
	}
	if ip.IsValid() {
		return p.ip.IsValid() && p.ip == ip
	}
	switch {
	case p.ip.IsValid():
		return false
	case p.any:
		return true
	case p.wildcard:
		return len(host) > len(p.name)+1 && strings.HasSuffix(host, p.name) && host[len(host)-len(p.name)-1] == '.'
	}
	return host == p.name
}

type allowedHosts []hostPattern

func compileAllowedHosts(patterns []string) (allowedHosts, error) {
	out := make(allowedHosts, 0, len(patterns))
	for _, s := range patterns {
		p, err := parseHostPattern(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// check refuses u unless a pattern covers its host and port.
func (a allowedHosts) check(u *url.URL) *egressError {
	host, ip, port := normalizeHost(u)
	for _, p := range a {
		if p.match(host, ip, port) {
			return nil
		}
	}
	name := u.Hostname()
	if len(a) == 0 {
		return newEgressError(fmt.Sprintf("egress: host %q on port %s is not in the plugin's allowed hosts (it has none)", name, port), nil, ErrEgressDenied)
	}
	if ip.IsValid() {
		return newEgressError(fmt.Sprintf("egress: host %q on port %s is not in the plugin's allowed hosts (an IP address is reached only when listed itself)", name, port),
			nil, ErrEgressDenied)
	}
	for _, p := range a {
		if p.port != "" {
			p.port = ""
			if p.match(host, ip, port) {
				return newEgressError(fmt.Sprintf("egress: host %q is in the plugin's allowed hosts only on other ports than port %s", name, port),
					nil, ErrEgressDenied)
			}
		}
	}
	return newEgressError(fmt.Sprintf("egress: host %q on port %s is not in the plugin's allowed hosts", name, port), nil, ErrEgressDenied)
}

var errNotIP = errors.New("not an IP address")

// parseIP is netip.ParseAddr without the cost of its error for the common
// case, a host name.
func parseIP(s string) (netip.Addr, error) {
	if !strings.ContainsRune(s, ':') && strings.Trim(s, "0123456789.") != "" {
		return netip.Addr{}, errNotIP
	}
	return netip.ParseAddr(s)
}

// normalizeHost returns u's host in lower case without a trailing dot, its
// IP when it is a literal, and its effective port.
func normalizeHost(u *url.URL) (string, netip.Addr, string) {
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	var ip netip.Addr
	if a, err := parseIP(host); err == nil {
		ip = a.Unmap().WithZone("")
	}
	return host, ip, port
}
