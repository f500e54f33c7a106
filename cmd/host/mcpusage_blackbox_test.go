package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// mcpCallAs is mcpCall with a principal's key (X-API-Key).
func (h *sandboxHost) mcpCallAs(t *testing.T, key, tool, args string) string {
	t.Helper()
	post := func(sid, body string) []byte {
		req, _ := http.NewRequest(http.MethodPost, h.base+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("X-API-Key", key)
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			t.Fatalf("/mcp: %d %s", resp.StatusCode, b)
		}
		if sid == "" {
			return []byte(resp.Header.Get("Mcp-Session-Id"))
		}
		return b
	}
	sid := string(post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"attack","version":"1"}}}`))
	post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	b := post(sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, tool, args))
	var text bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
			text.WriteString(strings.TrimSpace(d))
		}
	}
	if text.Len() == 0 {
		text.Write(b)
	}
	return text.String()
}

// observability.usageLimits hold over MCP as over A2A: a tool called
// through /mcp, an agent plugin's model and tool calls made for an MCP
// client, and the agent tool all count into the principal's totals and are
// refused at its limit; another principal is served meanwhile. Before, /mcp
// tools/call ran any number of calls (and the researcher plugin's model
// calls) for a principal at its limit, uncounted.
func TestBlackBoxUsageLimitsHoldOverMCP(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "calculator", "tool", readExample(t, "calculator"), map[string]any{"callTimeout": "60s"}, nil)
	installPlugin(t, pluginDir, "researcher", "agent", readExample(t, "researcher"),
		map[string]any{"callTimeout": "5m", "hostFunctions": []string{"model_call", "tool_call", "result_read", "emit"}},
		map[string]any{"maxRounds": 5})
	extra := authConfig(nil)
	delete(extra, "limits")
	extra["auth"].(map[string]any)["keys"] = []map[string]any{
		{"key": "alice-key", "principal": "alice"}, {"key": "bob-key", "principal": "bob"}, {"key": "carol-key", "principal": "carol"}}
	extra["observability"] = map[string]any{"usageLimits": map[string]any{
		"alice": map[string]any{"toolCalls": 3}, "carol": map[string]any{"tokens": 1}}}
	extra["mcp"] = map[string]any{"exposeAgent": true}
	h := startSandboxHostWith(t, top, pluginDir, nil, extra)

	const refusedCalls = `has made 3 tool calls, its limit is 3`
	for i := range 3 {
		if got := h.mcpCallAs(t, "alice-key", "calc", `{"expression":"6*7"}`); !strings.Contains(got, "42") {
			t.Fatalf("alice's MCP call %d, within her limit: %s", i+1, got)
		}
	}
	for _, c := range []struct{ tool, args string }{
		{"calc", `{"expression":"6*7"}`},
		{"researcher", `{"prompt":"owls"}`},
	} {
		if got := h.mcpCallAs(t, "alice-key", c.tool, c.args); !strings.Contains(got, refusedCalls) || strings.Contains(got, "42") {
			t.Fatalf("alice's MCP %s at her limit was not refused: %s", c.tool, got)
		}
	}
	// The agent tool runs a turn: the same totals stop it.
	if got := h.mcpCallAs(t, "alice-key", "ask_agent", `{"prompt":"hello"}`); !strings.Contains(got, refusedCalls) {
		t.Fatalf("alice's ask_agent at her limit was not stopped: %s", got)
	}
	// The counts are the ones A2A turns see.
	c := a2aClient(t, h.base, "alice-key")
	if text, state := turn(t, c, "hello"); state != "TASK_STATE_FAILED" || !strings.Contains(text, refusedCalls) {
		t.Fatalf("alice's A2A turn after her MCP calls: %s %q", state, text)
	}
	// bob has no limit and is served.
	if got := h.mcpCallAs(t, "bob-key", "calc", `{"expression":"6*7"}`); !strings.Contains(got, "42") {
		t.Fatalf("bob's MCP call: %s", got)
	}

	// Tokens: the researcher's model call for carol counts; her next call
	// (the tool itself) is refused.
	if got := h.mcpCallAs(t, "carol-key", "researcher", `{"prompt":"owls"}`); strings.Contains(got, "its limit is") {
		t.Fatalf("carol's first researcher call, within her limit: %s", got)
	}
	if got := h.mcpCallAs(t, "carol-key", "researcher", `{"prompt":"owls"}`); !regexp.MustCompile(`has used \d+ tokens, its limit is 1`).MatchString(got) {
		t.Fatalf("carol's researcher call past her token limit was not refused: %s", got)
	}
	if got := h.mcpCallAs(t, "carol-key", "calc", `{"expression":"6*7"}`); !strings.Contains(got, "its limit is 1") {
		t.Fatalf("carol's calc past her token limit was not refused: %s", got)
	}
}

var artID = regexp.MustCompile(`art-[0-9a-f]{24}`)

// An artifact a plugin writes during an MCP call belongs to its caller and
// expires as a finished task's does (limits.taskTTL after the call):
// the caller downloads it, another principal gets 404, and it is gone once
// the TTL passed. Before, it had no owner (404 to the caller too) and no
// expiry: 30 calls kept 93 MB for good.
func TestBlackBoxMCPArtifactsAreOwnedAndExpire(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "dataset-writer", "tool", readExample(t, "dataset-writer"),
		map[string]any{"callTimeout": "60s", "hostFunctions": []string{"artifact_write", "emit", "result_read"}}, nil)
	const ttl = 8 * time.Second
	h := startSandboxHostWith(t, top, pluginDir, nil, authConfig(map[string]any{"shutdownGrace": "2s", "taskTTL": ttl.String()}))

	started := time.Now()
	got := h.mcpCallAs(t, "alice-key", "make_dataset", `{"name":"d","rows":100}`)
	ended := time.Now()
	id := artID.FindString(got)
	if id == "" {
		t.Fatalf("make_dataset over MCP named no artifact: %s", got)
	}
	get := func(key string) int {
		req, _ := http.NewRequest(http.MethodGet, h.base+"/artifacts/"+id, nil)
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	code := get("alice-key")
	if time.Since(ended) < ttl && code != http.StatusOK {
		t.Fatalf("the caller reads its MCP call's artifact: %d, want 200", code)
	}
	if code := get("bob-key"); code != http.StatusNotFound {
		t.Fatalf("another principal reads the artifact: %d, want 404", code)
	}
	// Past the TTL it is gone (the guard only fails fast).
	h.waitFor(t, "the artifact to expire", ttl+2*time.Minute, func() bool { return get("alice-key") == http.StatusNotFound })
	if time.Since(started) < ttl {
		t.Fatalf("the artifact went before the TTL (%s after the call began)", time.Since(started))
	}
}
