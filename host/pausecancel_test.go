package host_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/looopy-go/looopy/host"
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

	// The sub-task's own A2A stream, replayed: it ends at its pause
	// (input-required, an interrupted state ends an A2A stream), and the
	// replay from there shows it working again, then completed.
	states := func(after string) ([]string, string) {
		sctx, sc := context.WithTimeout(ctx, 30*time.Second)
		defer sc()
		resp := openSSE(t, sctx, h.URL()+"/a2a/v1", "alice-key",
			`{"jsonrpc":"2.0","id":7,"method":"SubscribeToTask","params":{"id":"`+sub+`"}}`, "Last-Event-ID", after)
		var out []string
		last := ""
		for _, f := range readFrames(t, resp.Body, nil) {
			var r struct {
				Result struct {
					StatusUpdate *struct {
						Status struct {
							State string `json:"state"`
						} `json:"status"`
					} `json:"statusUpdate"`
				} `json:"result"`
			}
			if err := json.Unmarshal([]byte(f.Data), &r); err != nil {
				t.Fatalf("frame %q: %v", f.Data, err)
			}
			if su := r.Result.StatusUpdate; su != nil && (len(out) == 0 || out[len(out)-1] != su.Status.State) {
				out = append(out, su.Status.State)
			}
			last = f.ID
		}
		return out, last
	}
	first, pauseID := states("1")
	if len(first) == 0 || first[len(first)-1] != "TASK_STATE_INPUT_REQUIRED" {
		t.Fatalf("the sub-task's A2A stream up to its pause: %v", first)
	}
	if rest, _ := states(pauseID); len(rest) < 2 || rest[0] != "TASK_STATE_WORKING" || rest[len(rest)-1] != "TASK_STATE_COMPLETED" {
		t.Fatalf("the sub-task's A2A stream after its pause: %v", rest)
	}
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

// waitTaskState polls the task id (as c's principal) until it is in want,
// failing after a generous guard.
func waitTaskState(t *testing.T, ctx context.Context, c *a2aclient.Client, id string, want a2a.TaskState) *a2a.Task {
	t.Helper()
	guard := time.Now().Add(60 * time.Second)
	for {
		task, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(id)})
		if err == nil && task.Status.State == want {
			return task
		}
		if time.Now().After(guard) {
			t.Fatalf("task %s: %+v, %v; want %s", id, task, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkSubtaskEnded checks, on the stream evs, that the sub-task sub ended
// with status want (its task-status and one task-complete) before its
// parent's own end.
func checkSubtaskEnded(t *testing.T, evs []subEvent, sub, parent, want string) {
	t.Helper()
	var status, completes int
	parentEnd := -1
	subEnd := -1
	for i, e := range evs {
		switch {
		case e.Kind == "task-status" && e.TaskID == sub && e.Status == want:
			status++
		case e.Kind == "task-complete" && e.TaskID == sub:
			completes++
			subEnd = i
			if e.Status != want || e.ParentTaskID != parent {
				t.Fatalf("sub-task %s task-complete %+v, want %s under %s", sub, e, want, parent)
			}
		case e.Kind == "task-complete" && e.TaskID == parent && e.Status == want:
			parentEnd = i
		}
	}
	if status != 1 || completes != 1 || subEnd < 0 || parentEnd < subEnd {
		t.Fatalf("sub-task %s: %d task-status %s, %d task-complete (at %d, the parent's end at %d): %+v",
			sub, status, want, completes, subEnd, parentEnd, evs)
	}
}

// endedStream reads the conversation's stream from its start until the
// task parentID's task-complete with status want.
func endedStream(t *testing.T, ctx context.Context, url, key, contextID, parentID, want string) []subEvent {
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
		return e.Kind == "task-complete" && e.TaskID == parentID && e.Status == want
	})
	return out
}

// Cancelling a parent that waits on its remote child's passed-up approval
// cancels the child's task on the child host (CancelTask) and ends the
// sub-task canceled, with its own task-status and task-complete before the
// parent's; the child's call never runs.
func TestRoutedCancelReachesRemoteChild(t *testing.T) {
	t.Parallel()
	_, parent, ah := routedPair(t, false)
	alice := client10(t, parent.URL(), "alice-key")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m := userMsg("delegate ledger pay 8")
	m.ContextID = "cancel-remote"
	task := send(t, alice, ctx, &a2a.SendMessageRequest{Message: m})
	r := pausedForChild(t, task)
	route := r["route"].(map[string]any)
	sub, remoteID := route["subtaskId"].(string), route["remoteTaskId"].(string)
	asParent := client10(t, ah.url, "parent-key")
	if ct, err := asParent.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(remoteID)}); err != nil ||
		ct.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("child task before the cancel: %+v, %v", ct, err)
	}
	canceled, err := alice.CancelTask(ctx, &a2a.CancelTaskRequest{ID: task.ID})
	if err != nil || canceled.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("cancel the parent: %+v, %v", canceled, err)
	}
	waitTaskState(t, ctx, asParent, remoteID, a2a.TaskStateCanceled)
	waitTaskState(t, ctx, alice, sub, a2a.TaskStateCanceled)
	checkSubtaskEnded(t, endedStream(t, ctx, parent.URL(), "alice-key", "cancel-remote", string(task.ID), "canceled"),
		sub, string(task.ID), "canceled")
	if n := len(ah.lines(t)); n != 0 {
		t.Fatalf("the child's call ran %d times", n)
	}
}

// Cancelling a parent that waits on its local sub-agent's passed-up
// approval ends the sub-task canceled (its record, its task-status and
// task-complete); the call never runs.
func TestRoutedCancelReachesLocalChild(t *testing.T) {
	t.Parallel()
	cfg, ah := localRoutingHost(t)
	h := startHost(t, cfg)
	alice := client10(t, h.URL(), "alice-key")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m := userMsg("local ledger pay 9")
	m.ContextID = "cancel-local"
	task := send(t, alice, ctx, &a2a.SendMessageRequest{Message: m})
	if task.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("parent is %s, want input-required", task.Status.State)
	}
	sub := requestsOf(t, task)[0]["route"].(map[string]any)["subtaskId"].(string)
	if st, err := alice.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(sub)}); err != nil ||
		st.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("sub-task before the cancel: %+v, %v", st, err)
	}
	canceled, err := alice.CancelTask(ctx, &a2a.CancelTaskRequest{ID: task.ID})
	if err != nil || canceled.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("cancel the parent: %+v, %v", canceled, err)
	}
	waitTaskState(t, ctx, alice, sub, a2a.TaskStateCanceled)
	checkSubtaskEnded(t, endedStream(t, ctx, h.URL(), "alice-key", "cancel-local", string(task.ID), "canceled"),
		sub, string(task.ID), "canceled")
	if n := len(ah.lines(t)); n != 0 {
		t.Fatalf("the sub-agent's call ran %d times", n)
	}
}

// A passed-up request that expires with the outcome "fail" fails the
// parent and the sub-task (remote: the child's task is canceled on the
// child host); nothing runs.
func TestRoutedExpiryReachesChildren(t *testing.T) {
	t.Parallel()
	expiring := host.InteractionConfig{InputTimeout: host.Duration(time.Second), OnTimeout: "fail"}
	t.Run("remote", func(t *testing.T) {
		t.Parallel()
		_, parent, ah := routedPairWith(t, false, func(c *host.Config) { c.Interaction = expiring })
		alice := client10(t, parent.URL(), "alice-key")
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		task := send(t, alice, ctx, &a2a.SendMessageRequest{Message: userMsg("delegate ledger pay 11")})
		route := pausedForChild(t, task)["route"].(map[string]any)
		waitTaskState(t, ctx, alice, string(task.ID), a2a.TaskStateFailed)
		waitTaskState(t, ctx, alice, route["subtaskId"].(string), a2a.TaskStateFailed)
		waitTaskState(t, ctx, client10(t, ah.url, "parent-key"), route["remoteTaskId"].(string), a2a.TaskStateCanceled)
		if n := len(ah.lines(t)); n != 0 {
			t.Fatalf("the child's call ran %d times", n)
		}
	})
	t.Run("local", func(t *testing.T) {
		t.Parallel()
		cfg, ah := localRoutingHost(t)
		cfg.Interaction.InputTimeout, cfg.Interaction.OnTimeout = expiring.InputTimeout, expiring.OnTimeout
		h := startHost(t, cfg)
		alice := client10(t, h.URL(), "alice-key")
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		task := send(t, alice, ctx, &a2a.SendMessageRequest{Message: userMsg("local ledger pay 12")})
		if task.Status.State != a2a.TaskStateInputRequired {
			t.Fatalf("parent is %s, want input-required", task.Status.State)
		}
		sub := requestsOf(t, task)[0]["route"].(map[string]any)["subtaskId"].(string)
		waitTaskState(t, ctx, alice, string(task.ID), a2a.TaskStateFailed)
		waitTaskState(t, ctx, alice, sub, a2a.TaskStateFailed)
		if n := len(ah.lines(t)); n != 0 {
			t.Fatalf("the sub-agent's call ran %d times", n)
		}
	})
	// With the outcome "reject" the rejection goes down: the sub-agent
	// runs again with it (its call never runs) and both complete.
	t.Run("local-reject", func(t *testing.T) {
		t.Parallel()
		cfg, ah := localRoutingHost(t)
		cfg.Interaction.InputTimeout, cfg.Interaction.OnTimeout = expiring.InputTimeout, "reject"
		h := startHost(t, cfg)
		alice := client10(t, h.URL(), "alice-key")
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		task := send(t, alice, ctx, &a2a.SendMessageRequest{Message: userMsg("local ledger pay 13")})
		if task.Status.State != a2a.TaskStateInputRequired {
			t.Fatalf("parent is %s, want input-required", task.Status.State)
		}
		sub := requestsOf(t, task)[0]["route"].(map[string]any)["subtaskId"].(string)
		done := waitTaskState(t, ctx, alice, string(task.ID), a2a.TaskStateCompleted)
		if !strings.Contains(artifactText(done), "Researcher:") {
			t.Fatalf("parent after the expiry: %q", artifactText(done))
		}
		waitTaskState(t, ctx, alice, sub, a2a.TaskStateCompleted)
		if n := len(ah.lines(t)); n != 0 {
			t.Fatalf("the sub-agent's call ran %d times", n)
		}
	})
}
