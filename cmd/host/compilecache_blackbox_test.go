package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// withCustomSection is wasm with a custom section appended: the same code,
// another module (another sha256), as a plugin's next version is.
func withCustomSection(wasm []byte, tag string) []byte {
	body := append([]byte{byte(len("v"))}, 'v')
	body = append(body, tag...)
	return append(append([]byte(nil), wasm...), bbSection(0, body)...)
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// cacheEntries lists the compile cache folder's entries.
func cacheEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// Each version of a plugin loaded wrote its compiled code into the data
// folder's compile cache (about four times the module's size) and nothing
// removed it: 22 updates of a 3.6 MiB plugin took 330 MiB of the data
// folder's filesystem, past store.minFreeBytes, after which every new task
// was refused STORAGE_FULL for good. The host's cache keeps the code of the
// modules loaded now only: a replaced version's code goes with it, what a
// stopped host left (versions replaced meanwhile, the older layout) goes at
// the next start, and the code of what still serves stays across restarts.
func TestBlackBoxCompileCacheHoldsOnlyWhatServes(t *testing.T) {
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	cacheDir := filepath.Join(top, "data", "wasm-cache") // the host's own: in its data folder
	add := readExample(t, "wat-add")
	installPlugin(t, pluginDir, "wat-add", "tool", withCustomSection(add, "0"), nil, nil)
	cfg := func() map[string]any { return map[string]any{"cacheDir": cacheDir} }
	h := startSandboxHost(t, top, pluginDir, cfg())
	model := h.plugins(t)["scripted-model"].SHA256
	if model == "" {
		t.Fatal("the admin list names no sha256 for the model")
	}
	want := func(adds string) []string {
		w := []string{model, adds}
		slices.Sort(w)
		return w
	}
	if got := cacheEntries(t, cacheDir); !slices.Equal(got, want(sha256Hex(withCustomSection(add, "0")))) {
		t.Fatalf("the cache holds %v, want the model's and wat-add's code", got)
	}

	for i := 1; i <= 4; i++ {
		next := withCustomSection(add, string(rune('0'+i)))
		sum := sha256Hex(next)
		installPlugin(t, pluginDir, "wat-add", "tool", next, nil, nil)
		h.waitFor(t, "the next version to serve", 3*time.Minute, func() bool {
			p := h.plugins(t)["wat-add"]
			return p.State == "serving" && p.SHA256 == sum
		})
		// the replaced version closes when its calls end (none run here)
		h.waitFor(t, "the replaced version's code to go", time.Minute, func() bool {
			return slices.Equal(cacheEntries(t, cacheDir), want(sum))
		})
	}
	if text, err := h.mcpCall(t, "add", `{"a":40,"b":2}`); err != nil || text == "" {
		t.Fatalf("a call of the last version: %q %v", text, err)
	}

	// Stopped: the code of what serves stays for the next start.
	last := sha256Hex(withCustomSection(add, "4"))
	_ = syscall.Kill(h.pid, syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(2 * time.Minute):
		t.Fatal("the host did not stop")
	}
	if got := cacheEntries(t, cacheDir); !slices.Equal(got, want(last)) {
		t.Fatalf("after a stop the cache holds %v, want the serving modules' code kept", got)
	}
	modelFiles := func() map[string]time.Time {
		out := map[string]time.Time{}
		_ = filepath.Walk(filepath.Join(cacheDir, model), func(path string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() && filepath.Base(path) != ".lock" {
				out[path] = fi.ModTime()
			}
			return nil
		})
		return out
	}
	before := modelFiles()
	if len(before) == 0 {
		t.Fatal("no compiled code of the model on disk")
	}
	// What a stopped host leaves: a version replaced meanwhile, the older
	// layout of the cache (one folder for every module ever compiled).
	stale := sha256Hex([]byte("a version replaced while the host was stopped"))
	for _, d := range []string{filepath.Join(stale, "wazero-v1.12.0-amd64-linux"), "wazero-v1.12.0-amd64-linux", filepath.Join("interruptible", "wazero-v1.12.0-amd64-linux")} {
		if err := os.MkdirAll(filepath.Join(cacheDir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cacheDir, d, "code"), make([]byte, 64<<10), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h2 := startSandboxHost(t, top, pluginDir, cfg())
	if got := cacheEntries(t, cacheDir); !slices.Equal(got, want(last)) {
		t.Fatalf("after a start the cache holds %v, want only the serving modules' code", got)
	}
	after := modelFiles()
	for path, mt := range before {
		if !after[path].Equal(mt) {
			t.Fatalf("the model's compiled code was written again at the start (%s): the cache was not kept", path)
		}
	}
	if text, err := h2.mcpCall(t, "add", `{"a":40,"b":2}`); err != nil || text == "" {
		t.Fatalf("a call after the restart: %q %v", text, err)
	}
}
