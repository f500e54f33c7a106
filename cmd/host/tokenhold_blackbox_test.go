package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// A host killed -9 while a model call holds its principal's tokens does not
// take the budget with it: the hold lived in the process (never written to
// Badger), so after the restart, once the interrupted task is canceled,
// the principal's next turn runs. Before the kill the hold is real: a
// second turn of the same principal is refused, naming what is held.
func TestBlackBoxKilledHostLeavesNoTokenHold(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	installHangingModel(t, pluginDir)
	extra := authConfig(map[string]any{"shutdownGrace": "2s", "turnTimeout": "30m"})
	// One call reserves 4096 tokens for its answer and its prompt: the
	// limit is reached while one call holds.
	extra["observability"] = map[string]any{"usageLimits": map[string]any{"alice": map[string]any{"tokens": 4000}}}
	plugins := map[string]any{"maxCallTimeout": "10m"}
	h := startSandboxHostWith(t, top, pluginDir, plugins, extra)

	hung := sendHang(t, h, "alice-key")
	h.waitFor(t, "the hanging model call to begin", 3*time.Minute, func() bool {
		return h.plugins(t)["scripted-model"].Busy == 1
	})
	if text, state := turn(t, a2aClient(t, h.base, "alice-key"), "hi"); state != a2a.TaskStateFailed ||
		!strings.Contains(text, "model calls running now hold") {
		t.Fatalf("alice's turn while her call holds the limit: %s %q, want refused naming the hold", state, text)
	}

	if err := syscall.Kill(h.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-h.exited
	h2 := startSandboxHostWith(t, top, pluginDir, plugins, extra)
	// The interrupted task may run again (its call holds again): it is
	// canceled, and what its call held goes with it.
	h2.waitFor(t, "the interrupted task to end", 3*time.Minute, func() bool {
		switch h2.taskState(t, "alice-key", hung) {
		case "TASK_STATE_WORKING", "TASK_STATE_SUBMITTED":
			_ = h2.rpc(t, "alice-key", "CancelTask", map[string]any{"id": hung})
			return false
		}
		return true
	})
	if text, state := turn(t, a2aClient(t, h2.base, "alice-key"), "hi"); state != a2a.TaskStateCompleted {
		t.Fatalf("alice's turn after the restart: %s %q, want it run (nothing held)", state, text)
	}
}
