package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Attacks on interaction.approval through the real binary: a tool the
// operator marks for approval called over MCP (/mcp and `looopy mcp`), by
// an agent plugin's sub-agent called over MCP, and by the agent tool; a
// request a sub-agent passes up answered on the sub-task instead of the
// parent, answered twice, or answered by a self-declared agent where a
// person must answer. The ledger plugin writes one line per execution:
// what must never happen shows there.

const apScript = `{"rules": [
 {"name": "local", "match": "(?i)^local\\s+(.+)$", "steps": [
  {"toolCall": {"name": "researcher", "arguments": {"prompt": "$1"}}},
  {"text": "Researcher: {{lastToolResult}}"}]},
 {"name": "sub", "match": "(?i)briefly: ledger\\s+(.+)$", "steps": [
  {"toolCall": {"name": "ledger_append", "arguments": {"entry": "sub $1"}}},
  {"text": "Ledger: {{lastToolResult}}"}]},
 {"name": "ledger", "match": "(?i)^ledger\\s+(.+)$", "steps": [
  {"toolCall": {"name": "ledger_append", "arguments": {"entry": "$1"}}},
  {"text": "Ledger: {{lastToolResult}}"}]}
],"default":{"steps":[{"text":"echo: {{input}}"}]}}`

const (
	apAliceKey = "alice-key-AAAAAAAAAAAAAAAAAAAA"
	apOpsKey   = "ops-key-OOOOOOOOOOOOOOOOOOOOOO"
)

type approvalBB struct {
	h       *sandboxHost
	top     string
	cfgPath string
	ledger  string
}

// startApprovalHost: auth on (alice, and ops who is exempt), ledger_append
// needs an approval, the agent exposed over MCP, the researcher agent
// plugin as a local sub-agent.
func startApprovalHost(t *testing.T) *approvalBB {
	t.Helper()
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
	installPlugin(t, pluginDir, "researcher", "agent", readExample(t, "researcher"),
		map[string]any{"hostFunctions": []string{"model_call", "tool_call", "result_read", "emit"}}, map[string]any{"maxRounds": 3})
	h := startSandboxHostWith(t, top, pluginDir, map[string]any{"pathRoots": []string{filepath.Join(top, "grants")}}, map[string]any{
		"auth": map[string]any{"enabled": true, "keys": []map[string]any{
			{"key": apAliceKey, "principal": "alice"}, {"key": apOpsKey, "principal": "ops"}}},
		"interaction": map[string]any{"approval": map[string]any{"tools": []string{"ledger_append"}, "exemptPrincipals": []string{"ops"}}},
		"mcp":         map[string]any{"exposeAgent": true},
	})
	return &approvalBB{h: h, top: top, cfgPath: filepath.Join(top, "looopy.json"), ledger: filepath.Join(grant, "ledger.log")}
}

// lines are the ledger's lines: one per execution of ledger_append.
func (a *approvalBB) lines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(a.ledger)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func (a *approvalBB) wantLines(t *testing.T, when string, n int) {
	t.Helper()
	if got := a.lines(t); len(got) != n {
		t.Fatalf("%s: the ledger has %d lines %q, want %d", when, len(got), got, n)
	}
}

type apBearer struct{ tok string }

func (b apBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return http.DefaultTransport.RoundTrip(r)
}

func apMCP(t *testing.T, base, key string) *sdk.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := sdk.NewClient(&sdk.Implementation{Name: "approval-attack", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: base + "/mcp",
		HTTPClient: &http.Client{Transport: apBearer{key}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect to /mcp: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func apCall(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s: %v", tool, err)
	}
	return res
}

func apText(r *sdk.CallToolResult) string {
	var sb strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			sb.WriteString(tc.Text)
		}
	}
	return sb.String()
}

const apRefusal = "needs a person's approval"

// Every MCP path to a marked tool is held by the approval rules: a direct
// tools/call, an agent plugin whose sub-agent calls it, the agent tool
// (whose turn pauses for the approval, as over A2A), and `looopy mcp` over
// stdio. An exempt principal keeps its exemption.
func TestBlackBoxApprovalHoldsOverMCP(t *testing.T) {
	t.Parallel()
	a := startApprovalHost(t)
	alice := apMCP(t, a.h.base, apAliceKey)

	res := apCall(t, alice, "ledger_append", map[string]any{"entry": "pay 1000000 via mcp"})
	if !res.IsError || !strings.Contains(apText(res), apRefusal) || !strings.Contains(apText(res), "exemptPrincipals") {
		t.Fatalf("a marked tool over /mcp: error %v %q, want a refusal", res.IsError, apText(res))
	}
	a.wantLines(t, "after a marked tools/call over /mcp", 0)

	// An agent plugin called over MCP: its sub-agent's marked call is
	// refused too (the tools lent to it are the same guarded ones).
	res = apCall(t, alice, "researcher", map[string]any{"prompt": "ledger pay 20 via a sub-agent"})
	if !strings.Contains(apText(res), apRefusal) {
		t.Fatalf("the researcher over /mcp answered %q, want its ledger call refused", apText(res))
	}
	a.wantLines(t, "after the researcher over /mcp", 0)

	// The agent tool runs a turn: the call waits for an approval there.
	res = apCall(t, alice, "ask_agent", map[string]any{"prompt": "ledger pay 30 via ask_agent"})
	if sc, _ := res.StructuredContent.(map[string]any); sc["state"] != "waiting-input" || !strings.Contains(apText(res), "Approve ledger_append") {
		t.Fatalf("ask_agent: %v %q (structured %v), want the turn paused input-required", res.IsError, apText(res), res.StructuredContent)
	}
	a.wantLines(t, "after ask_agent", 0)

	// The exempt principal is not asked, over MCP either.
	ops := apMCP(t, a.h.base, apOpsKey)
	res = apCall(t, ops, "ledger_append", map[string]any{"entry": "ops pays"})
	if res.IsError || !strings.Contains(apText(res), "ops pays") {
		t.Fatalf("the exempt principal over /mcp: %v %q", res.IsError, apText(res))
	}
	a.wantLines(t, "after the exempt principal's call", 1)

	// `looopy mcp` (stdio) with the same config: its principal is not
	// exempt.
	bin := sandboxHostBinary(t)
	cmd := exec.Command(bin, "mcp", "-config", a.cfgPath, "-data", filepath.Join(a.top, "stdio-data"))
	cmd.Dir = a.top
	var stderr syncBuf
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "approval-attack-stdio", Version: "1"}, nil).
		Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to `looopy mcp`: %v\n%s", err, stderr.String())
	}
	defer cs.Close()
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "ledger_append", Arguments: map[string]any{"entry": "pay via stdio"}})
	if err != nil || !res.IsError || !strings.Contains(apText(res), apRefusal) {
		t.Fatalf("a marked tool over `looopy mcp`: %v %+v, want a refusal\n%s", err, res, stderr.String())
	}
	a.wantLines(t, "after a marked call over `looopy mcp`", 1)
}

func apAnswer(taskID a2a.TaskID, responses ...map[string]any) *a2a.SendMessageRequest {
	dp := a2a.NewDataPart(map[string]any{"responses": responses})
	dp.Metadata = map[string]any{apExtension: "responses"}
	m := a2a.NewMessage(a2a.MessageRoleUser, dp)
	m.TaskID = taskID
	return &a2a.SendMessageRequest{Message: m}
}

const apExtension = "https://github.com/looopy-go/looopy/blob/main/docs/A2A_EXTENSION.md#v1"

func apSend(t *testing.T, c *a2aclient.Client, req *a2a.SendMessageRequest) (*a2a.Task, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := c.SendMessage(ctx, req)
	if err != nil {
		return nil, err
	}
	task, ok := r.(*a2a.Task)
	if !ok {
		t.Fatalf("answered %T", r)
	}
	return task, nil
}

// A request a sub-agent passed up is answered on the parent only, once:
// the sub-task refuses an answer (and any message) addressed to it, an
// answer that claims an agent gave it is refused where a person must
// answer, a second answer on the parent is refused, and the approved call
// runs exactly once.
func TestBlackBoxPassedUpApprovalAnsweredOnceOnTheParent(t *testing.T) {
	t.Parallel()
	a := startApprovalHost(t)
	alice := a2aClient(t, a.h.base, apAliceKey)
	task, err := apSend(t, alice, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("local ledger pay-10"))})
	if err != nil {
		t.Fatal(err)
	}
	if task.Status.State != a2a.TaskStateInputRequired || task.Status.Message == nil {
		t.Fatalf("parent is %s, want input-required", task.Status.State)
	}
	var req map[string]any
	for _, p := range task.Status.Message.Parts {
		if d, ok := p.Content.(a2a.Data); ok {
			m, _ := d.Value.(map[string]any)
			if rs, _ := m["requests"].([]any); len(rs) == 1 {
				req, _ = rs[0].(map[string]any)
			}
		}
	}
	route, _ := req["route"].(map[string]any)
	sub, _ := route["subtaskId"].(string)
	childID, _ := route["inputId"].(string)
	inputID, _ := req["inputId"].(string)
	if sub == "" || childID == "" || req["requireUser"] != true {
		t.Fatalf("the parent's request: %v", req)
	}
	a.wantLines(t, "paused", 0)

	// The sub-task's own copy of the request, answered directly.
	for _, r := range []*a2a.SendMessageRequest{
		apAnswer(a2a.TaskID(sub), map[string]any{"inputId": childID, "decision": "approve"}),
		{Message: func() *a2a.Message {
			m := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("approve"))
			m.TaskID = a2a.TaskID(sub)
			return m
		}()},
	} {
		_, err := apSend(t, alice, r)
		if err == nil || !strings.Contains(err.Error(), "sub-task") || !strings.Contains(err.Error(), string(task.ID)) {
			t.Fatalf("a message on the sub-task %s: %v, want a refusal naming the parent", sub, err)
		}
	}
	a.wantLines(t, "after answers on the sub-task", 0)

	// requireUser: an answer that says an agent gave it is refused.
	_, err = apSend(t, alice, apAnswer(task.ID, map[string]any{"inputId": inputID, "decision": "approve", "providedBy": "agent"}))
	if err == nil || !strings.Contains(err.Error(), "requireUser") {
		t.Fatalf("providedBy agent on a requireUser request: %v, want a refusal", err)
	}
	a.wantLines(t, "after an agent's answer", 0)

	done, err := apSend(t, alice, apAnswer(task.ID, map[string]any{"inputId": inputID, "decision": "approve"}))
	if err != nil || done.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("the approval on the parent: %v %+v", err, done)
	}
	a.wantLines(t, "after the approval", 1)

	// The decision is final: a second answer (a rejection) is refused and
	// changes nothing.
	if _, err := apSend(t, alice, apAnswer(task.ID, map[string]any{"inputId": inputID, "decision": "reject"})); err == nil {
		t.Fatal("a second answer on the parent was accepted")
	}
	if _, err := apSend(t, alice, apAnswer(a2a.TaskID(sub), map[string]any{"inputId": childID, "decision": "approve"})); err == nil {
		t.Fatal("an answer on the finished sub-task was accepted")
	}
	a.wantLines(t, "after the second answers", 1)
	if l := a.lines(t)[0]; !strings.Contains(l, "sub pay-10") {
		t.Fatalf("ledger line %q", l)
	}
}
