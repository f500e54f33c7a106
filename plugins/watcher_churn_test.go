package plugins

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// listed returns the names of what the registry lists, serving or failed.
func listed(r *Registry) []string {
	var out []string
	for _, in := range r.List() {
		out = append(out, in.Name+"="+in.State)
	}
	slices.Sort(out)
	return out
}

// A plugin folder replaced install-style (a fresh copy renamed over it)
// hundreds of times a second once wedged the watcher inside fsnotify: its
// goroutine called Add while fsnotify's reader waited to hand it an error.
// After the churn the watcher must still follow the folder: the replaced
// plugin's removal unloads it, a plugin added later loads, and Run returns
// when its context ends.
func TestWatcherSurvivesRenameOverChurn(t *testing.T) {
	dir := t.TempDir()
	r := newRegistry(t, Config{})
	w, err := NewWatcher(r, WatchConfig{Dir: dir, Debounce: 20 * time.Millisecond, Rescan: 500 * time.Millisecond, Settle: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	defer cancel()

	wasm := fixtureWasm(t, "wecho")
	stage := t.TempDir() // two versions, copied from here on each replacement
	v1 := install(t, stage, "flap", wasm, nil)
	v2 := install(t, filepath.Join(stage, "v2"), "flap", wasm, func(m map[string]any) { m["version"] = "2.0.0" })
	install(t, dir, "flap", wasm, nil)
	waitFor(t, "flap to load", func() bool { _, ok := r.Plugin("flap"); return ok })

	copyDir := func(from, to string) {
		if err := os.MkdirAll(to, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"flap.wasm", ManifestFile} {
			b, err := os.ReadFile(filepath.Join(from, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(to, f), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A fixed number of replacements, as fast as this machine does them
	// (no timing is asserted): each a new folder renamed over the old one.
	flap := filepath.Join(dir, "flap")
	for i := 0; i < 3000; i++ {
		tmp, old := filepath.Join(dir, fmt.Sprintf(".tmp%d", i)), filepath.Join(dir, fmt.Sprintf(".old%d", i))
		src := v1
		if i%2 == 1 {
			src = v2
		}
		copyDir(src, tmp)
		if err := os.Rename(flap, old); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, flap); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(old); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(flap); err != nil {
		t.Fatal(err)
	}
	install(t, dir, "later", wasm, nil)
	waitFor(t, "the registry to match the folder after the churn", func() bool {
		_, flapServes := r.Plugin("flap")
		_, laterServes := r.Plugin("later")
		return !flapServes && laterServes && len(r.Loading()) == 0 &&
			slices.Equal(listed(r), []string{"later=serving"})
	})
	cancel()
	if err := hangGuard(t, stopped, "stopping the watcher after the churn"); err != nil {
		t.Fatal(err)
	}
}

// Whatever a plugin failed to load for, removing its folder drops it from
// the list: a refusal for the shared tools budget, a tool offered twice, a
// bad manifest, a module that does not load, and a newer version that
// failed beside a serving one.
func TestRemovedFolderDropsEveryFailure(t *testing.T) {
	dir := t.TempDir()
	r := newRegistry(t, Config{Policy: Policy{Budgets: Budgets{MaxToolsTotal: 1}}})
	w, err := NewWatcher(r, WatchConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	wasm := fixtureWasm(t, "wecho")
	install(t, dir, "a-serving", wasm, nil)
	w.Scan(ctx)
	if got := listed(r); !slices.Equal(got, []string{"a-serving=serving"}) {
		t.Fatalf("listed %v", got)
	}
	// the budget: a second plugin would offer 2 tools, over 1
	install(t, dir, "b-budget", wasm, nil)
	// a bad manifest (keyed by its path, not a name)
	bad := filepath.Join(dir, "c-badmanifest")
	if err := os.MkdirAll(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, ManifestFile), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	// a module that does not load
	install(t, dir, "d-noload", fixtureWasm(t, "unknownimport"), nil)
	// a second folder with a serving plugin's name, a newer version that fails
	install(t, dir, "e-newer", fixtureWasm(t, "unknownimport"), func(m map[string]any) {
		m["name"] = "a-serving"
		m["version"] = "2.0.0"
	})
	w.Scan(ctx)
	failed := 0
	for _, in := range r.List() {
		if in.State == "failed" {
			failed++
		}
	}
	if failed != 3 || len(r.List()) != 4 {
		t.Fatalf("before the removal, want a-serving serving (with its newer version's error) and 3 failed: %v", r.List())
	}
	if in := r.List(); !slices.ContainsFunc(in, func(i Info) bool { return i.Name == "a-serving" && i.LastError != "" }) {
		t.Fatalf("the newer version's failure is not shown: %+v", in)
	}
	for _, name := range []string{"b-budget", "c-badmanifest", "d-noload", "e-newer"} {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	w.Scan(ctx)
	in := r.List()
	if len(in) != 1 || in[0].Name != "a-serving" || in[0].State != "serving" || in[0].LastError != "" {
		t.Fatalf("after removing the failed plugins' folders: %+v", in)
	}
	// and the serving one's removal leaves nothing
	if err := os.RemoveAll(filepath.Join(dir, "a-serving")); err != nil {
		t.Fatal(err)
	}
	w.Scan(ctx)
	if in := r.List(); len(in) != 0 {
		t.Fatalf("after removing every folder: %+v", in)
	}
}
