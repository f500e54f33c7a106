package host

import (
	"errors"
	"fmt"
	"mime"
	"net"
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// Errors of the browser guard (docs/SECURITY.md, "Browsers").
var (
	// ErrForeignOrigin: a request from a web page of another origin, or
	// with a Host the host does not answer to (DNS rebinding).
	ErrForeignOrigin = errors.New("request refused")
	// ErrNotJSON: a request body that is not declared application/json.
	ErrNotJSON = errors.New("unsupported content type")
)

// Headers every answer of the host carries: no answer may be sniffed into
// another type, framed, embedded by another site, or run script.
const (
	// answerCSP is the policy of every answer but the web page's own: an
	// answer rendered by a browser (an artifact, an error echoing input)
	// loads nothing, runs nothing, and is in an opaque origin.
	answerCSP = "default-src 'none'; frame-ancestors 'none'; sandbox"
)

// browserGuard decides which requests a browser may make: the host's own
// origin, listed origins and clients that send no Origin (the A2A SDKs,
// looopy chat, curl) pass; a page of another origin is refused, and so is
// a Host header naming another site when the host is reached through a
// name it does not know (DNS rebinding).
type browserGuard struct {
	checkHost bool
	anyHost   bool
	hosts     map[string]bool // lower-case host names, no port

	anyOrigin bool
	origins   map[string]bool // scheme://host[:port], lower case, default port dropped
}

// newBrowserGuard builds the guard of cfg (defaults applied).
func newBrowserGuard(cfg Config) *browserGuard {
	g := &browserGuard{hosts: map[string]bool{"localhost": true}, origins: map[string]bool{}}
	for _, h := range cfg.Server.AllowedHosts {
		if h == "*" {
			g.anyHost = true
			continue
		}
		g.hosts[normHostName(h)] = true
	}
	for _, o := range cfg.Server.AllowedOrigins {
		if o == "*" {
			g.anyOrigin = true
			continue
		}
		if n, ok := normOrigin(o); ok {
			g.origins[n] = true
		}
	}
	if u, err := url.Parse(cfg.PublicURL); err == nil && u.Host != "" {
		g.hosts[normHostName(u.Hostname())] = true
		if n, ok := normOrigin(u.Scheme + "://" + u.Host); ok {
			g.origins[n] = true
		}
	}
	g.checkHost = !g.anyHost && (loopbackAddr(cfg.Addr) || len(cfg.Server.AllowedHosts) > 0)
	return g
}

// loopbackAddr reports whether the listen address addr is on loopback only.
func loopbackAddr(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		h = addr
	}
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(h, "[]"))
	return ip != nil && ip.IsLoopback()
}

// normHostName is a host name as compared: lower case, no brackets, no
// final dot.
func normHostName(h string) string {
	return strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
}

// splitHost splits a Host header (or an origin's host) into name and port.
func splitHost(hostport string) (name, port string) {
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return normHostName(h), p
	}
	return normHostName(hostport), ""
}

func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}

// normOrigin is origin o as compared, or false when o is not an origin
// (scheme://host[:port], nothing else).
func normOrigin(o string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(o))
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", false
	}
	name, port := splitHost(u.Host)
	if name == "" {
		return "", false
	}
	if strings.Contains(name, ":") {
		name = "[" + name + "]"
	}
	if port == "" || port == defaultPort(u.Scheme) {
		return u.Scheme + "://" + name, true
	}
	return u.Scheme + "://" + name + ":" + port, true
}

// hostAllowed reports whether a request with Host header hostport may be
// served. An IP address cannot be rebound, so it always passes; names pass
// when they are localhost, publicUrl's or listed in server.allowedHosts.
// The port is not compared: a tunnel or a port mapping changes it, and a
// rebinding attack always comes with a name of the attacker's.
func (g *browserGuard) hostAllowed(hostport string) bool {
	if !g.checkHost || hostport == "" {
		return true
	}
	name, _ := splitHost(hostport)
	if net.ParseIP(name) != nil {
		return true
	}
	return g.hosts[name] || strings.HasSuffix(name, ".localhost")
}

// originAllowed reports whether a request with Origin origin and Host
// hostport may be served: no Origin (not a browser, or a same-origin GET),
// the request's own origin, publicUrl's origin, or a listed one.
func (g *browserGuard) originAllowed(origin, hostport string) bool {
	if origin == "" || g.anyOrigin {
		return true
	}
	n, ok := normOrigin(origin)
	if !ok { // "null" (a sandboxed frame, a file) or garbage
		return false
	}
	if g.origins[n] {
		return true
	}
	u, _ := url.Parse(n)
	oName, oPort := splitHost(u.Host)
	hName, hPort := splitHost(hostport)
	if oPort == "" {
		oPort = defaultPort(u.Scheme)
	}
	if hPort == "" {
		hPort = defaultPort(u.Scheme)
	}
	return hostport != "" && oName == hName && oPort == hPort
}

// isJSON reports whether a Content-Type is application/json (any
// parameters).
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}

// check is the guard's decision on a request: nil, or the error to answer.
// jsonBody says the route reads a JSON body (JSON-RPC, MCP): such a POST
// must say application/json, which a page of another origin cannot send
// without a preflight the host never grants.
func (g *browserGuard) check(c *fiber.Ctx, jsonBody bool) error {
	host := string(c.Request().Host())
	if !g.hostAllowed(host) {
		return fmt.Errorf("%w: this host does not answer to the name %q (add it to server.allowedHosts)", ErrForeignOrigin, host)
	}
	if origin := c.Get(fiber.HeaderOrigin); !g.originAllowed(origin, host) {
		return fmt.Errorf("%w: origin %q is not this host's (add it to server.allowedOrigins to let its pages call the host)", ErrForeignOrigin, origin)
	}
	switch c.Method() {
	case fiber.MethodPost, fiber.MethodPut, fiber.MethodPatch:
		if (jsonBody || len(c.Request().Body()) > 0) && !isJSON(c.Get(fiber.HeaderContentType)) {
			return fmt.Errorf("%w: the body must be sent as Content-Type: application/json, not %q", ErrNotJSON, c.Get(fiber.HeaderContentType))
		}
	}
	return nil
}

// setSafeHeaders sets the headers every answer of the host carries. The
// web page sets its own Content-Security-Policy over this one.
func setSafeHeaders(c *fiber.Ctx) {
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderXFrameOptions, "DENY")
	c.Set(fiber.HeaderContentSecurityPolicy, answerCSP)
	c.Set("Cross-Origin-Resource-Policy", "same-origin")
	c.Set(fiber.HeaderReferrerPolicy, "no-referrer")
}

// guard wraps a route's handler in the browser guard. rpc is the JSON-RPC
// version of the route (0: none, 10 or 3) for the form of a refusal; json
// says the route reads a JSON body.
func (s *Server) guard(rpc int, json bool, fn fiber.Handler) fiber.Handler {
	return func(c *fiber.Ctx) error {
		setSafeHeaders(c)
		if err := s.browser.check(c, json); err != nil {
			s.log.Debug("request refused", "method", c.Method(), "path", c.Path(), "host", string(c.Request().Host()),
				"origin", c.Get(fiber.HeaderOrigin), "error", err)
			if rpc != 0 {
				return s.rpcErrorAnswer(c, rpc == 3, HTTPStatus(err), err)
			}
			return c.Status(HTTPStatus(err)).JSON(fiber.Map{"error": err.Error()})
		}
		return fn(c)
	}
}
