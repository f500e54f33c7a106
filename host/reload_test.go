package host_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
)

// TestHotReload: a plugin copied into the watched folder starts serving,
// and one removed stops, without a restart; the agent card follows.
func TestHotReload(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	cfg.PluginDir = benchPluginDir(t) // the scripted model alone
	cfg.Plugins.Only = nil
	h := startHost(t, cfg)
	skills := func() []string {
		card, err := agentcard.NewResolver(httpClient("")).Resolve(context.Background(), h.URL())
		if err != nil {
			t.Fatalf("card: %v", err)
		}
		var ids []string
		for _, s := range card.Skills {
			ids = append(ids, s.ID)
		}
		return ids
	}
	// A guard, not a timing: a Go plugin compiles for tens of seconds
	// under the race detector on a loaded machine.
	waitFor := func(what string, cond func([]string) bool) {
		deadline := time.Now().Add(3 * time.Minute)
		for {
			got := skills()
			if cond(got) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: skills are %v", what, got)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if slices.Contains(skills(), "calc") {
		t.Fatal("calc served before its plugin was added")
	}
	dst := filepath.Join(cfg.PluginDir, "calculator")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"calculator.wasm", "plugin.json"} { // the manifest last: it makes the plugin
		b, err := os.ReadFile(filepath.Join("../examples/plugins/calculator", f))
		if err != nil {
			t.Fatalf("read %s (run make plugins-go): %v", f, err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitFor("after adding the calculator", func(s []string) bool { return slices.Contains(s, "calc") })
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	waitFor("after removing the calculator", func(s []string) bool { return !slices.Contains(s, "calc") })
}
