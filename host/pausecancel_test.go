package host_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// subEvent is an event of the /events stream, the fields these tests read.
type subEvent struct {
	Kind         string `json:"kind"`
	TaskID       string `json:"taskId"`
	ParentTaskID string `json:"parentTaskId"`
	SubtaskID    string `json:"subtaskId"`
	Status       string `json:"status"`
}

// streamUntilParentDone reads the conversation's stream from its start until the
// task parentID's task-complete as completed.
func streamUntilParentDone(t *testing.T, ctx context.Context, url, key, contextID, parentID string) []subEvent {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp := openSSE(t, sctx, url+"/events/"+contextID, key, "")
	var out []subEvent
	readFrames(t, resp.Body, func(f frame) bool {
		var e subEvent
		if err := json.Unmarshal([]byte(f.Data), &e); err != nil {
			t.Fatalf("frame %q: %v", f.Data, err)
		}
		out = append(out, e)
		return e.Kind == "task-complete" && e.TaskID == parentID && e.Status == "completed"
	})
	if len(out) == 0 || out[len(out)-1].Kind != "task-complete" || out[len(out)-1].TaskID != parentID {
		t.Fatalf("the stream of %s ended before the parent's task-complete: %+v", contextID, out)
	}
	return out
}

// checkSubtaskOnce checks that the sub-task sub, run again after the
// request it passed up was answered, was announced once (one
// subtask-created, one task-created) and that its own statuses show the
// pause: working, then want (waiting-input or waiting-auth), working
// again, then completed, with exactly one task-complete.
func checkSubtaskOnce(t *testing.T, evs []subEvent, sub, want string) {
	t.Helper()
	var created, taskCreated, completes int
	var statuses []string
	for _, e := range evs {
		switch {
		case e.Kind == "subtask-created" && e.SubtaskID == sub:
			created++
		case e.Kind == "task-created" && e.TaskID == sub:
			taskCreated++
		case e.Kind == "task-complete" && e.TaskID == sub:
			completes++
		case e.Kind == "task-status" && e.TaskID == sub:
			statuses = append(statuses, e.Status)
		}
	}
	if created != 1 || taskCreated != 1 {
		t.Fatalf("sub-task %s: %d subtask-created and %d task-created, want one each: %+v", sub, created, taskCreated, evs)
	}
	if completes != 1 {
		t.Fatalf("sub-task %s: %d task-complete, want one: %v", sub, completes, statuses)
	}
	order := []string{"working", want, "working", "completed"}
	i := 0
	for _, s := range statuses {
		if i < len(order) && s == order[i] {
			i++
		}
	}
	if i != len(order) || statuses[len(statuses)-1] != "completed" {
		t.Fatalf("sub-task %s statuses %v, want %v in this order", sub, statuses, order)
	}
}

// A local sub-agent run again with the answer to the approval it passed up
// is one sub-task to a client: announced once, paused on its own stream
// (waiting-input), working again once the answer goes down, completed.
func TestRoutedLocalSubtaskAnnouncedOnce(t *testing.T) {
	t.Parallel()
	cfg, _ := localRoutingHost(t)
	h := startHost(t, cfg)
	alice := client10(t, h.URL(), "alice-key")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m := userMsg("local ledger pay 5")
	m.ContextID = "once-local"
	task := send(t, alice, ctx, &a2a.SendMessageRequest{Message: m})
	if task.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("parent is %s, want input-required", task.Status.State)
	}
	reqs := requestsOf(t, task)
	sub := reqs[0]["route"].(map[string]any)["subtaskId"].(string)
	done := send(t, alice, ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
		map[string]any{"inputId": reqs[0]["inputId"], "decision": "approve"})})
	if done.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("parent after the approval: %s %q", done.Status.State, artifactText(done))
	}
	checkSubtaskOnce(t, streamUntilParentDone(t, ctx, h.URL(), "alice-key", "once-local", string(task.ID)), sub, "waiting-input")
}

// The same with a remote child (two hosts on loopback): the parent's call
// runs again with the answer, and the sub-task is announced once.
func TestRoutedRemoteSubtaskAnnouncedOnce(t *testing.T) {
	t.Parallel()
	_, parent, _ := routedPair(t, false)
	alice := client10(t, parent.URL(), "alice-key")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m := userMsg("delegate ledger pay 6")
	m.ContextID = "once-remote"
	task := send(t, alice, ctx, &a2a.SendMessageRequest{Message: m})
	r := pausedForChild(t, task)
	sub := r["route"].(map[string]any)["subtaskId"].(string)
	done := send(t, alice, ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
		map[string]any{"inputId": r["inputId"], "decision": "approve"})})
	if done.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(done), "Child: Ledger:") {
		t.Fatalf("parent after the approval: %s %q", done.Status.State, artifactText(done))
	}
	checkSubtaskOnce(t, streamUntilParentDone(t, ctx, parent.URL(), "alice-key", "once-remote", string(task.ID)), sub, "waiting-input")
}
