package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// aqScript: "file N name" has the model call make_file for N bytes; anything
// else is answered "ok".
const aqScript = `{"rules":[{"name":"file","match":"^file ([0-9]+) ([a-z0-9]+)$","steps":[` +
	`{"toolCall":{"name":"make_file","arguments":"{\"name\":\"$2\",\"bytes\":$1}"}},{"text":"ok"}]}],` +
	`"default":{"steps":[{"text":"ok"}]}}`

// aqBudget is the limits.artifactBytesPerPrincipal of the tests: one file
// of 1 MiB (make_file's largest) fits, two do not.
const aqBudget = 3 << 19

func aqHost(t *testing.T, top string, limits map[string]any) func() *sandboxHost {
	t.Helper()
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}},
		map[string]any{"script": aqScript})
	installPlugin(t, pluginDir, "dataset-writer", "tool", readExample(t, "dataset-writer"),
		map[string]any{"callTimeout": "5m", "hostFunctions": []string{"artifact_write", "emit", "result_read"}}, nil)
	limits["artifactBytesPerPrincipal"] = aqBudget
	limits["shutdownGrace"] = "2s"
	cfg := authConfig(limits)
	return func() *sandboxHost {
		return startSandboxHostWith(t, top, pluginDir, map[string]any{"maxCallTimeout": "5m"}, cfg)
	}
}

// aqRefused reports whether a make_file answer is the budget's refusal, one
// that names the code and the setting.
func aqRefused(answer string) bool {
	return strings.Contains(answer, "ARTIFACT_BUDGET_EXCEEDED") && strings.Contains(answer, "limits.artifactBytesPerPrincipal")
}

const aqFile = `{"name":"f","bytes":1048576}`

// One principal cannot fill the data disk with artifacts: what its stored
// artifacts hold together is bounded (limits.artifactBytesPerPrincipal),
// whether they were written in its turns or by its calls over /mcp; past
// it a write is refused with ARTIFACT_BUDGET_EXCEEDED, naming the setting;
// another principal still writes; the count survives a kill -9; deleting
// the conversation of an artifact gives its bytes back. Before, a
// principal stored artifacts until the disk was under store.minFreeBytes
// and every principal's new turns were refused STORAGE_FULL, for as long
// as the artifacts lived (limits.taskTTL, 7 days).
func TestBlackBoxArtifactBudgetPerPrincipal(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	start := aqHost(t, top, map[string]any{})
	h := start()

	task, _, st := cdSend(t, h, "bob-key", "", "file 1048576 first")
	if st != "TASK_STATE_COMPLETED" {
		t.Fatalf("bob's turn: %s", st)
	}
	if got := h.mcpCallAs(t, "bob-key", "make_file", aqFile); !aqRefused(got) {
		t.Fatalf("bob's second MiB over /mcp, past his budget: %s", got)
	}
	// Another principal is served: its own budget, and new turns.
	if got := h.mcpCallAs(t, "alice-key", "make_file", aqFile); artID.FindString(got) == "" || aqRefused(got) {
		t.Fatalf("alice's MiB: %s", got)
	}
	if _, _, st := cdSend(t, h, "alice-key", "", "hello"); st != "TASK_STATE_COMPLETED" {
		t.Fatalf("alice's turn: %s", st)
	}

	// The count is kept across a kill -9.
	if err := syscall.Kill(h.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-h.exited
	h = start()
	if got := h.mcpCallAs(t, "bob-key", "make_file", aqFile); !aqRefused(got) {
		t.Fatalf("bob's second MiB after a restart: %s", got)
	}

	// Deleting the conversation gives the bytes back.
	conv := cdConversation(t, h, task)
	if code, body := cdAdmin(t, h, http.MethodDelete, "/admin/conversations/"+conv, "admin-token"); code != http.StatusOK && code != http.StatusNoContent {
		t.Fatalf("admin delete: %d %s", code, body)
	}
	if got := h.mcpCallAs(t, "bob-key", "make_file", aqFile); artID.FindString(got) == "" || aqRefused(got) {
		t.Fatalf("bob's MiB after his conversation's delete: %s", got)
	}
}

// An artifact's expiry (limits.taskTTL, then the sweep) gives its bytes
// back to its principal's budget.
func TestBlackBoxArtifactBudgetExpiryGivesBack(t *testing.T) {
	t.Parallel()
	const ttl = 5 * time.Second
	top := t.TempDir()
	h := aqHost(t, top, map[string]any{"taskTTL": ttl.String()})()

	started := time.Now()
	if got := h.mcpCallAs(t, "bob-key", "make_file", aqFile); artID.FindString(got) == "" || aqRefused(got) {
		t.Fatalf("bob's first MiB: %s", got)
	}
	// A second MiB fits only once the first is gone (the guard only fails
	// fast: the sweep runs every minute).
	h.waitFor(t, "the expired artifact's bytes to come back", ttl+3*time.Minute, func() bool {
		got := h.mcpCallAs(t, "bob-key", "make_file", aqFile)
		if !aqRefused(got) && artID.FindString(got) == "" {
			t.Fatalf("bob's second MiB: %s", got)
		}
		if aqRefused(got) {
			time.Sleep(time.Second) // each try writes half a MiB before its refusal
			return false
		}
		return true
	})
	if time.Since(started) < ttl {
		t.Fatalf("the bytes came back before the artifact expired (%s after it was written)", time.Since(started))
	}
}
