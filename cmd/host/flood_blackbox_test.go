package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// floodScript: "flood N" thinks N thoughts, then holds its model call 5 s
// (the model's only instance with it), then answers; anything else is
// answered at once.
const floodScript = `{"rules":[{"name":"flood","match":"^flood (\\d+)$","steps":[` +
	`{"thought":"tttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttt{{i}}","repeat":"$1"},` +
	`{"text":"flooded","delayMs":5000}]}],"default":{"steps":[{"text":"served"}]}}`

// rpcAnswer is a JSON-RPC answer as the wire has it, with its HTTP status
// and Retry-After.
type rpcAnswer struct {
	status     int
	retryAfter string
	Result     json.RawMessage `json:"result"`
	Error      *struct {
		Code    int               `json:"code"`
		Message string            `json:"message"`
		Data    []json.RawMessage `json:"data"`
	} `json:"error"`
}

func (a rpcAnswer) reason() string {
	if a.Error == nil {
		return ""
	}
	for _, d := range a.Error.Data {
		var info struct {
			Type   string `json:"@type"`
			Reason string `json:"reason"`
		}
		if json.Unmarshal(d, &info) == nil && strings.HasSuffix(info.Type, "ErrorInfo") {
			return info.Reason
		}
	}
	return ""
}

func (h *sandboxHost) rpc(t *testing.T, key, method string, params any) rpcAnswer {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, h.base+"/a2a/v1", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Errorf("%s: %v", method, err)
		return rpcAnswer{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := rpcAnswer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	if err := json.Unmarshal(b, &a); err != nil {
		t.Errorf("%s: answer %q: %v", method, b, err)
	}
	return a
}

// startTurn sends text as key's principal with returnImmediately.
func (h *sandboxHost) startTurn(t *testing.T, key, text string) (taskID string, a rpcAnswer) {
	t.Helper()
	a = h.rpc(t, key, "SendMessage", map[string]any{
		"message":       map[string]any{"messageId": fmt.Sprintf("m-%d", time.Now().UnixNano()), "role": "ROLE_USER", "parts": []any{map[string]any{"text": text}}},
		"configuration": map[string]any{"returnImmediately": true},
	})
	if a.Error != nil {
		return "", a
	}
	var r struct {
		Task struct {
			ID string `json:"id"`
		} `json:"task"`
	}
	if err := json.Unmarshal(a.Result, &r); err != nil || r.Task.ID == "" {
		t.Fatalf("SendMessage answer %s: no task (%v)", a.Result, err)
	}
	return r.Task.ID, a
}

func (h *sandboxHost) taskState(t *testing.T, key, id string) string {
	t.Helper()
	a := h.rpc(t, key, "GetTask", map[string]any{"id": id})
	if a.Error != nil {
		t.Fatalf("GetTask %s: %d %s", id, a.Error.Code, a.Error.Message)
	}
	var task struct {
		Status struct {
			State string `json:"state"`
		} `json:"status"`
	}
	_ = json.Unmarshal(a.Result, &task)
	return task.Status.State
}

// TestBlackBoxFloodingPrincipalCannotStarveOthers: one principal floods
// the real binary with turns whose model floods thoughts and holds the
// model's only instance for seconds. Past its bound (4) its turns are
// refused at once, with QUOTA_EXCEEDED and Retry-After, and leave no task;
// past the host's bound (5) anyone's are refused with HOST_BUSY. Another
// principal admitted beside the flood is served first: its answer comes
// while the flood's turns still wait for the model, because the model's
// instance goes to the principals waiting in turn. Asserted on order and
// outcomes, never on speed: the flood's turns each hold the instance 5 s.
func TestBlackBoxFloodingPrincipalCannotStarveOthers(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}, "instances": 1},
		map[string]any{"script": floodScript})
	h := startSandboxHostWith(t, top, pluginDir, nil, map[string]any{
		"auth": map[string]any{"enabled": true, "keys": []any{
			map[string]any{"key": "mallory-key", "principal": "mallory"},
			map[string]any{"key": "alice-key", "principal": "alice"},
			map[string]any{"key": "bob-key", "principal": "bob"},
		}},
		"limits": map[string]any{"shutdownGrace": "2s", "maxRunning": 5, "maxRunningPerPrincipal": 4},
	})

	// The flood: 12 turns at once, 4 admitted.
	const tries, bound = 12, 4
	var mu sync.Mutex
	var admitted []string
	var refused []rpcAnswer
	var wg sync.WaitGroup
	for range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, a := h.startTurn(t, "mallory-key", "flood 2000")
			mu.Lock()
			defer mu.Unlock()
			if id != "" {
				admitted = append(admitted, id)
			} else {
				refused = append(refused, a)
			}
		}()
	}
	wg.Wait()
	if len(admitted) != bound || len(refused) != tries-bound {
		t.Fatalf("flood of %d turns: %d admitted, %d refused; want %d admitted (maxRunningPerPrincipal)", tries, len(admitted), len(refused), bound)
	}
	for _, a := range refused {
		if a.Error == nil || a.Error.Code != -32000 || a.reason() != "QUOTA_EXCEEDED" || a.retryAfter == "" {
			t.Fatalf("a refused turn of the flood: HTTP %d, Retry-After %q, error %+v, reason %q; want -32000 QUOTA_EXCEEDED with Retry-After",
				a.status, a.retryAfter, a.Error, a.reason())
		}
	}
	list := h.rpc(t, "mallory-key", "ListTasks", map[string]any{})
	var tasks struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	if list.Error != nil || json.Unmarshal(list.Result, &tasks) != nil || len(tasks.Tasks) != bound {
		t.Fatalf("the flood's principal lists %d tasks (%s), want only the %d admitted", len(tasks.Tasks), list.Result, bound)
	}

	// Another principal is admitted beside the flood; the host is then
	// full for everyone.
	aliceTask, a := h.startTurn(t, "alice-key", "what is 6*7?")
	if aliceTask == "" {
		t.Fatalf("alice refused beside the flood: %+v", a.Error)
	}
	if _, a := h.startTurn(t, "bob-key", "hello"); a.Error == nil || a.reason() != "HOST_BUSY" || a.retryAfter == "" {
		t.Fatalf("a sixth turn with the host's bound at 5: error %+v, reason %q, Retry-After %q; want HOST_BUSY with Retry-After",
			a.Error, a.reason(), a.retryAfter)
	}

	// alice is served while the flood still runs: at most the one flood
	// call holding the instance went before her.
	h.waitFor(t, "alice's answer", 2*time.Minute, func() bool {
		st := h.taskState(t, "alice-key", aliceTask)
		if st == "TASK_STATE_FAILED" || st == "TASK_STATE_CANCELED" {
			t.Fatalf("alice's task %s", st)
		}
		return st == "TASK_STATE_COMPLETED"
	})
	unfinished := 0
	for _, id := range admitted {
		if st := h.taskState(t, "mallory-key", id); st == "TASK_STATE_WORKING" || st == "TASK_STATE_SUBMITTED" {
			unfinished++
		}
	}
	if unfinished < 2 {
		t.Fatalf("alice was answered after the flood: %d of its %d turns still running, want at least 2 (she waits for one call, not for the flood)",
			unfinished, bound)
	}

	// The flood ends (canceled); its principal is admitted again.
	for _, id := range admitted {
		h.rpc(t, "mallory-key", "CancelTask", map[string]any{"id": id})
	}
	h.waitFor(t, "the flood's turns to end", 2*time.Minute, func() bool {
		for _, id := range admitted {
			if st := h.taskState(t, "mallory-key", id); st == "TASK_STATE_WORKING" || st == "TASK_STATE_SUBMITTED" {
				return false
			}
		}
		return true
	})
	h.waitFor(t, "mallory admitted again", 2*time.Minute, func() bool {
		id, a := h.startTurn(t, "mallory-key", "hello")
		if id == "" && a.reason() != "QUOTA_EXCEEDED" && a.reason() != "HOST_BUSY" {
			t.Fatalf("mallory after the flood: %+v", a.Error)
		}
		return id != ""
	})
}
