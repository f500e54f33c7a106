package mcp

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

var (
	serverOnce sync.Once
	serverBin  string
	serverErr  error
)

// testServer builds the MCP server of testdata/mcpserver once per test
// binary and returns its path.
func testServer(t *testing.T) string {
	t.Helper()
	serverOnce.Do(func() {
		dir, err := os.MkdirTemp("", "looopy-mcpserver-")
		if err != nil {
			serverErr = err
			return
		}
		serverBin = filepath.Join(dir, "mcpserver")
		out, err := exec.Command("go", "build", "-o", serverBin, "./testdata/mcpserver").CombinedOutput()
		if err != nil {
			serverErr = err
			serverBin = string(out)
		}
	})
	if serverErr != nil {
		t.Fatalf("build the test MCP server: %v\n%s", serverErr, serverBin)
	}
	return serverBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if serverBin != "" && serverErr == nil {
		_ = os.RemoveAll(filepath.Dir(serverBin))
	}
	os.Exit(code)
}

func startToolset(t *testing.T, cfg ClientConfig) *Toolset {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "test"
	}
	if len(cfg.Command) == 0 && cfg.URL == "" {
		cfg.Command = []string{testServer(t)}
	}
	ts, err := NewToolset(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ts.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ts.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	return ts
}

func call(t *testing.T, ts loop.Toolset, name, args string, env *loop.ToolEnv) loop.ToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := ts.Call(ctx, loop.ToolCall{ID: "c-" + name, Name: name, Arguments: json.RawMessage(args)}, env)
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

func toolNames(t *testing.T, ts loop.Toolset) []string {
	t.Helper()
	defs, err := ts.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range defs {
		out = append(out, d.Name)
	}
	return out
}

func TestClientListsAndCallsToolsOfARealServer(t *testing.T) {
	ts := startToolset(t, ClientConfig{Name: "files", Deny: []string{"secret_*"}})
	names := toolNames(t, ts)
	want := []string{"files_crash", "files_echo", "files_fail", "files_flood", "files_getenv", "files_hang", "files_progress"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("tools %v, want %v (secret_admin denied, the rest prefixed)", names, want)
	}
	if ts.Sandboxed() {
		t.Error("an MCP toolset says it is sandboxed")
	}
	res := call(t, ts, "files_echo", `{"text":"hi"}`, nil)
	if res.IsError || res.Content != "echo: hi" {
		t.Fatalf("echo: %+v", res)
	}
	var data map[string]any
	if err := json.Unmarshal(res.Data, &data); err != nil || data["text"] != "hi" {
		t.Errorf("structured content %s: %v", res.Data, err)
	}
	if res := call(t, ts, "files_fail", `{}`, nil); !res.IsError || !strings.Contains(res.Content, "failed on purpose") {
		t.Errorf("fail: %+v, want a tool error with the server's text", res)
	}
	// A denied tool cannot be called by its name either.
	_, err := ts.Call(context.Background(), loop.ToolCall{ID: "x", Name: "files_secret_admin", Arguments: json.RawMessage(`{}`)}, nil)
	var nf *loop.NotFoundError
	if err == nil || !asNotFound(err, &nf) {
		t.Errorf("denied tool: err %v, want not found", err)
	}
	st := ts.Status()
	if st.State != "serving" || st.Sandboxed || st.Transport != "stdio" || len(st.Tools) != len(want) {
		t.Errorf("status %+v", st)
	}
}

func asNotFound(err error, target **loop.NotFoundError) bool {
	for e := err; e != nil; {
		if v, ok := e.(*loop.NotFoundError); ok {
			*target = v
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

func TestClientAllowListKeepsOnlyThose(t *testing.T) {
	ts := startToolset(t, ClientConfig{Name: "s", Prefix: "x.", Allow: []string{"echo", "get*"}, Deny: []string{"getenv"}})
	if got := strings.Join(toolNames(t, ts), ","); got != "x.echo" {
		t.Fatalf("tools %s, want x.echo (allow echo and get*, deny getenv)", got)
	}
}

func TestClientDoesNotPassTheHostEnvironment(t *testing.T) {
	t.Setenv("LOOOPY_TEST_SECRET", "hunter2")
	ts := startToolset(t, ClientConfig{Env: map[string]string{"GIVEN": "yes"}})
	if res := call(t, ts, "test_getenv", `{"name":"LOOOPY_TEST_SECRET"}`, nil); res.Content != "unset" {
		t.Errorf("the host's environment reached the server: %q", res.Content)
	}
	if res := call(t, ts, "test_getenv", `{"name":"GIVEN"}`, nil); res.Content != "set: yes" {
		t.Errorf("configured env: %q", res.Content)
	}
}

func TestClientProgressBecomesToolProgressEvents(t *testing.T) {
	ts := startToolset(t, ClientConfig{})
	var mu sync.Mutex
	var got []string
	env := &loop.ToolEnv{Emit: func(e loop.Event) {
		if p, ok := e.(*loop.ToolProgress); ok {
			mu.Lock()
			got = append(got, p.Message)
			mu.Unlock()
		}
	}}
	if res := call(t, ts, "test_progress", `{}`, env); res.IsError || res.Content != "done" {
		t.Fatalf("progress: %+v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	// Notifications may be delivered after the result; every one that
	// arrived is in order and named.
	for i, m := range got {
		if want := "step " + string(rune('1'+i)); m != want {
			t.Errorf("progress %d = %q, want %q", i, m, want)
		}
	}
}

func TestClientCutsAFloodingResult(t *testing.T) {
	ts := startToolset(t, ClientConfig{MaxResultBytes: 1000})
	res := call(t, ts, "test_flood", `{"bytes":100000}`, nil)
	if len(res.Content) > 1100 || !strings.Contains(res.Content, "[cut at 1000 bytes]") {
		t.Errorf("result of %d bytes, want it cut at 1000 with a note", len(res.Content))
	}
}

// waitState polls the toolset's status until want or a generous bound.
func waitState(t *testing.T, ts *Toolset, want string) Status {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		st := ts.Status()
		if st.State == want {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("state %q after 90s (last error %q), want %q", st.State, st.LastError, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestClientServerThatDiesIsRestarted(t *testing.T) {
	ts := startToolset(t, ClientConfig{})
	first := call(t, ts, "test_echo", `{"text":"a"}`, nil)
	res := call(t, ts, "test_crash", `{}`, nil)
	if !res.IsError || !strings.Contains(res.Content, `MCP server "test"`) {
		t.Fatalf("crash: %+v, want a tool error naming the server", res)
	}
	// Until it is back, calls answer at once with an error that says so.
	if st := ts.Status(); st.State == "restarting" {
		if r := call(t, ts, "test_echo", `{"text":"b"}`, nil); r.IsError && !strings.Contains(r.Content, "restarting") {
			t.Errorf("call while restarting: %q", r.Content)
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for st := ts.Status(); st.State != "serving" || st.Restarts < 1; st = ts.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("not restarted after a crash: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	second := call(t, ts, "test_echo", `{"text":"c"}`, nil)
	if second.IsError || second.Content != "echo: c" {
		t.Fatalf("after restart: %+v", second)
	}
	if pidOf(t, first) == pidOf(t, second) {
		t.Error("the same process answered after the crash")
	}
}

func pidOf(t *testing.T, r loop.ToolResult) float64 {
	t.Helper()
	var d struct {
		PID float64 `json:"pid"`
	}
	if err := json.Unmarshal(r.Data, &d); err != nil || d.PID == 0 {
		t.Fatalf("no pid in %s: %v", r.Data, err)
	}
	return d.PID
}

func TestClientRestartNeverLeavesItDown(t *testing.T) {
	ts := startToolset(t, ClientConfig{Restart: RestartNever})
	call(t, ts, "test_crash", `{}`, nil)
	waitState(t, ts, "down")
	res := call(t, ts, "test_echo", `{"text":"x"}`, nil)
	if !res.IsError || !strings.Contains(res.Content, "is down") {
		t.Errorf("call to a server that stays down: %+v", res)
	}
}

func TestClientHungServerTimesOutAndIsRestarted(t *testing.T) {
	ts := startToolset(t, ClientConfig{CallTimeout: 500 * time.Millisecond})
	// The server's pid, once an echo answers within the call timeout (on a
	// loaded machine one may not: a late echo is retried, not failed).
	var before float64
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if res := call(t, ts, "test_echo", `{"text":"a"}`, nil); !res.IsError {
			before = pidOf(t, res)
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the echo never answered: %q", res.Content)
		}
	}
	for i := 0; i < hangLimit; i++ {
		res := call(t, ts, "test_hang", `{}`, nil)
		if !res.IsError || !strings.Contains(res.Content, "no answer within 500ms") {
			t.Fatalf("hang %d: %+v, want a timeout error", i, res)
		}
	}
	// Two timeouts in a row: the server is taken for hung and restarted.
	deadline := time.Now().Add(90 * time.Second)
	for {
		res := call(t, ts, "test_echo", `{"text":"b"}`, nil)
		if !res.IsError {
			if pidOf(t, res) == before {
				t.Fatal("the hung process was not replaced")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer after the restart: %q", res.Content)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestClientCancelledCallReturnsAtOnce(t *testing.T) {
	ts := startToolset(t, ClientConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := ts.Call(ctx, loop.ToolCall{ID: "h", Name: "test_hang", Arguments: json.RawMessage(`{}`)}, nil)
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a cancelled call returned no error")
		}
	case <-time.After(time.Minute):
		t.Fatal("a cancelled call did not return")
	}
}

func TestClientStartFailuresAreClear(t *testing.T) {
	ts, err := NewToolset(ClientConfig{Name: "gone", Command: []string{"/nonexistent/mcp-server"}, Restart: RestartNever})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	if err := ts.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "/nonexistent/mcp-server") {
		t.Errorf("start of a missing command: %v", err)
	}
	// A server that never initializes is given up on after StartTimeout.
	t.Setenv("MCPSERVER_SLOW_START", "1")
	slow, err := NewToolset(ClientConfig{Name: "slow", Command: []string{testServer(t)}, Env: map[string]string{"MCPSERVER_SLOW_START": "1"},
		StartTimeout: 300 * time.Millisecond, Restart: RestartNever})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if err := slow.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Errorf("start of a server that never answers: %v", err)
	}
}

func TestClientConfigValidation(t *testing.T) {
	for _, c := range []ClientConfig{
		{Name: "", Command: []string{"x"}},
		{Name: "a b", Command: []string{"x"}},
		{Name: "x"},
		{Name: "x", Command: []string{"x"}, URL: "http://h"},
		{Name: "x", URL: "ftp://h"},
		{Name: "x", Command: []string{"x"}, Allow: []string{"["}},
		{Name: "x", Command: []string{"x"}, Restart: "sometimes"},
		{Name: "x", Command: []string{"x"}, CallTimeout: -1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
