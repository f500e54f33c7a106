package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
)

// relayScript: the parent's model hands "relay X" to its local sub-agent
// (the researcher agent plugin), whose model asks the remote agent peer;
// on the remote host (staleScript) the call needs an approval.
const relayScript = `{"rules": [
 {"name": "relay", "match": "^relay (.+)$", "steps": [
  {"toolCall": {"name": "researcher", "arguments": {"prompt": "delegate $1"}}},
  {"text": "researcher said: {{lastToolResult}}"}]},
 {"name": "delegate", "match": "briefly: delegate (.+)$", "steps": [
  {"toolCall": {"name": "peer", "arguments": {"prompt": "lchain $1"}}},
  {"text": "peer said: {{lastToolResult}}"}]}
],"default":{"steps":[{"text":"echo: {{input}}"}]}}`

// changedScript is relayScript once the researcher's model no longer asks
// peer: it answers at once.
const changedScript = `{"rules": [
 {"name": "relay", "match": "^relay (.+)$", "steps": [
  {"toolCall": {"name": "researcher", "arguments": {"prompt": "delegate $1"}}},
  {"text": "researcher said: {{lastToolResult}}"}]},
 {"name": "delegate", "match": "briefly: delegate (.+)$", "steps": [
  {"text": "not asking peer after all"}]}
],"default":{"steps":[{"text":"echo: {{input}}"}]}}`

// startRelayHostAt runs, on the folder top, a host whose researcher agent
// plugin may call the remote agent peer at url.
func startRelayHostAt(t *testing.T, top, url string) *sandboxHost {
	t.Helper()
	return startRelayHostScript(t, top, url, relayScript)
}

// startRelayHostScript is startRelayHostAt with the model's script.
func startRelayHostScript(t *testing.T, top, url, script string) *sandboxHost {
	t.Helper()
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}}, map[string]any{"script": script})
	installPlugin(t, pluginDir, "researcher", "agent", readExample(t, "researcher"),
		map[string]any{"hostFunctions": []string{"model_call", "tool_call", "result_read", "emit"}}, map[string]any{"maxRounds": 3})
	return startSandboxHostWith(t, top, pluginDir, nil, map[string]any{
		"remoteAgents": []map[string]any{{"name": "peer", "url": url, "allowPrivateNetwork": true, "watchEvery": "200ms"}},
	})
}

// relayedRequest returns the one open request of the paused task: its
// inputId, and the remote task its route names below the local
// sub-agent's level.
func relayedRequest(t *testing.T, task *a2a.Task) (inputID, remoteTask string) {
	t.Helper()
	if task.Status.State != a2a.TaskStateInputRequired || task.Status.Message == nil {
		t.Fatalf("the task is %s, want input-required", task.Status.State)
	}
	for _, p := range task.Status.Message.Parts {
		d, ok := p.Content.(a2a.Data)
		if !ok {
			continue
		}
		m, _ := d.Value.(map[string]any)
		rs, _ := m["requests"].([]any)
		if len(rs) != 1 {
			continue
		}
		req, _ := rs[0].(map[string]any)
		route, _ := req["route"].(map[string]any)
		inner, _ := route["inner"].(map[string]any)
		inputID, _ = req["inputId"].(string)
		remoteTask, _ = inner["remoteTaskId"].(string)
		if route["agentId"] != "researcher" || inner["agentId"] != "peer" || inputID == "" || remoteTask == "" {
			t.Fatalf("the request's route: %v; want the researcher's, and below it peer's with its remote task", req)
		}
		if p, _ := req["prompt"].(string); !strings.Contains(p, "ledger_append") {
			t.Fatalf("the request's prompt %q does not carry the remote agent's (an approval of ledger_append)", p)
		}
		return inputID, remoteTask
	}
	t.Fatalf("the paused task has no request: %+v", task.Status.Message)
	return "", ""
}

// remoteState is the state of task id on the remote host.
func remoteState(t *testing.T, c *a2aclient.Client, id string) a2a.TaskState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tk, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(id)})
	if err != nil {
		t.Fatalf("the remote task %s: %v", id, err)
	}
	return tk.Status.State
}

// waitRemoteState waits until task id on the remote host is in state.
func waitRemoteState(t *testing.T, c *a2aclient.Client, id string, want a2a.TaskState) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a hang guard
	for {
		got := remoteState(t, c, id)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the remote task %s is %s, want %s", id, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBlackBoxGrandchildAsksTheTopClient: host A's task hands its work to
// a local sub-agent (the researcher agent plugin), which calls the remote
// agent peer on host B, whose task needs an approval. The request travels
// up: A's task goes input-required with B's prompt, its route naming the
// local sub-task and, below it, peer's remote task. A is killed (-9)
// while paused and started again: still paused. The client's answer on A
// travels down to B's task, which runs the call once; A's task completes
// with the answer through both levels. A second task canceled while
// paused cancels B's task too; a third, whose remote task is canceled on
// B, goes on by itself (A watches the remote task below its sub-agent)
// with the call's outcome. Before, the local sub-agent's call ended with
// "needs input (...), which this call cannot ask for" and B's task was
// left input-required.
func TestBlackBoxGrandchildAsksTheTopClient(t *testing.T) {
	t.Parallel()
	b, ledger := startLedgerHost(t, nil)
	topA := t.TempDir()
	a := startRelayHostAt(t, topA, b.base)
	ca, cb := a2aClient(t, a.base, ""), a2aClient(t, b.base, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Paused, through the local sub-agent.
	task, err := apSend(t, ca, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("relay pay-1"))})
	if err != nil {
		t.Fatal(err)
	}
	inputID, remote := relayedRequest(t, task)
	if s := remoteState(t, cb, remote); s != a2a.TaskStateInputRequired {
		t.Fatalf("B's task is %s, want input-required", s)
	}

	// Killed while paused and started again: still paused.
	if err := syscall.Kill(a.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	a = startRelayHostAt(t, topA, b.base)
	ca = a2aClient(t, a.base, "")
	tk, err := ca.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	if id, r := relayedRequest(t, tk); id != inputID || r != remote {
		t.Fatalf("after the restart the request is %q (remote task %s), want %q (%s)", id, r, inputID, remote)
	}

	// Answered on A: down to B's task, which runs the call once.
	done, err := apSend(t, ca, apAnswer(task.ID, map[string]any{"inputId": inputID, "decision": "approve"}))
	if err != nil {
		t.Fatal(err)
	}
	if done.Status.State != a2a.TaskStateInputRequired && !done.Status.State.Terminal() {
		done = leftPause(t, ca, task.ID)
	}
	text := artifactsText(done)
	if done.Status.State != a2a.TaskStateCompleted || !strings.Contains(text, "researcher said:") || !strings.Contains(text, "peer said: done") {
		t.Fatalf("A's task %s %.600q; want completed with B's answer through the researcher", done.Status.State, text)
	}
	if s := remoteState(t, cb, remote); s != a2a.TaskStateCompleted {
		t.Fatalf("B's task is %s, want completed", s)
	}
	if got, _ := os.ReadFile(ledger); strings.Count(string(got), "\n") != 1 || !strings.Contains(string(got), "pay-1") {
		t.Fatalf("B's ledger: %q; want pay-1 run once", got)
	}

	// Canceled while paused: B's task is canceled, not left waiting.
	task, err = apSend(t, ca, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("relay pay-2"))})
	if err != nil {
		t.Fatal(err)
	}
	_, remote = relayedRequest(t, task)
	if _, err := ca.CancelTask(ctx, &a2a.CancelTaskRequest{ID: task.ID}); err != nil {
		t.Fatalf("cancel A's task: %v", err)
	}
	waitRemoteState(t, cb, remote, a2a.TaskStateCanceled)

	// The remote task canceled on B: A's task goes on with the outcome.
	task, err = apSend(t, ca, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("relay pay-3"))})
	if err != nil {
		t.Fatal(err)
	}
	_, remote = relayedRequest(t, task)
	if _, err := cb.CancelTask(ctx, &a2a.CancelTaskRequest{ID: a2a.TaskID(remote)}); err != nil {
		t.Fatalf("cancel the remote task on B: %v", err)
	}
	done = leftPause(t, ca, task.ID)
	if text := artifactsText(done); done.Status.State != a2a.TaskStateCompleted || !strings.Contains(text, "the remote task ended canceled") {
		t.Fatalf("A's task %s %.600q; want completed with the call's outcome (the remote task canceled)", done.Status.State, text)
	}
	if got, _ := os.ReadFile(ledger); strings.Count(string(got), "\n") != 1 {
		t.Fatalf("B's ledger: %q; want only pay-1", got)
	}
}

// TestBlackBoxRelayedRequestNotTakenEndsBelow: host A's researcher relays
// the approval asked by peer's task on B; A restarts with a model that no
// longer asks peer. The client's answer runs the researcher again, which
// completes without the call the request was about: B's task, which
// nothing will answer now, is canceled, not left input-required. Before,
// it waited on B until B's own expiry.
func TestBlackBoxRelayedRequestNotTakenEndsBelow(t *testing.T) {
	t.Parallel()
	b, ledger := startLedgerHost(t, nil)
	topA := t.TempDir()
	a := startRelayHostAt(t, topA, b.base)
	ca, cb := a2aClient(t, a.base, ""), a2aClient(t, b.base, "")
	task, err := apSend(t, ca, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("relay pay-9"))})
	if err != nil {
		t.Fatal(err)
	}
	inputID, remote := relayedRequest(t, task)
	if err := syscall.Kill(a.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	a = startRelayHostScript(t, topA, b.base, changedScript)
	ca = a2aClient(t, a.base, "")
	done, err := apSend(t, ca, apAnswer(task.ID, map[string]any{"inputId": inputID, "decision": "approve"}))
	if err != nil {
		t.Fatal(err)
	}
	if !done.Status.State.Terminal() {
		done = leftPause(t, ca, task.ID)
	}
	if text := artifactsText(done); done.Status.State != a2a.TaskStateCompleted || !strings.Contains(text, "not asking peer after all") {
		t.Fatalf("A's task %s %.600q; want completed with the researcher's new answer", done.Status.State, text)
	}
	waitRemoteState(t, cb, remote, a2a.TaskStateCanceled)
	if got, _ := os.ReadFile(ledger); len(got) != 0 {
		t.Fatalf("B's ledger: %q; want nothing run", got)
	}
}

// artifactsText is the text of a task's artifacts.
func artifactsText(tk *a2a.Task) string {
	var sb strings.Builder
	for _, art := range tk.Artifacts {
		for _, p := range art.Parts {
			sb.WriteString(p.Text())
		}
	}
	return sb.String()
}

// otherArgsScript is relayScript once the researcher's model asks peer
// something else in the same step (the same call id, other arguments).
const otherArgsScript = `{"rules": [
 {"name": "relay", "match": "^relay (.+)$", "steps": [
  {"toolCall": {"name": "researcher", "arguments": {"prompt": "delegate $1"}}},
  {"text": "researcher said: {{lastToolResult}}"}]},
 {"name": "delegate", "match": "briefly: delegate (.+)$", "steps": [
  {"toolCall": {"name": "peer", "arguments": {"prompt": "instead $1"}}},
  {"text": "peer said: {{lastToolResult}}"}]}
],"default":{"steps":[{"text":"echo: {{input}}"}]}}`

// TestBlackBoxRelayedCallAgainWithOtherArguments: host A's researcher
// relays the approval asked by peer's task on B; A restarts with a model
// whose researcher asks peer something else under the same call id. The
// client's answer runs the researcher again: its call of peer is a new
// call (a new remote task on B, which answers it), and B's first task,
// whose request nothing will answer now, is canceled, not left
// input-required until B's own expiry.
func TestBlackBoxRelayedCallAgainWithOtherArguments(t *testing.T) {
	t.Parallel()
	b, ledger := startLedgerHost(t, nil)
	topA := t.TempDir()
	a := startRelayHostAt(t, topA, b.base)
	ca, cb := a2aClient(t, a.base, ""), a2aClient(t, b.base, "")
	task, err := apSend(t, ca, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("relay pay-8"))})
	if err != nil {
		t.Fatal(err)
	}
	inputID, remote := relayedRequest(t, task)
	if err := syscall.Kill(a.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	a = startRelayHostScript(t, topA, b.base, otherArgsScript)
	ca = a2aClient(t, a.base, "")
	done, err := apSend(t, ca, apAnswer(task.ID, map[string]any{"inputId": inputID, "decision": "approve"}))
	if err != nil {
		t.Fatal(err)
	}
	if !done.Status.State.Terminal() {
		done = leftPause(t, ca, task.ID)
	}
	if text := artifactsText(done); done.Status.State != a2a.TaskStateCompleted || !strings.Contains(text, "peer said: echo: instead pay-8") {
		t.Fatalf("A's task %s %.600q; want completed with peer's answer to the new arguments", done.Status.State, text)
	}
	waitRemoteState(t, cb, remote, a2a.TaskStateCanceled)
	if got, _ := os.ReadFile(ledger); len(got) != 0 {
		t.Fatalf("B's ledger: %q; want nothing run", got)
	}
	// The new call's task is in a context of its own on B: it does not
	// see the abandoned call's history.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old, err := cb.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(remote)})
	if err != nil {
		t.Fatal(err)
	}
	list, err := cb.ListTasks(ctx, &a2a.ListTasksRequest{ContextID: old.ContextID})
	if err != nil || len(list.Tasks) != 1 || list.Tasks[0].ID != old.ID {
		t.Fatalf("B's tasks in the first call's context: %+v (%v); want that call's task alone", list, err)
	}
}
