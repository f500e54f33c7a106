package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// eventFollower reads an /events stream on a raw connection, so that it
// stays open as a browser's does, and keeps what it read.
type eventFollower struct {
	mu   sync.Mutex
	text strings.Builder
	ids  []uint64
}

// followEvents opens GET /events/{contextID} with Last-Event-ID after (as
// key's principal, "" with auth off) and follows it until the connection
// closes (at the test's end).
func followEvents(t *testing.T, h *sandboxHost, key, contextID string, after uint64, guard time.Duration) *eventFollower {
	t.Helper()
	addr := strings.TrimPrefix(h.base, "http://")
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(guard)) // a hang guard only
	auth := ""
	if key != "" {
		auth = "Authorization: Bearer " + key + "\r\n"
	}
	fmt.Fprintf(conn, "GET /events/%s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n%sLast-Event-ID: %d\r\n\r\n", contextID, addr, auth, after)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/events/%s after %d: %v %v", contextID, after, resp, err)
	}
	f := &eventFollower{}
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			f.mu.Lock()
			f.text.WriteString(line + "\n")
			if v, ok := strings.CutPrefix(line, "id:"); ok {
				if id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
					f.ids = append(f.ids, id)
				}
			}
			f.mu.Unlock()
		}
	}()
	return f
}

func (f *eventFollower) read() (string, []uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.text.String(), append([]uint64(nil), f.ids...)
}

// resumeStatus answers GET /events/{contextID} with Last-Event-ID after:
// the status and, when it is not 200, the body (a 200 is a stream, closed
// at once).
func resumeStatus(t *testing.T, h *sandboxHost, key, contextID string, after uint64) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.base+"/events/"+contextID, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Last-Event-ID", strconv.FormatUint(after, 10))
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return resp.StatusCode, ""
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// streamHeadAs is streamHead as key's principal.
func streamHeadAs(t *testing.T, h *sandboxHost, key, contextID string) uint64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodHead, h.base+"/events/"+contextID, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HEAD /events/%s: %d", contextID, resp.StatusCode)
	}
	n, _ := strconv.ParseUint(resp.Header.Get("Looopy-Last-Event-ID"), 10, 64)
	return n
}

// sendIn sends text in contextID (as key's principal) and returns the
// task's id once it ended.
func sendIn(t *testing.T, h *sandboxHost, key, contextID, text string) string {
	t.Helper()
	a := h.rpc(t, key, "SendMessage", map[string]any{"message": map[string]any{
		"messageId": fmt.Sprintf("m-%d", time.Now().UnixNano()), "role": "ROLE_USER", "contextId": contextID,
		"parts": []any{map[string]any{"text": text}}}})
	var r struct {
		Task struct {
			ID     string `json:"id"`
			Status struct {
				State string `json:"state"`
			} `json:"status"`
		} `json:"task"`
	}
	if a.Error != nil || json.Unmarshal(a.Result, &r) != nil || r.Task.Status.State != "TASK_STATE_COMPLETED" {
		t.Fatalf("SendMessage in %s: %+v %s", contextID, a.Error, a.Result)
	}
	return r.Task.ID
}

// checkAbove fails unless ids are increasing and all above floor.
func checkAbove(t *testing.T, who string, ids []uint64, floor uint64) {
	t.Helper()
	prev := floor
	for _, id := range ids {
		if id <= prev {
			t.Fatalf("%s read id %d after %d (ids %v; the stream's last id before was %d): an id went back", who, id, prev, ids, floor)
		}
		prev = id
	}
}

// resumeGetsTheTurn opens /events/{contextID} with Last-Event-ID after and
// waits until it carries the end of task; every id it reads is above after.
func resumeGetsTheTurn(t *testing.T, h *sandboxHost, key, contextID string, after uint64, task string) {
	t.Helper()
	resumed := followEvents(t, h, key, contextID, after, 5*time.Minute)
	h.waitFor(t, "the resumed stream to carry the new turn's end", 2*time.Minute, func() bool {
		text, _ := resumed.read()
		return strings.Contains(text, task) && strings.Contains(text, "event: task-complete")
	})
	_, ids := resumed.read()
	checkAbove(t, "the stream resumed after "+strconv.FormatUint(after, 10), ids, after)
}

// TestBlackBoxEventIDsGoOnAfterTheStreamExpired: the real binary with
// limits.taskTTL 3s (conversationTTL 1h). A conversation's events expire
// while a client follows its stream, then a new turn runs in it. Its
// events get ids above every id the stream ever had: the follower opened
// before the expiry hears the new turn, and a client resuming with the
// last id it saw (as the web page and looopy chat do after a reconnect)
// gets it too. A client resuming from an id whose following events expired
// is answered 410 Gone (LAST_EVENT_ID_EXPIRED on A2A), never a silent 200
// with nothing. Before, the new turn's ids started at 1 again: the
// follower stayed silent and the resume was refused or answered nothing.
func TestBlackBoxEventIDsGoOnAfterTheStreamExpired(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the host binary")
	}
	t.Parallel()
	top := t.TempDir()
	h := startSandboxHostWith(t, top, top+"/plugins", nil, map[string]any{
		"limits": map[string]any{"shutdownGrace": "2s", "taskTTL": "3s", "conversationTTL": "1h", "heartbeat": "500ms"},
	})
	const guard = 2 * time.Minute

	c := newConversation(t, h)
	last1 := streamHead(t, h, c)
	if last1 < 3 {
		t.Fatalf("the first turn of %s left %d events, want at least 3", c, last1)
	}
	follower := followEvents(t, h, "", c, last1, 5*time.Minute)
	defer func() {
		if t.Failed() {
			text, _ := follower.read()
			t.Logf("the follower of %s from id %d read:\n%s", c, last1, text)
		}
	}()

	// The stream's events expire: a resume from id 1 is no longer served.
	h.waitFor(t, "the conversation's events to expire", guard, func() bool {
		code, _ := resumeStatus(t, h, "", c, 1)
		return code != http.StatusOK
	})
	if code, body := resumeStatus(t, h, "", c, 1); code != http.StatusGone || !strings.Contains(body, "Last-Event-ID 1") {
		t.Fatalf("resume from id 1 of %s (ids 2..%d expired): %d %s, want 410 naming the id", c, last1, code, body)
	}
	if got := streamHead(t, h, c); got != last1 {
		t.Fatalf("the expired stream's last id is %d, want %d", got, last1)
	}

	// A new turn in the same context.
	task2 := sendIn(t, h, "", c, "hello again")
	if got := streamHead(t, h, c); got <= last1 {
		t.Fatalf("after the new turn the stream's last id is %d, not above %d, its last id before the expiry", got, last1)
	}

	// The follower opened before the expiry hears the new turn.
	h.waitFor(t, "the follower to hear the new turn's end", guard, func() bool {
		text, _ := follower.read()
		return strings.Contains(text, task2) && strings.Contains(text, "event: task-complete")
	})
	_, ids := follower.read()
	checkAbove(t, "the follower", ids, last1)

	// A client resuming with the last id it saw before the expiry.
	resumeGetsTheTurn(t, h, "", c, last1, task2)
}

// TestBlackBoxEventIDsGoOnAfterTheConversationExpired: limits.taskTTL =
// conversationTTL = 3s, so the conversation goes with its events. A
// follower opened before is ended with the stream-end frame (reason
// CONVERSATION_DELETED), not left open and silent; a new turn in the same
// context starts the conversation again with ids above the old ones, and
// the client resuming with the last id it saw gets that turn. With auth on
// the conversation started again is kept under the principal's scoped id
// (the id the host made for it is free again): its stream continues the
// ids of the one the client's id named. Before, the new turn's ids started
// at 1 again and the resume answered nothing.
func TestBlackBoxEventIDsGoOnAfterTheConversationExpired(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the host binary")
	}
	t.Parallel()
	for _, key := range []string{"", cdAliceKey} {
		name := "auth off"
		if key != "" {
			name = "auth on"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			top := t.TempDir()
			extra := map[string]any{
				"limits": map[string]any{"shutdownGrace": "2s", "taskTTL": "3s", "conversationTTL": "3s", "heartbeat": "500ms"},
			}
			if key != "" {
				extra["auth"] = map[string]any{"enabled": true, "keys": []map[string]any{{"key": key, "principal": "alice"}}}
			}
			h := startSandboxHostWith(t, top, top+"/plugins", nil, extra)
			_, c, st := cdSend(t, h, key, "", "hello")
			if st != "TASK_STATE_COMPLETED" {
				t.Fatalf("first task: %s", st)
			}
			last1 := streamHeadAs(t, h, key, c)
			follower := followEvents(t, h, key, c, last1, 5*time.Minute)
			h.waitFor(t, "the follower to be told the conversation is gone", 2*time.Minute, func() bool {
				text, _ := follower.read()
				return strings.Contains(text, "event: stream-end") && strings.Contains(text, "CONVERSATION_DELETED")
			})
			task2 := sendIn(t, h, key, c, "hello again")
			if got := streamHeadAs(t, h, key, c); got <= last1 {
				t.Fatalf("the conversation started again: last id %d, not above %d", got, last1)
			}
			resumeGetsTheTurn(t, h, key, c, last1, task2)
		})
	}
}

// TestBlackBoxDeletedConversationIDsGoOn: an admin deletes a conversation
// (DELETE /admin/conversations/{id}: its stream's events with it) while a
// client follows it, and its context is used again. The follower is ended
// with the stream-end frame; the recreated conversation's events get ids
// above the deleted one's, so an id a client held never names another
// event, and the client resuming with it gets the new turn.
func TestBlackBoxDeletedConversationIDsGoOn(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the host binary")
	}
	t.Parallel()
	top := t.TempDir()
	h := startSandboxHostWith(t, top, top+"/plugins", nil, map[string]any{
		"limits": map[string]any{"shutdownGrace": "2s", "heartbeat": "500ms"},
	})
	d := newConversation(t, h)
	dLast := streamHead(t, h, d)
	code, body := cdAdmin(t, h, http.MethodGet, "/admin/tasks", "admin-token")
	var listed struct {
		Tasks []struct {
			ContextID string `json:"contextId"`
		} `json:"tasks"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &listed) != nil {
		t.Fatalf("/admin/tasks: %d %s", code, body)
	}
	conv := ""
	for _, tk := range listed.Tasks {
		if strings.HasSuffix(tk.ContextID, d) {
			conv = tk.ContextID
		}
	}
	if conv == "" {
		t.Fatalf("/admin/tasks lists no task of %s: %s", d, body)
	}
	follower := followEvents(t, h, "", d, dLast, 5*time.Minute)
	if code, body := cdAdmin(t, h, http.MethodDelete, "/admin/conversations/"+conv, "admin-token"); code != http.StatusOK {
		t.Fatalf("DELETE /admin/conversations/%s: %d %s", conv, code, body)
	}
	h.waitFor(t, "the follower to be told the conversation is gone", 2*time.Minute, func() bool {
		text, _ := follower.read()
		return strings.Contains(text, "event: stream-end") && strings.Contains(text, "CONVERSATION_DELETED")
	})
	dTask := sendIn(t, h, "", d, "after the delete")
	if got := streamHead(t, h, d); got <= dLast {
		t.Fatalf("the conversation recreated after its delete: last id %d, not above %d", got, dLast)
	}
	resumeGetsTheTurn(t, h, "", d, dLast, dTask)
}
