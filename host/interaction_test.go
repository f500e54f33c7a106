package host_test

import (
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2aext"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/loop"
)

// approvalScript: "ledger <text>" calls the non-idempotent ledger tool,
// then quotes its result.
const approvalScript = `{"rules": [
 {"name": "ledger", "match": "(?i)^ledger\\s+(.+)$", "steps": [
  {"toolCall": {"name": "ledger_append", "arguments": {"entry": "$1"}}},
  {"text": "Ledger: {{lastToolResult}}"}]},
 {"name": "both", "match": "(?i)^both (\\S+) (\\S+)$", "steps": [
  {"toolCall": {"name": "ledger_append", "arguments": {"entry": "$1"}}},
  {"toolCall": {"name": "get_location", "arguments": {"precision": "city"}}},
  {"toolCall": {"name": "ledger_append", "arguments": {"entry": "$2"}}},
  {"text": "Done: {{toolResults}}"}]},
 {"name": "where", "match": "(?i)^where am i$", "steps": [
  {"toolCall": {"name": "get_location", "arguments": {"precision": "city"}}},
  {"text": "You are in {{lastToolResult}}"}]},
 {"name": "exactly", "match": "(?i)^where exactly$", "steps": [
  {"toolCall": {"name": "get_location", "arguments": {"precision": "street"}}},
  {"text": "Result: {{lastToolResult}}"}]}]}`

// grantedPlugin copies an example plugin into dir with its own config and
// granted folders (none when paths is nil).
func grantedPlugin(t testing.TB, dir, name string, config map[string]any, paths []string) {
	t.Helper()
	copyPlugin(t, dir, name, func(m map[string]any) {
		m["config"] = config
		caps, _ := m["capabilities"].(map[string]any)
		delete(caps, "allowedPaths")
		if paths != nil {
			var ap []any
			for _, p := range paths {
				ap = append(ap, map[string]any{"path": p})
			}
			caps["allowedPaths"] = ap
		}
	})
}

// approvalHost is a host whose ledger calls need an approval; the ledger
// writes one line per execution in ledger.
type approvalHost struct {
	cfg    host.Config
	ledger string
}

func newApprovalHost(t testing.TB, ic host.InteractionConfig) approvalHost {
	root := t.TempDir()
	plugins := filepath.Join(root, "plugins")
	ledger := filepath.Join(root, "ledger")
	if err := os.MkdirAll(ledger, 0o755); err != nil {
		t.Fatal(err)
	}
	grantedPlugin(t, plugins, "scripted-model", map[string]any{"script": json.RawMessage(approvalScript)}, nil)
	grantedPlugin(t, plugins, "ledger", map[string]any{"dir": ledger}, []string{ledger})
	cfg := baseConfig(filepath.Join(root, "data"))
	cfg.PluginDir = plugins
	cfg.Plugins.Only = []string{"scripted-model", "ledger"}
	cfg.Plugins.PathRoots = []string{root}
	cfg.Plugins.NoWatch = true
	cfg.Interaction = ic
	return approvalHost{cfg: cfg, ledger: filepath.Join(ledger, "ledger.log")}
}

// lines are the ledger's lines: one per execution of the tool.
func (a approvalHost) lines(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile(a.ledger)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// requestsOf returns the extension's requests in a paused task's status.
func requestsOf(t testing.TB, task *a2a.Task) []map[string]any {
	t.Helper()
	if task.Status.Message == nil {
		t.Fatalf("task %s (%s) has no status message", task.ID, task.Status.State)
	}
	for _, p := range task.Status.Message.Parts {
		if p.Metadata[loop.InteractionURI] != "requests" {
			continue
		}
		d, ok := p.Content.(a2a.Data)
		if !ok {
			t.Fatalf("requests part is %T", p.Content)
		}
		m, _ := d.Value.(map[string]any)
		raw, _ := m["requests"].([]any)
		var out []map[string]any
		for _, r := range raw {
			out = append(out, r.(map[string]any))
		}
		return out
	}
	t.Fatalf("status message has no requests part: %+v", task.Status.Message)
	return nil
}

func answerMsg(taskID a2a.TaskID, responses ...map[string]any) *a2a.Message {
	dp := a2a.NewDataPart(map[string]any{"responses": responses})
	dp.Metadata = map[string]any{loop.InteractionURI: "responses"}
	m := a2a.NewMessage(a2a.MessageRoleUser, dp)
	m.TaskID = taskID
	return m
}

func pausedForApproval(t testing.TB, task *a2a.Task) map[string]any {
	t.Helper()
	if task.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("task is %s, want input-required", task.Status.State)
	}
	reqs := requestsOf(t, task)
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1: %v", len(reqs), reqs)
	}
	r := reqs[0]
	call, _ := r["call"].(map[string]any)
	tool, _ := r["tool"].(map[string]any)
	if r["inputType"] != "approval" || r["requireUser"] != true || call["name"] != "ledger_append" ||
		tool["source"] != "plugin" || tool["plugin"] != "ledger" || tool["grants"] == nil || r["expiresAt"] == nil {
		t.Fatalf("request = %v", r)
	}
	return r
}

// An approval truly blocks: the call waits, answers that do not fit are
// refused and change nothing, an approval runs the call exactly once, a
// second answer is refused; a rejection never runs it and its reason
// reaches the model (A2A 1.0, official client).
func TestApprovalBlocksUntilApproved(t *testing.T) {
	t.Parallel()
	ah := newApprovalHost(t, host.InteractionConfig{Approval: host.ApprovalConfig{Tools: []string{"ledger_*"}, AllowEdits: true}})
	h := startHost(t, ah.cfg)
	c := client10(t, h.URL(), "")
	ctx := context.Background()

	task := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("ledger pay 10")})
	r := pausedForApproval(t, task)
	if n := len(ah.lines(t)); n != 0 {
		t.Fatalf("the tool ran %d times before any approval", n)
	}
	id := r["inputId"].(string)

	// Answers that do not fit: each refused with invalid params, nothing runs.
	bad := []map[string]any{
		{"inputId": "approval:nope", "decision": "approve"},
		{"inputId": id, "decision": "maybe"},
		{"inputId": id, "decision": "approve", "arguments": map[string]any{"entry": 12}},
		{"inputId": id, "decision": "approve", "result": map[string]any{"content": "x"}},
	}
	for _, b := range bad {
		_, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID, b)})
		if err == nil || !strings.Contains(err.Error(), "invalid") && !strings.Contains(err.Error(), "-32602") {
			t.Fatalf("answer %v: err = %v, want invalid params", b, err)
		}
	}
	got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	pausedForApproval(t, got)
	if n := len(ah.lines(t)); n != 0 {
		t.Fatalf("a refused answer ran the tool (%d lines)", n)
	}

	// Approved with narrowed arguments: runs once, with them.
	done := send(t, c, ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
		map[string]any{"inputId": id, "decision": "approve", "arguments": map[string]any{"entry": "pay 5"}})})
	if done.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("after approval the task is %s", done.Status.State)
	}
	lines := ah.lines(t)
	if len(lines) != 1 || !strings.HasSuffix(lines[0], "\tpay 5") {
		t.Fatalf("ledger after approval = %q, want one line with the edited entry", lines)
	}
	if !strings.Contains(artifactText(done), "Ledger:") {
		t.Fatalf("answer = %q", artifactText(done))
	}
	// A decision is final.
	if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
		map[string]any{"inputId": id, "decision": "approve"})}); err == nil {
		t.Fatal("a second approval was accepted")
	}
	if n := len(ah.lines(t)); n != 1 {
		t.Fatalf("ledger has %d lines after a second approval", n)
	}

	// Rejected: never runs; the model is told the reason.
	task2 := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("ledger pay 99")})
	r2 := pausedForApproval(t, task2)
	done2 := send(t, c, ctx, &a2a.SendMessageRequest{Message: answerMsg(task2.ID,
		map[string]any{"inputId": r2["inputId"], "decision": "reject", "reason": "too much"})})
	if done2.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("after rejection the task is %s", done2.Status.State)
	}
	if !strings.Contains(artifactText(done2), "too much") {
		t.Fatalf("the model was not told the rejection's reason: %q", artifactText(done2))
	}
	if n := len(ah.lines(t)); n != 1 {
		t.Fatalf("a rejected call ran: ledger has %d lines", n)
	}
}

// stream sends a message with SendStreamingMessage and returns its events.
func stream(t testing.TB, c interface {
	SendStreamingMessage(context.Context, *a2a.SendMessageRequest) iter.Seq2[a2a.Event, error]
}, m *a2a.Message) []a2a.Event {
	t.Helper()
	var evs []a2a.Event
	for ev, err := range c.SendStreamingMessage(context.Background(), &a2a.SendMessageRequest{Message: m}) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// A pause survives a restart of the host: the task still waits, and the
// approval given to the new process runs the call exactly once. Both
// streams show the pause and the resumption.
func TestApprovalAcrossRestartAndStreams(t *testing.T) {
	t.Parallel()
	ah := newApprovalHost(t, host.InteractionConfig{Approval: host.ApprovalConfig{Plugins: []string{"ledger"}}})
	h := startHost(t, ah.cfg)
	c := client10(t, h.URL(), "")
	ctx := context.Background()

	evs := stream(t, c, userMsg("ledger across"))
	last, ok := evs[len(evs)-1].(*a2a.TaskStatusUpdateEvent)
	if !ok || last.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("the stream ends with %T %+v, want the input-required status", evs[len(evs)-1], evs[len(evs)-1])
	}
	r := pausedForApproval(t, &a2a.Task{ID: last.TaskID, Status: last.Status})
	if r["edits"].(map[string]any)["allowed"] != false {
		t.Fatalf("edits allowed without allowEdits: %v", r)
	}
	taskID, contextID := last.TaskID, last.ContextID

	// Restart: the new process finds the task still waiting.
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	h = startHost(t, ah.cfg)
	c = client10(t, h.URL(), "")
	got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: taskID})
	if err != nil {
		t.Fatal(err)
	}
	pausedForApproval(t, got)
	if n := len(ah.lines(t)); n != 0 {
		t.Fatalf("the tool ran %d times before any approval", n)
	}

	// Approve over a stream: a working status says who answered, then the end.
	evs = stream(t, c, answerMsg(taskID, map[string]any{"inputId": r["inputId"], "decision": "approve"}))
	var received, completed bool
	for _, ev := range evs {
		if su, ok := ev.(*a2a.TaskStatusUpdateEvent); ok {
			if su.Status.State == a2a.TaskStateWorking && su.Metadata["activity"] == "input-received" &&
				su.Metadata["inputId"] == r["inputId"] && su.Metadata["providedBy"] == "user" {
				received = true
			}
			completed = completed || su.Status.State == a2a.TaskStateCompleted
		}
	}
	if !received || !completed {
		t.Fatalf("approval stream: input-received %v, completed %v: %+v", received, completed, evs)
	}
	if n := len(ah.lines(t)); n != 1 {
		t.Fatalf("ledger has %d lines after one approval, want 1", n)
	}

	// Looopy's own stream has the request and the answer, with who gave it.
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp := openSSE(t, sctx, h.URL()+"/events/"+contextID+"?kinds=input-required,input-received", "", "")
	frames := readFrames(t, resp.Body, func(f frame) bool { return f.Event == "input-received" })
	if len(frames) != 2 || frames[0].Event != "input-required" ||
		!strings.Contains(frames[0].Data, `"inputType":"approval"`) || !strings.Contains(frames[0].Data, `"requireUser":true`) ||
		!strings.Contains(frames[0].Data, `"name":"ledger_append"`) ||
		!strings.Contains(frames[1].Data, `"providedBy":"user"`) || !strings.Contains(frames[1].Data, `"userId":"local"`) {
		t.Fatalf("/events frames = %+v", frames)
	}
}

// The same round trip with the official 0.3 client.
func TestApprovalA2A03(t *testing.T) {
	t.Parallel()
	ah := newApprovalHost(t, host.InteractionConfig{Approval: host.ApprovalConfig{Tools: []string{"ledger_append"}}})
	h := startHost(t, ah.cfg)
	c := client03For(t, h.URL(), "")
	ctx := context.Background()
	res, err := c.SendMessage(ctx, msg03("ledger zero three", ""))
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
				inputID, _ = reqs[0].(map[string]any)["inputId"].(string)
			}
		}
	}
	if inputID == "" || len(ah.lines(t)) != 0 {
		t.Fatalf("0.3 pause: inputId %q, ledger %q", inputID, ah.lines(t))
	}
	answer := func(resp map[string]any) (a2a03.SendMessageResult, error) {
		m := a2a03.NewMessage(a2a03.MessageRoleUser, a2a03.DataPart{
			Data:     map[string]any{"responses": []any{resp}},
			Metadata: map[string]any{loop.InteractionURI: "responses"}})
		m.TaskID = task.ID
		return c.SendMessage(ctx, &a2a03.MessageSendParams{Message: m})
	}
	if _, err := answer(map[string]any{"inputId": inputID, "decision": "approve", "arguments": map[string]any{"entry": "x"}}); err == nil {
		t.Fatal("edited arguments accepted without allowEdits")
	}
	res, err = answer(map[string]any{"inputId": inputID, "decision": "approve"})
	if err != nil {
		t.Fatal(err)
	}
	if done, ok := res.(*a2a03.Task); !ok || done.Status.State != a2a03.TaskStateCompleted || !strings.Contains(text03(done), "Ledger:") {
		t.Fatalf("0.3 after approval: %#v", res)
	}
	if n := len(ah.lines(t)); n != 1 {
		t.Fatalf("ledger has %d lines, want 1", n)
	}
	// Streamed: the final status update carries the requests part.
	var last a2a03.Event
	for ev, err := range c.SendStreamingMessage(ctx, msg03("ledger streamed", "")) {
		if err != nil {
			t.Fatal(err)
		}
		last = ev
	}
	su, ok := last.(*a2a03.TaskStatusUpdateEvent)
	if !ok || !su.Final || su.Status.State != a2a03.TaskStateInputRequired || su.Status.Message == nil {
		t.Fatalf("0.3 stream ends with %#v", last)
	}
	found := false
	for _, p := range su.Status.Message.Parts {
		if dp, ok := p.(a2a03.DataPart); ok && dp.Metadata[loop.InteractionURI] == "requests" {
			reqs, _ := dp.Data["requests"].([]any)
			found = len(reqs) == 1 && reqs[0].(map[string]any)["inputType"] == "approval"
		}
	}
	if !found {
		t.Fatalf("0.3 stream's pause has no requests part: %+v", su.Status.Message)
	}
}

// Unanswered requests expire as the operator says: rejected (the task goes
// on, the tool never runs) or failed. A waiting task can be cancelled, and
// an exempt principal's calls need no approval.
func TestApprovalExpiryCancelAndExemption(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	wait := func(c *a2aclient.Client, id a2a.TaskID, want a2a.TaskState) *a2a.Task {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: id})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.State == want {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s is %s after 60s, want %s", id, got.Status.State, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Run("reject", func(t *testing.T) {
		t.Parallel()
		ah := newApprovalHost(t, host.InteractionConfig{InputTimeout: host.Duration(time.Second),
			Approval: host.ApprovalConfig{Tools: []string{"ledger_append"}}})
		h := startHost(t, ah.cfg)
		c := client10(t, h.URL(), "")
		// The request may expire before the paused task is read back on a
		// loaded machine: its id is known (the script's first call).
		task := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("ledger late")})
		r := map[string]any{"inputId": "approval:call_1_0_0"}
		done := wait(c, task.ID, a2a.TaskStateCompleted)
		if !strings.Contains(artifactText(done), "no answer in time") || len(ah.lines(t)) != 0 {
			t.Fatalf("expired approval: answer %q, ledger %q", artifactText(done), ah.lines(t))
		}
		if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
			map[string]any{"inputId": r["inputId"], "decision": "approve"})}); err == nil {
			t.Fatal("a late approval was accepted")
		}
		if n := len(ah.lines(t)); n != 0 {
			t.Fatalf("a late approval ran the tool (%d lines)", n)
		}
	})
	t.Run("fail", func(t *testing.T) {
		t.Parallel()
		ah := newApprovalHost(t, host.InteractionConfig{InputTimeout: host.Duration(time.Second), OnTimeout: "fail",
			Approval: host.ApprovalConfig{Tools: []string{"ledger_append"}}})
		h := startHost(t, ah.cfg)
		c := client10(t, h.URL(), "")
		task := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("ledger late")})
		failed := wait(c, task.ID, a2a.TaskStateFailed)
		if failed.Status.Message == nil || !strings.Contains(failed.Status.Message.Parts[0].Text(), "expired") || len(ah.lines(t)) != 0 {
			t.Fatalf("expired approval with onTimeout fail: %+v, ledger %q", failed.Status, ah.lines(t))
		}
	})
	t.Run("cancel-and-exempt", func(t *testing.T) {
		t.Parallel()
		ah := newApprovalHost(t, host.InteractionConfig{Approval: host.ApprovalConfig{Tools: []string{"ledger_append"},
			ExemptPrincipals: []string{"ops"}}})
		ah.cfg.Auth = host.AuthConfig{Enabled: true, Keys: []host.APIKey{
			{Key: "alice-key", Principal: "alice"}, {Key: "ops-key", Principal: "ops"}}}
		h := startHost(t, ah.cfg)
		alice, ops := client10(t, h.URL(), "alice-key"), client10(t, h.URL(), "ops-key")
		task := send(t, alice, ctx, &a2a.SendMessageRequest{Message: userMsg("ledger cancel me")})
		r := pausedForApproval(t, task)
		// Another principal cannot answer it.
		if _, err := ops.SendMessage(ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
			map[string]any{"inputId": r["inputId"], "decision": "approve"})}); err == nil {
			t.Fatal("another principal answered alice's request")
		}
		canceled, err := alice.CancelTask(ctx, &a2a.CancelTaskRequest{ID: task.ID})
		if err != nil || canceled.Status.State != a2a.TaskStateCanceled {
			t.Fatalf("cancel a waiting task: %v, %+v", err, canceled)
		}
		if _, err := alice.SendMessage(ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
			map[string]any{"inputId": r["inputId"], "decision": "approve"})}); err == nil {
			t.Fatal("an approval of a canceled task was accepted")
		}
		if n := len(ah.lines(t)); n != 0 {
			t.Fatalf("a canceled call ran (%d lines)", n)
		}
		done := send(t, ops, ctx, &a2a.SendMessageRequest{Message: userMsg("ledger exempt")})
		if done.Status.State != a2a.TaskStateCompleted || len(ah.lines(t)) != 1 {
			t.Fatalf("an exempt principal's call: %s, ledger %q", done.Status.State, ah.lines(t))
		}
	})
}

// locationTool is a client tool offer: parameters and a result schema.
var locationTool = map[string]any{"name": "get_location", "description": "The user's current city.",
	"parameters": map[string]any{"type": "object", "properties": map[string]any{
		"precision": map[string]any{"type": "string", "enum": []any{"city", "country"}}}},
	"resultSchema": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}},
		"required": []any{"city"}}}

func offering(m *a2a.Message, tools ...any) *a2a.Message {
	m.Metadata = map[string]any{loop.InteractionURI: map[string]any{"clientTools": tools}}
	return m
}

// Client tools: offered with the message, a call pauses the task with the
// call; the client's result continues the same task; results that do not
// fit, and bad offers, are refused and change nothing; a call whose
// arguments break the tool's schema is answered to the model at once.
func TestClientTools(t *testing.T) {
	t.Parallel()
	ah := newApprovalHost(t, host.InteractionConfig{Approval: host.ApprovalConfig{Tools: []string{"ledger_append"}}})
	h := startHost(t, ah.cfg)
	c := client10(t, h.URL(), "")
	ctx := context.Background()

	// Bad offers are refused before any task starts.
	for _, bad := range []any{
		map[string]any{"name": "bad name!"},
		map[string]any{"name": "ledger_append"},
		map[string]any{"name": "x", "parameters": map[string]any{"type": 12}},
		map[string]any{"name": "x", "unknownField": true},
	} {
		if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: offering(userMsg("where am i"), bad)}); err == nil {
			t.Fatalf("offer %v accepted", bad)
		}
	}

	task := send(t, c, ctx, &a2a.SendMessageRequest{Message: offering(userMsg("where am i"), locationTool)})
	if task.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("task is %s, want input-required", task.Status.State)
	}
	reqs := requestsOf(t, task)
	if len(reqs) != 1 || reqs[0]["inputType"] != "client-tool" || reqs[0]["resultSchema"] == nil ||
		reqs[0]["call"].(map[string]any)["name"] != "get_location" {
		t.Fatalf("requests = %v", reqs)
	}
	id := reqs[0]["inputId"]
	for _, bad := range []map[string]any{
		{"inputId": "client-tool:other", "result": map[string]any{"content": "Paris", "data": map[string]any{"city": "Paris"}}},
		{"inputId": id, "result": map[string]any{"content": "Paris", "data": map[string]any{"town": "Paris"}}},
		{"inputId": id, "result": map[string]any{"data": map[string]any{"city": "Paris"}}},
		{"inputId": id, "decision": "approve"},
	} {
		if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID, bad)}); err == nil {
			t.Fatalf("result %v accepted", bad)
		}
	}
	got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
	if err != nil || got.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("after refused results: %v, %+v", err, got)
	}
	done := send(t, c, ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
		map[string]any{"inputId": id, "result": map[string]any{"content": "Paris", "data": map[string]any{"city": "Paris"}}})})
	if done.ID != task.ID || done.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(done), "You are in Paris") {
		t.Fatalf("after the result: %s %q", done.Status.State, artifactText(done))
	}

	// Arguments that break the tool's parameters: no pause, the model is told.
	task = send(t, c, ctx, &a2a.SendMessageRequest{Message: offering(userMsg("where exactly"), locationTool)})
	if task.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(task), "do not match") {
		t.Fatalf("a call with bad arguments: %s %q", task.Status.State, artifactText(task))
	}
}

// The client tool round trip with the official 0.3 client, across a
// restart of the host.
func TestClientToolsA2A03(t *testing.T) {
	t.Parallel()
	ah := newApprovalHost(t, host.InteractionConfig{})
	h := startHost(t, ah.cfg)
	c := client03For(t, h.URL(), "")
	ctx := context.Background()
	p := msg03("where am i", "")
	p.Message.Metadata = map[string]any{loop.InteractionURI: map[string]any{"clientTools": []any{locationTool}}}
	res, err := c.SendMessage(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a03.Task)
	if !ok || task.Status.State != a2a03.TaskStateInputRequired || task.Status.Message == nil {
		t.Fatalf("0.3 send = %#v", res)
	}
	var inputID string
	for _, part := range task.Status.Message.Parts {
		if dp, ok := part.(a2a03.DataPart); ok && dp.Metadata[loop.InteractionURI] == "requests" {
			if reqs, _ := dp.Data["requests"].([]any); len(reqs) == 1 {
				inputID, _ = reqs[0].(map[string]any)["inputId"].(string)
			}
		}
	}
	// The offer is the task's: it survives a restart of the host.
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	h = startHost(t, ah.cfg)
	c = client03For(t, h.URL(), "")
	m := a2a03.NewMessage(a2a03.MessageRoleUser, a2a03.DataPart{
		Data: map[string]any{"responses": []any{map[string]any{"inputId": inputID,
			"result": map[string]any{"content": "Lyon", "data": map[string]any{"city": "Lyon"}}}}},
		Metadata: map[string]any{loop.InteractionURI: "responses"}})
	m.TaskID = task.ID
	res, err = c.SendMessage(ctx, &a2a03.MessageSendParams{Message: m})
	if err != nil {
		t.Fatal(err)
	}
	if done, ok := res.(*a2a03.Task); !ok || done.Status.State != a2a03.TaskStateCompleted || !strings.Contains(text03(done), "You are in Lyon") {
		t.Fatalf("0.3 after the result: %#v", res)
	}
}

// One response asks for three things (two approvals, a client tool): the
// answers may come in several messages; the task stays paused, listing
// what is still open, until the last, and goes on once.
func TestPartialAnswers(t *testing.T) {
	t.Parallel()
	ah := newApprovalHost(t, host.InteractionConfig{Approval: host.ApprovalConfig{Tools: []string{"ledger_append"}}})
	h := startHost(t, ah.cfg)
	c := client10(t, h.URL(), "")
	ctx := context.Background()
	task := send(t, c, ctx, &a2a.SendMessageRequest{Message: offering(userMsg("both one two"), locationTool)})
	reqs := requestsOf(t, task)
	if task.Status.State != a2a.TaskStateInputRequired || len(reqs) != 3 {
		t.Fatalf("task %s with %d requests, want 3: %v", task.Status.State, len(reqs), reqs)
	}
	ids := map[string]string{} // input type + entry -> input id
	for _, r := range reqs {
		args, _ := r["call"].(map[string]any)["arguments"].(map[string]any)
		entry, _ := args["entry"].(string)
		ids[r["inputType"].(string)+entry] = r["inputId"].(string)
	}
	// A plain text message does not answer them.
	if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: func() *a2a.Message {
		m := userMsg("hello?")
		m.TaskID = task.ID
		return m
	}()}); err == nil {
		t.Fatal("a text message was accepted by a task waiting for responses")
	}
	got := send(t, c, ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
		map[string]any{"inputId": ids["approvalone"], "decision": "approve"})})
	if got.Status.State != a2a.TaskStateInputRequired || len(requestsOf(t, got)) != 2 || len(ah.lines(t)) != 0 {
		t.Fatalf("after one answer: %s, %d open, ledger %q", got.Status.State, len(requestsOf(t, got)), ah.lines(t))
	}
	got = send(t, c, ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
		map[string]any{"inputId": ids["client-tool"], "result": map[string]any{"content": "Oslo", "data": map[string]any{"city": "Oslo"}}})})
	if got.Status.State != a2a.TaskStateInputRequired || len(requestsOf(t, got)) != 1 {
		t.Fatalf("after two answers: %s, %d open", got.Status.State, len(requestsOf(t, got)))
	}
	done := send(t, c, ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
		map[string]any{"inputId": ids["approvaltwo"], "decision": "reject", "reason": "only one"})})
	if done.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("after the last answer: %s", done.Status.State)
	}
	lines := ah.lines(t)
	if len(lines) != 1 || !strings.HasSuffix(lines[0], "\tone") {
		t.Fatalf("ledger = %q, want the approved call only", lines)
	}
	text := artifactText(done)
	if !strings.Contains(text, "Oslo") || !strings.Contains(text, "only one") {
		t.Fatalf("the model did not see every result: %q", text)
	}
}

// recordingTransport keeps the request and response headers of every call.
type recordingTransport struct {
	mu   sync.Mutex
	sent []string // the A2A-Extensions header of each request
	got  []string // the A2A-Extensions header of each response
}

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.sent = append(rt.sent, r.Header.Get("A2A-Extensions"))
	if err == nil {
		rt.got = append(rt.got, resp.Header.Get("A2A-Extensions"))
	}
	return resp, err
}

// The card declares the extension; a client that activates it (the
// official activator) is answered with the header naming it; one that
// does not is not.
func TestInteractionExtensionDeclaredAndActivated(t *testing.T) {
	t.Parallel()
	ah := newApprovalHost(t, host.InteractionConfig{Approval: host.ApprovalConfig{Tools: []string{"ledger_append"}}})
	h := startHost(t, ah.cfg)
	ctx := context.Background()
	card, err := agentcard.NewResolver(http.DefaultClient).Resolve(ctx, h.URL())
	if err != nil {
		t.Fatal(err)
	}
	var ext *a2a.AgentExtension
	for i := range card.Capabilities.Extensions {
		if card.Capabilities.Extensions[i].URI == loop.InteractionURI {
			ext = &card.Capabilities.Extensions[i]
		}
	}
	if ext == nil || ext.Required || ext.Params["onTimeout"] != "reject" || ext.Params["inputTimeout"] != "24h0m0s" {
		t.Fatalf("card extensions = %+v", card.Capabilities.Extensions)
	}
	rec := &recordingTransport{}
	c, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(&http.Client{Transport: rec}),
		a2aclient.WithCallInterceptors(a2aext.NewActivator(loop.InteractionURI)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	task := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("ledger activated")})
	pausedForApproval(t, task)
	rec.mu.Lock()
	sent, got := rec.sent, rec.got
	rec.mu.Unlock()
	if len(sent) != 1 || sent[0] != loop.InteractionURI || got[0] != loop.InteractionURI {
		t.Fatalf("activation: sent %q, answered %q", sent, got)
	}
	// Without activation, no header; 0.3 uses its own header name.
	for _, tc := range []struct{ path, header, value string }{
		{"/", "A2A-Extensions", ""}, {"/a2a/v0.3", "X-A2A-Extensions", loop.InteractionURI}} {
		req, _ := http.NewRequest(http.MethodPost, h.URL()+tc.path,
			strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"`+string(task.ID)+`"}}`))
		req.Header.Set("Content-Type", "application/json")
		if tc.value != "" {
			req.Header.Set(tc.header, tc.value)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Header.Get(tc.header) != tc.value {
			t.Fatalf("%s: %s answered %q, want %q", tc.path, tc.header, resp.Header.Get(tc.header), tc.value)
		}
	}
}

// BenchmarkApprovalRoundTrip: a task that pauses for an approval (one
// SendMessage, the ledger call held) and its approval (a second
// SendMessage, the call run, the task completed), on Badger, one client.
// Reports round trips per second and the latency of each half.
func BenchmarkApprovalRoundTrip(b *testing.B) {
	ah := newApprovalHost(b, host.InteractionConfig{Approval: host.ApprovalConfig{Tools: []string{"ledger_append"}}})
	h := startHost(b, ah.cfg)
	c := client10(b, h.URL(), "")
	ctx := context.Background()
	pause := make([]time.Duration, b.N)
	approve := make([]time.Duration, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		t0 := time.Now()
		task := send(b, c, ctx, &a2a.SendMessageRequest{Message: userMsg("ledger bench")})
		pause[i] = time.Since(t0)
		r := pausedForApproval(b, task)
		t1 := time.Now()
		done := send(b, c, ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
			map[string]any{"inputId": r["inputId"], "decision": "approve"})})
		approve[i] = time.Since(t1)
		if done.Status.State != a2a.TaskStateCompleted {
			b.Fatalf("after approval: %s", done.Status.State)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	med := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "roundtrips/s")
	b.ReportMetric(med(pause), "pause-p50-ms")
	b.ReportMetric(med(approve), "approve-p50-ms")
}
