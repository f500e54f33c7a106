package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/loop"
)

// Attacks through remote agents between real hosts: two hosts whose
// remoteAgents name each other, and a remote agent that never answers.

const peerScript = `{"rules": [
 {"name": "ask", "match": "^ask (.+)$", "steps": [
  {"toolCall": {"name": "peer", "arguments": {"prompt": "ask $1"}}},
  {"text": "peer said: {{lastToolResult}}"}]},
 {"name": "hang", "match": "^use hang$", "steps": [
  {"toolCall": {"name": "hang", "arguments": {"prompt": "anything"}}},
  {"text": "hang said: {{lastToolResult}}"}]}
],"default":{"steps":[{"text":"echo: {{input}}"}]}}`

// startPeerHost runs a host on port whose remote agents are remotes
// (name: url), with the peer script.
func startPeerHost(t *testing.T, port int, remotes map[string]string, extra map[string]any) *sandboxHost {
	t.Helper()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}}, map[string]any{"script": peerScript})
	var ras []map[string]any
	for name, url := range remotes {
		ra := map[string]any{"name": name, "url": url, "allowPrivateNetwork": true}
		if name == "hang" {
			// Longer than any guard here: the fetch ends when the test
			// lets it.
			ra["cardTimeout"] = "10m"
		}
		ras = append(ras, ra)
	}
	cfg := map[string]any{"port": port, "remoteAgents": ras,
		"limits": map[string]any{"shutdownGrace": "2s", "maxRunning": 16}}
	for k, v := range extra {
		cfg[k] = v
	}
	return startSandboxHostWith(t, top, pluginDir, nil, cfg)
}

// sendText sends text (with message metadata md) as a new task and returns
// the answer's text, or the error.
func sendText(t *testing.T, base, text string, md map[string]any) (string, error) {
	t.Helper()
	c := a2aClient(t, base, "")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(text))
	msg.Metadata = md
	r, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: msg})
	if err != nil {
		return "", err
	}
	task, ok := r.(*a2a.Task)
	if !ok {
		t.Fatalf("%q: answered %T", text, r)
	}
	var sb strings.Builder
	for _, a := range task.Artifacts {
		for _, p := range a.Parts {
			sb.WriteString(p.Text())
		}
	}
	if task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("%q: task %s: %s", text, task.Status.State, sb.String())
	}
	return sb.String(), nil
}

// TestBlackBoxRemoteAgentsThatNameEachOther: host A's remote agent "peer"
// is host B and B's is A, and the model asks the peer to ask again. One
// client message used to recurse between the hosts until their turn
// limits (HOST_BUSY for everyone). Every message a host sends a remote
// agent carries the call chain (docs/A2A_EXTENSION.md, "Call chains"): A
// refuses the message that comes back to it, B's model reads the refusal,
// and the client's turn ends after two hops. A chain that arrives deeper
// than sub-agents nest is refused, and a task started at the deepest level
// does not call further.
func TestBlackBoxRemoteAgentsThatNameEachOther(t *testing.T) {
	t.Parallel()
	pa, pb := freePort(t), freePort(t)
	ua, ub := fmt.Sprintf("http://127.0.0.1:%d", pa), fmt.Sprintf("http://127.0.0.1:%d", pb)
	b := startPeerHost(t, pb, map[string]string{"peer": ua}, nil)
	a := startPeerHost(t, pa, map[string]string{"peer": ub}, nil)

	answer, err := sendText(t, a.base, "ask loop", nil)
	if err != nil {
		t.Fatalf("ask loop: %v", err)
	}
	if !strings.Contains(answer, "call cycle refused") {
		t.Fatalf("the answer does not show the cycle refused: %.600q", answer)
	}
	if n := strings.Count(answer, "peer said"); n > 2 {
		t.Fatalf("the call went %d hops deep: %.600q", n, answer)
	}
	if !strings.Contains(a.out.String(), "call cycle refused") {
		t.Errorf("host A's log does not say why it refused the message")
	}
	_ = b

	// A chain that says it is already past the depth bound: refused.
	deep := func(d int) map[string]any {
		return map[string]any{loop.CallChainKey: map[string]any{"depth": d, "hosts": []any{"h-elsewhere"}}}
	}
	if _, err := sendText(t, a.base, "hello", deep(loop.MaxSubAgentDepth+1)); err == nil || !strings.Contains(err.Error(), "call chain too deep") {
		t.Fatalf("a message %d levels deep: %v; want refused as too deep", loop.MaxSubAgentDepth+1, err)
	}
	// At the deepest level a task runs, and its remote call is refused
	// before it leaves the host.
	answer, err = sendText(t, a.base, "ask deep", deep(loop.MaxSubAgentDepth))
	if err != nil {
		t.Fatalf("a message at the deepest level: %v", err)
	}
	if !strings.Contains(answer, fmt.Sprintf("nest at most %d deep", loop.MaxSubAgentDepth)) || strings.Count(answer, "peer said") != 1 {
		t.Fatalf("a task at the deepest level called on: %.600q", answer)
	}
	// Not well formed: refused with a clear error.
	if _, err := sendText(t, a.base, "hello", map[string]any{loop.CallChainKey: "deep"}); err == nil || !strings.Contains(err.Error(), loop.CallChainKey) {
		t.Fatalf("a malformed chain: %v; want a clear refusal", err)
	}
}

// hangAgent is an A2A agent that takes every request (its card's too) and
// answers none until released; then it answers 503.
type hangAgent struct {
	srv      *httptest.Server
	release  chan struct{}
	once     sync.Once
	inflight atomic.Int64
}

func newHangAgent(t *testing.T) *hangAgent {
	h := &hangAgent{release: make(chan struct{})}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h.inflight.Add(1)
		defer h.inflight.Add(-1)
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
		http.Error(w, "gone", http.StatusServiceUnavailable)
	}))
	t.Cleanup(func() { h.let(); h.srv.Close() })
	return h
}

func (h *hangAgent) let() { h.once.Do(func() { close(h.release) }) }

// TestBlackBoxHangingRemoteAgentBlocksNothing: a remote agent that never
// answers, not even its card. The host's own agent card used to wait for
// that card's fetch (5 s, and a turn every 30 s the same), and two hosts
// naming each other deadlocked their first card fetches. The fetch runs
// in the background now: the host's card and a turn that does not use the
// agent answer while it hangs (its cardTimeout here outlasts the test), and
// the turn that calls the agent gets a clear error once the fetch fails.
func TestBlackBoxHangingRemoteAgentBlocksNothing(t *testing.T) {
	t.Parallel()
	hang := newHangAgent(t)
	h := startPeerHost(t, freePort(t), map[string]string{"hang": hang.srv.URL}, nil)

	hc := &http.Client{Timeout: 60 * time.Second} // a hang guard
	res, err := hc.Get(h.base + "/.well-known/agent-card.json")
	if err != nil {
		t.Fatalf("the host's own card while a remote card hangs: %v", err)
	}
	var card struct {
		Skills []struct{ ID string } `json:"skills"`
	}
	err = json.NewDecoder(res.Body).Decode(&card)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("the host's card: %d %v", res.StatusCode, err)
	}
	h.waitFor(t, "the card fetch to reach the hanging agent", time.Minute, func() bool { return hang.inflight.Load() > 0 })

	// A turn that does not use the agent.
	if answer, err := sendText(t, h.base, "hello", nil); err != nil || !strings.Contains(answer, "echo: hello") {
		t.Fatalf("a turn beside the hanging fetch: %q %v", answer, err)
	}
	if hang.inflight.Load() == 0 {
		t.Fatal("the fetch ended before the test let it: the check above proves nothing")
	}

	// The turn that calls it ends with a clear error: it waited for the
	// fetch and read its failure, or (the fetch failed first) the tool is
	// not offered.
	type result struct {
		answer string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		a, err := sendText(t, h.base, "use hang", nil)
		done <- result{a, err}
	}()
	h.waitFor(t, "the turn that calls the agent to start", time.Minute, func() bool {
		return metricValue(h.base, "looopy_turns_running") > 0
	})
	hang.let()
	select {
	case r := <-done:
		if r.err != nil || !(strings.Contains(r.answer, `agent "hang" not reachable`) || strings.Contains(r.answer, `tool "hang" does not exist`)) {
			t.Fatalf("the turn that calls the agent: %q %v; want its clear error", r.answer, r.err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the turn that calls the agent: wedged")
	}
}

// metricValue reads one unlabelled value of /metrics (0 when absent).
func metricValue(base, name string) float64 {
	res, err := http.Get(base + "/metrics")
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			_, _ = fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

const staleScript = `{"rules": [
 {"name": "delegate", "match": "^delegate (.+)$", "steps": [
  {"toolCall": {"name": "peer", "arguments": {"prompt": "lchain $1"}}},
  {"text": "peer said: {{lastToolResult}}"}]},
 {"name": "lchain", "match": "^lchain (.+)$", "steps": [
  {"toolCall": {"name": "ledger_append", "arguments": {"entry": "$1"}}},
  {"text": "done {{lastToolResult}}"}]}
],"default":{"steps":[{"text":"echo: {{input}}"}]}}`

// startLedgerHost runs a host with the ledger plugin (ledger_append needs
// an approval) and remotes; it returns the host and its ledger file.
func startLedgerHost(t *testing.T, remotes map[string]string) (*sandboxHost, string) {
	t.Helper()
	return startLedgerHostAt(t, t.TempDir(), remotes, nil)
}

// startLedgerHostAt is startLedgerHost on the folder top (the same folder
// again: a restart of that host), each remote agent's config with the
// fields of raExtra.
func startLedgerHostAt(t *testing.T, top string, remotes map[string]string, raExtra map[string]any) (*sandboxHost, string) {
	t.Helper()
	pluginDir := filepath.Join(top, "plugins")
	grant := filepath.Join(top, "grants", "ledger")
	if err := os.MkdirAll(grant, 0o755); err != nil {
		t.Fatal(err)
	}
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}}, map[string]any{"script": staleScript})
	installPlugin(t, pluginDir, "ledger", "tool", readExample(t, "ledger"),
		map[string]any{"allowedPaths": []map[string]any{{"path": grant}}}, map[string]any{"dir": grant})
	var ras []map[string]any
	for name, url := range remotes {
		ra := map[string]any{"name": name, "url": url, "allowPrivateNetwork": true}
		for k, v := range raExtra {
			ra[k] = v
		}
		ras = append(ras, ra)
	}
	h := startSandboxHostWith(t, top, pluginDir, map[string]any{"pathRoots": []string{filepath.Join(top, "grants")}}, map[string]any{
		"remoteAgents": ras,
		"interaction":  map[string]any{"approval": map[string]any{"tools": []string{"ledger_append"}}},
	})
	return h, filepath.Join(grant, "ledger.log")
}

// TestBlackBoxPassedUpRequestAnsweredOnTheRemoteHost: host A's call of
// remote agent B pauses on B's approval request, passed up to A's client.
// The request is answered on B directly (its task id is in the route): B
// runs the call and completes. A's answer afterwards used to end the call
// as failed ("the remote agent refused the answer ... is completed") while
// the call had run. A reads the remote task back when its answer is
// refused: the request is withdrawn (an event says so) and the call takes
// the remote task's actual outcome; the ledger shows one execution.
func TestBlackBoxPassedUpRequestAnsweredOnTheRemoteHost(t *testing.T) {
	t.Parallel()
	b, ledger := startLedgerHost(t, nil)
	// A does not watch the remote task while paused here (it would take
	// B's outcome by itself, TestBlackBoxPausedParentWatchesTheRemoteTask):
	// the answer of A's client meets the stale request.
	a, _ := startLedgerHostAt(t, t.TempDir(), map[string]string{"peer": b.base}, map[string]any{"watchEvery": "1h"})
	ca, cb := a2aClient(t, a.base, ""), a2aClient(t, b.base, "")

	task, err := apSend(t, ca, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("delegate pay-7"))})
	if err != nil {
		t.Fatal(err)
	}
	if task.Status.State != a2a.TaskStateInputRequired || task.Status.Message == nil {
		t.Fatalf("A's task is %s, want input-required", task.Status.State)
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
	remoteTask, _ := route["remoteTaskId"].(string)
	childID, _ := route["inputId"].(string)
	inputID, _ := req["inputId"].(string)
	if remoteTask == "" || childID == "" || inputID == "" {
		t.Fatalf("A's request names no remote task: %v", req)
	}

	// Answered on B directly: B runs the call and completes.
	bt, err := apSend(t, cb, apAnswer(a2a.TaskID(remoteTask), map[string]any{"inputId": childID, "decision": "approve"}))
	if err != nil || bt.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("the answer on B: %v %v", bt, err)
	}
	if b, _ := os.ReadFile(ledger); strings.Count(string(b), "\n") != 1 {
		t.Fatalf("the ledger after B's approval: %q", b)
	}

	// A's own answer, given later: the call takes B's outcome.
	at, err := apSend(t, ca, apAnswer(task.ID, map[string]any{"inputId": inputID, "decision": "approve"}))
	if err != nil {
		t.Fatalf("the answer on A: %v", err)
	}
	var sb strings.Builder
	for _, art := range at.Artifacts {
		for _, p := range art.Parts {
			sb.WriteString(p.Text())
		}
	}
	if at.Status.State != a2a.TaskStateCompleted || strings.Contains(sb.String(), "failed") || !strings.Contains(sb.String(), "peer said: done") {
		t.Fatalf("A's task: %s %.400q; want completed with B's answer", at.Status.State, sb.String())
	}
	if b, _ := os.ReadFile(ledger); strings.Count(string(b), "\n") != 1 {
		t.Fatalf("the ledger at the end: %q; want the one execution", b)
	}
	if !strings.Contains(a.out.String(), "remote task moved on before the answer") {
		t.Errorf("A's log does not say the request was withdrawn")
	}
}
