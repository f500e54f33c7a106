package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// hostFDs is how many descriptors process pid holds open.
func hostFDs(t *testing.T, pid int) int {
	t.Helper()
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// A plugin granted one read-only folder opens a file in it 100,000 times a
// call and never closes it (the attack that took a host from 20 to 20,000
// descriptors and stopped its HTTP server). It gets EMFILE past its
// instance's budget (plugins.budgets.openFilesPerInstance, default 64), the
// host's descriptors stay bounded, and the host keeps serving: readiness,
// and the same plugin's other calls.
func TestBlackBoxPluginCannotExhaustDescriptors(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	grants := filepath.Join(top, "grants")
	folder := filepath.Join(grants, "hog")
	if err := os.MkdirAll(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(folder, "x")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	wasm := buildGuest(t, filepath.Join(top, "escape.wasm"), filepath.Join("..", "..", "plugins", "testdata", "guests", "escape"))
	installPlugin(t, pluginDir, "fdhog", "tool", wasm,
		map[string]any{"allowedPaths": []map[string]any{{"path": folder, "readOnly": true}}, "memoryPages": 512, "callTimeout": "2m"}, nil)
	h := startSandboxHost(t, top, pluginDir, map[string]any{"pathRoots": []string{grants}})
	h.waitFor(t, "the plugin to load", 5*time.Minute, func() bool { return h.plugins(t)["fdhog"].State == "serving" })
	before := hostFDs(t, h.pid)

	heldRe := regexp.MustCompile(`held (\d+), then: [^"]*Too many open files`)
	for i := 0; i < 2; i++ {
		text, err := h.mcpCall(t, "fs", `{"op":"hold","path":"`+file+`","text":"100000"}`)
		if err != nil {
			t.Fatal(err)
		}
		m := heldRe.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("call %d: the guest was not refused with EMFILE: %.300s", i, text)
		}
		if n, _ := strconv.Atoi(m[1]); n > 64 {
			t.Fatalf("call %d: the guest holds %d files, over the budget of 64", i, n)
		}
	}
	// Some slack for the HTTP connections of the calls themselves.
	if after := hostFDs(t, h.pid); after > before+64+32 {
		t.Fatalf("the host's descriptors went from %d to %d", before, after)
	}
	if !h.ready() {
		t.Fatal("the host stopped serving /readyz")
	}
	// Another plugin (the model) serves a turn.
	if answer, state := turn(t, a2aClient(t, h.base, ""), "hello"); state != a2a.TaskStateCompleted || answer != "ok" {
		t.Fatalf("a turn beside the hog: %s %q", state, answer)
	}
	// The guest's files close when it closes them: it opens again.
	if text, err := h.mcpCall(t, "fs", `{"op":"release","path":"x"}`); err != nil || !strings.Contains(text, "released") {
		t.Fatalf("release answered %.300s %v", text, err)
	}
	if text, err := h.mcpCall(t, "fs", `{"op":"read","path":"`+file+`"}`); err != nil || !strings.Contains(text, `"text":"x"`) {
		t.Fatalf("a read after the release answered %.300s %v", text, err)
	}
}
