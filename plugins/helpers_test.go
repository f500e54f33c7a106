package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// testCacheDir is wazero's compilation cache shared by the tests' registries
// across runs (a test of the cache itself brings its own).
var testCacheDir = filepath.Join(os.TempDir(), "looopy-plugins-test-wasm-cache")

// Guests are built from source once per test binary run, into buildDir.
var (
	buildDir  string
	buildMu   sync.Mutex
	built     = map[string]string{}
	buildErrs = map[string]error{}
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "looopy-guests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// guestWasm builds testdata/guests/<name> (a Go guest) and returns the .wasm path.
func guestWasm(t testing.TB, name string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[name]; ok {
		return p
	}
	if err, ok := buildErrs[name]; ok {
		t.Fatalf("build guest %s: %v", name, err)
	}
	out := filepath.Join(buildDir, name+".wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", out, "./testdata/guests/"+name)
	if _, err := os.Stat(filepath.Join("testdata", "guests", name, "go.mod")); err == nil {
		// a guest with its own module (Extism's PDK)
		cmd = exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", out, ".")
		cmd.Dir = filepath.Join("testdata", "guests", name)
	}
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		buildErrs[name] = fmt.Errorf("%v\n%s", err, b)
		t.Fatalf("build guest %s: %v\n%s", name, err, b)
	}
	built[name] = out
	return out
}

// fixtureWasm returns a committed .wasm fixture of testdata/wat.
func fixtureWasm(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join("testdata", "wat", name+".wasm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("fixture %s: %v", p, err)
	}
	return p
}

// install copies wasm into dir/<name>/ with a manifest; edit may change the
// manifest before it is written.
func install(t testing.TB, dir, name, wasm string, edit func(m map[string]any)) string {
	t.Helper()
	b, err := os.ReadFile(wasm)
	if err != nil {
		t.Fatal(err)
	}
	pd := filepath.Join(dir, name)
	if err := os.MkdirAll(pd, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	m := map[string]any{
		"name": name, "version": "1.0.0", "kind": "tool", "wasm": name + ".wasm",
		"sha256":       hex.EncodeToString(sum[:]),
		"capabilities": map[string]any{"callTimeout": "5s", "memoryPages": 512},
	}
	if edit != nil {
		edit(m)
	}
	mb, _ := json.MarshalIndent(m, "", "  ")
	// the .wasm first, the manifest last: a watcher sees a complete plugin
	if err := os.WriteFile(filepath.Join(pd, name+".wasm"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pd, ManifestFile), mb, 0o644); err != nil {
		t.Fatal(err)
	}
	return pd
}

func caps(m map[string]any) map[string]any { return m["capabilities"].(map[string]any) }

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newRegistry(t testing.TB, cfg Config) *Registry {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.CacheDir == "" {
		// One compilation cache for every run: each guest compiles once
		// (wazero keys it by the module's bytes, which a -trimpath build
		// reproduces, and by its own version), the later runs read it.
		cfg.CacheDir = testCacheDir
	}
	if cfg.Policy.CompileTimeout == 0 {
		// A Go guest compiles for minutes under the race detector on a
		// loaded machine: compiles here are bounded by a hang guard.
		cfg.Policy.CompileTimeout = 10 * time.Minute
	}
	if cfg.Policy.LoadTimeout == 0 {
		// Loads are bounded by a hang guard here, not by the default: a Go
		// guest's _initialize under the race detector on a loaded machine
		// can take seconds. Tests of the timeout set their own.
		cfg.Policy.LoadTimeout = 5 * time.Minute
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func call(name, args string) loop.ToolCall {
	return loop.ToolCall{ID: "c-" + name, Name: name, Arguments: json.RawMessage(args)}
}

func mustCall(t testing.TB, ts loop.Toolset, name, args string) loop.ToolResult {
	t.Helper()
	res, err := ts.Call(context.Background(), call(name, args), &loop.ToolEnv{ContextID: "ctx", TaskID: "task"})
	if err != nil {
		t.Fatalf("call %s(%s): %v", name, args, err)
	}
	return res
}
