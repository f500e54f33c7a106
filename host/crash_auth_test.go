//go:build long

package host_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// crashAuthScript: "secure <tag>" calls whoami (the caller's credentials),
// answers slowly (the kill lands there), calls whoami again (it needs them
// again), then appends to the ledger and answers.
const crashAuthScript = `{"rules":[{"name":"secure","match":"^secure (\\S+)$","steps":[
 {"toolCall":{"name":"whoami","arguments":{}}},
 {"text":"first: {{lastToolResult}}. ","delayMs":4000},
 {"toolCall":{"name":"whoami","arguments":{}}},
 {"text":"second: {{lastToolResult}}. "},
 {"toolCall":{"name":"ledger_append","arguments":{"entry":"$1 after auth"}}},
 {"text":"done $1"}]}]}`

// TestLongCrashAuthAsksAgain: a task whose plugin holds the caller's
// credentials (whoami, granted plugins.callerAuth) is killed with SIGKILL
// mid-turn (the real binary); the restarted host resumes it, and the
// plugin's next call, which needs the credentials again, pauses the task
// in auth-required instead of running without them: nothing after it ran
// (the ledger is empty) until the client answers with its credentials;
// then the plugin runs with them and the ledger counts one line.
func TestLongCrashAuthAsksAgain(t *testing.T) {
	root := t.TempDir()
	bin := hostBinary(t)
	plugins := filepath.Join(root, "plugins")
	ledgerData := filepath.Join(root, "grants", "ledger")
	if err := os.MkdirAll(ledgerData, 0o755); err != nil {
		t.Fatal(err)
	}
	crashPlugin(t, plugins, "scripted-model", map[string]any{"script": json.RawMessage(crashAuthScript)}, nil)
	crashPlugin(t, plugins, "ledger", map[string]any{"dir": ledgerData}, []string{ledgerData})
	crashPlugin(t, plugins, "authed-api", nil, nil)
	const key = "crash-alice-key-91f0"
	cfg := map[string]any{
		"dataDir":   filepath.Join(root, "data"),
		"pluginDir": plugins,
		"plugins": map[string]any{"only": []string{"scripted-model", "ledger", "authed-api"}, "cacheDir": wasmCache,
			"callerAuth": []string{"authed-api"}},
		"auth":      map[string]any{"enabled": true, "keys": []any{map[string]any{"key": key, "principal": "alice"}}},
		"limits":    map[string]any{"heartbeat": "1s", "shutdownGrace": "1s", "turnTimeout": "5m"},
		"logFormat": "json",
	}
	config, logf := longHostFiles(t, root, cfg)
	ledgerLines := func() int {
		b, err := os.ReadFile(filepath.Join(ledgerData, "ledger.log"))
		if err != nil {
			return 0
		}
		return len(strings.Split(strings.TrimSpace(string(b)), "\n"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	p := startProc(t, bin, config, logf)
	c := client10(t, p.base, key)
	msg := userMsg("secure k1")
	msg.ContextID = "crash-auth"
	r, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: msg, Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
	if err != nil {
		t.Fatal(err)
	}
	taskID := r.(*a2a.Task).ID
	// Kill once whoami ran with the credentials, while the model answers.
	resp := openSSE(t, ctx, p.base+"/events/crash-auth?kinds=tool-complete", key, "")
	frames := readFrames(t, resp.Body, func(f frame) bool { return f.Event == "tool-complete" })
	resp.Body.Close()
	if len(frames) != 1 || !strings.Contains(frames[0].Data, `"toolName":"whoami"`) || !strings.Contains(frames[0].Data, `"success":true`) ||
		!strings.Contains(frames[0].Data, "caller alice, token sha256 "+digest(key)) {
		t.Fatalf("before the kill: %+v", frames)
	}
	p.kill()

	p = startProc(t, bin, config, logf)
	defer p.kill()
	c = client10(t, p.base, key)
	var task *a2a.Task
	for {
		task, err = c.GetTask(ctx, &a2a.GetTaskRequest{ID: taskID})
		if err != nil {
			t.Fatal(err)
		}
		if task.Status.State != a2a.TaskStateWorking && task.Status.State != a2a.TaskStateSubmitted {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("task still %s", task.Status.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if task.Status.State != a2a.TaskStateAuthRequired {
		t.Fatalf("resumed task is %s (%s), want auth-required", task.Status.State, statusText(task))
	}
	reqs := requestsOf(t, task)
	auth, _ := reqs[0]["auth"].(map[string]any)
	if len(reqs) != 1 || reqs[0]["inputType"] != "auth" || auth["provider"] != "caller" || auth["holder"] != "plugin:authed-api" {
		t.Fatalf("requests = %v", reqs)
	}
	if n := ledgerLines(); n != 0 {
		t.Fatalf("the ledger has %d lines before the credentials came back: the turn went on without them", n)
	}
	done := send(t, c, ctx, &a2a.SendMessageRequest{Message: answerMsg(taskID, map[string]any{"inputId": reqs[0]["inputId"]})})
	if done.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("after the credentials: %s (%s)", done.Status.State, statusText(done))
	}
	if text := artifactText(done); !strings.Contains(text, "done k1") {
		t.Fatalf("answer %q", text)
	}
	// Every whoami that ran had the credentials; the one after the restart
	// first asked for them (its call ended without running the tool).
	resp = openSSE(t, ctx, p.base+"/events/crash-auth?kinds=tool-complete,task-complete", key, "")
	frames = readFrames(t, resp.Body, func(f frame) bool {
		return f.Event == "task-complete" && strings.Contains(f.Data, `"status":"completed"`)
	})
	resp.Body.Close()
	var ran, asked int
	for _, f := range frames {
		if f.Event != "tool-complete" || !strings.Contains(f.Data, `"toolName":"whoami"`) {
			continue
		}
		switch {
		case strings.Contains(f.Data, `"success":true`) && strings.Contains(f.Data, "caller alice, token sha256 "+digest(key)):
			ran++
		case strings.Contains(f.Data, "needs a credential"):
			asked++
		default:
			t.Errorf("whoami completed without the credentials: %s", f.Data)
		}
	}
	if ran != 2 || asked != 1 {
		t.Fatalf("whoami ran %d times with the credentials (want 2) and asked %d times (want 1): %+v", ran, asked, frames)
	}
	if n := ledgerLines(); n != 1 {
		t.Fatalf("ledger has %d lines, want 1", n)
	}
}
