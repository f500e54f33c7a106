package host

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// requestCtxSpy stands for the context Fiber's net/http adaptor gives a
// request: the fasthttp RequestCtx, reused once the handler returns, whose
// Done reads server state its shutdown rewrites. It counts every use.
type requestCtxSpy struct{ used atomic.Int32 }

func (s *requestCtxSpy) Deadline() (time.Time, bool) { s.used.Add(1); return time.Time{}, false }
func (s *requestCtxSpy) Done() <-chan struct{}       { s.used.Add(1); return nil }
func (s *requestCtxSpy) Err() error                  { s.used.Add(1); return nil }
func (s *requestCtxSpy) Value(any) any               { s.used.Add(1); return nil }

// The MCP handler (whose SDK keeps a session's first request context for
// the session's life) gets a context that never touches the request's:
// no method of it is called, during the request or after, so nothing the
// SDK keeps reaches the fasthttp RequestCtx. Before, the handler's context
// was tied to the RequestCtx with context.AfterFunc, which calls its Done
// (and from a goroutine of its own, which may run after the request): a
// data race with fasthttp's shutdown, found by the race detector in
// TestMCPEndpointServesSandboxedTools. The context ends with the request
// and when the server's does.
func TestMCPHandlerContextNeverTouchesTheRequests(t *testing.T) {
	t.Parallel()
	base, endServer := context.WithCancel(context.Background())
	defer endServer()
	var kept context.Context
	spy := &requestCtxSpy{}
	h := detachContext(base, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kept = r.Context()
		if kept.Err() != nil {
			t.Error("the handler's context ended before the handler")
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	req := httptest.NewRequest(http.MethodPost, "/mcp", nil).WithContext(spy)
	h.ServeHTTP(httptest.NewRecorder(), req)
	if n := spy.used.Load(); n != 0 {
		t.Fatalf("the request's context was used %d times", n)
	}
	if kept.Err() == nil {
		t.Error("the handler's context outlives its request")
	}

	// The server's end ends a request still served (an MCP client's
	// stream), so that its connection closes.
	started := make(chan context.Context)
	done := make(chan struct{})
	h = detachContext(base, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		started <- r.Context()
		<-r.Context().Done()
		close(done)
	}))
	go h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/mcp", nil).WithContext(spy))
	guard := time.After(time.Minute)
	select {
	case <-started:
	case <-guard:
		t.Fatal("the handler did not start")
	}
	endServer()
	select {
	case <-done:
	case <-guard:
		t.Fatal("the server's end did not end the request's context")
	}
	if n := spy.used.Load(); n != 0 {
		t.Fatalf("the request's context was used %d times", n)
	}
}
