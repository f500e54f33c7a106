package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// A tool that answers data nested just under encoding/json's 10,000 levels
// passes a decoder at the plugin boundary, but the stored task record holds
// it a few levels deeper: without a bound far below that limit, the record
// never decodes again (GetTask, ListTasks, /admin/tasks and the next turn of
// the conversation fail for good). The host refuses the answer: the model
// gets an error result and the turn goes on.
func TestBlackBoxDeepToolResultRefused(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	model := readExample(t, "scripted-model")
	script := `{"rules":[{"name":"deep","match":"^deep (\\d+)$","steps":[
  {"toolCall":{"name":"deep","arguments":"{\"n\":$1}"}},
  {"text":"tool said: {{lastToolResult}}"}]}],
 "default":{"steps":[{"text":"echo: {{input}}"}]}}`
	installPlugin(t, pluginDir, "scripted-model", "model", model,
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}}, map[string]any{"script": script})
	flood := buildGuest(t, filepath.Join(top, "flood.wasm"), "../../plugins/testdata/guests/flood")
	installPlugin(t, pluginDir, "flood", "tool", flood, floodCaps, map[string]any{"deep": "1"})
	h := startSandboxHost(t, top, pluginDir, nil)
	c := a2aClient(t, h.base, "")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	r, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("deep 9997"))})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := r.(*a2a.Task)
	if !ok {
		t.Fatalf("answered %T", r)
	}
	if task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("the turn with the deep result: %s %+v", task.Status.State, task.Status.Message)
	}
	text := taskText(task)
	if !strings.Contains(text, "nests deeper than 512") {
		t.Fatalf("the model did not get the refusal as the tool's result: %q", text)
	}
	got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
	if err != nil || got.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("GetTask of the acknowledged task: %v %+v", err, got)
	}
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("again"))
	msg.ContextID = task.ContextID
	r, err = c.SendMessage(ctx, &a2a.SendMessageRequest{Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	if next, ok := r.(*a2a.Task); !ok || next.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("the next turn of the conversation: %+v", r)
	}
	list, err := c.ListTasks(ctx, &a2a.ListTasksRequest{})
	if err != nil || len(list.Tasks) < 2 {
		t.Fatalf("ListTasks: %v %+v", err, list)
	}
	req, _ := http.NewRequest(http.MethodGet, h.base+"/admin/tasks", nil)
	req.Header.Set("Authorization", "Bearer admin-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), string(task.ID)) {
		t.Fatalf("/admin/tasks: %d %s", resp.StatusCode, b)
	}
}

// A describe whose tool schema nests "not" thousands deep (inside the
// per-tool size limit) costs the schema compiler minutes, outside any load
// deadline: the host refuses the schema by its nesting before compiling.
// 3,000 deep is past the bound of any answer (512); 400 deep passes that
// one and is refused by the schema's own (64).
func TestBlackBoxDeepSchemaRefused(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	flood := buildGuest(t, filepath.Join(top, "flood.wasm"), "../../plugins/testdata/guests/flood")
	installPlugin(t, pluginDir, "flood", "tool", flood, floodCaps, map[string]any{"schemaDepth": "400"})
	installPlugin(t, pluginDir, "wat-add", "tool", readExample(t, "wat-add"), nil, nil)
	h := startSandboxHost(t, top, pluginDir, nil)
	got := h.plugins(t)
	if p := got["flood"]; p.State != "failed" || !strings.Contains(p.LastError, "parameters schema") || !strings.Contains(p.LastError, "nests deeper than 64") {
		t.Fatalf("flood = %+v", p)
	}
	// The attack's own shape, 3,000 deep, is refused with the answer.
	installPlugin(t, pluginDir, "flood", "tool", flood, floodCaps, map[string]any{"schemaDepth": "3000"})
	h.waitFor(t, "the 3,000-deep schema refused", time.Minute, func() bool {
		p := h.plugins(t)["flood"]
		return p.State == "failed" && strings.Contains(p.LastError, "nests deeper than 512")
	})
	if text, err := h.mcpCall(t, "add", `{"a":40,"b":2}`); err != nil || !strings.Contains(text, "42") {
		t.Fatalf("a call beside the refused plugin: %q %v", text, err)
	}
}

// floodCaps grants the flood guest what it imports.
var floodCaps = map[string]any{"hostFunctions": []string{"artifact_write", "emit", "http_close", "http_read",
	"http_request", "kv_set", "log", "result_read"}}

func taskText(task *a2a.Task) string {
	var sb strings.Builder
	for _, a := range task.Artifacts {
		for _, p := range a.Parts {
			sb.WriteString(p.Text())
		}
	}
	if task.Status.Message != nil {
		for _, p := range task.Status.Message.Parts {
			sb.WriteString(p.Text())
		}
	}
	return sb.String()
}
