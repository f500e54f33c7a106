package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/looopy-go/looopy/loop"
)

// goTools is a toolset of Go functions whose list can change while it runs.
type goTools struct {
	mu    sync.Mutex
	defs  []loop.ToolDefinition
	calls []*loop.ToolEnv
}

func (g *goTools) Tools(context.Context) ([]loop.ToolDefinition, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]loop.ToolDefinition(nil), g.defs...), nil
}

func (g *goTools) Call(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	g.mu.Lock()
	g.calls = append(g.calls, env)
	g.mu.Unlock()
	switch c.Name {
	case "add":
		var a struct{ A, B int }
		if err := json.Unmarshal(c.Arguments, &a); err != nil {
			return loop.ToolResult{IsError: true, Content: err.Error()}, nil
		}
		return loop.ToolResult{Content: fmt.Sprint(a.A + a.B), Data: json.RawMessage(fmt.Sprintf(`{"sum":%d}`, a.A+a.B))}, nil
	case "slow":
		for i := 1; i <= 4; i++ {
			env.Emit(&loop.ToolProgress{ToolCallID: c.ID, Progress: float64(i) / 4, Message: fmt.Sprintf("%d of 4", i)})
		}
		return loop.ToolResult{Content: "slow done"}, nil
	case "whoami":
		return loop.ToolResult{Content: env.Auth.Principal}, nil
	}
	return loop.ToolResult{}, &loop.NotFoundError{What: "tool", ID: c.Name}
}

func newGoTools() *goTools {
	return &goTools{defs: []loop.ToolDefinition{
		{Name: "add", Description: "adds", Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}}}`)},
		{Name: "slow", Description: "reports progress"},
		{Name: "whoami", Description: "the caller's principal", Parameters: json.RawMessage(`{"type":"object"}`)},
		{Name: "client_side", Client: true},
		{Name: "bad_schema", Parameters: json.RawMessage(`{"type":"string"}`)},
	}}
}

type fakeAgent struct{}

func (fakeAgent) Ask(_ context.Context, a *loop.AuthContext, contextID, prompt string, progress func(string)) (AgentAnswer, error) {
	progress("thinking")
	if contextID == "" {
		contextID = "ctx-new"
	}
	return AgentAnswer{Text: a.Principal + " asked: " + prompt, ContextID: contextID, TaskID: "t1", State: "completed"}, nil
}

func keys(tok string) (*loop.AuthContext, error) {
	switch tok {
	case "key-alice":
		return &loop.AuthContext{Principal: "alice"}, nil
	case "key-bob":
		return &loop.AuthContext{Principal: "bob"}, nil
	}
	return nil, errors.New("unknown credential")
}

func httpServer(t *testing.T, tools loop.Toolset, auth bool) (*Server, string) {
	t.Helper()
	s, err := NewServer(ServerConfig{Tools: tools, Agent: fakeAgent{}})
	if err != nil {
		t.Fatal(err)
	}
	opts := HTTPOptions{}
	if auth {
		opts.Authenticate = keys
	}
	hs := httptest.NewServer(s.Handler(opts))
	t.Cleanup(hs.Close)
	return s, hs.URL
}

type bearer struct {
	tok  string
	base http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.tok != "" {
		r.Header.Set("Authorization", "Bearer "+b.tok)
	}
	return b.base.RoundTrip(r)
}

func connect(t *testing.T, url, tok string, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url,
		HTTPClient: &http.Client{Transport: bearer{tok, http.DefaultTransport}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func callTool(t *testing.T, cs *sdk.ClientSession, name string, args any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

func textOf(r *sdk.CallToolResult) string {
	var sb strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			sb.WriteString(tc.Text)
		}
	}
	return sb.String()
}

func listNames(t *testing.T, cs *sdk.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tl := range res.Tools {
		out = append(out, tl.Name)
	}
	return out
}

func TestServerOverHTTPListsAndCalls(t *testing.T) {
	tools := newGoTools()
	_, url := httpServer(t, tools, false)
	cs := connect(t, url, "", nil)
	got := strings.Join(listNames(t, cs), ",")
	// client-side tools and tools whose schema is no object are left out
	if got != "add,ask_agent,slow,whoami" {
		t.Fatalf("tools %s", got)
	}
	res := callTool(t, cs, "add", map[string]any{"a": 2, "b": 40})
	if res.IsError || textOf(res) != "42" {
		t.Fatalf("add: %+v", res)
	}
	if sc, _ := json.Marshal(res.StructuredContent); string(sc) != `{"sum":42}` {
		t.Errorf("structured content %s", sc)
	}
	if res := callTool(t, cs, "whoami", nil); textOf(res) != "local" {
		t.Errorf("principal with auth off: %q", textOf(res))
	}
	if res := callTool(t, cs, "ask_agent", map[string]any{"prompt": "hi"}); res.IsError || textOf(res) != "local asked: hi" {
		t.Errorf("agent: %+v", res)
	}
	if res := callTool(t, cs, "ask_agent", map[string]any{"prompt": ""}); !res.IsError {
		t.Error("agent with an empty prompt: no error")
	}
	if res := callTool(t, cs, "ask_agent", map[string]any{"prompt": "x", "sneaky": 1}); !res.IsError {
		t.Error("agent with an unknown argument: no error")
	}
}

func TestServerProgressNotifications(t *testing.T) {
	_, url := httpServer(t, newGoTools(), false)
	var mu sync.Mutex
	var got []sdk.ProgressNotificationParams
	cs := connect(t, url, "", &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
		mu.Lock()
		got = append(got, *r.Params)
		mu.Unlock()
	}})
	p := &sdk.CallToolParams{Name: "slow", Arguments: map[string]any{}}
	p.SetProgressToken("tok-1")
	if _, err := cs.CallTool(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	// The client hands notifications to its handler asynchronously: wait
	// for all four (they were sent before the result).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 4 || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// The client may run its handlers concurrently: compare in progress order.
	sort.Slice(got, func(i, j int) bool { return got[i].Progress < got[j].Progress })
	if len(got) != 4 {
		t.Fatalf("%d progress notifications, want 4: %+v", len(got), got)
	}
	for i, n := range got {
		if n.ProgressToken != "tok-1" || n.Total != 1 || n.Progress != float64(i+1)/4 || n.Message != fmt.Sprintf("%d of 4", i+1) {
			t.Errorf("notification %d: %+v", i, n)
		}
	}
}

func TestServerAuthPerPrincipal(t *testing.T) {
	tools := newGoTools()
	_, url := httpServer(t, tools, true)
	// No credential, a wrong one: refused before any MCP is spoken.
	for _, tok := range []string{"", "nope"} {
		c := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil)
		_, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: url,
			HTTPClient: &http.Client{Transport: bearer{tok, http.DefaultTransport}}, MaxRetries: -1}, nil)
		if err == nil {
			t.Errorf("credential %q: connected", tok)
		}
	}
	alice := connect(t, url, "key-alice", nil)
	if res := callTool(t, alice, "whoami", nil); textOf(res) != "alice" {
		t.Errorf("whoami as alice: %q", textOf(res))
	}
	if res := callTool(t, alice, "ask_agent", map[string]any{"prompt": "p"}); textOf(res) != "alice asked: p" {
		t.Errorf("agent as alice: %q", textOf(res))
	}
	// X-API-Key works as on the rest of the host.
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
	req.Header.Set("X-API-Key", "key-bob")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"serverInfo"`) {
		t.Fatalf("initialize with X-API-Key: %d %s", resp.StatusCode, body)
	}
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatal("no session id")
	}
	// Alice's credential cannot use bob's session.
	req, _ = http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`))
	req.Header.Set("Authorization", "Bearer key-alice")
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || strings.Contains(string(body), "bob") {
		t.Errorf("alice on bob's session: %d %s, want 403", resp.StatusCode, body)
	}
}

func TestServerFollowsToolChanges(t *testing.T) {
	tools := newGoTools()
	_, url := httpServer(t, tools, false)
	changed := make(chan struct{}, 8)
	cs := connect(t, url, "", &sdk.ClientOptions{ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}})
	tools.mu.Lock()
	tools.defs = tools.defs[:1] // only add is left
	tools.mu.Unlock()
	if got := strings.Join(listNames(t, cs), ","); got != "add,ask_agent" {
		t.Fatalf("after removing tools: %s", got)
	}
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "whoami"})
	if err == nil && !res.IsError {
		t.Errorf("a removed tool answered: %+v", res)
	}
	select {
	case <-changed:
	case <-time.After(time.Minute):
		t.Error("no tools/list_changed notification")
	}
}

func TestServerStdio(t *testing.T) {
	s, err := NewServer(ServerConfig{Tools: newGoTools(), Principal: "me"})
	if err != nil {
		t.Fatal(err)
	}
	ctr, str := io.Pipe()
	srd, cwr := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- s.ServeStdio(context.Background(), srd, str) }()
	c := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &sdk.IOTransport{Reader: ctr, Writer: cwr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(listNames(t, cs), ","); got != "add,slow,whoami" {
		t.Errorf("stdio tools (no agent configured): %s", got)
	}
	if res := callTool(t, cs, "whoami", nil); textOf(res) != "me" {
		t.Errorf("stdio principal: %q", textOf(res))
	}
	_ = cs.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve stdio: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the stdio server did not end when the client left")
	}
}
