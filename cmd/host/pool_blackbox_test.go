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

// A model call's callTimeout counts its run, not its wait for a free
// instance. The model has one instance and a call timeout of 3s: two
// hanging calls hold it one after the other (each stopped by its timeout),
// and a one-line turn queued behind both waits longer than 3s, then gets
// the instance and answers at once, without a retry. Before, its wait ran
// out its call timeout: the call failed "ran past its timeout" (and was
// retried, or failed the task when it had streamed), so under load one
// principal's turns failed others'.
func TestBlackBoxCallTimeoutCountsTheRunNotTheWait(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	script := `{"rules":[{"match":"^hang$","steps":[{"delayMs":600000,"text":"late"}]}],"default":{"steps":[{"text":"ok"}]}}`
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"},
			"instances": 1, "callTimeout": "3s"}, map[string]any{"script": script})
	h := startSandboxHostWith(t, top, pluginDir, nil,
		authConfig(map[string]any{"shutdownGrace": "2s", "turnTimeout": "10m"}))
	sendHang(t, h, "alice-key")
	h.waitFor(t, "the first hanging call to hold the instance", 3*time.Minute, func() bool {
		return h.plugins(t)["scripted-model"].Busy == 1
	})
	sendHang(t, h, "alice-key")
	h.waitFor(t, "the second hanging call to queue", 3*time.Minute, func() bool {
		return h.plugins(t)["scripted-model"].Waiting == 1
	})
	type answer struct {
		task *a2a.Task
		err  error
	}
	quick := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		r, err := a2aClient(t, h.base, "alice-key").SendMessage(ctx, &a2a.SendMessageRequest{
			Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("hi"))})
		task, _ := r.(*a2a.Task)
		quick <- answer{task, err}
	}()
	h.waitFor(t, "the one-line turn to queue behind the second", 3*time.Minute, func() bool {
		return h.plugins(t)["scripted-model"].Waiting == 2
	})
	var a answer
	select {
	case a = <-quick:
	case <-time.After(3 * time.Minute):
		t.Fatal("the one-line turn never ended")
	}
	if a.err != nil || a.task == nil {
		t.Fatalf("the one-line turn: %v", a.err)
	}
	var text strings.Builder
	for _, art := range a.task.Artifacts {
		for _, p := range art.Parts {
			text.WriteString(p.Text())
		}
	}
	if a.task.Status.State != a2a.TaskStateCompleted || !strings.Contains(text.String(), "ok") || a.task.Metadata["retries"] != nil {
		t.Fatalf("the turn that waited past the call timeout for the instance: %s %q, metadata %v; want completed at its first call",
			a.task.Status.State, text.String(), a.task.Metadata)
	}
}
