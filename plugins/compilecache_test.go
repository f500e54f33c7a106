package plugins

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// The compile cache keeps a module's code while a load or a plugin holds it
// and removes it with the last hold (each update of a plugin used to leave
// its old code in the data folder for ever); a registry closing keeps it for
// the next start; Prune removes what nothing holds and the older layout; a
// folder another process holds, or a folder the registry does not own, is
// never removed.
func TestCompileCacheHoldsOnlyWhatIsLoaded(t *testing.T) {
	dir := t.TempDir()
	c, err := newCompileCaches(dir, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v1, v2, v3 := digestOf("v1"), digestOf("v2"), digestOf("v3")

	_, _, let1 := c.hold(v1)  // the plugin loaded
	_, _, let1b := c.hold(v1) // a reload of the same module
	if !exists(t, filepath.Join(dir, v1)) {
		t.Fatal("a held module has no folder")
	}
	let1b()
	let1b() // twice is once
	if !exists(t, filepath.Join(dir, v1)) {
		t.Fatal("the module's folder went while a plugin still holds it")
	}
	let1()
	if exists(t, filepath.Join(dir, v1)) {
		t.Fatal("the module's folder stayed after its last plugin closed")
	}

	// another process (another registry on the same folder) holds v2
	other, err := newCompileCaches(dir, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, _, letOther := other.hold(v2)
	_, _, let2 := c.hold(v2)
	let2()
	if !exists(t, filepath.Join(dir, v2)) {
		t.Fatal("a folder another process holds was removed")
	}
	if n := c.Prune(); n != 0 || !exists(t, filepath.Join(dir, v2)) {
		t.Fatalf("Prune removed %d, a folder another process holds among them", n)
	}
	letOther()
	if exists(t, filepath.Join(dir, v2)) {
		t.Fatal("the last holder's release left the folder")
	}

	// left over from earlier runs: a module no longer loaded, the older
	// layout, and a file that is not the cache's
	if err := os.MkdirAll(filepath.Join(dir, v3, "wazero-v1.12.0-amd64-linux"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"wazero-v1.12.0-amd64-linux", "interruptible"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "code"), make([]byte, 1024), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "README"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, letHeld := c.hold(v1)
	if n := c.Prune(); n != 3 {
		t.Fatalf("Prune removed %d entries, want 3 (a module no longer loaded, the older layout's two folders)", n)
	}
	if exists(t, filepath.Join(dir, v3)) || exists(t, filepath.Join(dir, "interruptible")) || exists(t, filepath.Join(dir, "wazero-v1.12.0-amd64-linux")) {
		t.Fatal("Prune left code nothing holds")
	}
	if !exists(t, filepath.Join(dir, v1)) || !exists(t, filepath.Join(dir, "README")) {
		t.Fatal("Prune removed a held module or a file that is not the cache's")
	}

	// the registry closing: the code stays for the next start
	c.keep()
	letHeld()
	if !exists(t, filepath.Join(dir, v1)) {
		t.Fatal("closing the registry removed the compiled code the next start reads")
	}
}

// A folder the registry does not own (an operator's plugins.cacheDir,
// possibly shared by hosts and test runs) keeps wazero's own layout and
// everything in it. A disk below the store's floor gets no compiled code at all (kept in
// memory).
func TestCompileCacheNotOwnedOrDiskFull(t *testing.T) {
	dir := t.TempDir()
	c, err := newCompileCaches(dir, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v1 := digestOf("v1")
	cache, _, let := c.hold(v1)
	let()
	if cache != c.shared || cache == c.mem || exists(t, filepath.Join(dir, v1)) || c.Prune() != 0 {
		t.Fatal("a cache folder the registry does not own is not wazero's shared cache, or was pruned")
	}

	full := t.TempDir()
	f, err := newCompileCaches(full, true, func() error { return errors.New("storage full") })
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cache, icache, letFull := f.hold(v1)
	defer letFull()
	if cache != f.mem || icache != f.imem {
		t.Fatal("a full disk still got a folder of compiled code")
	}
	if entries, _ := os.ReadDir(full); len(entries) != 0 {
		t.Fatalf("a full disk got %d entries in the cache folder", len(entries))
	}
}
