package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// streamHead answers HEAD /events/{contextID}: the stream's last id (kept
// when its events expired), 0 when it has none (never written, or its
// conversation is gone).
func streamHead(t *testing.T, h *sandboxHost, contextID string) uint64 {
	t.Helper()
	resp, err := http.Head(h.base + "/events/" + contextID)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return 0
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HEAD /events/%s: %d", contextID, resp.StatusCode)
	}
	n, _ := strconv.ParseUint(resp.Header.Get("Looopy-Last-Event-ID"), 10, 64)
	return n
}

// A conversation's event stream expires limits.taskTTL after its last turn
// ended, never under a turn of it that is running: a turn that runs
// across the deadline keeps the stream (the earlier turns' events and its
// own first ones), its later events follow on with the next ids, and a
// client following the stream from before the turn hears its end. Before,
// the stream went at the deadline mid-turn: the first events were lost,
// the rest went into a new stream from id 1, and the follower (its cursor
// above those ids) was never told the turn ended.
//
// The deadline is the real clock's: the second turn must begin before the
// first turn's stream expires. On a machine too slow for that, the run
// says so and starts again with a TTL four times as long, so the outcome
// never depends on the machine's speed, only the test's length.
func TestBlackBoxContextStreamKeptUnderARunningTurn(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{45 * time.Second, 180 * time.Second} {
		if !contextStreamKeptUnderARunningTurn(t, ttl) {
			return
		}
		t.Logf("the second turn began after the first turn's stream expired at taskTTL %v: again with a longer TTL", ttl)
	}
	t.Fatal("the second turn began after the first turn's stream expired even at taskTTL 180s")
}

// contextStreamKeptUnderARunningTurn runs the test at taskTTL ttl; it
// reports true when the machine was too slow for ttl (nothing tested).
func contextStreamKeptUnderARunningTurn(t *testing.T, ttl time.Duration) (tooSlow bool) {
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	script := `{"rules":[{"match":"^hang$","steps":[{"text":"early"},{"delayMs":600000,"text":"late"}]}],"default":{"steps":[{"text":"ok"}]}}`
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"},
			"instances": 2, "callTimeout": "10m"}, map[string]any{"script": script})
	h := startSandboxHostWith(t, top, pluginDir, map[string]any{"maxCallTimeout": "10m"}, map[string]any{"limits": map[string]any{"shutdownGrace": "2s", "taskTTL": ttl.String()}})

	t0 := time.Now()
	c1 := newConversation(t, h) // its stream expires ttl after this turn, unless written to
	c2 := newConversation(t, h) // a control: its deadline comes after c1's
	before := streamHead(t, h, c1)
	if before == 0 {
		t.Fatalf("the first turn of %s left no events", c1)
	}

	// A follower from the current head, as a client resuming does.
	addr := strings.TrimPrefix(h.base, "http://")
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(ttl + 3*time.Minute)) // a hang guard only
	fmt.Fprintf(conn, "GET /events/%s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\nLast-Event-ID: %d\r\n\r\n", c1, addr, before)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/events/%s: %v %v", c1, resp, err)
	}
	var mu sync.Mutex
	var seen strings.Builder
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			mu.Lock()
			seen.WriteString(sc.Text() + "\n")
			mu.Unlock()
		}
	}()
	followed := func() string { mu.Lock(); defer mu.Unlock(); return seen.String() }
	defer func() {
		if t.Failed() {
			t.Logf("the follower of %s from id %d read:\n%s", c1, before, followed())
		}
	}()

	// The second turn of c1 starts, then waits on its model.
	a := h.rpc(t, "", "SendMessage", map[string]any{
		"message": map[string]any{"messageId": fmt.Sprintf("m-%d", time.Now().UnixNano()), "role": "ROLE_USER",
			"contextId": c1, "parts": []any{map[string]any{"text": "hang"}}},
		"configuration": map[string]any{"returnImmediately": true}})
	var r struct {
		Task struct {
			ID string `json:"id"`
		} `json:"task"`
	}
	if a.Error != nil || json.Unmarshal(a.Result, &r) != nil || r.Task.ID == "" {
		t.Fatalf("SendMessage: %+v %s", a.Error, a.Result)
	}
	h.waitFor(t, "the running turn's first events", 2*time.Minute, func() bool { return streamHead(t, h, c1) != before })
	t.Logf("turn began %v after the first", time.Since(t0))
	if code, _ := resumeStatus(t, h, "", c1, 1); code != http.StatusOK {
		// Not what is tested: the stream's events expired before the
		// turn began (ttl after the first turn: a very slow machine).
		return true
	}
	h.waitFor(t, "the follower to hear the running turn", 2*time.Minute, func() bool { return strings.Contains(followed(), r.Task.ID) })
	mid := streamHead(t, h, c1)

	// Past c1's deadline: c2's events, given their deadline later, are
	// gone (a resume from its first id is refused).
	h.waitFor(t, "the control conversation's stream to expire", ttl+2*time.Minute, func() bool {
		code, _ := resumeStatus(t, h, "", c2, 1)
		return code != http.StatusOK
	})
	if code, body := resumeStatus(t, h, "", c1, 1); code != http.StatusOK {
		t.Fatalf("the stream of %s under a running turn, after its deadline: a resume from id 1 answers %d %s (the turn's first events and the earlier turns' are gone)", c1, code, body)
	}
	if got := streamHead(t, h, c1); got < mid {
		t.Fatalf("the stream of %s under a running turn: last id %d after its deadline, was %d", c1, got, mid)
	}

	// The turn ends (canceled): its end follows on, and the follower hears it.
	if a := h.rpc(t, "", "CancelTask", map[string]any{"id": r.Task.ID}); a.Error != nil {
		t.Fatalf("CancelTask: %+v", a.Error)
	}
	h.waitFor(t, "the follower to hear the turn's end", 2*time.Minute, func() bool { return strings.Contains(followed(), `"status":"canceled"`) })
	if got := streamHead(t, h, c1); got <= mid {
		t.Fatalf("the stream of %s after the turn ended: last id %d, want above %d", c1, got, mid)
	}
	return false
}
