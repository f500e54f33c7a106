package main

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
)

// passedUpRoute returns the remote task named by the route of the one
// request the paused task passed up.
func passedUpRoute(t *testing.T, task *a2a.Task) string {
	t.Helper()
	if task.Status.State != a2a.TaskStateInputRequired || task.Status.Message == nil {
		t.Fatalf("the task is %s, want input-required", task.Status.State)
	}
	for _, p := range task.Status.Message.Parts {
		if d, ok := p.Content.(a2a.Data); ok {
			m, _ := d.Value.(map[string]any)
			if rs, _ := m["requests"].([]any); len(rs) == 1 {
				req, _ := rs[0].(map[string]any)
				route, _ := req["route"].(map[string]any)
				if id, _ := route["remoteTaskId"].(string); id != "" {
					return id
				}
			}
		}
	}
	t.Fatalf("the task's request names no remote task: %+v", task.Status.Message)
	return ""
}

// leftPause waits until the task id is no longer input-required.
func leftPause(t *testing.T, c *a2aclient.Client, id a2a.TaskID) *a2a.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		tk, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: id})
		if err == nil && tk.Status.State != a2a.TaskStateInputRequired && tk.Status.State.Terminal() {
			return tk
		}
		if ctx.Err() != nil {
			t.Fatalf("the paused parent never took the remote task's outcome (last: %v %v)", tk, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBlackBoxPausedParentWatchesTheRemoteTask: host A's call of remote
// agent B pauses on B's approval request, passed up to A's client. The
// remote task is canceled on B directly. A watches the remote task while
// it is paused (remoteAgents[].watchEvery) and takes its real outcome at
// once, without being answered: A's task leaves input-required and
// completes with the call's error result (the remote task ended canceled).
// The same after A is killed (-9) while paused and started again: the
// restarted host watches the paused task's remote task again. Before, A
// stayed input-required until answered or until interaction.inputTimeout.
func TestBlackBoxPausedParentWatchesTheRemoteTask(t *testing.T) {
	b, ledger := startLedgerHost(t, nil)
	topA := t.TempDir()
	watch := map[string]any{"watchEvery": "100ms"}
	a, _ := startLedgerHostAt(t, topA, map[string]string{"peer": b.base}, watch)
	ca, cb := a2aClient(t, a.base, ""), a2aClient(t, b.base, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	check := func(when string, ca *a2aclient.Client, id a2a.TaskID) {
		t.Helper()
		tk := leftPause(t, ca, id)
		var sb strings.Builder
		for _, art := range tk.Artifacts {
			for _, p := range art.Parts {
				sb.WriteString(p.Text())
			}
		}
		if tk.Status.State != a2a.TaskStateCompleted || !strings.Contains(sb.String(), "peer said:") ||
			!strings.Contains(sb.String(), "the remote task ended canceled") {
			t.Fatalf("%s: A's task %s %.500q; want completed with the call's error result (remote task canceled)", when, tk.Status.State, sb.String())
		}
		if b, _ := os.ReadFile(ledger); len(b) != 0 {
			t.Fatalf("%s: the ledger: %q; want nothing run", when, b)
		}
	}

	// Paused, then the remote task is canceled on B.
	task, err := apSend(t, ca, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("delegate pay-1"))})
	if err != nil {
		t.Fatal(err)
	}
	remote := passedUpRoute(t, task)
	if _, err := cb.CancelTask(ctx, &a2a.CancelTaskRequest{ID: a2a.TaskID(remote)}); err != nil {
		t.Fatalf("cancel the remote task on B: %v", err)
	}
	check("canceled on B", ca, task.ID)
	if !strings.Contains(a.out.String(), "passed-up request withdrawn") {
		t.Errorf("A's log does not say the request was withdrawn")
	}

	// Paused, A killed and started again, then the remote task is
	// canceled on B: the restarted A watches it.
	task, err = apSend(t, ca, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("delegate pay-2"))})
	if err != nil {
		t.Fatal(err)
	}
	remote = passedUpRoute(t, task)
	if err := syscall.Kill(a.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	a2, _ := startLedgerHostAt(t, topA, map[string]string{"peer": b.base}, watch)
	ca2 := a2aClient(t, a2.base, "")
	if tk, err := ca2.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID}); err != nil || tk.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("A's task after the restart: %v %v; want still input-required", tk, err)
	}
	if _, err := cb.CancelTask(ctx, &a2a.CancelTaskRequest{ID: a2a.TaskID(remote)}); err != nil {
		t.Fatalf("cancel the remote task on B: %v", err)
	}
	check("canceled on B after A's restart", ca2, task.ID)
}
