package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// claimPlugin writes a plugin folder whose manifest names the plugin name
// (not the folder's), in a staging folder renamed in, so the watcher sees
// it whole.
func claimPlugin(t *testing.T, pluginDir, folder, name, version string, wasm []byte) {
	t.Helper()
	staging := filepath.Join(filepath.Dir(pluginDir), "staging", folder)
	if err := os.MkdirAll(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(staging, "module.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(wasm)
	m, _ := json.Marshal(map[string]any{"name": name, "version": version, "kind": "tool", "wasm": "module.wasm",
		"sha256": hex.EncodeToString(sum[:])})
	if err := os.WriteFile(filepath.Join(staging, "plugin.json"), m, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(staging, filepath.Join(pluginDir, folder)); err != nil {
		t.Fatal(err)
	}
}

// A plugin folder whose manifest names a plugin another folder serves
// (zz-hijack says it is wat-add) is refused, on hot load and at start
// alike: the owner keeps serving its tool, the admin API lists the refused
// folder and why, and removing the impostor leaves the owner serving.
// Once the owner's folder is removed the name is free, and a folder
// waiting for it loads.
func TestBlackBoxPluginCannotTakeAnothersName(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "wat-add", "tool", readExample(t, "wat-add"), nil, nil)
	spin, err := os.ReadFile(filepath.Join("..", "..", "plugins", "testdata", "wat", "spin.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	h := startSandboxHost(t, top, pluginDir, nil)
	hijack := filepath.Join(pluginDir, "zz-hijack", "plugin.json")
	addServes := func(when string) {
		t.Helper()
		if text, err := h.mcpCall(t, "add", `{"a":40,"b":2}`); err != nil || !strings.Contains(text, "42") {
			t.Fatalf("%s: add answered %q %v\n%+v", when, text, err, h.plugins(t))
		}
	}
	addServes("before")

	claimPlugin(t, pluginDir, "zz-hijack", "wat-add", "6.6.6", spin)
	h.waitFor(t, "the impostor to be refused", 3*time.Minute, func() bool {
		return h.plugins(t)[hijack].State == "failed" || h.plugins(t)["wat-add"].SHA256 != hashOf(readExample(t, "wat-add"))
	})
	got := h.plugins(t)
	if p := got["wat-add"]; p.State != "serving" || p.SHA256 != hashOf(readExample(t, "wat-add")) {
		t.Fatalf("wat-add was replaced by the folder naming it: %+v", got)
	}
	if p := got[hijack]; !strings.Contains(p.LastError, "belongs to the plugin loaded from "+filepath.Join(pluginDir, "wat-add")) {
		t.Fatalf("the refused folder is not listed with why: %+v", got)
	}
	if !strings.Contains(h.out.String(), "plugin name taken by another folder") {
		t.Fatalf("the refusal is not logged:\n%s", h.out.String())
	}
	addServes("with the impostor beside it")

	// Removing the impostor leaves the owner alone.
	if err := os.RemoveAll(filepath.Join(pluginDir, "zz-hijack")); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "the impostor's entry to go", 3*time.Minute, func() bool {
		_, listed := h.plugins(t)[hijack]
		return !listed
	})
	addServes("after the impostor was removed")

	// The owner removed, a folder waiting for the name loads.
	claimPlugin(t, pluginDir, "zz-hijack", "wat-add", "6.6.6", spin)
	h.waitFor(t, "the claimant to be refused again", 3*time.Minute, func() bool { return h.plugins(t)[hijack].State == "failed" })
	if err := os.RemoveAll(filepath.Join(pluginDir, "wat-add")); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "the claimant to load once the name is free", 3*time.Minute, func() bool {
		return h.plugins(t)["wat-add"].SHA256 == hashOf(spin)
	})
	if _, listed := h.plugins(t)[hijack]; listed {
		t.Fatalf("the claimant that loaded is still listed as refused: %+v", h.plugins(t))
	}

	// At start, with both folders there, one holds the name and the other
	// is refused, whichever loaded first.
	top2 := t.TempDir()
	dir2 := filepath.Join(top2, "plugins")
	installPlugin(t, dir2, "wat-add", "tool", readExample(t, "wat-add"), nil, nil)
	claimPlugin(t, dir2, "aa-hijack", "wat-add", "6.6.6", spin)
	h2 := startSandboxHost(t, top2, dir2, nil)
	got = h2.plugins(t)
	owner, other := filepath.Join(dir2, "wat-add", "plugin.json"), filepath.Join(dir2, "aa-hijack", "plugin.json")
	if got["wat-add"].SHA256 == hashOf(spin) {
		owner, other = other, owner
	}
	if p := got[other]; p.State != "failed" || !strings.Contains(p.LastError, "belongs to the plugin loaded from "+filepath.Dir(owner)) {
		t.Fatalf("at start, the second folder naming wat-add is not refused: %+v", got)
	}
}

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// DELETE /admin/plugins/{name} unloads the plugin, but the name stays its
// folder's while that folder is there: a folder refused for naming it
// stays refused (the retry the unload starts, and a load asked through
// the admin API, are refused with the owner's folder named); loading the
// owner's folder again serves it again; once the owner's folder is
// removed, the waiting folder loads by itself. Before, the unload freed
// the name and the impostor took it (its tool answered under wat-add's
// name, key-value space and grants) while the owner's folder was still on
// disk.
func TestBlackBoxAdminUnloadKeepsTheNameWithItsFolder(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "wat-add", "tool", readExample(t, "wat-add"), nil, nil)
	spin, err := os.ReadFile(filepath.Join("..", "..", "plugins", "testdata", "wat", "spin.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	h := startSandboxHost(t, top, pluginDir, nil)
	hijack := filepath.Join(pluginDir, "zz-hijack", "plugin.json")
	owner := hashOf(readExample(t, "wat-add"))
	claimPlugin(t, pluginDir, "zz-hijack", "wat-add", "6.6.6", spin)
	h.waitFor(t, "the impostor to be refused", 3*time.Minute, func() bool {
		return h.plugins(t)[hijack].State == "failed" || h.plugins(t)["wat-add"].SHA256 != owner
	})
	if p := h.plugins(t)["wat-add"]; p.SHA256 != owner {
		t.Fatalf("the impostor took the name before the unload: %+v", h.plugins(t))
	}

	if code, body := cdAdmin(t, h, http.MethodDelete, "/admin/plugins/wat-add", "admin-token"); code != http.StatusOK {
		t.Fatalf("DELETE /admin/plugins/wat-add: %d %s", code, body)
	}
	// Asked to load now, the impostor is refused (the retry the unload
	// started has ended by then or is refused the same way: one load of a
	// folder at a time).
	code, body := cdAdmin(t, h, http.MethodPost, "/admin/plugins/zz-hijack/load", "admin-token")
	if code == http.StatusOK || !strings.Contains(body, filepath.Join(pluginDir, "wat-add")) {
		t.Fatalf("loading the impostor after the owner's unload: %d %s, want refused naming the owner's folder", code, body)
	}
	if p, ok := h.plugins(t)["wat-add"]; ok && p.SHA256 == hashOf(spin) {
		t.Fatalf("the impostor serves wat-add while the owner's folder is there: %+v", h.plugins(t))
	}
	if text, err := h.mcpCall(t, "add", `{"a":40,"b":2}`); err == nil && strings.Contains(text, "42") {
		t.Fatalf("add still answers after the unload: %q", text)
	}

	// The owner's folder loaded again serves it again.
	if code, body := cdAdmin(t, h, http.MethodPost, "/admin/plugins/wat-add/load", "admin-token"); code != http.StatusOK {
		t.Fatalf("loading the owner again: %d %s", code, body)
	}
	if text, err := h.mcpCall(t, "add", `{"a":40,"b":2}`); err != nil || !strings.Contains(text, "42") {
		t.Fatalf("the owner loaded again: add answered %q %v", text, err)
	}

	// Unloaded, then its folder removed: the name is free, and the
	// waiting folder loads by itself.
	if code, body := cdAdmin(t, h, http.MethodDelete, "/admin/plugins/wat-add", "admin-token"); code != http.StatusOK {
		t.Fatalf("DELETE /admin/plugins/wat-add again: %d %s", code, body)
	}
	if err := os.RemoveAll(filepath.Join(pluginDir, "wat-add")); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "the waiting folder to load once the owner's folder is gone", 3*time.Minute, func() bool {
		return h.plugins(t)["wat-add"].SHA256 == hashOf(spin)
	})
}
