package plugins

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A plugin name belongs to the folder that loaded it: another folder naming
// it is refused (listed by its path, the owner untouched) and loads once
// the owner's folder is gone.
func TestANameBelongsToItsFolder(t *testing.T) {
	dir := t.TempDir()
	r := newRegistry(t, Config{})
	ctx := context.Background()
	owner := install(t, dir, "spin", fixtureWasm(t, "spin"), nil)
	if _, err := r.Load(ctx, owner); err != nil {
		t.Fatal(err)
	}
	impostor := install(t, dir, "zz", fixtureWasm(t, "spin"), func(m map[string]any) {
		m["name"], m["version"], m["wasm"] = "spin", "6.6.6", "zz.wasm"
	})
	if _, err := r.Load(ctx, impostor); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("a second folder naming spin: %v, want ErrNameTaken", err)
	}
	if p, _ := r.Plugin("spin"); p == nil || p.Version() != "1.0.0" {
		t.Fatalf("the owner was replaced: %+v", r.List())
	}
	listed := false
	for _, in := range r.List() {
		if in.Name == "spin" && in.Health != "ok" {
			t.Fatalf("the owner carries the impostor's refusal: %+v", in)
		}
		if in.Source == filepath.Join(impostor, ManifestFile) && in.State == "failed" {
			listed = true
		}
	}
	if !listed {
		t.Fatalf("the refused folder is not listed: %+v", r.List())
	}
	if err := r.unloadSource(ctx, filepath.Join(impostor, ManifestFile)); err != nil {
		t.Fatal(err)
	}
	if p, _ := r.Plugin("spin"); p == nil || p.Version() != "1.0.0" {
		t.Fatalf("removing the impostor unloaded the owner: %+v", r.List())
	}
	// The impostor again, then the owner's folder goes: the name is free.
	if _, err := r.Load(ctx, impostor); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("the impostor again: %v", err)
	}
	if err := r.unloadSource(ctx, filepath.Join(owner, ManifestFile)); err != nil {
		t.Fatal(err)
	}
	r.retries.Wait()
	if p, _ := r.Plugin("spin"); p == nil || p.Version() != "6.6.6" {
		t.Fatalf("the waiting folder did not load once the name was free: %+v", r.List())
	}
}

// A folder whose manifest comes to name another plugin gives up the old
// name: the plugin it served under it is unloaded, not left serving with
// no folder (whose tools would then refuse the new name's).
func TestAFolderRenamingItsPluginGivesUpTheOldName(t *testing.T) {
	dir := t.TempDir()
	r := newRegistry(t, Config{})
	ctx := context.Background()
	pd := install(t, dir, "spin", fixtureWasm(t, "spin"), nil)
	if _, err := r.Load(ctx, pd); err != nil {
		t.Fatal(err)
	}
	install(t, dir, "spin", fixtureWasm(t, "spin"), func(m map[string]any) { m["name"] = "spun" })
	if _, err := r.Load(ctx, pd); err != nil {
		t.Fatalf("the folder naming its plugin anew: %v", err)
	}
	if p, ok := r.Plugin("spin"); ok {
		t.Fatalf("the old name still serves (%s) with no folder", p.Version())
	}
	if _, ok := r.Plugin("spun"); !ok {
		t.Fatalf("the new name does not serve: %+v", r.List())
	}
	if err := os.RemoveAll(pd); err != nil {
		t.Fatal(err)
	}
	if err := r.unloadSource(ctx, filepath.Join(pd, ManifestFile)); err != nil {
		t.Fatal(err)
	}
	if got := r.List(); len(got) != 0 {
		t.Fatalf("after the folder went: %+v", got)
	}
}

// At start, of two folders naming one plugin, the first in path order
// owns the name whatever their loads cost: a-first's module is a Go
// guest, far slower to load than z-last's few bytes of WAT, which owned
// the name when both loaded side by side and the first load to end won.
func TestAtStartTheFirstFolderOwnsAName(t *testing.T) {
	for round := range 3 {
		dir := t.TempDir()
		r := newRegistry(t, Config{})
		install(t, dir, "a-first", guestWasm(t, "echo"), func(m map[string]any) { m["name"], m["version"] = "dup", "1.0.0" })
		last := install(t, dir, "z-last", fixtureWasm(t, "spin"), func(m map[string]any) { m["name"], m["version"] = "dup", "9.9.9" })
		w, err := NewWatcher(r, WatchConfig{Dir: dir, Rescan: -1})
		if err != nil {
			t.Fatal(err)
		}
		w.Scan(context.Background())
		if p, _ := r.Plugin("dup"); p == nil || p.Version() != "1.0.0" {
			t.Fatalf("round %d: dup is served by %+v, want a-first's 1.0.0", round, r.List())
		}
		refused := false
		for _, in := range r.List() {
			if in.Source == filepath.Join(last, ManifestFile) && in.State == "failed" && strings.Contains(in.LastError, "name") {
				refused = true
			}
		}
		if !refused {
			t.Fatalf("round %d: z-last is not listed refused: %+v", round, r.List())
		}
	}
}
