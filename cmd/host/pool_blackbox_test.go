package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// A model whose upstream hangs: the scripted model waits 10 minutes before
// it answers "hang", and answers anything else at once. Its calls may last
// 10 minutes (callTimeout, maxCallTimeout), as a CPU-served model's may.
func installHangingModel(t *testing.T, pluginDir string) {
	t.Helper()
	script := `{"rules":[{"match":"^hang$","steps":[{"delayMs":600000,"text":"late"}]}],"default":{"steps":[{"text":"ok"}]}}`
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"},
			"instances": 4, "callTimeout": "10m"}, map[string]any{"script": script})
}

func authConfig(limits map[string]any) map[string]any {
	return map[string]any{
		"auth": map[string]any{"enabled": true, "keys": []map[string]any{
			{"key": "alice-key", "principal": "alice"}, {"key": "bob-key", "principal": "bob"}}},
		"limits": limits,
	}
}

// sendHang starts a turn the model never answers in time, without waiting
// for it, and returns its task id.
func sendHang(t *testing.T, h *sandboxHost, token string) string {
	t.Helper()
	c := a2aClient(t, h.base, token)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("hang")),
		Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := r.(*a2a.Task)
	if !ok {
		t.Fatalf("answered %T", r)
	}
	return string(task.ID)
}

// One principal's model calls that hang at the upstream cannot hold every
// instance of the model plugin: alice's four hanging turns hold three of
// its four instances, and bob's one-line turn is answered while all of
// them still hang. Before, alice's calls held all four and bob waited for
// her whole call timeout (59 s against the real binary with callTimeout
// 60s; 10 minutes here).
func TestBlackBoxOnePrincipalCannotHoldEveryModelInstance(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	installHangingModel(t, pluginDir)
	h := startSandboxHostWith(t, top, pluginDir, map[string]any{"maxCallTimeout": "10m"},
		authConfig(map[string]any{"shutdownGrace": "2s", "turnTimeout": "30m"}))

	for range 4 {
		sendHang(t, h, "alice-key")
	}
	h.waitFor(t, "alice's four model calls to begin", 3*time.Minute, func() bool {
		p := h.plugins(t)["scripted-model"]
		return p.Busy+p.Waiting == 4
	})
	if p := h.plugins(t)["scripted-model"]; p.Busy != 3 || p.Waiting != 1 {
		t.Fatalf("alice: %d instances held, %d calls waiting; want 3 and 1 (one instance kept for others)", p.Busy, p.Waiting)
	}

	type answer struct {
		text  string
		state a2a.TaskState
	}
	bob := make(chan answer, 1)
	go func() {
		text, state := turn(t, a2aClient(t, h.base, "bob-key"), "hi")
		bob <- answer{text, state}
	}()
	select {
	case a := <-bob:
		if a.state != a2a.TaskStateCompleted || !strings.Contains(a.text, "ok") {
			t.Fatalf("bob's turn: %s %q", a.state, a.text)
		}
	case <-time.After(80 * time.Second):
		t.Fatal("bob's one-line turn waits behind alice's hanging model calls")
	}
	if p := h.plugins(t)["scripted-model"]; p.Busy != 3 || p.Waiting != 1 {
		t.Fatalf("after bob's turn: %d held, %d waiting; alice's calls should still hang", p.Busy, p.Waiting)
	}
}

// A turn the host stops because it ran past limits.turnTimeout ends failed,
// saying which limit stopped it: before, it ended canceled ("turn
// canceled: context deadline exceeded"), as if the client had cancelled it.
func TestBlackBoxTurnTimeoutFailsTheTurn(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	installHangingModel(t, pluginDir)
	h := startSandboxHostWith(t, top, pluginDir, map[string]any{"maxCallTimeout": "10m"},
		authConfig(map[string]any{"shutdownGrace": "2s", "turnTimeout": "2s"}))
	text, state := turn(t, a2aClient(t, h.base, "alice-key"), "hang")
	if state != a2a.TaskStateFailed || !strings.Contains(text, "limits.turnTimeout") || strings.Contains(text, "cancel") {
		t.Fatalf("a turn past its turn timeout ended %s %q; want failed, naming limits.turnTimeout", state, text)
	}
}
