package mcp

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Defaults of HTTPOptions' session bounds.
const (
	DefaultMaxSessions             = 1024
	DefaultMaxSessionsPerPrincipal = 64
)

// sessionHeader names a streamable HTTP session (MCP spec, transports).
const sessionHeader = "Mcp-Session-Id"

// sessionLimiter bounds the sessions the streamable HTTP handler keeps:
// each lives until its client ends it or it idles past the session
// timeout, so without a bound one client opening sessions (one initialize
// request each) grows the host's memory for as long as the timeout.
//
// At the bound of its principal, a new session closes that principal's
// oldest one (a client that restarts and never ends its sessions keeps
// working, and no one else's session is touched); at the bound of all
// sessions a new one is refused with 503 and Retry-After. Sessions are
// counted from the SDK's own list (Server.Sessions), so a session the
// timeout or a DELETE ended is no longer counted.
type sessionLimiter struct {
	srv          *sdk.Server
	max, perUser int
	maxBody      int64

	mu     sync.Mutex
	owner  map[string]string   // session id -> principal
	byUser map[string][]string // principal -> its session ids, oldest first
}

func newSessionLimiter(srv *sdk.Server, max, perUser int, maxBody int64) *sessionLimiter {
	if maxBody <= 0 {
		maxBody = 4 << 20
	}
	if max <= 0 {
		max = DefaultMaxSessions
	}
	if perUser <= 0 {
		perUser = DefaultMaxSessionsPerPrincipal
	}
	perUser = min(perUser, max)
	return &sessionLimiter{srv: srv, max: max, perUser: perUser, maxBody: maxBody, owner: map[string]string{}, byUser: map[string][]string{}}
}

// prune forgets sessions the SDK no longer holds and returns the live ones:
// those initialized (a request of another method opens a session that the
// SDK closes when the request ends). Called with mu held.
func (l *sessionLimiter) prune() map[string]*sdk.ServerSession {
	live := map[string]*sdk.ServerSession{}
	for ss := range l.srv.Sessions() {
		if id := ss.ID(); id != "" && ss.InitializeParams() != nil {
			live[id] = ss
		}
	}
	for id, p := range l.owner {
		if live[id] == nil {
			delete(l.owner, id)
			l.byUser[p] = slices.DeleteFunc(l.byUser[p], func(s string) bool { return s == id })
			if len(l.byUser[p]) == 0 {
				delete(l.byUser, p)
			}
		}
	}
	return live
}

func (l *sessionLimiter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get(sessionHeader) != "" || !l.initializes(r) {
			next.ServeHTTP(w, r) // a request of a session the SDK holds (or refuses), or one that opens none to keep
			return
		}
		principal := ""
		if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
			principal = ti.UserID
		}
		l.mu.Lock()
		live := l.prune()
		own := l.byUser[principal]
		drop := max(0, len(own)-l.perUser+1) // the principal's oldest, to stay within its bound
		if len(live)-drop >= l.max {
			l.mu.Unlock()
			w.Header().Set("Retry-After", strconv.Itoa(60))
			http.Error(w, "too many MCP sessions are open on this host (mcp.maxSessions): end one (DELETE /mcp) or retry later", http.StatusServiceUnavailable)
			return
		}
		var evict []*sdk.ServerSession
		for _, id := range own[:drop] {
			if ss := live[id]; ss != nil {
				evict = append(evict, ss)
			}
			delete(l.owner, id)
		}
		l.byUser[principal] = own[drop:]
		l.mu.Unlock()
		for _, ss := range evict {
			_ = ss.Close() // the session removes itself from the handler
		}
		// The session is counted as its answer starts, before the client
		// can send another initialize on the strength of it.
		rw := &sessionRecorder{ResponseWriter: w, opened: func(id string) {
			l.mu.Lock()
			defer l.mu.Unlock()
			if _, known := l.owner[id]; !known {
				l.owner[id] = principal
				l.byUser[principal] = append(l.byUser[principal], id)
			}
		}}
		next.ServeHTTP(rw, r)
	})
}

// initializes tells whether a request without a session is an initialize
// (alone or in a batch), the one request that opens a session the SDK
// keeps. The body is read (within the request bound) and put back.
func (l *sessionLimiter) initializes(r *http.Request) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, l.maxBody+1))
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), r.Body))
	if err != nil || int64(len(b)) > l.maxBody {
		return false // the SDK refuses it
	}
	type call struct {
		Method string `json:"method"`
	}
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		var batch []call
		_ = json.Unmarshal(b, &batch)
		return slices.ContainsFunc(batch, func(c call) bool { return c.Method == "initialize" })
	}
	var c call
	_ = json.Unmarshal(b, &c)
	return c.Method == "initialize"
}

// sessionRecorder counts a session when the handler's answer to its
// initialize starts with success and names it. (Concurrent initializes
// may pass the bounds by the number in flight, which maxConnections
// bounds; the next one brings a principal back within its own.)
type sessionRecorder struct {
	http.ResponseWriter
	status int
	opened func(id string)
}

func (s *sessionRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
		if id := s.Header().Get(sessionHeader); id != "" && code < 300 {
			s.opened(id)
		}
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *sessionRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.WriteHeader(http.StatusOK)
	}
	return s.ResponseWriter.Write(b)
}

// Flush lets the SDK stream through the recorder.
func (s *sessionRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the writer underneath.
func (s *sessionRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
