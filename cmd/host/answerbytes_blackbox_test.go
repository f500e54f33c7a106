package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rawRPC posts one JSON-RPC call (auth off) to path and returns the answer's
// body as sent.
func (h *sandboxHost) rawRPC(t *testing.T, path, method string, params any) []byte {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, h.base+path, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return b
}

// TestBlackBoxListAnswerBounded: a principal whose tasks are large cannot
// make the binary build one huge answer. ListTasks with pageSize 100 and
// historyLength 100 over tasks of 900 KB messages each ends its page when
// the answer reaches limits.maxAnswerBytes (default 4 MiB), with a
// nextPageToken; following the tokens lists every task with its history.
func TestBlackBoxListAnswerBounded(t *testing.T) {
	top := t.TempDir()
	h := startSandboxHost(t, top, filepath.Join(top, "plugins"), nil)
	const tasks = 7 // ~6.3 MB of messages: over the default cap
	big := strings.Repeat("x", 900_000)
	ids := map[string]bool{}
	for i := range tasks {
		a := h.rpc(t, "", "SendMessage", map[string]any{"message": map[string]any{
			"messageId": fmt.Sprintf("big-%d", i), "role": "ROLE_USER",
			"parts": []any{map[string]any{"text": fmt.Sprintf("%d %s", i, big)}}}})
		if a.Error != nil {
			t.Fatalf("SendMessage %d: %d %s", i, a.Error.Code, a.Error.Message)
		}
		ids[taskIDOf(t, a)] = true
	}
	const limit = 4 << 20
	for _, v := range []struct{ path, method, tokenField string }{
		{"/a2a/v1", "ListTasks", "nextPageToken"},
	} {
		seen, pages, token := map[string]bool{}, 0, ""
		for {
			params := map[string]any{"pageSize": 100, "historyLength": 100}
			if token != "" {
				params["pageToken"] = token
			}
			raw := h.rawRPC(t, v.path, v.method, params)
			if len(raw) > limit+1<<20 { // one task may pass the cap; never a page of them
				t.Fatalf("%s: an answer of %d bytes, over the cap %d", v.method, len(raw), limit)
			}
			var a struct {
				Result map[string]json.RawMessage `json:"result"`
				Error  *struct{ Message string }  `json:"error"`
			}
			if err := json.Unmarshal(raw, &a); err != nil || a.Error != nil {
				t.Fatalf("%s: %v %+v", v.method, err, a.Error)
			}
			var page []struct {
				ID      string            `json:"id"`
				History []json.RawMessage `json:"history"`
			}
			if err := json.Unmarshal(a.Result["tasks"], &page); err != nil {
				t.Fatalf("%s: tasks: %v", v.method, err)
			}
			if len(page) == 0 {
				t.Fatalf("%s: an empty page", v.method)
			}
			for _, tk := range page {
				if len(tk.History) < 2 {
					t.Errorf("%s: task %s listed with %d messages of history, want its 2", v.method, tk.ID, len(tk.History))
				}
				seen[tk.ID] = true
			}
			pages++
			_ = json.Unmarshal(a.Result[v.tokenField], &token)
			if token == "" {
				break
			}
			if pages > tasks {
				t.Fatalf("%s: more pages than tasks", v.method)
			}
		}
		if len(seen) != len(ids) || pages < 2 {
			t.Fatalf("%s: %d pages listed %d tasks, want %d tasks on 2 pages or more", v.method, pages, len(seen), len(ids))
		}
		for id := range ids {
			if !seen[id] {
				t.Errorf("%s: task %s not listed", v.method, id)
			}
		}
	}
}
