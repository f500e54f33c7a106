package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
)

// TestLocalSubAgentLifecycle: a parent task calls the researcher agent
// plugin (real Wasm) through the scripted model's demo. The sub-agent runs
// as a sub-task of its own: a record its owner can read (and no one else),
// listed in the parent's metadata; its own task-created (initiator agent,
// parentTaskId) and status events; its tool calls, thoughts and text under
// its own task id; the parent waiting-subtask meanwhile; its tokens counted
// into the parent's usage.
func TestLocalSubAgentLifecycle(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	cfg.Plugins.Only = []string{"scripted-model", "researcher", "echo"}
	cfg.Auth.Enabled = true
	cfg.Auth.Keys = []host.APIKey{{Key: "alice-key", Principal: "alice"}, {Key: "bob-key", Principal: "bob"}}
	h := startHost(t, cfg)
	alice, bob := client10(t, h.URL(), "alice-key"), client10(t, h.URL(), "bob-key")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	m := userMsg("research wasm sandboxes")
	m.ContextID = "sub-local"
	task := send(t, alice, ctx, &a2a.SendMessageRequest{Message: m})
	if task.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(task), "My notes on wasm sandboxes") {
		t.Fatalf("parent: %s %q", task.Status.State, artifactText(task))
	}
	subs, _ := task.Metadata["subtasks"].([]any)
	if len(subs) != 1 {
		t.Fatalf("parent's metadata lists sub-tasks %v, want one", task.Metadata["subtasks"])
	}
	childID, _ := subs[0].(string)
	if !strings.HasPrefix(childID, string(task.ID)+".") {
		t.Fatalf("sub-task id %q is not under the parent %q", childID, task.ID)
	}

	child, err := alice.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(childID)})
	if err != nil {
		t.Fatalf("owner gets the sub-task: %v", err)
	}
	if child.Status.State != a2a.TaskStateCompleted || child.Metadata["parentTaskId"] != string(task.ID) ||
		child.ContextID != "sub-local" || !strings.Contains(artifactText(child), "through the echo tool") {
		t.Fatalf("sub-task: %s, metadata %v, context %q, answer %q", child.Status.State, child.Metadata, child.ContextID, artifactText(child))
	}
	if _, err := bob.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(childID)}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("another principal gets the sub-task: %v, want task not found", err)
	}
	if _, err := alice.CancelTask(ctx, &a2a.CancelTaskRequest{ID: a2a.TaskID(childID)}); !errors.Is(err, a2a.ErrTaskNotCancelable) {
		t.Fatalf("cancel a finished sub-task: %v, want not cancelable", err)
	}

	// The conversation's stream, event by event.
	resp := openSSE(t, ctx, h.URL()+"/events/sub-local", "alice-key", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("events: %d", resp.StatusCode)
	}
	type ev struct {
		Kind         string `json:"kind"`
		TaskID       string `json:"taskId"`
		ParentTaskID string `json:"parentTaskId"`
		Status       string `json:"status"`
		Initiator    string `json:"initiator"`
		SubtaskID    string `json:"subtaskId"`
		ToolName     string `json:"toolName"`
		Content      string `json:"content"`
		Usage        struct {
			TotalTokens int `json:"totalTokens"`
		} `json:"usage"`
	}
	var got []string
	usage := map[string]int{}
	frames := readFrames(t, resp.Body, func(f frame) bool {
		return f.Event == "task-complete" && strings.Contains(f.Data, `"taskId":"`+string(task.ID)+`"`)
	})
	for _, f := range frames {
		if f.Event == "thought-stream" && strings.Contains(f.Data, `"source":"loop"`) {
			continue // the loop's own thoughts are tested in thoughts_test.go
		}
		var e ev
		if err := json.Unmarshal([]byte(f.Data), &e); err != nil {
			t.Fatalf("frame %s: %v", f.Data, err)
		}
		who := "parent"
		switch {
		case e.TaskID == childID && e.ParentTaskID == string(task.ID):
			who = "child"
		case e.TaskID != string(task.ID) || e.ParentTaskID != "":
			t.Fatalf("event of task %q parent %q: %s", e.TaskID, e.ParentTaskID, f.Data)
		}
		s := who + " " + e.Kind
		switch e.Kind {
		case "task-status":
			s += " " + e.Status
		case "task-created":
			s += " " + e.Initiator
		case "subtask-created":
			if e.SubtaskID != childID {
				t.Errorf("subtask-created names %q", e.SubtaskID)
			}
		case "tool-start":
			s += " " + e.ToolName
		case "task-complete":
			usage[who] = e.Usage.TotalTokens
		case "content-delta", "tool-progress":
			continue // how many depends on the plugins' chunking
		}
		got = append(got, s)
	}
	want := []string{
		"parent task-created user", "parent task-status working",
		"parent thought-stream",   // "This needs research: ..."
		"parent content-complete", // "Asking the researcher about ..."
		"parent tool-start researcher",
		"parent subtask-created",
		"parent task-status waiting-subtask",
		"child task-created agent", "child task-status working",
		"child thought-stream",
		"child tool-start echo", "child tool-complete",
		"child content-complete",
		"child task-status completed", "child task-complete",
		"parent task-status working",
		"parent tool-complete",
		"parent content-complete",
		"parent task-status completed", "parent task-complete",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if usage["child"] == 0 || usage["parent"] <= usage["child"] {
		t.Errorf("usage: child %d, parent %d: want the child's tokens counted in the parent's", usage["child"], usage["parent"])
	}
	if u, _ := child.Metadata["usage"].(map[string]any); fmt.Sprint(u["totalTokens"]) != fmt.Sprint(usage["child"]) {
		t.Errorf("sub-task record's usage %v, its task-complete said %d", child.Metadata["usage"], usage["child"])
	}
}
