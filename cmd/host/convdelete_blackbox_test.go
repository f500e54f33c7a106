package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const cdAliceKey, cdBobKey = "alice-key-CDCDCDCDCDCDCDCDCDCD", "bob-key-CDCDCDCDCDCDCDCDCDCDCD"

// cdAdmin sends an admin request with token and returns the status and
// the body.
func cdAdmin(t *testing.T, h *sandboxHost, method, path, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, h.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// cdSend sends text in contextID ("" a new one) as key's principal and
// waits for the task to finish or pause; it returns the task's id, its
// context id as the client sees it, and its state.
func cdSend(t *testing.T, h *sandboxHost, key, contextID, text string) (id, ctxID, state string) {
	t.Helper()
	msg := map[string]any{"messageId": fmt.Sprintf("m-%d", time.Now().UnixNano()), "role": "ROLE_USER",
		"parts": []any{map[string]any{"text": text}}}
	if contextID != "" {
		msg["contextId"] = contextID
	}
	a := h.rpc(t, key, "SendMessage", map[string]any{"message": msg})
	var r struct {
		Task struct {
			ID        string `json:"id"`
			ContextID string `json:"contextId"`
			Status    struct {
				State string `json:"state"`
			} `json:"status"`
		} `json:"task"`
	}
	if a.Error != nil || json.Unmarshal(a.Result, &r) != nil || r.Task.ID == "" {
		t.Fatalf("SendMessage %q: %+v %s", text, a.Error, a.Result)
	}
	return r.Task.ID, r.Task.ContextID, r.Task.Status.State
}

// TestBlackBoxAdminDeletesAConversation: DELETE /admin/conversations/{id}
// on the real binary. A conversation with a paused task (an approval) is
// refused with 409 CONVERSATION_BUSY and left whole; a principal's key
// (not the admin's) is refused and deletes nothing; an unknown id is 404;
// with cancel=true the paused task is canceled and the conversation is
// deleted: its tasks are gone from GetTask, ListTasks and /admin/tasks,
// its /events from its owner, and the tool waiting for approval never
// ran. Another principal's conversation is untouched.
func TestBlackBoxAdminDeletesAConversation(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the host binary")
	}
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	grant := filepath.Join(top, "grants", "ledger")
	if err := os.MkdirAll(grant, 0o755); err != nil {
		t.Fatal(err)
	}
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}}, map[string]any{"script": apScript})
	installPlugin(t, pluginDir, "ledger", "tool", readExample(t, "ledger"),
		map[string]any{"allowedPaths": []map[string]any{{"path": grant}}}, map[string]any{"dir": grant})
	h := startSandboxHostWith(t, top, pluginDir, map[string]any{"pathRoots": []string{filepath.Join(top, "grants")}}, map[string]any{
		"auth": map[string]any{"enabled": true, "keys": []map[string]any{
			{"key": cdAliceKey, "principal": "alice"}, {"key": cdBobKey, "principal": "bob"}}},
		"interaction": map[string]any{"approval": map[string]any{"tools": []string{"ledger_append"}}},
	})

	first, ctxID, st := cdSend(t, h, cdAliceKey, "", "hello")
	if st != "TASK_STATE_COMPLETED" {
		t.Fatalf("first task: %s", st)
	}
	paused, _, st := cdSend(t, h, cdAliceKey, ctxID, "ledger pay 5")
	if st != "TASK_STATE_INPUT_REQUIRED" {
		t.Fatalf("the ledger task: %s, want input-required", st)
	}
	bobTask, bobCtx, st := cdSend(t, h, cdBobKey, "", "hello from bob")
	if st != "TASK_STATE_COMPLETED" {
		t.Fatalf("bob's task: %s", st)
	}
	// The conversation's id as the admin API lists it.
	code, body := cdAdmin(t, h, http.MethodGet, "/admin/tasks?owner=alice", "admin-token")
	var listed struct {
		Tasks []struct {
			ID        string `json:"id"`
			ContextID string `json:"contextId"`
		} `json:"tasks"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &listed) != nil || len(listed.Tasks) != 2 {
		t.Fatalf("/admin/tasks?owner=alice: %d %s", code, body)
	}
	conv := listed.Tasks[0].ContextID
	path := "/admin/conversations/" + conv

	whole := func(when string) {
		t.Helper()
		if s := h.taskState(t, cdAliceKey, first); s != "TASK_STATE_COMPLETED" {
			t.Fatalf("%s: the first task is %s", when, s)
		}
		if s := h.taskState(t, cdAliceKey, paused); s != "TASK_STATE_INPUT_REQUIRED" {
			t.Fatalf("%s: the paused task is %s", when, s)
		}
	}
	// A principal's key is no admin credential.
	for _, key := range []string{cdAliceKey, cdBobKey} {
		if code, body := cdAdmin(t, h, http.MethodDelete, path+"?cancel=true", key); code != http.StatusUnauthorized {
			t.Fatalf("DELETE with a principal's key: %d %s, want 401", code, body)
		}
	}
	whole("after the principals' deletes")
	// Busy: a paused task.
	code, body = cdAdmin(t, h, http.MethodDelete, path, "admin-token")
	if code != http.StatusConflict || !strings.Contains(body, "CONVERSATION_BUSY") || !strings.Contains(body, paused) {
		t.Fatalf("DELETE of a conversation with a paused task: %d %s, want 409 CONVERSATION_BUSY naming it", code, body)
	}
	whole("after the refused delete")
	if code, body := cdAdmin(t, h, http.MethodDelete, "/admin/conversations/no-such-conversation", "admin-token"); code != http.StatusNotFound {
		t.Fatalf("DELETE of an unknown conversation: %d %s, want 404", code, body)
	}
	// With cancel=true.
	code, body = cdAdmin(t, h, http.MethodDelete, path+"?cancel=true", "admin-token")
	if code != http.StatusOK || !strings.Contains(body, first) || !strings.Contains(body, paused) {
		t.Fatalf("DELETE ?cancel=true: %d %s, want 200 naming both tasks", code, body)
	}
	for _, id := range []string{first, paused} {
		a := h.rpc(t, cdAliceKey, "GetTask", map[string]any{"id": id})
		if a.Error == nil || a.Error.Code != -32001 {
			t.Fatalf("GetTask %s after the delete: %+v %s, want task not found", id, a.Error, a.Result)
		}
	}
	a := h.rpc(t, cdAliceKey, "ListTasks", map[string]any{})
	if a.Error != nil || strings.Contains(string(a.Result), first) || strings.Contains(string(a.Result), paused) {
		t.Fatalf("ListTasks after the delete: %+v %s", a.Error, a.Result)
	}
	if code, body := cdAdmin(t, h, http.MethodGet, "/admin/tasks?contextId="+conv, "admin-token"); code != http.StatusOK || strings.Contains(body, first) || strings.Contains(body, paused) {
		t.Fatalf("/admin/tasks of the deleted conversation: %d %s", code, body)
	}
	req, _ := http.NewRequest(http.MethodGet, h.base+"/events/"+ctxID, nil)
	req.Header.Set("Authorization", "Bearer "+cdAliceKey)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/events of the deleted conversation: %d, want 404", resp.StatusCode)
	}
	if b, err := os.ReadFile(filepath.Join(grant, "ledger.log")); err == nil && len(b) > 0 {
		t.Fatalf("the tool waiting for approval ran: %q", b)
	}
	// Deleted again: nothing left, 404.
	if code, body := cdAdmin(t, h, http.MethodDelete, path, "admin-token"); code != http.StatusNotFound {
		t.Fatalf("second DELETE: %d %s, want 404", code, body)
	}
	// Bob's conversation is untouched, and a new message in Alice's
	// context starts it again without the old history.
	if s := h.taskState(t, cdBobKey, bobTask); s != "TASK_STATE_COMPLETED" {
		t.Fatalf("bob's task after the delete: %s", s)
	}
	if _, c, st := cdSend(t, h, cdBobKey, bobCtx, "again"); st != "TASK_STATE_COMPLETED" || c != bobCtx {
		t.Fatalf("bob's next turn: %s in %s", st, c)
	}
	again, _, st := cdSend(t, h, cdAliceKey, ctxID, "hello again")
	if st != "TASK_STATE_COMPLETED" {
		t.Fatalf("a new turn in the deleted context: %s", st)
	}
	a = h.rpc(t, cdAliceKey, "GetTask", map[string]any{"id": again, "historyLength": 100})
	if a.Error != nil || strings.Contains(string(a.Result), "ledger pay 5") {
		t.Fatalf("the new turn's task carries the old history: %+v %s", a.Error, a.Result)
	}
}

// cdScript: "dataset N" has the model call make_dataset for N rows named
// after the turn; anything else is answered "ok".
const cdScript = `{"rules":[{"name":"dataset","match":"^dataset ([0-9]+) ([a-z0-9]+)$","steps":[` +
	`{"toolCall":{"name":"make_dataset","arguments":"{\"name\":\"$2\",\"rows\":$1}"}},{"text":"ok"}]}],` +
	`"default":{"steps":[{"text":"ok"}]}}`

// cdDatasetHost starts the real binary with the scripted model (cdScript)
// and dataset-writer, with extra config.
func cdDatasetHost(t *testing.T, top string, extra map[string]any, env ...string) (*sandboxHost, func(...string) *sandboxHost) {
	t.Helper()
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}},
		map[string]any{"script": cdScript})
	installPlugin(t, pluginDir, "dataset-writer", "tool", readExample(t, "dataset-writer"),
		map[string]any{"callTimeout": "5m", "hostFunctions": []string{"artifact_write", "emit", "result_read"}}, nil)
	pcfg := map[string]any{"maxCallTimeout": "5m"}
	start := func(env ...string) *sandboxHost { return startSandboxHostEnv(t, top, pluginDir, pcfg, extra, env...) }
	return start(env...), start
}

// cdArtifactCode is the status GET /artifacts/{id} answers.
func cdArtifactCode(t *testing.T, h *sandboxHost, id string) int {
	t.Helper()
	resp, err := http.Get(h.base + "/artifacts/" + id)
	if err != nil {
		t.Fatalf("GET artifact %s: %v", id, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// cdConversation is the conversation's id as /admin/tasks lists it for
// task.
func cdConversation(t *testing.T, h *sandboxHost, task string) string {
	t.Helper()
	code, body := cdAdmin(t, h, http.MethodGet, "/admin/tasks", "admin-token")
	var listed struct {
		Tasks []struct {
			ID        string `json:"id"`
			ContextID string `json:"contextId"`
		} `json:"tasks"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &listed) != nil {
		t.Fatalf("/admin/tasks: %d %s", code, body)
	}
	for _, l := range listed.Tasks {
		if l.ID == task {
			return l.ContextID
		}
	}
	t.Fatalf("/admin/tasks does not list %s: %s", task, body)
	return ""
}

// TestBlackBoxAdminDeleteEndsTheConversationsStream: an /events stream of
// a conversation open while the admin deletes it ends, with a last frame
// that says why (event stream-end, reason CONVERSATION_DELETED), and gives
// its place back: with one stream allowed per conversation, a stream of
// the context started again is served. The conversation's artifacts are
// gone: GET /artifacts/{id} answers 404. Before, the stream stayed open
// (heartbeats only, for ever) and held its place.
func TestBlackBoxAdminDeleteEndsTheConversationsStream(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the host binary")
	}
	t.Parallel()
	top := t.TempDir()
	h, _ := cdDatasetHost(t, top, map[string]any{"limits": map[string]any{"shutdownGrace": "2s", "maxStreamsPerStream": 1}})
	task, ctxID, st := cdSend(t, h, "", "", "dataset 3000 first")
	if st != "TASK_STATE_COMPLETED" {
		t.Fatalf("the dataset turn: %s", st)
	}
	conv := cdConversation(t, h, task)
	// The conversation's stream, from its start: it names the artifact.
	req, _ := http.NewRequest(http.MethodGet, h.base+"/events/"+ctxID, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/events/%s: %v %v", ctxID, resp, err)
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 1<<20)
	art := ""
	for art == "" {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream of %s ended without naming an artifact: %v", ctxID, err)
		}
		art = artID.FindString(line)
	}
	if code := cdArtifactCode(t, h, art); code != http.StatusOK {
		t.Fatalf("GET artifact %s before the delete: %d", art, code)
	}
	frames := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(br)
		frames <- string(b)
	}()
	if code, body := cdAdmin(t, h, http.MethodDelete, "/admin/conversations/"+conv, "admin-token"); code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	var got string
	select {
	case got = <-frames:
	case <-time.After(90 * time.Second): // a hang guard: heartbeats are every 15 s
		t.Fatal("the stream of the deleted conversation is still open")
	}
	end := strings.LastIndex(got, "event: stream-end\n")
	if end < 0 || !strings.Contains(got[end:], "CONVERSATION_DELETED") {
		t.Fatalf("the stream ended without a stream-end frame saying CONVERSATION_DELETED; its end:\n%s", got[max(0, len(got)-600):])
	}
	if code := cdArtifactCode(t, h, art); code != http.StatusNotFound {
		t.Fatalf("GET artifact %s after the delete: %d, want 404", art, code)
	}
	// The context begun again gets a stream: the old one's place is back.
	if _, c, st := cdSend(t, h, "", ctxID, "hello again"); st != "TASK_STATE_COMPLETED" || c != ctxID {
		t.Fatalf("a new turn in the deleted context: %s in %s", st, c)
	}
	req, _ = http.NewRequest(http.MethodGet, h.base+"/events/"+ctxID, nil)
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusOK {
		t.Fatalf("/events of the context begun again: %d, want 200", resp2.StatusCode)
	}
}

// TestBlackBoxAdminDeleteKilledMidway: the host is killed (-9) in the
// middle of the delete of a conversation of eight turns, each with a
// dataset artifact: its agent record and history are gone, three of its
// tasks deleted, five left (LOOOPY_CRASHPOINT=conversation-purging:4).
// Started again, the host finishes the delete before it serves: no task of
// the conversation is served (GetTask, /admin/tasks), no artifact
// (404), no /events stream (404), and a delete sent again finds nothing
// (404). Before, the tasks the kill left were served until their TTL.
func TestBlackBoxAdminDeleteKilledMidway(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the host binary")
	}
	t.Parallel()
	top := t.TempDir()
	h, start := cdDatasetHost(t, top, nil, "LOOOPY_CRASHPOINT=conversation-purging:4")
	var tasks []string
	ctxID := ""
	for i := range 8 {
		id, c, st := cdSend(t, h, "", ctxID, fmt.Sprintf("dataset 1500 turn%d", i))
		if st != "TASK_STATE_COMPLETED" {
			t.Fatalf("turn %d: %s", i, st)
		}
		tasks, ctxID = append(tasks, id), c
	}
	conv := cdConversation(t, h, tasks[0])
	// The artifacts, as the conversation's stream names them.
	resp, err := http.Get(h.base + "/events/" + ctxID + "?kinds=dataset-write")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/events/%s: %v %v", ctxID, resp, err)
	}
	arts := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for len(arts) < 8 && sc.Scan() {
		if id := artID.FindString(sc.Text()); id != "" {
			arts[id] = true
		}
	}
	resp.Body.Close()
	if len(arts) != 8 {
		t.Fatalf("the stream named %d artifacts, want 8: %v", len(arts), sc.Err())
	}
	for id := range arts {
		if code := cdArtifactCode(t, h, id); code != http.StatusOK {
			t.Fatalf("GET artifact %s before the delete: %d", id, code)
		}
	}

	req, _ := http.NewRequest(http.MethodDelete, h.base+"/admin/conversations/"+conv, nil)
	req.Header.Set("Authorization", "Bearer admin-token")
	if resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("the delete was answered (%d %s): the host was to die in the middle of it", resp.StatusCode, b)
	}
	select {
	case <-h.exited:
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("the host did not die at the crash point")
	}

	h = start()
	for _, id := range tasks {
		a := h.rpc(t, "", "GetTask", map[string]any{"id": id})
		if a.Error == nil || a.Error.Code != -32001 {
			t.Fatalf("GetTask %s after the restart: %+v %s, want task not found", id, a.Error, a.Result)
		}
	}
	if code, body := cdAdmin(t, h, http.MethodGet, "/admin/tasks?contextId="+conv, "admin-token"); code != http.StatusOK || strings.Contains(body, conv) {
		t.Fatalf("/admin/tasks of the deleted conversation after the restart: %d %s", code, body)
	}
	for id := range arts {
		if code := cdArtifactCode(t, h, id); code != http.StatusNotFound {
			t.Fatalf("GET artifact %s after the restart: %d, want 404", id, code)
		}
	}
	resp, err = http.Get(h.base + "/events/" + ctxID)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/events of the deleted conversation after the restart: %d, want 404", resp.StatusCode)
	}
	if code, body := cdAdmin(t, h, http.MethodDelete, "/admin/conversations/"+conv, "admin-token"); code != http.StatusNotFound {
		t.Fatalf("the delete sent again: %d %s, want 404 (finished at the start)", code, body)
	}
}
