package host_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/loop"
)

// coordinatorScript: "delegate <text>" asks the remote agent "child" and
// quotes its answer; asked by a sub-agent for input it may give, it
// approves.
const coordinatorScript = `{"rules": [
 {"name": "delegate", "match": "(?i)^delegate\\s+(.+)$", "steps": [
  {"toolCall": {"name": "child", "arguments": {"prompt": "$1"}}},
  {"text": "Child: {{lastToolResult}}"}]},
 {"name": "coordinate", "match": "(?s)^The sub-agent child was asked: .*It asks for input \\(approval\\)", "steps": [
  {"text": "approve"}]}]}`

// routedPair starts a child host whose ledger calls need an approval
// (agentMayApprove as given) and a parent host that calls it as the
// remote agent "child" with the coordinator script. It returns the
// parent's config (to restart it), the parent, and the child's ledger.
func routedPair(t *testing.T, agentMayApprove bool) (host.Config, *testHost, routedChild) {
	t.Helper()
	return routedPairWith(t, agentMayApprove, nil)
}

// routedPairWith is routedPair with the parent's config changed by edit
// (when not nil) before it starts.
func routedPairWith(t *testing.T, agentMayApprove bool, edit func(*host.Config)) (host.Config, *testHost, routedChild) {
	t.Helper()
	ah := newApprovalHost(t, host.InteractionConfig{Approval: host.ApprovalConfig{Tools: []string{"ledger_*"},
		AgentMayApprove: agentMayApprove}})
	ah.cfg.Auth = host.AuthConfig{Enabled: true, Keys: []host.APIKey{{Key: "parent-key", Principal: "parent-host"}}}
	child := startHost(t, ah.cfg)

	root := t.TempDir()
	plugins := filepath.Join(root, "plugins")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	grantedPlugin(t, plugins, "scripted-model", map[string]any{"script": json.RawMessage(coordinatorScript)}, nil)
	pcfg := baseConfig(filepath.Join(root, "data"))
	pcfg.PluginDir = plugins
	pcfg.Plugins.Only = []string{"scripted-model"}
	pcfg.Plugins.NoWatch = true
	pcfg.Auth = host.AuthConfig{Enabled: true, Keys: []host.APIKey{{Key: "alice-key", Principal: "alice"}}}
	pcfg.RemoteAgents = []host.RemoteAgentConfig{{Name: "child", URL: child.URL(),
		Headers: map[string]string{"Authorization": "Bearer parent-key"}, AllowPrivateNetwork: true}}
	if edit != nil {
		edit(&pcfg)
	}
	return pcfg, startHost(t, pcfg), routedChild{ah, child.URL()}
}

// routedChild is the child host of routedPair: its ledger and its URL.
type routedChild struct {
	approvalHost
	url string
}

// pausedForChild checks that the parent task waits for its remote child's
// approval, passed up: namespaced with the sub-task's id, with its route.
func pausedForChild(t *testing.T, task *a2a.Task) map[string]any {
	t.Helper()
	if task.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("parent task is %s, want input-required", task.Status.State)
	}
	reqs := requestsOf(t, task)
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1: %v", len(reqs), reqs)
	}
	r := reqs[0]
	route, _ := r["route"].(map[string]any)
	call, _ := route["call"].(map[string]any)
	sub, _ := route["subtaskId"].(string)
	if r["inputType"] != "approval" || r["requireUser"] != true || route["agentId"] != "child" || sub == "" ||
		!strings.HasPrefix(r["inputId"].(string), sub+":") || route["remoteTaskId"] == nil || call["name"] != "ledger_append" ||
		!strings.Contains(r["prompt"].(string), "The sub-agent child") {
		t.Fatalf("passed-up request = %v", r)
	}
	return r
}

// A remote sub-agent's request that a person must answer pauses the
// parent in input-required with the request (namespaced, routed); the
// pause survives a restart of the parent; a wrong answer is refused and
// runs nothing; the client's approval on the parent task goes down to the
// child's task, whose call runs exactly once, and both tasks complete
// (A2A 1.0, official client, two hosts on loopback).
func TestRoutedApprovalFromRemoteChild(t *testing.T) {
	t.Parallel()
	pcfg, parent, ah := routedPair(t, false)
	alice := client10(t, parent.URL(), "alice-key")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	m := userMsg("delegate ledger pay 10")
	m.ContextID = "routed-1"
	task := send(t, alice, ctx, &a2a.SendMessageRequest{Message: m})
	r := pausedForChild(t, task)
	if n := len(ah.lines(t)); n != 0 {
		t.Fatalf("the child's tool ran %d times before any approval", n)
	}

	// The parent restarts while it waits: the request is still pending.
	if err := parent.Close(); err != nil {
		t.Fatal(err)
	}
	parent = startHost(t, pcfg)
	alice = client10(t, parent.URL(), "alice-key")
	got, err := alice.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	pausedForChild(t, got)

	// The child's own id is not an id of the parent's: refused.
	route := r["route"].(map[string]any)
	if _, err := alice.SendMessage(ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
		map[string]any{"inputId": route["inputId"], "decision": "approve"})}); err == nil {
		t.Fatal("an answer naming the child's own inputId was accepted on the parent")
	}
	if n := len(ah.lines(t)); n != 0 {
		t.Fatalf("a refused answer ran the child's tool (%d lines)", n)
	}

	done := send(t, alice, ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
		map[string]any{"inputId": r["inputId"], "decision": "approve"})})
	if done.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(done), "Child: Ledger:") {
		t.Fatalf("parent after the approval: %s %q", done.Status.State, artifactText(done))
	}
	if lines := ah.lines(t); len(lines) != 1 || !strings.HasSuffix(lines[0], "\tpay 10") {
		t.Fatalf("ledger = %q, want one line", lines)
	}
	// The child's task (the same one that asked) completed, answered by the user.
	asParent := client10(t, ah.url, "parent-key")
	ct, err := asParent.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(route["remoteTaskId"].(string))})
	if err != nil || ct.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("child task: %+v, %v", ct, err)
	}

	// The parent's stream: the child's request on the sub-task, the
	// parent's own pause, and the user's answer.
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	resp := openSSE(t, sctx, parent.URL()+"/events/routed-1?kinds=input-required,input-received", "alice-key", "")
	frames := readFrames(t, resp.Body, func(f frame) bool { return f.Event == "input-received" })
	var childAsk, parentAsk, received bool
	for _, f := range frames {
		switch {
		case f.Event == "input-required" && strings.Contains(f.Data, `"parentTaskId":"`+string(task.ID)+`"`):
			childAsk = true
		case f.Event == "input-required" && strings.Contains(f.Data, `"inputId":"`+r["inputId"].(string)+`"`):
			parentAsk = strings.Contains(f.Data, `"requireUser":true`)
		case f.Event == "input-received":
			received = strings.Contains(f.Data, `"providedBy":"user"`) && strings.Contains(f.Data, `"userId":"alice"`)
		}
	}
	if !childAsk || !parentAsk || !received {
		t.Fatalf("/events: child's request %v, parent's %v, answer %v: %+v", childAsk, parentAsk, received, frames)
	}
}

// A request the child lets an agent answer (requireUser false) is answered
// by the parent's model: the parent never pauses, the child's call runs
// once, and the answer is recorded as the agent's.
func TestRoutedApprovalAnsweredByParentModel(t *testing.T) {
	t.Parallel()
	_, parent, ah := routedPair(t, true)
	alice := client10(t, parent.URL(), "alice-key")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m := userMsg("delegate ledger pay 7")
	m.ContextID = "routed-2"
	done := send(t, alice, ctx, &a2a.SendMessageRequest{Message: m})
	if done.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(done), "Child: Ledger:") {
		t.Fatalf("parent: %s %q", done.Status.State, artifactText(done))
	}
	if lines := ah.lines(t); len(lines) != 1 || !strings.HasSuffix(lines[0], "\tpay 7") {
		t.Fatalf("ledger = %q, want one line", lines)
	}
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	resp := openSSE(t, sctx, parent.URL()+"/events/routed-2?kinds=input-required,input-received", "alice-key", "")
	frames := readFrames(t, resp.Body, func(f frame) bool { return f.Event == "input-received" })
	if len(frames) != 2 || !strings.Contains(frames[0].Data, `"requireUser":false`) ||
		!strings.Contains(frames[1].Data, `"providedBy":"agent"`) || !strings.Contains(frames[1].Data, `"parentTaskId":"`+string(done.ID)+`"`) {
		t.Fatalf("/events frames = %+v", frames)
	}
}

// The pass-up round trip with the official 0.3 client on the parent.
func TestRoutedApprovalA2A03(t *testing.T) {
	t.Parallel()
	_, parent, ah := routedPair(t, false)
	c := client03For(t, parent.URL(), "alice-key")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := c.SendMessage(ctx, msg03("delegate ledger pay 3", ""))
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a03.Task)
	if !ok || task.Status.State != a2a03.TaskStateInputRequired || task.Status.Message == nil {
		t.Fatalf("0.3 send = %#v", res)
	}
	var inputID string
	for _, p := range task.Status.Message.Parts {
		if dp, ok := p.(a2a03.DataPart); ok && dp.Metadata[loop.InteractionURI] == "requests" {
			reqs, _ := dp.Data["requests"].([]any)
			if len(reqs) == 1 {
				if rt, _ := reqs[0].(map[string]any)["route"].(map[string]any); rt["agentId"] == "child" {
					inputID, _ = reqs[0].(map[string]any)["inputId"].(string)
				}
			}
		}
	}
	if inputID == "" || len(ah.lines(t)) != 0 {
		t.Fatalf("0.3 pause: inputId %q, ledger %q", inputID, ah.lines(t))
	}
	am := a2a03.NewMessage(a2a03.MessageRoleUser, a2a03.DataPart{
		Data:     map[string]any{"responses": []any{map[string]any{"inputId": inputID, "decision": "reject", "reason": "not today"}}},
		Metadata: map[string]any{loop.InteractionURI: "responses"}})
	am.TaskID = task.ID
	res, err = c.SendMessage(ctx, &a2a03.MessageSendParams{Message: am})
	if err != nil {
		t.Fatal(err)
	}
	// Rejected: the child's call never runs, its model is told why.
	if done, ok := res.(*a2a03.Task); !ok || done.Status.State != a2a03.TaskStateCompleted || !strings.Contains(text03(done), "not today") {
		t.Fatalf("0.3 after the rejection: %#v", res)
	}
	if n := len(ah.lines(t)); n != 0 {
		t.Fatalf("a rejected call ran: ledger has %d lines", n)
	}
}

// localScript: "local <text>" asks the researcher agent plugin (a local
// sub-agent), whose model calls then play the ledger and profile rules.
const localScript = `{"rules": [
 {"name": "local", "match": "(?i)^local\\s+(.+)$", "steps": [
  {"toolCall": {"name": "researcher", "arguments": {"prompt": "$1"}}},
  {"text": "Researcher: {{lastToolResult}}"}]},
 {"name": "ledger", "match": "(?i)briefly: ledger\\s+(.+)$", "steps": [
  {"toolCall": {"name": "ledger_append", "arguments": {"entry": "$1"}}},
  {"text": "Ledger: {{lastToolResult}}"}]},
 {"name": "twice", "match": "(?i)briefly: twice (\\S+) (\\S+)$", "steps": [
  {"toolCall": {"name": "ledger_append", "arguments": {"entry": "$1"}}},
  {"toolCall": {"name": "ledger_append", "arguments": {"entry": "$2"}}, "delayMs": 1},
  {"text": "Twice: {{toolResults}}"}]},
 {"name": "profile", "match": "(?i)briefly: profile", "steps": [
  {"toolCall": {"name": "profile_read", "arguments": {}}},
  {"text": "Profile: {{lastToolResult}}"}]}]}`

// localRoutingHost serves the scripted model, the researcher agent plugin,
// the ledger (its calls need a person's approval) and authed-api.
func localRoutingHost(t *testing.T) (host.Config, approvalHost) {
	t.Helper()
	ah := newApprovalHost(t, host.InteractionConfig{Approval: host.ApprovalConfig{Tools: []string{"ledger_*"}}})
	plugins := ah.cfg.PluginDir
	grantedPlugin(t, plugins, "scripted-model", map[string]any{"script": json.RawMessage(localScript)}, nil)
	copyPlugin(t, plugins, "researcher", nil)
	copyPlugin(t, plugins, "authed-api", nil)
	ah.cfg.Plugins.Only = []string{"scripted-model", "ledger", "researcher", "authed-api"}
	ah.cfg.Auth = host.AuthConfig{Enabled: true, Keys: []host.APIKey{{Key: "alice-key", Principal: "alice"}}}
	return ah.cfg, ah
}

// A local sub-agent (an agent plugin) whose tool call needs a person's
// approval stops; the parent pauses with the request (routed to the
// sub-task and the call); after a restart of the host the request is still
// pending; the client's approval on the parent goes down to the sub-agent,
// which runs again, and its call runs exactly once.
func TestRoutedApprovalFromLocalChild(t *testing.T) {
	t.Parallel()
	cfg, ah := localRoutingHost(t)
	h := startHost(t, cfg)
	alice := client10(t, h.URL(), "alice-key")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	task := send(t, alice, ctx, &a2a.SendMessageRequest{Message: userMsg("local ledger pay 4")})
	if task.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("parent is %s %q, want input-required", task.Status.State, artifactText(task))
	}
	reqs := requestsOf(t, task)
	route, _ := reqs[0]["route"].(map[string]any)
	call, _ := route["call"].(map[string]any)
	if len(reqs) != 1 || reqs[0]["inputType"] != "approval" || route["agentId"] != "researcher" || call["name"] != "ledger_append" ||
		!strings.HasPrefix(reqs[0]["inputId"].(string), route["subtaskId"].(string)+":") {
		t.Fatalf("requests = %v", reqs)
	}
	if n := len(ah.lines(t)); n != 0 {
		t.Fatalf("the sub-agent's call ran %d times before any approval", n)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	h = startHost(t, cfg)
	alice = client10(t, h.URL(), "alice-key")
	got, err := alice.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
	if err != nil || got.Status.State != a2a.TaskStateInputRequired || requestsOf(t, got)[0]["inputId"] != reqs[0]["inputId"] {
		t.Fatalf("after a restart: %+v, %v", got, err)
	}
	done := send(t, alice, ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
		map[string]any{"inputId": reqs[0]["inputId"], "decision": "approve"})})
	if done.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(done), "Researcher:") {
		t.Fatalf("parent after the approval: %s %q", done.Status.State, artifactText(done))
	}
	if lines := ah.lines(t); len(lines) != 1 || !strings.HasSuffix(lines[0], "\tpay 4") {
		t.Fatalf("ledger = %q, want one line", lines)
	}
}

// A local sub-agent's plugin that needs a credential pauses the parent in
// auth-required; the client's credential, sent on the parent task,
// reaches that plugin in the sub-task, and the sub-agent answers.
func TestRoutedAuthFromLocalChild(t *testing.T) {
	t.Parallel()
	cfg, _ := localRoutingHost(t)
	h := startHost(t, cfg)
	alice := client10(t, h.URL(), "alice-key")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	task := send(t, alice, ctx, &a2a.SendMessageRequest{Message: userMsg("local profile please")})
	if task.Status.State != a2a.TaskStateAuthRequired {
		t.Fatalf("parent is %s %q, want auth-required", task.Status.State, artifactText(task))
	}
	reqs := requestsOf(t, task)
	auth, _ := reqs[0]["auth"].(map[string]any)
	route, _ := reqs[0]["route"].(map[string]any)
	if len(reqs) != 1 || reqs[0]["inputType"] != "auth" || auth["provider"] != "example-oauth" || auth["holder"] != "plugin:authed-api" ||
		route["agentId"] != "researcher" {
		t.Fatalf("requests = %v", reqs)
	}
	// A response without the credential is refused.
	if _, err := alice.SendMessage(ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
		map[string]any{"inputId": reqs[0]["inputId"]})}); err == nil {
		t.Fatal("an auth response without a credential was accepted")
	}
	const token = "routed-token-6f2b"
	done := send(t, alice, ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
		map[string]any{"inputId": reqs[0]["inputId"], "credential": map[string]any{"token": token}})})
	if done.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(done), digest(token)) ||
		strings.Contains(artifactText(done), token) {
		t.Fatalf("parent after the credential: %s %q %q", done.Status.State, artifactText(done), done.Status.Message.Parts[0].Text())
	}
}

// A local sub-agent that needs two approvals, one after the other: the
// parent pauses twice; the second time the sub-agent runs again, its first
// call (approved and run already) is neither asked about nor run again; a
// rejection is final too. Each approved call runs exactly once.
func TestRoutedApprovalsOneAfterAnother(t *testing.T) {
	t.Parallel()
	cfg, ah := localRoutingHost(t)
	h := startHost(t, cfg)
	alice := client10(t, h.URL(), "alice-key")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	task := send(t, alice, ctx, &a2a.SendMessageRequest{Message: userMsg("local twice first second")})
	answer := func(decision, wantEntry string) *a2a.Task {
		t.Helper()
		if task.Status.State != a2a.TaskStateInputRequired {
			t.Fatalf("parent is %s %q, want input-required", task.Status.State, artifactText(task))
		}
		reqs := requestsOf(t, task)
		route, _ := reqs[0]["route"].(map[string]any)
		call, _ := route["call"].(map[string]any)
		args, _ := call["arguments"].(map[string]any)
		if len(reqs) != 1 || args["entry"] != wantEntry {
			t.Fatalf("requests = %v, want the approval of %q", reqs, wantEntry)
		}
		return send(t, alice, ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
			map[string]any{"inputId": reqs[0]["inputId"], "decision": decision, "reason": "no " + wantEntry})})
	}
	task = answer("approve", "first")
	if lines := ah.lines(t); len(lines) != 1 || !strings.HasSuffix(lines[0], "\tfirst") {
		t.Fatalf("ledger after the first approval = %q", lines)
	}
	task = answer("reject", "second")
	if task.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(task), "no second") {
		t.Fatalf("parent after the second answer: %s %q", task.Status.State, artifactText(task))
	}
	if lines := ah.lines(t); len(lines) != 1 {
		t.Fatalf("ledger = %q, want the first call once and the rejected one never", lines)
	}
}
