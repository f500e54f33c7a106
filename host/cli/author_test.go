package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/loop"
)

var (
	binOnce sync.Once
	bin     string
	binErr  error
)

// looopy builds the binary once per test run.
func looopy(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "looopy-cli-")
		if err != nil {
			binErr = err
			return
		}
		bin = filepath.Join(dir, "looopy")
		if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/host").CombinedOutput(); err != nil {
			binErr = &exec.ExitError{}
			t.Logf("%s", out)
		}
	})
	if binErr != nil {
		t.Fatalf("build looopy: %v", binErr)
	}
	return bin
}

// cmd runs `looopy args...` in dir and returns its output.
func cmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, looopy(t), args...)
	c.Dir = dir
	c.Env = append(os.Environ(), env...)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("looopy %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// quietModel stands in for the model: the tools are called over MCP.
type quietModel struct{}

func (quietModel) Generate(context.Context, *loop.ModelRequest, func(loop.Delta)) (*loop.ModelResponse, error) {
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "ok"}}, nil
}

// watchedHost runs a host watching a fresh plugin folder and returns the
// folder, an MCP session with it and its URL.
func watchedHost(t *testing.T) (string, *sdk.ClientSession, string) {
	t.Helper()
	pluginDir := t.TempDir()
	m := host.NewMain()
	m.Stdout = os.Stderr
	if os.Getenv("LOOOPY_TEST_LOG") == "" {
		m.Stdout = &bytes.Buffer{}
	}
	m.Model = quietModel{}
	// The compile and load timeouts are hang guards here, not the defaults:
	// a Go plugin's first compile under the race detector ran past the
	// default 3 minutes on a loaded machine (the timeouts have their own
	// tests in package plugins). A load that fails anyway fails the test at
	// once (waitAnswer).
	m.Config = host.Config{Addr: "127.0.0.1:0", DataDir: t.TempDir(), PluginDir: pluginDir,
		Admin: host.AdminConfig{Token: adminToken},
		Plugins: host.PluginsConfig{CacheDir: hostCacheDir(),
			CompileTimeout: host.Duration(hangGuard), LoadTimeout: host.Duration(hangGuard)}}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	c := sdk.NewClient(&sdk.Implementation{Name: "author-test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: m.URL() + "/mcp", MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return pluginDir, cs, m.URL()
}

// hostCacheDir is the compilation cache the host tests share: the built
// plugins are reproducible (-trimpath), so a later run compiles neither
// version of a plugin.
func hostCacheDir() string { return filepath.Join(os.TempDir(), "looopy-host-test-wasm-cache") }

// hangGuard bounds each step of the author's path: a step that hangs fails
// the test, one that is merely slow (a loaded machine) passes.
const hangGuard = 10 * time.Minute

const adminToken = "author-test-admin"

// loadFailure is the error the host lists for the plugin name's module
// wasm (the installed file's name), or "" while it has none: the watcher
// does not retry a module that failed to load, so waiting on is pointless.
func loadFailure(t *testing.T, url, name, wasm string) string {
	t.Helper()
	req, err := http.NewRequest("GET", url+"/admin/plugins", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("admin plugins: %v", err)
	}
	defer resp.Body.Close()
	var out struct {
		Plugins []host.PluginStatus `json:"plugins"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("admin plugins: %d %v", resp.StatusCode, err)
	}
	for _, p := range out.Plugins {
		// A failed load names the module it loaded; an older module's
		// failure (the file replaced while it loaded) is not this one's.
		if p.Name == name && strings.Contains(p.Error, wasm) {
			return p.Error
		}
	}
	return ""
}

// waitAnswer calls tool over MCP until its text contains want (the watcher
// loads the plugin in the background); it fails at once when failed reports
// the module failed to load, and a guard fails a hang.
func waitAnswer(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any, want string, failed func() string) {
	t.Helper()
	// a hang guard past the host's compile and load timeouts: a Go plugin
	// compiles slowly on a loaded machine
	deadline := time.Now().Add(hangGuard + time.Minute)
	last := ""
	for {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: args})
		if err == nil && !res.IsError && len(res.Content) > 0 {
			if tc, ok := res.Content[0].(*sdk.TextContent); ok {
				last = tc.Text
				if strings.Contains(tc.Text, want) {
					return
				}
			}
		} else if err != nil {
			last = err.Error()
		}
		if e := failed(); e != "" {
			t.Fatalf("tool %s: the installed module failed to load: %s", tool, e)
		}
		if time.Now().After(deadline) {
			t.Fatalf("tool %s never answered %q; last: %s", tool, want, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// authorPath is the author's whole path for one language: new, build,
// test, install into the folder a running host watches, a call, an edit,
// a rebuild and reinstall, and the call answering the edited text (hot
// reload).
func authorPath(t *testing.T, lang, name, source, from, to string, args map[string]any, before, after string) {
	work := t.TempDir()
	src, _ := filepath.Abs("../..")
	env := []string{"LOOOPY_SRC=" + src}
	cmd(t, work, env, "plugin", "new", lang, name)
	dir := filepath.Join(work, name)
	if lang == "go" {
		// the template's own native test
		c := exec.Command("go", "test", "./...")
		c.Dir = dir
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("go test of the Go template: %v\n%s", err, out)
		}
	}
	cmd(t, work, env, "plugin", "build", name)
	// the timeouts as in the host below: hang guards
	// with a compilation cache kept across runs: a later run reads the
	// module instead of compiling it (the host below keys its cache by
	// another wazero version string, a test binary's, so it compiles its own)
	test := func() {
		t.Helper()
		out := cmd(t, work, env, "plugin", "test", "-compile-timeout", hangGuard.String(), "-load-timeout", hangGuard.String(),
			"-cache-dir", hostCacheDir(), name)
		if !strings.Contains(out, "PASS") || !strings.Contains(out, "grant") {
			t.Fatalf("plugin test:\n%s", out)
		}
	}
	test()
	pluginDir, cs, url := watchedHost(t)
	tool := strings.ReplaceAll(name, "-", "_")
	// install and wait for the answer; a load of the installed module that
	// fails ends the wait at once
	installed := func(want string) {
		t.Helper()
		cmd(t, work, env, "plugin", "install", "-plugins", pluginDir, name)
		mods, _ := filepath.Glob(filepath.Join(pluginDir, name, "*.wasm"))
		if len(mods) != 1 {
			t.Fatalf("installed modules %v, want one", mods)
		}
		wasm := filepath.Base(mods[0])
		waitAnswer(t, cs, tool, args, want, func() string { return loadFailure(t, url, name, wasm) })
	}
	installed(before)

	p := filepath.Join(dir, source)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(from)) {
		t.Fatalf("%s does not contain %q", p, from)
	}
	if err := os.WriteFile(p, bytes.ReplaceAll(b, []byte(from), []byte(to)), 0o644); err != nil {
		t.Fatal(err)
	}
	// the author's test cases follow the edit
	cases := filepath.Join(dir, "plugin.test.json")
	if b, err := os.ReadFile(cases); err == nil {
		if err := os.WriteFile(cases, bytes.ReplaceAll(b, []byte(before), []byte(after)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd(t, work, env, "plugin", "build", name)
	test()
	installed(after)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(res.Tools, func(tl *sdk.Tool) bool { return tl.Name == tool }) {
		t.Errorf("%s not listed after the reload", tool)
	}
	// One module in the installed folder: the old one is gone.
	mods, _ := filepath.Glob(filepath.Join(pluginDir, name, "*.wasm"))
	if len(mods) != 1 {
		t.Errorf("installed modules %v, want one", mods)
	}
}

func TestPluginAuthorPathGo(t *testing.T) {
	authorPath(t, "go", "greeter", "main.go", `"Hello, "`, `"Hi, "`,
		map[string]any{"name": "Ada"}, "Hello, Ada!", "Hi, Ada!")
}

func TestPluginAuthorPathWAT(t *testing.T) {
	authorPath(t, "wat", "hello-wat", "hello-wat.wat", `Hello from`, `Howdy from`, nil,
		"Hello from hello-wat", "Howdy from hello-wat")
}
