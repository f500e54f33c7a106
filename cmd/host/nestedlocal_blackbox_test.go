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

// nestScript: "nest X" hands X to the local sub-agent researcher, whose
// model hands it on to the local sub-agent scout (the same agent plugin
// under another name), whose model appends X to the ledger: a call that
// needs an approval.
const nestScript = `{"rules": [
 {"name": "nest", "match": "^nest (.+)$", "steps": [
  {"toolCall": {"name": "researcher", "arguments": {"prompt": "outer $1"}}},
  {"text": "top: {{lastToolResult}}"}]},
 {"name": "outer", "match": "briefly: outer (.+)$", "steps": [
  {"toolCall": {"name": "scout", "arguments": {"prompt": "inner $1"}}},
  {"text": "outer: {{lastToolResult}}"}]},
 {"name": "inner", "match": "briefly: inner (.+)$", "steps": [
  {"toolCall": {"name": "ledger_append", "arguments": {"entry": "$1"}}},
  {"text": "inner: {{lastToolResult}}"}]}
],"default":{"steps":[{"text":"echo: {{input}}"}]}}`

// startNestHost runs, on the folder top, a host with two local agent
// plugins (researcher and scout) and the ledger, whose ledger_append
// needs an approval. It returns the host and its ledger file.
func startNestHost(t *testing.T, top string) (*sandboxHost, string) {
	t.Helper()
	pluginDir := filepath.Join(top, "plugins")
	grant := filepath.Join(top, "grants", "ledger")
	if err := os.MkdirAll(grant, 0o755); err != nil {
		t.Fatal(err)
	}
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}}, map[string]any{"script": nestScript})
	installPlugin(t, pluginDir, "ledger", "tool", readExample(t, "ledger"),
		map[string]any{"allowedPaths": []map[string]any{{"path": grant}}}, map[string]any{"dir": grant})
	for _, name := range []string{"researcher", "scout"} {
		installPlugin(t, pluginDir, name, "agent", readExample(t, "researcher"),
			map[string]any{"hostFunctions": []string{"model_call", "tool_call", "result_read", "emit"}}, map[string]any{"maxRounds": 3})
	}
	h := startSandboxHostWith(t, top, pluginDir, map[string]any{"pathRoots": []string{filepath.Join(top, "grants")}}, map[string]any{
		"interaction": map[string]any{"approval": map[string]any{"tools": []string{"ledger_append"}}},
	})
	return h, filepath.Join(grant, "ledger.log")
}

// nestedRequest returns the one open request of the paused task: its
// inputId and the two sub-tasks its route names (the researcher's, and
// below it the scout's, which asked).
func nestedRequest(t *testing.T, task *a2a.Task) (inputID, outer, inner string) {
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
		in, _ := route["inner"].(map[string]any)
		inputID, _ = req["inputId"].(string)
		outer, _ = route["subtaskId"].(string)
		inner, _ = in["subtaskId"].(string)
		if route["agentId"] != "researcher" || in["agentId"] != "scout" || in["inner"] != nil || in["remoteTaskId"] != nil ||
			inputID == "" || outer == "" || inner == "" {
			t.Fatalf("the request's route: %v; want the researcher's, and below it the scout's", req)
		}
		if p, _ := req["prompt"].(string); !strings.Contains(p, "ledger_append") {
			t.Fatalf("the request's prompt %q does not carry the scout's (an approval of ledger_append)", p)
		}
		return inputID, outer, inner
	}
	t.Fatalf("the paused task has no request: %+v", task.Status.Message)
	return "", "", ""
}

// taskState is the state of task id on the host.
func taskState(t *testing.T, c *a2aclient.Client, id string) a2a.TaskState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tk, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(id)})
	if err != nil {
		t.Fatalf("task %s: %v", id, err)
	}
	return tk.Status.State
}

// TestBlackBoxNestedLocalSubAgentsAskTheTopClient: the researcher agent
// plugin calls the scout agent plugin (both local), whose call of
// ledger_append needs an approval. The request travels up both levels:
// the top task goes input-required, its route naming the researcher's
// sub-task and, below it, the scout's. The answer on the top task goes
// down both levels and the call runs once; the same after a kill -9 while
// paused and a restart; a cancel while paused ends both sub-tasks, and
// nothing runs.
func TestBlackBoxNestedLocalSubAgentsAskTheTopClient(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	h, ledger := startNestHost(t, top)
	c := a2aClient(t, h.base, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lines := func(when string, want ...string) {
		t.Helper()
		got, _ := os.ReadFile(ledger)
		if strings.Count(string(got), "\n") != len(want) {
			t.Fatalf("%s: the ledger is %q, want %q once each", when, got, want)
		}
		for _, w := range want {
			if strings.Count(string(got), w) != 1 {
				t.Fatalf("%s: the ledger is %q, want %q once each", when, got, want)
			}
		}
	}
	answered := func(id a2a.TaskID, inputID, entry string) {
		t.Helper()
		done, err := apSend(t, c, apAnswer(id, map[string]any{"inputId": inputID, "decision": "approve"}))
		if err != nil {
			t.Fatal(err)
		}
		if !done.Status.State.Terminal() {
			done = leftPause(t, c, id)
		}
		if text := artifactsText(done); done.Status.State != a2a.TaskStateCompleted || !strings.Contains(text, "top: outer: inner:") ||
			!strings.Contains(text, entry) {
			t.Fatalf("the task after the answer: %s %.600q; want completed through both sub-agents", done.Status.State, text)
		}
	}

	// Paused through both local sub-agents, answered.
	task, err := apSend(t, c, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("nest pay-1"))})
	if err != nil {
		t.Fatal(err)
	}
	inputID, outer, inner := nestedRequest(t, task)
	for _, id := range []string{outer, inner} {
		if s := taskState(t, c, id); s != a2a.TaskStateInputRequired {
			t.Fatalf("sub-task %s is %s, want input-required", id, s)
		}
	}
	lines("while paused")
	answered(task.ID, inputID, "pay-1")
	lines("after the answer", "pay-1")
	for _, id := range []string{outer, inner} {
		if s := taskState(t, c, id); s != a2a.TaskStateCompleted {
			t.Fatalf("sub-task %s is %s, want completed", id, s)
		}
	}

	// Killed (-9) while paused and started again: still paused on the
	// same request, and the answer goes down both levels.
	task, err = apSend(t, c, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("nest pay-2"))})
	if err != nil {
		t.Fatal(err)
	}
	inputID, outer, inner = nestedRequest(t, task)
	quiet(t, h)
	if err := syscall.Kill(h.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-h.exited
	h, _ = startNestHost(t, top)
	c = a2aClient(t, h.base, "")
	tk, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	if id, o, i := nestedRequest(t, tk); id != inputID || o != outer || i != inner {
		t.Fatalf("after the restart the request is %q (%s, %s), want %q (%s, %s)", id, o, i, inputID, outer, inner)
	}
	for _, id := range []string{outer, inner} {
		if s := taskState(t, c, id); s != a2a.TaskStateInputRequired {
			t.Fatalf("sub-task %s after the restart is %s, want input-required", id, s)
		}
	}
	lines("after the restart", "pay-1")
	answered(task.ID, inputID, "pay-2")
	lines("after the answer that followed the restart", "pay-1", "pay-2")
	for _, id := range []string{outer, inner} {
		if s := taskState(t, c, id); s != a2a.TaskStateCompleted {
			t.Fatalf("sub-task %s after the answer that followed the restart is %s, want completed", id, s)
		}
	}

	// Canceled while paused: both sub-tasks end canceled, nothing runs,
	// and a late answer is refused.
	task, err = apSend(t, c, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("nest pay-3"))})
	if err != nil {
		t.Fatal(err)
	}
	inputID, outer, inner = nestedRequest(t, task)
	if got, err := c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: task.ID}); err != nil || got.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("cancel: %v, %v; want canceled", got, err)
	}
	for _, id := range []string{outer, inner} {
		if s := taskState(t, c, id); s != a2a.TaskStateCanceled {
			t.Fatalf("sub-task %s after the cancel is %s, want canceled", id, s)
		}
	}
	if _, err := apSend(t, c, apAnswer(task.ID, map[string]any{"inputId": inputID, "decision": "approve"})); err == nil {
		t.Fatal("an answer after the cancel was taken")
	}
	lines("after the cancel", "pay-1", "pay-2")
	quiet(t, h)
}

// quiet fails the test when the host logged a warning or an error: every
// step here is an ordinary one.
func quiet(t *testing.T, h *sandboxHost) {
	t.Helper()
	for _, l := range strings.Split(h.out.String(), "\n") {
		if strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
			t.Fatalf("the host logged: %s", l)
		}
	}
}

// nestRemoteScript: "nest X" goes to researcher, then scout (both local
// agent plugins), whose model asks the remote agent peer, whose task
// needs an approval (staleScript on the remote host).
const nestRemoteScript = `{"rules": [
 {"name": "nest", "match": "^nest (.+)$", "steps": [
  {"toolCall": {"name": "researcher", "arguments": {"prompt": "outer $1"}}},
  {"text": "top: {{lastToolResult}}"}]},
 {"name": "outer", "match": "briefly: outer (.+)$", "steps": [
  {"toolCall": {"name": "scout", "arguments": {"prompt": "inner $1"}}},
  {"text": "outer: {{lastToolResult}}"}]},
 {"name": "inner", "match": "briefly: inner (.+)$", "steps": [
  {"toolCall": {"name": "peer", "arguments": {"prompt": "lchain $1"}}},
  {"text": "inner: {{lastToolResult}}"}]},
 {"name": "other", "match": "briefly: other (.+)$", "steps": [
  {"text": "scout did not ask peer"}]}
],"default":{"steps":[{"text":"echo: {{input}}"}]}}`

// startNestRemoteHost runs, on the folder top, a host whose researcher
// and scout agent plugins may call the remote agent peer at url.
func startNestRemoteHost(t *testing.T, top, url, script string) *sandboxHost {
	t.Helper()
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}}, map[string]any{"script": script})
	for _, name := range []string{"researcher", "scout"} {
		installPlugin(t, pluginDir, name, "agent", readExample(t, "researcher"),
			map[string]any{"hostFunctions": []string{"model_call", "tool_call", "result_read", "emit"}}, map[string]any{"maxRounds": 3})
	}
	return startSandboxHostWith(t, top, pluginDir, nil, map[string]any{
		"remoteAgents": []map[string]any{{"name": "peer", "url": url, "allowPrivateNetwork": true, "watchEvery": "200ms"}},
	})
}

// TestBlackBoxRelayedThroughTwoLevelsCalledAgainWithOtherArguments: peer's
// approval on host B is relayed by scout, then by researcher (both local
// on A). A restarts with a model whose researcher asks scout something
// else under the same call id, which scout answers without asking peer.
// The answer runs researcher again: its call of scout is a new call, and
// what waited below the old one (the sub-task of scout's call of peer,
// and B's task) ends canceled: when scout's call starts over (the levels
// below the old call's request), and at the latest at the turn's end (an
// unfinished sub-task under an ended one is an orphan); B's task is not
// left input-required until B's own expiry.
func TestBlackBoxRelayedThroughTwoLevelsCalledAgainWithOtherArguments(t *testing.T) {
	t.Parallel()
	b, ledger := startLedgerHost(t, nil)
	topA := t.TempDir()
	a := startNestRemoteHost(t, topA, b.base, nestRemoteScript)
	ca, cb := a2aClient(t, a.base, ""), a2aClient(t, b.base, "")
	task, err := apSend(t, ca, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("nest pay-7"))})
	if err != nil {
		t.Fatal(err)
	}
	if task.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("A's task is %s, want input-required", task.Status.State)
	}
	var inputID, remote, low string
	for _, p := range task.Status.Message.Parts {
		d, _ := p.Content.(a2a.Data)
		m, _ := d.Value.(map[string]any)
		rs, _ := m["requests"].([]any)
		if len(rs) != 1 {
			continue
		}
		req, _ := rs[0].(map[string]any)
		inputID, _ = req["inputId"].(string)
		r1, _ := req["route"].(map[string]any)
		r2, _ := r1["inner"].(map[string]any)
		r3, _ := r2["inner"].(map[string]any)
		remote, _ = r3["remoteTaskId"].(string)
		low, _ = r3["subtaskId"].(string)
		if r1["agentId"] != "researcher" || r2["agentId"] != "scout" || r3["agentId"] != "peer" || remote == "" || low == "" {
			t.Fatalf("the request's route: %v; want researcher, scout, then peer with its remote task", req)
		}
	}
	if inputID == "" {
		t.Fatalf("the paused task has no request: %+v", task.Status.Message)
	}
	if err := syscall.Kill(a.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	a = startNestRemoteHost(t, topA, b.base, strings.Replace(nestRemoteScript, `"prompt": "inner $1"`, `"prompt": "other $1"`, 1))
	ca = a2aClient(t, a.base, "")
	done, err := apSend(t, ca, apAnswer(task.ID, map[string]any{"inputId": inputID, "decision": "approve"}))
	if err != nil {
		t.Fatal(err)
	}
	if !done.Status.State.Terminal() {
		done = leftPause(t, ca, task.ID)
	}
	if text := artifactsText(done); done.Status.State != a2a.TaskStateCompleted || !strings.Contains(text, "top: outer: scout did not ask peer") {
		t.Fatalf("A's task %s %.600q; want completed with scout's new answer", done.Status.State, text)
	}
	waitRemoteState(t, cb, remote, a2a.TaskStateCanceled)
	if s := taskState(t, ca, low); s != a2a.TaskStateCanceled {
		t.Fatalf("the sub-task of scout's old call of peer is %s, want canceled", s)
	}
	if got, _ := os.ReadFile(ledger); len(got) != 0 {
		t.Fatalf("B's ledger: %q; want nothing run", got)
	}
}
