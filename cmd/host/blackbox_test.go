package main

import (
	"context"
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

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
)

// The black-box test runs the real binary as a process, with a config, a
// plugin folder holding hostile plugins built from source in this
// repository, and the official A2A client. A principal drives the hostile
// plugins through the scripted model: symbolic links out of its folder, the
// host's environment, files beside its grant, floods of log, events and
// key-value writes; a manifest asks for more than the policy allows. The
// host must stay up, serve another principal's turn, and nothing outside
// the grant may be read or written.

const bbScript = `{"rules":[
 {"name":"fs","match":"^fs (\\S+) (\\S+)(?: (\\S+))?$","steps":[
   {"toolCall":{"name":"fs","arguments":{"op":"$1","path":"$2","to":"$3","text":"forged"}}}]},
 {"name":"flood","match":"^flood (\\S+) (\\d+) (\\d+)$","steps":[
   {"toolCall":{"name":"flood","arguments":"{\"channel\":\"$1\",\"n\":$2,\"size\":$3}"}}]}
],"default":{"steps":[{"text":"echo: {{input}}"}]}}`

// bbSecret is in the host's environment and in a file beside the grant:
// no answer may ever carry it.
const bbSecret = "BLACKBOX-TOPSECRET-7f3a"

func buildGuest(t *testing.T, out, pkgDir string) []byte {
	t.Helper()
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", out, ".")
	cmd.Dir = pkgDir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkgDir, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// installPlugin writes a plugin folder: the module and its manifest.
func installPlugin(t *testing.T, pluginDir, name, kind string, wasm []byte, caps, config map[string]any) {
	t.Helper()
	dir := filepath.Join(pluginDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(wasm)
	m := map[string]any{"name": name, "version": "1.0.0", "kind": kind, "wasm": name + ".wasm",
		"sha256": hex.EncodeToString(sum[:]), "capabilities": caps}
	if config != nil {
		m["config"] = config
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, "plugin.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func a2aClient(t *testing.T, base, token string) *a2aclient.Client {
	t.Helper()
	hc := &http.Client{Transport: bearer{token}, Timeout: 60 * time.Second}
	ctx := context.Background()
	card, err := agentcard.NewResolver(hc).Resolve(ctx, base)
	if err != nil {
		t.Fatalf("resolve card: %v", err)
	}
	c, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(hc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}

// turn sends text in a new conversation and returns the task's answer
// (its artifacts' text, or the status message when it failed).
func turn(t *testing.T, c *a2aclient.Client, text string) (string, a2a.TaskState) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(text))})
	if err != nil {
		t.Fatalf("%q: %v", text, err)
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
	if task.Status.Message != nil {
		for _, p := range task.Status.Message.Parts {
			sb.WriteString(p.Text())
		}
	}
	return sb.String(), task.Status.State
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// syncBuf keeps what the host process writes.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() < 64<<20 {
		s.b.Write(p)
	}
	return len(p), nil
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestBlackBoxHostileTenant(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the host binary")
	}
	t.Parallel()
	top := t.TempDir()
	bin := sandboxHostBinary(t) // the one build of the host for the package's black-box tests
	model, err := os.ReadFile("../../examples/plugins/scripted-model/scripted-model.wasm")
	if err != nil {
		t.Fatalf("the scripted model (run make plugins-go): %v", err)
	}
	escape := buildGuest(t, filepath.Join(top, "escape.wasm"), "../../plugins/testdata/guests/escape")
	flood := buildGuest(t, filepath.Join(top, "flood.wasm"), "../../plugins/testdata/guests/flood")

	pluginDir := filepath.Join(top, "plugins")
	grants := filepath.Join(top, "grants")
	granted := filepath.Join(grants, "escape")
	outside := filepath.Join(top, "outside")
	for _, d := range []string{pluginDir, granted, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secretFile := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secretFile, []byte(bbSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(granted, "in.txt"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(granted, "planted")); err != nil {
		t.Fatal(err)
	}

	installPlugin(t, pluginDir, "scripted-model", "model", model,
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}}, map[string]any{"script": bbScript})
	installPlugin(t, pluginDir, "escape", "tool", escape,
		map[string]any{"allowedPaths": []map[string]any{{"path": granted}}}, nil)
	installPlugin(t, pluginDir, "flood", "tool", flood,
		map[string]any{"hostFunctions": []string{"log", "emit", "kv_get", "kv_set", "kv_delete", "artifact_write", "http_request", "http_read", "http_close"}}, nil)

	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := map[string]any{
		"addr": fmt.Sprintf("127.0.0.1:%d", port), "publicUrl": base,
		"dataDir": filepath.Join(top, "data"), "pluginDir": pluginDir,
		"plugins": map[string]any{"pathRoots": []string{grants}, "cacheDir": blackboxCache(),
			"budgets": map[string]any{"logBytesPerCall": 4096, "kvQuotaKeys": 100}},
		"auth": map[string]any{"enabled": true, "keys": []map[string]any{
			{"key": "env:BB_KEY_MALLORY", "principal": "mallory"}, {"key": "env:BB_KEY_BOB", "principal": "bob"}}},
		"admin":  map[string]any{"token": "env:BB_ADMIN"},
		"limits": map[string]any{"shutdownGrace": "2s"},
	}
	cb, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(top, "looopy.json")
	if err := os.WriteFile(cfgPath, cb, 0o600); err != nil {
		t.Fatal(err)
	}

	var out syncBuf
	cmd := exec.Command(bin, "-config", cfgPath)
	cmd.Dir = top
	cmd.Env = append(os.Environ(), "BB_KEY_MALLORY=mallory-key", "BB_KEY_BOB=bob-key", "BB_ADMIN=admin-token",
		"BB_HOST_SECRET="+bbSecret)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	alive := func(when string) {
		t.Helper()
		select {
		case err := <-exited:
			t.Fatalf("the host exited %s: %v\n%s", when, err, out.String())
		default:
		}
	}

	// Ready: the host listens once its plugins are loaded (compiling them
	// the first time is slow on a loaded machine; the cache keeps them).
	deadline := time.Now().Add(5 * time.Minute)
	for {
		alive("while starting")
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host is not ready after 5 minutes:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	mallory := a2aClient(t, base, "mallory-key")
	in := func(p string) string { return filepath.Join(granted, p) }

	// The grant works for what lies inside.
	if got, st := turn(t, mallory, "fs read "+in("in.txt")); st != a2a.TaskStateCompleted || !strings.Contains(got, "inside") {
		t.Fatalf("read inside the grant: %s %q", st, got)
	}
	// Every way out, through the real host.
	ups := strings.Repeat("../", strings.Count(granted, "/")+2)
	attacks := []string{
		"fs symlink " + in("esc") + " " + ups,
		"fs read " + in("esc/proc/self/environ"),
		"fs read /proc/self/environ",
		"fs read " + fmt.Sprintf("/proc/%d/environ", cmd.Process.Pid),
		"fs read " + in("planted/secret.txt"),
		"fs read " + in("../../outside/secret.txt"),
		"fs read " + secretFile,
		"fs read " + cfgPath,
		"fs list " + in("planted"),
		"fs list " + filepath.Join(top, "data"),
		"fs write " + in("planted/forged.txt"),
		"fs write " + filepath.Join(outside, "forged.txt"),
		"fs write " + filepath.Join(pluginDir, "forged.txt"),
		"fs rename " + in("in.txt") + " " + in("planted/moved.txt"),
		"fs link " + in("hard") + " " + in("planted/secret.txt"),
		"fs read " + filepath.Join(pluginDir, "flood", "plugin.json"),
	}
	for _, a := range attacks {
		got, _ := turn(t, mallory, a)
		if strings.Contains(got, bbSecret) || strings.Contains(got, "mallory-key") || strings.Contains(got, "admin-token") ||
			strings.Contains(got, "BB_HOST_SECRET") || strings.Contains(got, `"sha256"`) {
			t.Fatalf("%q leaked: %.300q", a, got)
		}
		alive("after " + a)
	}
	// A plugin over-asks: the root of the machine, the plugin folder, the
	// data folder. It is the escape guest again, dropped into the watched
	// folder once the first is serving (were both there at start, the one
	// loaded first would own the tool name, whichever it is). Its grants
	// are refused and logged, and nothing of them is readable.
	installPlugin(t, pluginDir, "greedy", "tool", escape,
		map[string]any{"allowedPaths": []map[string]any{{"path": "/"}, {"path": pluginDir}, {"path": filepath.Join(top, "data")}}}, nil)
	overAskLogged := func() bool {
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.Contains(line, "capabilities asked for and not granted") && strings.Contains(line, "greedy") {
				return true
			}
		}
		return false
	}
	for logged := time.Now().Add(3 * time.Minute); !overAskLogged(); {
		alive("while loading the over-asking plugin")
		if time.Now().After(logged) {
			t.Fatalf("the over-asking manifest was not reported:\n%.2000s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if hn, err := os.ReadFile("/etc/hostname"); err == nil && len(strings.TrimSpace(string(hn))) > 0 {
		if got, _ := turn(t, mallory, "fs read /etc/hostname"); strings.Contains(got, strings.TrimSpace(string(hn))) {
			t.Fatalf("read /etc/hostname answered %.300q", got)
		}
	}

	// Floods: each bounded, each answered, the host keeps serving.
	for _, f := range []string{"flood log 20000 1000", "flood progress 100000 10", "flood event 100 200000", "flood kv 500 10"} {
		if _, st := turn(t, mallory, f); st == "" {
			t.Fatalf("%s: no state", f)
		}
		alive("after " + f)
	}

	// Another principal is served.
	bob := a2aClient(t, base, "bob-key")
	if got, st := turn(t, bob, "hello from bob"); st != a2a.TaskStateCompleted || !strings.Contains(got, "echo: hello from bob") {
		t.Fatalf("bob's turn: %s %q", st, got)
	}

	// Nothing outside the grant changed.
	if b, _ := os.ReadFile(secretFile); string(b) != bbSecret {
		t.Fatalf("the secret file changed: %q", b)
	}
	if es, _ := os.ReadDir(outside); len(es) != 1 {
		t.Fatalf("the folder beside the grant changed: %v", es)
	}
	for _, p := range []string{filepath.Join(pluginDir, "forged.txt"), in("esc"), in("hard")} {
		if _, err := os.Lstat(p); err == nil {
			t.Fatalf("%s was made", p)
		}
	}
	if b, _ := os.ReadFile(in("in.txt")); string(b) != "inside" {
		t.Fatalf("in.txt changed: %q", b)
	}
	// The host's log took at most the log budget per call of the flood.
	if n := strings.Count(out.String(), strings.Repeat("x", 1000)); n > 5 {
		t.Fatalf("the flood put %d of its lines in the host's log, budget 4 KiB", n)
	}
	alive("at the end")
}
