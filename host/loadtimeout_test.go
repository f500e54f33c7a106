package host_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
)

// installFixture puts a hostile .wasm fixture of the plugins' corpus into
// a plugin folder as a tool plugin.
func installFixture(t *testing.T, root, name string) {
	t.Helper()
	wasm, err := os.ReadFile(filepath.Join("..", "plugins", "testdata", "wat", name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(wasm)
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	m, _ := json.Marshal(map[string]any{"name": name, "version": "1", "kind": "tool", "wasm": name + ".wasm", "sha256": hex.EncodeToString(sum[:])})
	if err := os.WriteFile(filepath.Join(dir, "plugin.json"), m, 0o644); err != nil {
		t.Fatal(err)
	}
}

// within runs f and fails the test if it does not return: a guard against
// a wedge, far above any load timeout, not a timing assertion.
func within(t *testing.T, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(3 * time.Minute):
		t.Fatalf("%s: wedged", what)
		return nil
	}
}

// Plugins that loop forever in their start section, _initialize or
// describe sit in the plugin folder: the host starts all the same (each is
// refused at its load timeout and reported), answers /readyz, serves a turn,
// hot-loads another plugin dropped in the folder beside a new spinning
// one, and shuts down.
func TestHostStartsAndServesPastSpinningPlugins(t *testing.T) {
	plugins := t.TempDir()
	// The demo script alone: the copy's folder has no user rules beside it.
	copyPlugin(t, plugins, "scripted-model", func(m map[string]any) {
		delete(m, "config")
		delete(m["capabilities"].(map[string]any), "allowedPaths")
	})
	for _, n := range []string{"startspin", "initspin", "describespin"} {
		installFixture(t, plugins, n)
	}
	cfg := baseConfig(t.TempDir())
	cfg.PluginDir = plugins
	cfg.Plugins.Only = nil
	// The spinning plugins are stopped by the timeout, and each spins a
	// core until then: the timeout is what this test waits out, twice. The
	// good one must load within it on a loaded machine: the timeout bounds
	// only the guest code a load runs (its start section, _initialize and
	// describe, milliseconds for the scripted model), not the compile, so a
	// few seconds are wide.
	cfg.Plugins.LoadTimeout = host.Duration(4 * time.Second)
	cfg.Admin.Token = "root-token"
	m := host.NewMain()
	m.Config = cfg
	m.Stdout = io.Discard
	if os.Getenv("LOOOPY_TEST_LOG") != "" {
		m.Stdout = os.Stderr
	}
	if err := within(t, "start", func() error { return m.Run(context.Background()) }); err != nil {
		t.Fatalf("run host: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = m.Close()
		}
	})
	get := func(path string) (int, map[string]any) {
		req, _ := http.NewRequest("GET", m.URL()+path, nil)
		req.Header.Set("Authorization", "Bearer root-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	if st, out := get("/readyz"); st != 200 {
		t.Fatalf("readyz: %d %v", st, out)
	}
	states := func() map[string]string {
		st, out := get("/admin/plugins")
		if st != 200 {
			t.Fatalf("plugins: %d %v", st, out)
		}
		got := map[string]string{}
		for _, p := range out["plugins"].([]any) {
			pm := p.(map[string]any)
			got[pm["name"].(string)] = pm["state"].(string)
		}
		return got
	}
	got := states()
	for _, n := range []string{"startspin", "initspin", "describespin"} {
		if got[n] != "failed" {
			t.Fatalf("%s: state %q, want failed (%v)", n, got[n], got)
		}
	}
	if got["scripted-model"] != "serving" {
		t.Fatalf("scripted-model: %v", got)
	}
	c := client10(t, m.URL(), "")
	if task := send(t, c, context.Background(), &a2a.SendMessageRequest{Message: userMsg("hello")}); task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("turn: %v", task.Status.State)
	}

	// Hot reload: a new spinning plugin and a good one arrive together.
	os.RemoveAll(filepath.Join(plugins, "initspin"))
	installFixture(t, plugins, "wecho")
	installFixture(t, plugins, "initspin")
	deadline := time.Now().Add(3 * time.Minute) // hang guard
	for states()["wecho"] != "serving" {
		if time.Now().After(deadline) {
			t.Fatalf("wecho never loaded: %v", states())
		}
		time.Sleep(20 * time.Millisecond)
	}
	closed = true
	if err := within(t, "shutdown", m.Close); err != nil {
		t.Fatalf("close: %v", err)
	}
}
