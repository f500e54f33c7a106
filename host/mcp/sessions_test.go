package mcp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A client opening sessions without end (one initialize request each,
// never ending them) no longer grows the host: a principal past its bound
// loses its oldest session, not another principal's, and past the bound
// of all sessions a new one is refused with 503 and Retry-After.
func TestSessionsAreBounded(t *testing.T) {
	s, err := NewServer(ServerConfig{Tools: newGoTools(), Agent: fakeAgent{}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler(HTTPOptions{Authenticate: keys, MaxSessions: 4, MaxSessionsPerPrincipal: 2}))
	t.Cleanup(hs.Close)

	works := func(cs *sdk.ClientSession) bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := cs.ListTools(ctx, nil)
		return err == nil
	}
	bob := connect(t, hs.URL, "key-bob", nil)
	a1 := connect(t, hs.URL, "key-alice", nil)
	a2 := connect(t, hs.URL, "key-alice", nil)
	a3 := connect(t, hs.URL, "key-alice", nil) // past alice's bound: her oldest ends
	if works(a1) {
		t.Fatal("alice's oldest session still works after she opened one past her bound")
	}
	if !works(a2) || !works(a3) || !works(bob) {
		t.Fatal("a session within the bounds, or another principal's, stopped working")
	}
	connect(t, hs.URL, "key-bob", nil) // 4 open: alice 2, bob 2

	// A fifth, by raw initialize: refused.
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	req, _ := http.NewRequest(http.MethodPost, hs.URL, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer key-alice")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	// alice is at her bound: this initialize ends her oldest and opens.
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get(sessionHeader) == "" {
		t.Fatalf("alice's initialize at her bound: %s, want a new session", resp.Status)
	}
	if works(a2) {
		t.Fatal("alice's oldest session (a2) still works")
	}
	// Now the host is full with alice 2 and bob 2; a third principal would
	// pass its own bound but not the host's.
	s2, _ := NewServer(ServerConfig{Tools: newGoTools(), Agent: fakeAgent{}})
	full := httptest.NewServer(s2.Handler(HTTPOptions{Authenticate: keys, MaxSessions: 2, MaxSessionsPerPrincipal: 2}))
	t.Cleanup(full.Close)
	connect(t, full.URL, "key-alice", nil)
	connect(t, full.URL, "key-alice", nil)
	req, _ = http.NewRequest(http.MethodPost, full.URL, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer key-bob")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("an initialize past mcp.maxSessions: %s (Retry-After %q), want 503 with Retry-After", resp.Status, resp.Header.Get("Retry-After"))
	}
}
