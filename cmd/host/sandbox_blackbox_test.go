package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Attacks on the plugin sandbox through the real binary: a module that
// compiles for minutes, a watcher kept busy by one plugin's load, a call
// that spins while its plugin is removed. Guards (generous deadlines) only
// fail fast; nothing here measures speed.

var (
	hostBinOnce sync.Once
	hostBin     string
	hostBinErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if hostBin != "" {
		// the host built once for the package's black-box tests (70 MB)
		_ = os.RemoveAll(filepath.Dir(hostBin))
	}
	os.Exit(code)
}

// sandboxHostBinary builds the host once for the package's black-box tests.
func sandboxHostBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the host binary")
	}
	hostBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "looopy-sandbox-bin-")
		if err != nil {
			hostBinErr = err
			return
		}
		hostBin = filepath.Join(dir, "looopy")
		if b, err := exec.Command("go", "build", "-o", hostBin, ".").CombinedOutput(); err != nil {
			hostBinErr = fmt.Errorf("build the host: %v\n%s", err, b)
			return
		}
		hostBinErr = warmCompileCache(hostBin)
	})
	if hostBinErr != nil {
		t.Fatal(hostBinErr)
	}
	return hostBin
}

// blackboxCache is the compilation cache (plugins.cacheDir) every host of
// the package's black-box tests shares.
func blackboxCache() string { return filepath.Join(os.TempDir(), "looopy-blackbox-wasm-cache") }

// warmCompileCache runs the host once with the scripted model, until it
// listens, so that its compiled code is in the shared cache before the
// tests start theirs, side by side: a test then reads it (a cold compile,
// slow on a loaded machine, would otherwise fall in whichever tests start
// first, TestBlackBoxUnboundedCompileRefused's compileTimeout of 20 s
// among them).
func warmCompileCache(bin string) error {
	top, err := os.MkdirTemp("", "looopy-blackbox-warm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(top)
	model, err := os.ReadFile(filepath.Join("..", "..", "examples", "plugins", "scripted-model", "scripted-model.wasm"))
	if err != nil {
		return fmt.Errorf("the scripted model (run make plugins-go): %w", err)
	}
	dir := filepath.Join(top, "plugins", "scripted-model")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "scripted-model.wasm"), model, 0o644); err != nil {
		return err
	}
	sum := sha256.Sum256(model)
	manifest, _ := json.Marshal(map[string]any{"name": "scripted-model", "version": "1.0.0", "kind": "model",
		"wasm": "scripted-model.wasm", "sha256": hex.EncodeToString(sum[:]),
		"capabilities": map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}}})
	if err := os.WriteFile(filepath.Join(dir, "plugin.json"), manifest, 0o644); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cfg, _ := json.Marshal(map[string]any{"addr": fmt.Sprintf("127.0.0.1:%d", port), "dataDir": filepath.Join(top, "data"),
		"pluginDir": filepath.Join(top, "plugins"), "plugins": map[string]any{"cacheDir": blackboxCache()}})
	cfgPath := filepath.Join(top, "looopy.json")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		return err
	}
	var out syncBuf
	cmd := exec.Command(bin, "-config", cfgPath, "-log-format", "text")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
	}()
	h := &sandboxHost{base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	for deadline := time.Now().Add(5 * time.Minute); !h.ready(); time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("the host that warms the compilation cache exited: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the host that warms the compilation cache is not ready after 5 minutes:\n%s", out.String())
		}
	}
	return nil
}

type sandboxHost struct {
	base string
	pid  int
	out  *syncBuf
	// exited gets the process's end (its Wait's error) once; gone is
	// closed when it has ended, however often it is asked (a test that
	// took the end from exited leaves its cleanup nothing to wait for).
	exited chan error
	gone   chan struct{}
}

// watch waits for cmd to end in the background: exited and gone report it.
func (h *sandboxHost) watch(cmd *exec.Cmd) {
	h.exited, h.gone = make(chan error, 1), make(chan struct{})
	go func() {
		h.exited <- cmd.Wait()
		close(h.gone)
	}()
}

// startSandboxHost runs the host on a plugin folder with the given plugins
// config (admin token "admin-token", no auth) and returns once it listens.
func startSandboxHost(t *testing.T, top, pluginDir string, pluginsCfg map[string]any) *sandboxHost {
	t.Helper()
	return startSandboxHostWith(t, top, pluginDir, pluginsCfg, nil)
}

// startSandboxHostWith is startSandboxHost with more config: each key of
// extra replaces that section (auth, limits, ...); extra["port"] (an int)
// is the port to listen on, when chosen ahead.
func startSandboxHostWith(t *testing.T, top, pluginDir string, pluginsCfg, extra map[string]any) *sandboxHost {
	t.Helper()
	return startSandboxHostEnv(t, top, pluginDir, pluginsCfg, extra)
}

// startSandboxHostEnv is startSandboxHostWith with variables added to the
// host's environment (NAME=value).
func startSandboxHostEnv(t *testing.T, top, pluginDir string, pluginsCfg, extra map[string]any, env ...string) *sandboxHost {
	t.Helper()
	bin := sandboxHostBinary(t)
	if _, err := os.Stat(filepath.Join(pluginDir, "scripted-model")); err != nil {
		installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
			map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}}, map[string]any{"script": `{"default":{"steps":[{"text":"ok"}]}}`})
	}
	chosen, ahead := extra["port"].(int) // a port chosen ahead (hosts that name each other)
	delete(extra, "port")
	for attempt := 1; ; attempt++ {
		port := chosen
		if !ahead {
			port = freePort(t)
		}
		h, taken := startSandboxHostOn(t, bin, port, top, pluginDir, pluginsCfg, extra, env)
		if !taken {
			return h
		}
		// Another test's host or connection took the free port between
		// its choice and the host's listen (the tests run side by side).
		if ahead || attempt == 5 {
			t.Fatalf("port %d is taken:\n%s", port, h.out.String())
		}
	}
}

// startSandboxHostOn is startSandboxHostEnv on port: the host once it
// listens, or (taken) the host that exited because port was in use.
func startSandboxHostOn(t *testing.T, bin string, port int, top, pluginDir string, pluginsCfg, extra map[string]any, env []string) (h *sandboxHost, taken bool) {
	t.Helper()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	if pluginsCfg == nil {
		pluginsCfg = map[string]any{}
	}
	if _, ok := pluginsCfg["cacheDir"]; !ok {
		pluginsCfg["cacheDir"] = blackboxCache()
	}
	cfg := map[string]any{
		"addr": fmt.Sprintf("127.0.0.1:%d", port), "publicUrl": base,
		"dataDir": filepath.Join(top, "data"), "pluginDir": pluginDir,
		"plugins": pluginsCfg, "admin": map[string]any{"token": "admin-token"},
		"limits": map[string]any{"shutdownGrace": "2s"},
	}
	for k, v := range extra {
		cfg[k] = v
	}
	cb, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(top, "looopy.json")
	if err := os.WriteFile(cfgPath, cb, 0o600); err != nil {
		t.Fatal(err)
	}
	h = &sandboxHost{base: base, out: &syncBuf{}}
	cmd := exec.Command(bin, "-config", cfgPath, "-log-format", "text")
	cmd.Dir = top
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = h.out, h.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h.pid = cmd.Process.Pid
	h.watch(cmd)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		// gone, not exited: a test that killed or stopped the host has
		// taken its end from exited already (waiting on exited then sat
		// out the whole 30 s below).
		select {
		case <-h.gone:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("host output:\n%s", h.out.String())
		}
	})
	deadline := time.Now().Add(5 * time.Minute) // a hang guard
	for !h.ready() {
		select {
		case <-h.gone:
			if strings.Contains(h.out.String(), "address already in use") {
				return h, true
			}
			t.Fatalf("the host exited before it listened:\n%s", h.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for the host to listen: wedged")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return h, false
}

func (h *sandboxHost) ready() bool {
	resp, err := http.Get(h.base + "/readyz")
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// waitFor polls cond until it holds; the deadline is a hang guard.
func (h *sandboxHost) waitFor(t *testing.T, what string, guard time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		select {
		case err := <-h.exited:
			t.Fatalf("the host exited waiting for %s: %v\n%s", what, err, h.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: wedged", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type pluginInfo struct {
	Name      string `json:"name"`
	SHA256    string `json:"sha256"`
	State     string `json:"state"`
	LastError string `json:"error"`
	Calls     int64  `json:"calls"`
	Busy      int    `json:"busy"`
	Waiting   int    `json:"waiting"`
}

func (h *sandboxHost) plugins(t *testing.T) map[string]pluginInfo {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.base+"/admin/plugins", nil)
	req.Header.Set("Authorization", "Bearer admin-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var doc struct {
		Plugins []pluginInfo `json:"plugins"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || resp.StatusCode != 200 {
		var list []pluginInfo
		if json.Unmarshal(b, &list) != nil {
			t.Fatalf("/admin/plugins: %d %s", resp.StatusCode, b)
		}
		doc.Plugins = list
	}
	out := map[string]pluginInfo{}
	for _, p := range doc.Plugins {
		out[p.Name] = p
	}
	return out
}

// mcpCall calls a tool through the host's MCP endpoint (Streamable HTTP,
// JSON-RPC) and returns the text of the answer.
func (h *sandboxHost) mcpCall(t *testing.T, tool, args string) (string, error) {
	post := func(sid string, body string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, h.base+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		return http.DefaultClient.Do(req)
	}
	resp, err := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"attack","version":"1"}}}`)
	if err != nil {
		return "", err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp, err = post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
		return "", err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	resp, err = post(sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, tool, args))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	// an SSE stream's data lines, or a JSON body
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
	return text.String(), nil
}

// Byte by byte, modules that attack the compiler (a copy of the emitter of
// plugins/wasmgen_test.go, kept small).
func bbSection(id byte, body []byte) []byte {
	return append(bbU32([]byte{id}, uint32(len(body))), body...)
}

func bbU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func bbModule(bodies [][]byte) []byte {
	out := []byte("\x00asm\x01\x00\x00\x00")
	out = append(out, bbSection(1, []byte{1, 0x60, 0, 0})...)
	fs := bbU32(nil, uint32(len(bodies)))
	for range bodies {
		fs = append(fs, 0)
	}
	out = append(out, bbSection(3, fs)...)
	out = append(out, bbSection(5, []byte{1, 0, 2})...)
	code := bbU32(nil, uint32(len(bodies)))
	for _, b := range bodies {
		code = append(bbU32(code, uint32(len(b))), b...)
	}
	return append(out, bbSection(10, code)...)
}

// bbBigCompile: one function, a loop of 60,000 memory.fill (660 KB): it
// compiled for minutes, the host not listening meanwhile.
func bbBigCompile() []byte {
	b := []byte{0, 0x03, 0x40}
	for range 60000 {
		b = append(b, 0x41, 0, 0x41, 0, 0x41, 0, 0xfc, 0x0b, 0)
	}
	return bbModule([][]byte{append(b, 0x0c, 0, 0x0b, 0x0b)})
}

// bbSlowCompile is within every admission limit and compiles for many
// minutes, a function at a time: 1,000 functions of 4,000 ifs (about 0.6 s
// of CPU each, BenchmarkCompileAtTheLimits).
func bbSlowCompile() []byte {
	b := []byte{1, 1, 0x7f}
	for range 4000 {
		b = append(b, 0x20, 0, 0x04, 0x40, 0x41, 1, 0x21, 0, 0x0b)
	}
	b = append(b, 0x0b)
	bodies := make([][]byte, 1000)
	for i := range bodies {
		bodies[i] = b
	}
	return bbModule(bodies)
}

func readExample(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "plugins", name, name+".wasm"))
	if err != nil {
		t.Fatalf("%s (run make plugins-go): %v", name, err)
	}
	return b
}

// A plugin folder holding a module that compiles for minutes (refused
// before compiling) and one within the admission limits that still
// compiles for minutes (refused at the compile timeout): the host starts,
// listens with its other plugins loaded and serves them, and the admin list
// shows both bad plugins failed, each with its reason.
func TestBlackBoxUnboundedCompileRefused(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "wat-add", "tool", readExample(t, "wat-add"), nil, nil)
	installPlugin(t, pluginDir, "bigcompile", "tool", bbBigCompile(), nil, nil)
	installPlugin(t, pluginDir, "slowcompile", "tool", bbSlowCompile(), nil, nil)
	// The timeout applies to the model's compile too (a Go guest: a cache
	// read, or a full compile when the cache is cold), which must fit in it
	// on a loaded machine; slowcompile needs minutes of CPU on any.
	h := startSandboxHost(t, top, pluginDir, map[string]any{"compileTimeout": "20s"})

	got := h.plugins(t)
	if p := got["wat-add"]; p.State != "serving" {
		t.Fatalf("wat-add = %+v", p)
	}
	if p := got["bigcompile"]; p.State != "failed" || !strings.Contains(p.LastError, "refused before compiling") || !strings.Contains(p.LastError, "functionBranches") {
		t.Fatalf("bigcompile = %+v", p)
	}
	if p := got["slowcompile"]; p.State != "failed" || !strings.Contains(p.LastError, "compileTimeout") {
		t.Fatalf("slowcompile = %+v", p)
	}
	log := h.out.String()
	if !strings.Contains(log, "functionBranches") || !strings.Contains(log, "plugins.compileTimeout") {
		t.Fatalf("the log does not say why the plugins were refused:\n%s", log)
	}
	if text, err := h.mcpCall(t, "add", `{"a":40,"b":2}`); err != nil || !strings.Contains(text, "42") {
		t.Fatalf("a call beside the refused plugins: %q %v", text, err)
	}
}

// copyPluginDir writes a plugin into a staging folder beside the plugin
// folder and renames it in, so the watcher sees it whole.
func dropPlugin(t *testing.T, pluginDir, name, kind string, wasm []byte) {
	t.Helper()
	staging := filepath.Join(filepath.Dir(pluginDir), "staging")
	installPlugin(t, staging, name, kind, wasm, nil, nil)
	if err := os.Rename(filepath.Join(staging, name), filepath.Join(pluginDir, name)); err != nil {
		t.Fatal(err)
	}
}

// While a hot-loaded plugin compiles (for minutes: the compile timeout is
// 10m here), a plugin dropped into the folder beside it loads and serves,
// and the host answers /readyz meanwhile; removing the slow plugin stops its
// load.
func TestBlackBoxWatcherLoadsBesideASlowCompile(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	if err := os.MkdirAll(pluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	h := startSandboxHost(t, top, pluginDir, map[string]any{"compileTimeout": "10m"})
	dropPlugin(t, pluginDir, "slowcompile", "tool", bbSlowCompile())
	// the admin API lists the slow compile as loading once the watcher
	// has seen the folder settle; the good plugin is dropped after that,
	// and must not wait for it
	h.waitFor(t, "the slow compile to be listed as loading", 3*time.Minute, func() bool {
		return h.plugins(t)["slowcompile"].State == "loading"
	})
	dropPlugin(t, pluginDir, "wat-add", "tool", readExample(t, "wat-add"))
	h.waitFor(t, "wat-add to load beside the slow compile", 3*time.Minute, func() bool {
		return h.plugins(t)["wat-add"].State == "serving"
	})
	if p := h.plugins(t)["slowcompile"]; p.State != "loading" {
		t.Fatalf("the slow compile ended (%+v) before wat-add loaded: the test proves nothing", p)
	}
	if !h.ready() {
		t.Fatal("/readyz does not answer while a plugin compiles")
	}
	if text, err := h.mcpCall(t, "add", `{"a":40,"b":2}`); err != nil || !strings.Contains(text, "42") {
		t.Fatalf("a call beside the slow compile: %q %v", text, err)
	}
	if err := os.RemoveAll(filepath.Join(pluginDir, "slowcompile")); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "the removed plugin's load to be cancelled", 3*time.Minute, func() bool {
		return strings.Contains(h.out.String(), `source=`+filepath.Join(pluginDir, "slowcompile", "plugin.json"))
	})
	if strings.Contains(h.out.String(), "plugin loaded component=plugins plugin=slowcompile") {
		t.Fatal("the removed plugin loaded")
	}
}

// A call spinning in a plugin whose call timeout is 10 minutes stops at
// once when the plugin's folder is removed, answering that the plugin was
// unloaded; likewise when the admin unloads it.
func TestBlackBoxUnloadStopsACallInFlight(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	spin, err := os.ReadFile(filepath.Join("..", "..", "plugins", "testdata", "wat", "spin.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	long := map[string]any{"callTimeout": "10m"}
	installPlugin(t, pluginDir, "spin", "tool", spin, long, nil)
	installPlugin(t, pluginDir, "spin2", "tool", spin, long, nil)
	// two plugins cannot offer one tool: spin2's module is spin's under
	// another tool name
	spin2 := bytes.Replace(spin, []byte(`"spin_wat"`), []byte(`"spin_wa2"`), 1)
	installPlugin(t, pluginDir, "spin2", "tool", spin2, long, nil)
	h := startSandboxHost(t, top, pluginDir, map[string]any{"maxCallTimeout": "10m"})

	for _, c := range []struct{ plugin, tool, how string }{{"spin", "spin_wat", "rm"}, {"spin2", "spin_wa2", "admin"}} {
		type answer struct {
			text string
			err  error
		}
		done := make(chan answer, 1)
		go func() {
			text, err := h.mcpCall(t, c.tool, `{}`)
			done <- answer{text, err}
		}()
		h.waitFor(t, "the call to begin", 3*time.Minute, func() bool { return h.plugins(t)[c.plugin].Calls > 0 })
		switch c.how {
		case "rm":
			if err := os.RemoveAll(filepath.Join(pluginDir, c.plugin)); err != nil {
				t.Fatal(err)
			}
		case "admin":
			req, _ := http.NewRequest(http.MethodDelete, h.base+"/admin/plugins/"+c.plugin, nil)
			req.Header.Set("Authorization", "Bearer admin-token")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("admin unload: %d", resp.StatusCode)
			}
		}
		select {
		case a := <-done:
			if a.err != nil || !strings.Contains(a.text, "plugin unloaded") || strings.Contains(a.text, "timeout") {
				t.Fatalf("%s: the spinning call answered %q %v", c.how, a.text, a.err)
			}
		case <-time.After(3 * time.Minute):
			t.Fatalf("%s: the spinning call still runs 3 minutes after its plugin was unloaded", c.how)
		}
	}
}
