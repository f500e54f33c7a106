package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// liveStream is a raw /events stream: the client's own TCP connection, so
// a test can drop it as a vanishing client would.
type liveStream struct {
	conn   *net.TCPConn
	status int
	body   string // the answer of a refused stream
}

// openEvents opens GET /events/{contextID} on its own connection and reads
// the answer's head (and a refused stream's body).
func openEvents(t *testing.T, h *sandboxHost, contextID string) *liveStream {
	t.Helper()
	addr := strings.TrimPrefix(h.base, "http://")
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn := c.(*net.TCPConn)
	_ = conn.SetDeadline(time.Now().Add(time.Minute)) // a hang guard only
	fmt.Fprintf(conn, "GET /events/%s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", contextID, addr)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("/events/%s: %v", contextID, err)
	}
	s := &liveStream{conn: conn, status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		s.body = string(b)
		_ = conn.Close()
		return s
	}
	_ = conn.SetDeadline(time.Time{})
	return s
}

// vanish drops the connection as a client killed mid-stream does: no FIN
// handshake, a reset.
func (s *liveStream) vanish() {
	_ = s.conn.SetLinger(0)
	_ = s.conn.Close()
}

// a2aStream sends a SendStreamingMessage and reads its whole stream (the
// turn's events to its end, or the one error frame of a refusal).
func a2aStream(t *testing.T, h *sandboxHost, contextID, text string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
		"params": map[string]any{"message": map[string]any{"messageId": fmt.Sprintf("m-%d", time.Now().UnixNano()),
			"role": "ROLE_USER", "contextId": contextID, "parts": []any{map[string]any{"text": text}}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.base+"/a2a/v1", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("SendStreamingMessage: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("SendStreamingMessage stream: %v", err)
	}
	return string(b)
}

// newConversation runs one turn and returns its conversation's id.
func newConversation(t *testing.T, h *sandboxHost) string {
	t.Helper()
	a := h.rpc(t, "", "SendMessage", map[string]any{"message": map[string]any{
		"messageId": fmt.Sprintf("m-%d", time.Now().UnixNano()), "role": "ROLE_USER",
		"parts": []any{map[string]any{"text": "hello"}}}})
	var r struct {
		Task struct {
			ContextID string `json:"contextId"`
		} `json:"task"`
	}
	if a.Error != nil || json.Unmarshal(a.Result, &r) != nil || r.Task.ContextID == "" {
		t.Fatalf("SendMessage: %+v %s", a.Error, a.Result)
	}
	return r.Task.ContextID
}

// TestBlackBoxLiveStreamsBoundedHostWide: with auth off (every client one
// principal, no bound per principal) the real binary holds at most
// limits.maxStreams (3 here) live streams, across conversations and
// surfaces. The next /events is refused with 429 naming the bound, the
// next A2A SendStreamingMessage with the error frame TOO_MANY_STREAMS and
// no turn started; a closed stream, a stream that ended with its turn and
// a client that vanished mid-stream (its connection reset) each give their
// place back: after three rounds of vanishing clients the host still takes
// three streams.
func TestBlackBoxLiveStreamsBoundedHostWide(t *testing.T) {
	const limit = 3
	top := t.TempDir()
	h := startSandboxHostWith(t, top, top+"/plugins", nil, map[string]any{
		"limits": map[string]any{"shutdownGrace": "2s", "maxStreams": limit, "maxStreamsPerStream": -1, "heartbeat": "500ms"},
	})
	ctxA, ctxB := newConversation(t, h), newConversation(t, h)
	var live []*liveStream
	t.Cleanup(func() {
		for _, s := range live {
			_ = s.conn.Close()
		}
	})
	for i := 0; i < limit; i++ {
		c := ctxA
		if i == limit-1 {
			c = ctxB // the bound is the host's, not the conversation's
		}
		s := openEvents(t, h, c)
		if s.status != http.StatusOK {
			t.Fatalf("stream %d of %d: status %d %s", i+1, limit, s.status, s.body)
		}
		live = append(live, s)
	}
	if s := openEvents(t, h, ctxB); s.status != http.StatusTooManyRequests || !strings.Contains(s.body, "limits.maxStreams") {
		t.Fatalf("a stream past the host's bound: status %d %s; want 429 naming limits.maxStreams", s.status, s.body)
	}
	tasksBefore := taskCount(t, h)
	if out := a2aStream(t, h, ctxB, "hello"); !strings.Contains(out, "TOO_MANY_STREAMS") || !strings.Contains(out, "limits.maxStreams") {
		t.Fatalf("an A2A stream past the host's bound: %s", out)
	}
	if n := taskCount(t, h); n != tasksBefore {
		t.Fatalf("a refused SendStreamingMessage started a turn: %d tasks, %d before", n, tasksBefore)
	}

	// reopen waits until a new stream is taken (the host sees a closed or
	// reset connection a moment after it, or at its next write); the
	// deadline only ends a hung wait, a leaked place never comes back.
	reopen := func(what string) *liveStream {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			s := openEvents(t, h, ctxA)
			if s.status == http.StatusOK {
				return s
			}
			if s.status != http.StatusTooManyRequests {
				t.Fatalf("%s: status %d %s", what, s.status, s.body)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the place never came back (%s)", what, s.body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// A client that closes its stream gives its place back.
	_ = live[0].conn.Close()
	live[0] = reopen("a stream after one was closed")

	// A stream that ends with its turn gives its place back: with one
	// place free, five streamed turns in a row each get it.
	_ = live[0].conn.Close()
	live = live[1:]
	for i := 0; i < 5; i++ {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			out := a2aStream(t, h, ctxB, fmt.Sprintf("turn %d", i))
			if strings.Contains(out, "TASK_STATE_COMPLETED") {
				break
			}
			if !strings.Contains(out, "TOO_MANY_STREAMS") || time.Now().After(deadline) {
				t.Fatalf("streamed turn %d: %s", i, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	live = append(live, reopen("a stream after five streamed turns"))

	// Clients that vanish mid-stream: three rounds, each resetting every
	// stream the host holds and taking all of its places again.
	for round := 0; round < 3; round++ {
		for _, s := range live {
			s.vanish()
		}
		live = live[:0]
		for i := 0; i < limit; i++ {
			live = append(live, reopen(fmt.Sprintf("round %d, stream %d after clients vanished", round+1, i+1)))
		}
		if s := openEvents(t, h, ctxA); s.status != http.StatusTooManyRequests {
			t.Fatalf("round %d: a stream past the bound: status %d", round+1, s.status)
		}
	}
}

// TestBlackBoxGoneStreamsGiveTheirPlaceAtOnce: the real binary at
// limits.maxStreams 2 with a heartbeat of an hour (no write would ever
// reveal a departed client within the test) takes a new stream as soon as
// the clients holding both places have left: reset (SO_LINGER 0) or
// closed (FIN), the host sees the closed connection while it streams,
// without waiting for a heartbeat. Two live streams still hold their
// places: the next one is refused 429 and neither live stream is cut. A
// HEAD on /events answers the stream's head (Looopy-Last-Event-ID) and
// takes no place. Two A2A SendStreamingMessage streams whose clients reset
// give their places back alike.
func TestBlackBoxGoneStreamsGiveTheirPlaceAtOnce(t *testing.T) {
	const limit = 2
	top := t.TempDir()
	installHangingModel(t, top+"/plugins")
	h := startSandboxHostWith(t, top, top+"/plugins", nil, map[string]any{
		"limits": map[string]any{"shutdownGrace": "2s", "maxStreams": limit, "maxStreamsPerStream": limit, "heartbeat": "1h"},
	})
	ctxA, ctxB := newConversation(t, h), newConversation(t, h)
	var live []*liveStream
	t.Cleanup(func() {
		for _, s := range live {
			_ = s.conn.Close()
		}
	})
	// next waits for a new stream to be taken. The host frees a place once
	// it has read the departed client's FIN or reset, a moment after the
	// client sent it; the heartbeat (1h) never comes, so only that frees
	// it. The deadline ends a hung wait only.
	next := func(what, contextID string) *liveStream {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			s := openEvents(t, h, contextID)
			if s.status == http.StatusOK {
				return s
			}
			if s.status != http.StatusTooManyRequests {
				t.Fatalf("%s: status %d %s", what, s.status, s.body)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the places of the departed clients never came back (%s)", what, s.body)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	fill := func(what, contextID string) {
		t.Helper()
		for i := 0; i < limit; i++ {
			live = append(live, next(fmt.Sprintf("%s: stream %d of %d", what, i+1, limit), contextID))
		}
	}
	refused := func(what, contextID, bound string) {
		t.Helper()
		if s := openEvents(t, h, contextID); s.status != http.StatusTooManyRequests || !strings.Contains(s.body, bound) {
			t.Fatalf("%s: status %d %s; want 429 naming %s", what, s.status, s.body, bound)
		}
	}
	// stillLive checks that the host has not closed a live stream: a read
	// finds nothing to read yet (a deadline), not the end of the stream.
	stillLive := func(what string, s *liveStream) {
		t.Helper()
		_ = s.conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		var b [512]byte
		for {
			_, err := s.conn.Read(b[:])
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			if err != nil {
				t.Fatalf("%s: a live client's stream was cut: %v", what, err)
			}
		}
		_ = s.conn.SetReadDeadline(time.Time{})
	}

	for round, leave := range []struct {
		how string
		do  func(*liveStream)
	}{
		{"reset", (*liveStream).vanish},
		{"closed", func(s *liveStream) { _ = s.conn.Close() }},
		{"reset", (*liveStream).vanish},
	} {
		what := fmt.Sprintf("round %d (%s)", round+1, leave.how)
		fill(what, ctxA)
		refused(what+": host-wide", ctxB, "limits.maxStreams")
		for _, s := range live {
			stillLive(what, s)
		}
		for _, s := range live {
			leave.do(s)
		}
		live = live[:0]
		live = append(live, next(what+": a stream after both clients left", ctxB))
		live = append(live, next(what+": the second place", ctxB))
		refused(what+": two live streams hold both places", ctxA, "limits.maxStreams")
		for _, s := range live {
			stillLive(what, s)
			_ = s.conn.Close()
		}
		live = live[:0]
		// Both closed: both places come back without a heartbeat.
		fill(what+": after the live streams closed", ctxA)
		for _, s := range live {
			leave.do(s)
		}
		live = live[:0]
	}

	// A HEAD takes no place: with both places taken it still answers the
	// head, and when none is taken, as many as the bound leave it free.
	fill("before HEAD", ctxA)
	for i := 0; i < 2*limit; i++ {
		req, _ := http.NewRequest(http.MethodHead, h.base+"/events/"+ctxA, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Looopy-Last-Event-ID") == "" {
			t.Fatalf("HEAD /events: status %d, Looopy-Last-Event-ID %q", resp.StatusCode, resp.Header.Get("Looopy-Last-Event-ID"))
		}
	}
	for _, s := range live {
		_ = s.conn.Close()
	}
	live = live[:0]
	live = append(live, next("after HEADs", ctxA), next("after HEADs, second place", ctxA))
	for _, s := range live {
		_ = s.conn.Close()
	}
	live = live[:0]

	// A2A streams: two SendStreamingMessage turns the model does not
	// answer within the test hold both places; their clients reset, a new
	// stream is taken.
	for i := 0; i < limit; i++ {
		var s *liveStream
		deadline := time.Now().Add(time.Minute)
		for {
			s = openA2AStream(t, h, "", "hang") // a new conversation each
			if s.status == http.StatusOK && s.body == "" {
				break
			}
			if !strings.Contains(s.body, "TOO_MANY_STREAMS") || time.Now().After(deadline) {
				t.Fatalf("A2A stream %d: status %d %s", i+1, s.status, s.body)
			}
			time.Sleep(20 * time.Millisecond)
		}
		live = append(live, s)
	}
	refused("two A2A streams hold both places", ctxA, "limits.maxStreams")
	for _, s := range live {
		s.vanish()
	}
	live = live[:0]
	live = append(live, next("after the A2A clients left", ctxA))
}

// openA2AStream sends SendStreamingMessage on its own connection and reads
// the answer's head; a refusal's one error frame is read as its body.
func openA2AStream(t *testing.T, h *sandboxHost, contextID, text string) *liveStream {
	t.Helper()
	msg := map[string]any{"messageId": fmt.Sprintf("m-%d", time.Now().UnixNano()),
		"role": "ROLE_USER", "parts": []any{map[string]any{"text": text}}}
	if contextID != "" {
		msg["contextId"] = contextID
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
		"params": map[string]any{"message": msg}})
	addr := strings.TrimPrefix(h.base, "http://")
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn := c.(*net.TCPConn)
	_ = conn.SetDeadline(time.Now().Add(time.Minute)) // a hang guard only
	fmt.Fprintf(conn, "POST /a2a/v1 HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: %d\r\n\r\n%s",
		addr, len(body), body)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("SendStreamingMessage: %v", err)
	}
	s := &liveStream{conn: conn, status: resp.StatusCode}
	// The first frame: a refusal's error, or the turn's first event.
	line, err := br.ReadString('\n')
	for err == nil && !strings.HasPrefix(line, "data:") {
		line, err = br.ReadString('\n')
	}
	if err != nil {
		t.Fatalf("SendStreamingMessage: the first frame: %v", err)
	}
	if strings.Contains(line, `"error"`) || resp.StatusCode != http.StatusOK {
		s.body = line
		_ = conn.Close()
		return s
	}
	_ = conn.SetDeadline(time.Time{})
	return s
}

// A client that half-closes its connection after GET /events (its sending
// side shut, legal in HTTP/1.1) still reads: the host replays every event
// of the conversation to it and keeps the stream open, while a client that
// closes its connection gives its place back at once
// (TestBlackBoxGoneStreamsGiveTheirPlaceAtOnce).
func TestBlackBoxHalfClosedClientGetsItsStream(t *testing.T) {
	top := t.TempDir()
	h := startSandboxHostWith(t, top, top+"/plugins", nil, map[string]any{
		"limits": map[string]any{"shutdownGrace": "2s", "heartbeat": "1h"},
	})
	ctxID := newConversation(t, h)
	resp, err := http.Head(h.base + "/events/" + ctxID)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	last := resp.Header.Get("Looopy-Last-Event-ID")
	if resp.StatusCode != http.StatusOK || last == "" || last == "0" {
		t.Fatalf("HEAD /events: %d, Looopy-Last-Event-ID %q", resp.StatusCode, last)
	}
	for round := 1; round <= 3; round++ {
		addr := strings.TrimPrefix(h.base, "http://")
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		s := &liveStream{conn: c.(*net.TCPConn)}
		fmt.Fprintf(s.conn, "GET /events/%s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", ctxID, addr)
		if err := s.conn.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		// Every event up to the last, then the stream stays open: a read
		// finds nothing more (a deadline), not its end. The deadlines are
		// hang guards; the host's heartbeat (1h) never comes.
		_ = s.conn.SetReadDeadline(time.Now().Add(time.Minute))
		var got bytes.Buffer
		var b [4096]byte
		for !strings.Contains(got.String(), "id: "+last+"\n") {
			n, err := s.conn.Read(b[:])
			got.Write(b[:n])
			if err != nil {
				t.Fatalf("round %d: the half-closed client's stream ended before event %s (%v):\n%s", round, last, err, got.String())
			}
		}
		_ = s.conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		for {
			_, err := s.conn.Read(b[:])
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			if err != nil {
				t.Fatalf("round %d: the half-closed client's stream was cut after its replay: %v", round, err)
			}
		}
		_ = s.conn.Close()
	}
}
