package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestBlackBoxIdleConnectionsCannotLockClientsOut: a client without a key
// fills the connection cap (limits.maxConnections 16 here) with
// connections that send nothing, or only the start of a request, and
// opens them again as fast as the host closes them. Another client is
// served at once each time, without waiting for any timeout: at the cap
// the host closes the oldest connection with no request in flight to
// admit the new one, taken from the client address with the most
// connections: a slow upload from another address (127.0.0.2), its head
// sent and its body still to come when the flood starts, is served once
// its body comes. Two /events streams open before the flood are never
// taken for idle: they still carry the events of a turn started after it.
func TestBlackBoxIdleConnectionsCannotLockClientsOut(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	h := startSandboxHostWith(t, top, top+"/plugins", nil, map[string]any{
		"limits": map[string]any{"shutdownGrace": "2s", "maxConnections": 16, "maxStreams": 4, "heartbeat": "1h"},
	})
	ctxID := newConversation(t, h)
	streams := []*liveStream{openEvents(t, h, ctxID), openEvents(t, h, ctxID)}
	for i, s := range streams {
		if s.status != http.StatusOK {
			t.Fatalf("stream %d: %d %s", i, s.status, s.body)
		}
		defer s.conn.Close()
	}
	addr := strings.TrimPrefix(h.base, "http://")
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			_ = c.Close()
		}
	}()
	// One connection per request: the client's own connection is new each
	// time, as a client arriving during the flood.
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	post := func(method string, params any) (int, string, error) {
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
		resp, err := client.Post(h.base+"/a2a/v1", "application/json", strings.NewReader(string(body)))
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	// The slow upload: the oldest idle connection when the flood starts,
	// from its own address.
	slowDialer := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	slow, err := slowDialer.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("a connection from 127.0.0.2: %v", err)
	}
	defer slow.Close()
	slowBody := `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"slow-upload"}}`
	fmt.Fprintf(slow, "POST /a2a/v1 HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		addr, len(slowBody), slowBody[:10])
	for round := 1; round <= 3; round++ {
		// Twice the cap: half send nothing, half the start of a request
		// line and headers they never finish. The host takes them in the
		// order they connected, before the client's below.
		for i := 0; i < 32; i++ {
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				t.Fatalf("round %d: connection %d: %v", round, i, err)
			}
			if i%2 == 1 {
				_, _ = c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "))
			}
			flood = append(flood, c)
		}
		status, body, err := post("GetTask", map[string]any{"id": "no-such-task"})
		if err != nil || status != http.StatusOK || !strings.Contains(body, `"error"`) {
			t.Fatalf("round %d: a client during the flood was not served: %d %q %v", round, status, body, err)
		}
	}

	if _, err := io.WriteString(slow, slowBody[10:]); err != nil {
		t.Fatalf("the slow upload's connection was closed during the flood: %v", err)
	}
	_ = slow.SetReadDeadline(time.Now().Add(time.Minute)) // a hang guard
	resp, err := http.ReadResponse(bufio.NewReader(slow), nil)
	if err != nil {
		t.Fatalf("the slow upload from another address was not served after the flood: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "slow-upload") {
		t.Fatalf("the slow upload: %d %s", resp.StatusCode, b)
	}

	// The streams opened before the flood still carry the conversation's
	// events: a turn started now reaches both.
	status, body, err := post("SendMessage", map[string]any{"message": map[string]any{
		"messageId": fmt.Sprintf("m-%d", time.Now().UnixNano()), "role": "ROLE_USER", "contextId": ctxID,
		"parts": []any{map[string]any{"text": "hello again"}}}})
	var a struct {
		Result struct {
			Task struct {
				ID string `json:"id"`
			} `json:"task"`
		} `json:"result"`
	}
	if err != nil || status != http.StatusOK || json.Unmarshal([]byte(body), &a) != nil || a.Result.Task.ID == "" {
		t.Fatalf("SendMessage after the flood: %d %q %v", status, body, err)
	}
	for i, s := range streams {
		_ = s.conn.SetReadDeadline(time.Now().Add(time.Minute)) // a hang guard
		var got strings.Builder
		var b [4096]byte
		for !strings.Contains(got.String(), a.Result.Task.ID) {
			n, err := s.conn.Read(b[:])
			got.Write(b[:n])
			if err != nil {
				t.Fatalf("stream %d opened before the flood ended before the new turn's events (%v):\n%s", i, err, got.String())
			}
		}
	}
}

// TestBlackBoxSilentConnectionsClosedAtTheHeaderTimeout: with
// limits.headerTimeout 1s, a connection that sends nothing and one that
// trickles its headers a byte at a time are closed by the host, long
// before the 30 s its body may take (the guard: 15 s); a request whose
// headers came in time but whose body comes 2 s later is served (the body
// has its own deadline), and an /events stream open all along, far past
// the header timeout, still carries a turn's events.
func TestBlackBoxSilentConnectionsClosedAtTheHeaderTimeout(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	h := startSandboxHostWith(t, top, top+"/plugins", nil, map[string]any{
		"limits": map[string]any{"shutdownGrace": "2s", "headerTimeout": "1s", "heartbeat": "1h"},
	})
	ctxID := newConversation(t, h)
	stream := openEvents(t, h, ctxID)
	if stream.status != http.StatusOK {
		t.Fatalf("/events: %d %s", stream.status, stream.body)
	}
	defer stream.conn.Close()
	addr := strings.TrimPrefix(h.base, "http://")
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	silent, trickle, slowBody := dial(), dial(), dial()
	start := time.Now()
	guard := start.Add(15 * time.Second)

	body := `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"no-such-task"}}`
	fmt.Fprintf(slowBody, "POST /a2a/v1 HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", addr, len(body))

	trickled := make(chan error, 1)
	go func() {
		head := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 200)
		for i := 0; i < len(head); i++ {
			if _, err := trickle.Write([]byte{head[i]}); err != nil {
				trickled <- nil // closed by the host
				return
			}
			if time.Now().After(guard) {
				trickled <- fmt.Errorf("still open after %d bytes trickled", i)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		trickled <- fmt.Errorf("the whole head was trickled without the host closing the connection")
	}()

	// The host may answer 408 before it closes.
	_ = silent.SetReadDeadline(guard)
	if got, err := io.ReadAll(silent); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection that sent nothing is still open %v after it connected (read %q)", time.Since(start), got)
	}
	if err := <-trickled; err != nil {
		t.Fatalf("a connection trickling its headers: %v", err)
	}

	// The body, well after the header timeout.
	time.Sleep(time.Until(start.Add(2 * time.Second)))
	if _, err := io.WriteString(slowBody, body); err != nil {
		t.Fatal(err)
	}
	_ = slowBody.SetReadDeadline(time.Now().Add(time.Minute)) // a hang guard
	resp, err := http.ReadResponse(bufio.NewReader(slowBody), nil)
	if err != nil {
		t.Fatalf("a request whose body came after the header timeout: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"error"`) {
		t.Fatalf("a request whose body came after the header timeout: %d %s", resp.StatusCode, b)
	}

	taskID := newTaskIn(t, h, ctxID)
	_ = stream.conn.SetReadDeadline(time.Now().Add(time.Minute)) // a hang guard
	var got strings.Builder
	var buf [4096]byte
	for !strings.Contains(got.String(), taskID) {
		n, err := stream.conn.Read(buf[:])
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("the stream ended before the new turn's events (%v):\n%s", err, got.String())
		}
	}
}

// newTaskIn runs a turn in the conversation contextID and returns its task's id.
func newTaskIn(t *testing.T, h *sandboxHost, contextID string) string {
	t.Helper()
	a := h.rpc(t, "", "SendMessage", map[string]any{"message": map[string]any{
		"messageId": fmt.Sprintf("m-%d", time.Now().UnixNano()), "role": "ROLE_USER", "contextId": contextID,
		"parts": []any{map[string]any{"text": "hello again"}}}})
	var r struct {
		Task struct {
			ID string `json:"id"`
		} `json:"task"`
	}
	if a.Error != nil || json.Unmarshal(a.Result, &r) != nil || r.Task.ID == "" {
		t.Fatalf("SendMessage: %+v %s", a.Error, a.Result)
	}
	return r.Task.ID
}
