package wasmtest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/plugins"
)

func TestWasmDemoCalc(t *testing.T) {
	r := registry(t, plugins.Config{}, "scripted-model", "calculator")
	m, err := r.Model("scripted-model")
	if err != nil {
		t.Fatal(err)
	}
	msgs := []loop.Message{{Role: loop.RoleUser, Content: "calc (1+2)*3"}}
	first, deltas, err := ask(t, m, msgs...)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Message.ToolCalls) != 1 || len(deltas) != 1 || deltas[0].Content != first.Message.Content {
		t.Fatalf("first answer %+v, deltas %+v", first, deltas)
	}
	call := first.Message.ToolCalls[0]
	res, err := r.Call(context.Background(), call, &loop.ToolEnv{})
	if err != nil || res.Content != "9" {
		t.Fatalf("calc: %+v %v", res, err)
	}
	msgs = append(msgs, first.Message, loop.Message{Role: loop.RoleTool, ToolCallID: call.ID, Name: call.Name, Content: res.Content})
	second, _, err := ask(t, m, msgs...)
	if err != nil || second.Message.Content != "(1+2)*3 = 9" || second.FinishReason != loop.FinishStop {
		t.Fatalf("second answer %+v %v", second, err)
	}
	if second.Usage.TotalTokens == 0 {
		t.Error("no usage")
	}
}

func TestWasmEchoMemoryAndErrors(t *testing.T) {
	r := registry(t, plugins.Config{}, "scripted-model")
	m, _ := r.Model("scripted-model")
	resp, _, err := ask(t, m,
		loop.Message{Role: loop.RoleUser, Content: "a"}, loop.Message{Role: loop.RoleAssistant, Content: "You said: a"},
		loop.Message{Role: loop.RoleUser, Content: "b"})
	if err != nil || resp.Message.Content != "You said: a | b" {
		t.Errorf("echo: %+v %v", resp, err)
	}
	_, _, err = ask(t, m, loop.Message{Role: loop.RoleUser, Content: "fail"})
	var me *loop.ModelError
	if !errors.As(err, &me) || me.Transient || me.Code != "model_error" {
		t.Errorf("fail: %#v", err)
	}
}

func TestWasmFlakyCountsAttemptsInKV(t *testing.T) {
	kv := &memKV{m: map[string][]byte{}}
	r := registry(t, plugins.Config{KV: kv}, "scripted-model")
	m, _ := r.Model("scripted-model")
	_, _, err := ask(t, m, loop.Message{Role: loop.RoleUser, Content: "flaky"})
	var me *loop.ModelError
	if !errors.As(err, &me) || !me.Transient {
		t.Fatalf("first attempt: %v, want a transient error", err)
	}
	resp, _, err := ask(t, m, loop.Message{Role: loop.RoleUser, Content: "flaky"})
	if err != nil || resp.Message.Content != "Recovered on attempt 2." {
		t.Errorf("second attempt: %+v %v", resp, err)
	}
	kv.mu.Lock()
	left := len(kv.m)
	kv.mu.Unlock()
	if left != 0 {
		t.Errorf("%d keys left in the plugin's key-value space", left)
	}
}

func TestWasmSlowIsInterruptible(t *testing.T) {
	r := registry(t, plugins.Config{}, "scripted-model")
	m, _ := r.Model("scripted-model")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ticks []string
	_, err := m.Generate(ctx, &loop.ModelRequest{Stream: true, Messages: []loop.Message{{Role: loop.RoleUser, Content: "SLOW 6s"}}},
		func(d loop.Delta) {
			if strings.HasPrefix(d.Content, " tick") {
				ticks = append(ticks, d.Content)
				cancel() // after the first tick
			}
		})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if len(ticks) != 1 {
		t.Errorf("ticks after the cancel: %q", ticks)
	}
	// The pool replaces the interrupted instance: the next call is served.
	resp, _, err := ask(t, m, loop.Message{Role: loop.RoleUser, Content: "x"})
	if err != nil || resp.Message.Content != "You said: x" {
		t.Errorf("after a cancel: %+v %v", resp, err)
	}
}

func TestWasmConfiguredScript(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(examples, "scripted-model", "plugin.json"))
	if err != nil {
		t.Fatalf("%v (build the Go example plugins first: make plugins-go)", err)
	}
	var man map[string]any
	if err := json.Unmarshal(b, &man); err != nil {
		t.Fatal(err)
	}
	wasm, err := os.ReadFile(filepath.Join(examples, "scripted-model", "scripted-model.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, script any) string {
		sub := filepath.Join(dir, name)
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		man["config"] = map[string]any{"script": script}
		mb, _ := json.Marshal(man)
		if err := os.WriteFile(filepath.Join(sub, "plugin.json"), mb, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sub, "scripted-model.wasm"), wasm, 0o644); err != nil {
			t.Fatal(err)
		}
		return sub
	}
	good := write("good", map[string]any{"rules": []any{map[string]any{"match": "^ping$", "steps": []any{map[string]any{"text": "pong"}}}}})
	bad := write("bad", map[string]any{"rules": []any{map[string]any{"match": "(", "steps": []any{}}}})
	for _, tt := range []struct {
		dir, in, want string
		wantErr       string
	}{
		{good, "ping", "pong", ""},
		{good, "other", "You said: other", ""},
		{bad, "ping", "", "error parsing regexp"},
	} {
		r, err := plugins.New(plugins.Config{CacheDir: cacheDir})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Load(context.Background(), tt.dir); err != nil {
			t.Fatal(err)
		}
		m, _ := r.Model("scripted-model")
		resp, _, err := ask(t, m, loop.Message{Role: loop.RoleUser, Content: tt.in})
		switch {
		case tt.wantErr != "":
			var me *loop.ModelError
			if !errors.As(err, &me) || me.Code != "bad_config" || !strings.Contains(me.Message, tt.wantErr) {
				t.Errorf("%s: %v, want a bad_config error about %q", tt.in, err, tt.wantErr)
			}
		case err != nil || resp.Message.Content != tt.want:
			t.Errorf("%s: %+v %v, want %q", tt.in, resp, err, tt.want)
		}
		r.Close()
	}
}
