package wasmtest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/plugins"
)

// examples is the folder of the example plugins; cacheDir is wazero's
// compilation cache, shared by the tests so each plugin compiles once.
var (
	examples = ".."
	cacheDir = filepath.Join(os.TempDir(), "looopy-examples-wasm-cache")
)

// memKV is the plugins' key-value space, in memory.
type memKV struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (k *memKV) KVGet(_ context.Context, ns, key string) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := k.m[ns+"\x00"+key]
	if !ok {
		return nil, loop.ErrNotFound
	}
	return v, nil
}

func (k *memKV) KVSet(_ context.Context, ns, key string, v []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m[ns+"\x00"+key] = v
	return nil
}

func (k *memKV) KVDelete(_ context.Context, ns, key string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, ns+"\x00"+key)
	return nil
}

// registry loads the named example plugins into a registry configured by
// cfg (its compilation cache is shared by the tests). Unless cfg says
// otherwise, the policy grants folders under examples/grants, as the host's
// default configuration does.
func registry(t *testing.T, cfg plugins.Config, names ...string) *plugins.Registry {
	t.Helper()
	cfg.CacheDir = cacheDir
	if len(cfg.Policy.PathRoots) == 0 {
		cfg.Policy.PathRoots = []string{filepath.Join(examples, "..", "grants")}
	}
	r, err := plugins.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	for _, n := range names {
		manifest := filepath.Join(examples, n, "plugin.json")
		if _, err := os.Stat(manifest); err != nil {
			t.Fatalf("%s: %v (build the Go example plugins first: make plugins-go)", manifest, err)
		}
		if _, err := r.Load(context.Background(), manifest); err != nil {
			t.Fatalf("load %s: %v", n, err)
		}
	}
	return r
}

func ask(t *testing.T, m loop.Model, msgs ...loop.Message) (*loop.ModelResponse, []loop.Delta, error) {
	t.Helper()
	var deltas []loop.Delta
	resp, err := m.Generate(context.Background(), &loop.ModelRequest{Messages: msgs, Stream: true}, func(d loop.Delta) { deltas = append(deltas, d) })
	return resp, deltas, err
}

// install copies an example plugin (its built .wasm and plugin.json) into a
// folder of dir, lets edit change the manifest, and returns the folder.
func install(t testing.TB, dir, name string, edit func(man map[string]any)) string {
	t.Helper()
	src := filepath.Join(examples, name)
	b, err := os.ReadFile(filepath.Join(src, "plugin.json"))
	if err != nil {
		t.Fatalf("%v (build the Go example plugins first: make plugins-go)", err)
	}
	var man map[string]any
	if err := json.Unmarshal(b, &man); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(man)
	}
	wasm, err := os.ReadFile(filepath.Join(src, name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, name)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	mb, _ := json.Marshal(man)
	if err := os.WriteFile(filepath.Join(dst, "plugin.json"), mb, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, name+".wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// capabilities returns the manifest's capabilities object, created if absent.
func capabilities(man map[string]any) map[string]any {
	c, _ := man["capabilities"].(map[string]any)
	if c == nil {
		c = map[string]any{}
		man["capabilities"] = c
	}
	return c
}

// load loads plugin folders into a registry configured by cfg.
func load(t *testing.T, cfg plugins.Config, dirs ...string) *plugins.Registry {
	t.Helper()
	cfg.CacheDir = cacheDir
	r, err := plugins.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	for _, d := range dirs {
		if _, err := r.Load(context.Background(), d); err != nil {
			t.Fatalf("load %s: %v", d, err)
		}
	}
	return r
}

// call runs one tool call through the registry.
func call(t *testing.T, r *plugins.Registry, env *loop.ToolEnv, id, name, args string) loop.ToolResult {
	t.Helper()
	if env == nil {
		env = &loop.ToolEnv{ContextID: "ctx", TaskID: "task"}
	}
	res, err := r.Call(context.Background(), loop.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(args)}, env)
	if err != nil {
		t.Fatalf("%s %s: %v", name, args, err)
	}
	return res
}
