package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/looopy-go/looopy/host"
)

var (
	buildOnce          sync.Once
	looopyBin, testMCP string
	buildErr           error
)

// binaries builds the looopy binary and the test MCP server once per test
// binary.
func binaries(t testing.TB) (looopy, mcpServer string) {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "looopy-bin-")
		if err != nil {
			buildErr = err
			return
		}
		looopyBin, testMCP = filepath.Join(dir, "looopy"), filepath.Join(dir, "mcpserver")
		for _, b := range [][2]string{{looopyBin, "../cmd/host"}, {testMCP, "./mcp/testdata/mcpserver"}} {
			if out, err := exec.Command("go", "build", "-o", b[0], b[1]).CombinedOutput(); err != nil {
				buildErr = &buildError{err: err, out: string(out)}
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatalf("build: %v", buildErr)
	}
	return looopyBin, testMCP
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

type bearerRT struct{ tok string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.tok != "" {
		r.Header.Set("Authorization", "Bearer "+b.tok)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func mcpConnect(t testing.TB, url, tok string, opts *sdk.ClientOptions) (*sdk.ClientSession, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := sdk.NewClient(&sdk.Implementation{Name: "host-test", Version: "1"}, opts)
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url,
		HTTPClient: &http.Client{Transport: bearerRT{tok}}, MaxRetries: -1}, nil)
	if err == nil {
		t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

func mcpText(r *sdk.CallToolResult) string {
	var sb strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			sb.WriteString(tc.Text)
		}
	}
	return sb.String()
}

func mcpToolNames(t testing.TB, cs *sdk.ClientSession) []string {
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

// mcpHostConfig: auth on, the calculator and the dataset writer as
// sandboxed tools, the agent exposed, and the test MCP server as an outside
// toolset.
func mcpHostConfig(t *testing.T) host.Config {
	_, mcpServer := binaries(t)
	cfg := baseConfig(t.TempDir())
	cfg.Plugins.Only = []string{"scripted-model", "calculator", "dataset-writer"}
	cfg.Auth = host.AuthConfig{Enabled: true, Keys: []host.APIKey{{Key: "k-alice", Principal: "alice"}, {Key: "k-bob", Principal: "bob"}}}
	cfg.Admin.Token = "admin-token"
	cfg.MCP = host.MCPConfig{ExposeAgent: true, Servers: []host.MCPServerConfig{
		{Name: "outside", Command: []string{mcpServer}, Deny: []string{"secret_*", "crash", "hang"}},
	}}
	return cfg
}

func TestMCPEndpointServesSandboxedTools(t *testing.T) {
	t.Parallel()
	th := startHost(t, mcpHostConfig(t))
	url := th.URL() + "/mcp"

	for _, tok := range []string{"", "wrong"} {
		if _, err := mcpConnect(t, url, tok, nil); err == nil {
			t.Errorf("credential %q: connected to /mcp", tok)
		}
	}

	var mu sync.Mutex
	var progress []string
	cs, err := mcpConnect(t, url, "k-alice", &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
		mu.Lock()
		progress = append(progress, r.Params.Message)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	names := mcpToolNames(t, cs)
	for _, want := range []string{"calc", "make_dataset", "ask_agent"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools %v: %s missing", names, want)
		}
	}
	for _, n := range names {
		if strings.HasPrefix(n, "outside_") {
			t.Errorf("/mcp offers %s, a tool of an outside (unsandboxed) MCP server", n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "calc", Arguments: map[string]any{"expression": "6*7"}})
	if err != nil || res.IsError || !strings.Contains(mcpText(res), "42") {
		t.Fatalf("calc over MCP: %v %+v", err, res)
	}
	// A plugin's progress reaches the client as progress notifications.
	p := &sdk.CallToolParams{Name: "make_dataset", Arguments: map[string]any{"name": "numbers", "rows": 50}}
	p.SetProgressToken("ds")
	if res, err := cs.CallTool(ctx, p); err != nil || res.IsError {
		t.Fatalf("make_dataset over MCP: %v %+v", err, res)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(progress)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no progress notification from make_dataset")
		}
	}
	// Bad arguments are a tool error the client can read, not a crash.
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "calc", Arguments: map[string]any{"expression": 12}})
	if err != nil || !res.IsError {
		t.Errorf("calc with a number for a string: %v %+v, want a tool error", err, res)
	}
	// The agent itself, as one tool, runs as the caller.
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "ask_agent", Arguments: map[string]any{"prompt": "calc 2+2"}})
	if err != nil || res.IsError || !strings.Contains(mcpText(res), "4") {
		t.Fatalf("ask_agent: %v %+v", err, res)
	}
	var ans struct{ ContextID, TaskID, State string }
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &ans); err != nil || ans.State != "completed" || ans.TaskID == "" {
		t.Fatalf("ask_agent structured answer %s: %v", b, err)
	}
	// The task is alice's: bob cannot read it over A2A.
	bob := client10(t, th.URL(), "k-bob")
	if _, err := bob.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(ans.TaskID)}); err == nil {
		t.Error("bob read the task alice's MCP call started")
	}
	alice := client10(t, th.URL(), "k-alice")
	if _, err := alice.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(ans.TaskID)}); err != nil {
		t.Errorf("alice reading her task: %v", err)
	}
}

func TestMCPOutsideServerIsAToolsetAndSaysUnsandboxed(t *testing.T) {
	t.Parallel()
	th := startHost(t, mcpHostConfig(t))
	// The agent card lists the outside tools, marked.
	resp, err := http.Get(th.URL() + "/.well-known/agent-card.json")
	if err != nil {
		t.Fatal(err)
	}
	var card struct {
		Skills []struct {
			ID, Description string
			Tags            []string
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&card)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, s := range card.Skills {
		if strings.HasPrefix(s.ID, "outside_") {
			found[s.ID] = true
			if !slices.Contains(s.Tags, "not-sandboxed") || !strings.Contains(s.Description, "NOT sandboxed") {
				t.Errorf("card skill %s: %+v, want it marked not sandboxed", s.ID, s)
			}
		}
		if s.ID == "calc" && slices.Contains(s.Tags, "not-sandboxed") {
			t.Error("a Wasm tool is marked not sandboxed")
		}
	}
	if !found["outside_echo"] || found["outside_crash"] || found["outside_secret_admin"] {
		t.Errorf("outside tools on the card: %v (echo allowed; crash, secret_admin denied)", found)
	}
	// The admin listing shows it beside the plugins, with the plugins' grants.
	req, _ := http.NewRequest(http.MethodGet, th.URL()+"/admin/plugins", nil)
	req.Header.Set("Authorization", "Bearer admin-token")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Plugins []host.PluginStatus }
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]host.PluginStatus{}
	for _, p := range list.Plugins {
		byName[p.Name] = p
	}
	out, ok := byName["outside"]
	if !ok || out.Sandboxed || out.Kind != "mcp-server" || out.State != "serving" || !strings.Contains(out.Note, "not sandboxed") {
		t.Errorf("admin entry of the MCP server: %+v", out)
	}
	ds := byName["dataset-writer"]
	if !ds.Sandboxed || ds.Grant == nil || !slices.Contains(ds.Grant.HostFunctions, "artifact_write") || ds.Grant.CallTimeout == "" {
		t.Errorf("admin entry of dataset-writer: %+v (grant %+v)", ds, ds.Grant)
	}
}

func TestMCPStdioCommand(t *testing.T) {
	t.Parallel()
	looopy, _ := binaries(t)
	cfgFile := filepath.Join(t.TempDir(), "looopy.json")
	cfg := fmt.Sprintf(`{"plugins":{"only":["scripted-model","calculator"],"cacheDir":%q}}`, wasmCache)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(looopy, "mcp", "-config", cfgFile, "-data", t.TempDir(), "-plugins", "../examples/plugins")
	cmd.Env = append(os.Environ(), "LOOOPY_LOG_FORMAT=json")
	cmd.Stderr = &logTail{}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := sdk.NewClient(&sdk.Implementation{Name: "stdio-test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to `looopy mcp`: %v\n%s", err, cmd.Stderr)
	}
	names := mcpToolNames(t, cs)
	if !slices.Contains(names, "calc") {
		t.Fatalf("tools over stdio: %v", names)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "calc", Arguments: map[string]any{"expression": "1+2*3"}})
	if err != nil || res.IsError || !strings.Contains(mcpText(res), "7") {
		t.Fatalf("calc over stdio: %v %+v", err, res)
	}
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v (the command should exit cleanly when its stdin closes)\n%s", err, cmd.Stderr)
	}
}

// logTail keeps the last 8 KiB a child wrote.
type logTail struct {
	mu  sync.Mutex
	buf []byte
}

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if len(l.buf) > 8<<10 {
		l.buf = l.buf[len(l.buf)-8<<10:]
	}
	return len(p), nil
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}

// mcp.servers[].maxMessageBytes is the bound of one message from that
// server: an answer of 500 KB past a bound of 64 KiB is refused as it is
// read, and the model reads the tool error naming the bound (the default,
// 8 MiB, would have taken it).
func TestMCPServerMessageBoundIsASetting(t *testing.T) {
	t.Parallel()
	_, mcpServer := binaries(t)
	root := t.TempDir()
	plugins := filepath.Join(root, "plugins")
	grantedPlugin(t, plugins, "scripted-model", map[string]any{"script": json.RawMessage(`{"rules":[
		{"name":"flood","match":"^flood$","steps":[
			{"toolCall":{"name":"outside_flood","arguments":{"bytes":500000}}},
			{"text":"flood said: {{lastToolResult}}"}]}],
		"default":{"steps":[{"text":"ok"}]}}`)}, nil)
	cfg := baseConfig(filepath.Join(root, "data"))
	cfg.PluginDir = plugins
	cfg.Plugins.Only = []string{"scripted-model"}
	cfg.Plugins.NoWatch = true
	cfg.MCP = host.MCPConfig{Servers: []host.MCPServerConfig{
		{Name: "outside", Command: []string{mcpServer}, Allow: []string{"flood"}, MaxMessageBytes: 64 << 10},
	}}
	h := startHost(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	task := send(t, client10(t, h.URL(), ""), ctx, &a2a.SendMessageRequest{Message: userMsg("flood")})
	text := artifactText(task)
	if task.Status.State != a2a.TaskStateCompleted || !strings.Contains(text, "larger than 65536 bytes") {
		t.Fatalf("%s %.300q; want the tool error naming the 65536-byte bound", task.Status.State, text)
	}
}
