package plugins

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

func TestSchemaValidationRefusesBadArguments(t *testing.T) {
	r := newRegistry(t, Config{})
	if _, err := r.Load(context.Background(), install(t, t.TempDir(), "echo", guestWasm(t, "echo"), nil)); err != nil {
		t.Fatal(err)
	}
	p, _ := r.Plugin("echo")
	cases := []struct{ args, want string }{
		{`{"a":1}`, "missing property 'b'"},
		{`{"a":"one","b":2}`, "/a"},
		{`{"a":1,"b":2,"op":"*"}`, "/op"},
		{`{"a":1,"b":2,"extra":true}`, "additional properties 'extra' not allowed"},
		{`[1,2]`, "want object"},
		{`{"a":1,`, "not JSON"},
	}
	for _, c := range cases {
		before := p.calls.Load()
		res := mustCall(t, r, "add", c.args)
		if !res.IsError || !strings.Contains(res.Content, c.want) || !strings.Contains(res.Content, `invalid arguments for tool "add"`) {
			t.Errorf("add(%s) = %+v; want an error result saying %q", c.args, res, c.want)
		}
		if p.calls.Load() != before {
			t.Errorf("add(%s): the plugin was called with invalid arguments", c.args)
		}
	}
	// missing arguments are an empty object: "echo" requires text
	res := mustCall(t, r, "echo", ``)
	if !res.IsError || !strings.Contains(res.Content, "missing property 'text'") {
		t.Fatalf("echo() = %+v", res)
	}
}

func TestConcurrentCallsHammer(t *testing.T) {
	r := newRegistry(t, Config{})
	if _, err := r.Load(context.Background(), install(t, t.TempDir(), "echo", guestWasm(t, "echo"), func(m map[string]any) {
		caps(m)["instances"] = 3
		caps(m)["callTimeout"] = "60s"
	})); err != nil {
		t.Fatal(err)
	}
	const goroutines, calls = 16, 40
	var wg sync.WaitGroup
	var bad atomic.Int64
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				a, b := g*1000+i, i*7-g
				res, err := r.Call(context.Background(), call("add", fmt.Sprintf(`{"a":%d,"b":%d}`, a, b)), &loop.ToolEnv{})
				if err != nil || res.IsError || res.Content != fmt.Sprint(a+b) {
					bad.Add(1)
					t.Errorf("add(%d,%d) = %+v, %v", a, b, res, err)
					return
				}
				text := fmt.Sprintf("g%d-i%d", g, i)
				res, err = r.Call(context.Background(), call("echo", `{"text":"`+text+`"}`), &loop.ToolEnv{})
				if err != nil || res.Content != text {
					bad.Add(1)
					t.Errorf("echo(%s) = %+v, %v", text, res, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if bad.Load() > 0 {
		t.Fatalf("%d wrong answers", bad.Load())
	}
}

// kitchen loads the kitchen guest with every capability a tool may have.
func kitchen(t *testing.T, cfg Config, edit func(m map[string]any)) *Registry {
	t.Helper()
	r := newRegistry(t, cfg)
	if _, err := r.Load(context.Background(), install(t, t.TempDir(), "kitchen", guestWasm(t, "kitchen"), func(m map[string]any) {
		caps(m)["hostFunctions"] = []string{"log", "emit", "kv_get", "kv_set", "kv_delete", "http_request", "http_read", "http_close"}
		if edit != nil {
			edit(m)
		}
	})); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestKVOnBadger(t *testing.T) {
	db, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r := kitchen(t, Config{KV: db}, nil)
	if res := mustCall(t, r, "kv_read", `{"key":"k"}`); res.Content != "(absent)" {
		t.Fatalf("read absent = %+v", res)
	}
	if res := mustCall(t, r, "kv_put", `{"key":"k","value":"v1"}`); res.IsError {
		t.Fatalf("put = %+v", res)
	}
	if res := mustCall(t, r, "kv_read", `{"key":"k"}`); res.Content != "v1" {
		t.Fatalf("read = %+v", res)
	}
	// the space is the plugin's own: the store holds it under its name
	if v, err := db.KVGet(context.Background(), "kitchen", "k"); err != nil || string(v) != "v1" {
		t.Fatalf("store has %q, %v", v, err)
	}
	if res := mustCall(t, r, "kv_del", `{"key":"k"}`); res.IsError {
		t.Fatalf("delete = %+v", res)
	}
	if res := mustCall(t, r, "kv_read", `{"key":"k"}`); res.Content != "(absent)" {
		t.Fatalf("read after delete = %+v", res)
	}
	if _, err := db.KVGet(context.Background(), "kitchen", "k"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("store after delete: %v", err)
	}
}

func TestFilesOnlyInsideTheGrant(t *testing.T) {
	granted, outside := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(granted, "in.txt"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "hidden.txt"), []byte("TOPSECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	policy := Policy{PathRoots: []string{granted}}
	r := kitchen(t, Config{Policy: policy}, func(m map[string]any) {
		caps(m)["allowedPaths"] = []map[string]any{{"path": granted, "readOnly": true}, {"path": outside}}
	})
	if res := mustCall(t, r, "read_file", `{"path":"`+filepath.Join(granted, "in.txt")+`"}`); res.IsError || res.Content != "inside" {
		t.Fatalf("read inside = %+v", res)
	}
	for _, p := range []string{filepath.Join(outside, "hidden.txt"), filepath.Join(granted, "..", filepath.Base(outside), "hidden.txt"), "/etc/passwd"} {
		res := mustCall(t, r, "read_file", `{"path":"`+p+`"}`)
		if !res.IsError || strings.Contains(res.Content, "TOPSECRET") || strings.Contains(res.Content, "root:") {
			t.Fatalf("read %s = %+v", p, res)
		}
	}
	// the grant is read-only
	res := mustCall(t, r, "write_file", `{"path":"`+filepath.Join(granted, "new.txt")+`","text":"x"}`)
	if !res.IsError {
		t.Fatalf("write into a read-only grant = %+v", res)
	}
	if _, err := os.Stat(filepath.Join(granted, "new.txt")); err == nil {
		t.Fatal("a file was written into a read-only grant")
	}
}

func TestProgressLogMetaConfigSecrets(t *testing.T) {
	var got []loop.Event
	var mu sync.Mutex
	env := &loop.ToolEnv{ContextID: "ctx1", TaskID: "task1", Emit: func(e loop.Event) {
		mu.Lock()
		got = append(got, e)
		mu.Unlock()
	}}
	r := kitchen(t, Config{
		Policy: Policy{Secrets: []string{"KITCHEN_TOKEN"}},
		LookupEnv: func(k string) (string, bool) {
			return map[string]string{"KITCHEN_TOKEN": "s3cret", "HOME": "/root"}[k], k == "KITCHEN_TOKEN"
		},
	}, func(m map[string]any) {
		m["config"] = map[string]any{"greeting": "hi", "limit": 3}
		m["secrets"] = map[string]string{"token": "KITCHEN_TOKEN"}
	})
	res, err := r.Call(context.Background(), loop.ToolCall{ID: "call-7", Name: "progress", Arguments: []byte(`{}`)}, env)
	if err != nil || res.Content != "done ctx1/task1/call-7" {
		t.Fatalf("progress = %+v, %v", res, err)
	}
	mu.Lock()
	if len(got) != 1 {
		t.Fatalf("events = %+v", got)
	}
	tp, ok := got[0].(*loop.ToolProgress)
	if !ok || tp.ToolCallID != "call-7" || tp.Progress != 0.5 || tp.Message != "half way" || tp.TaskID != "task1" || tp.ContextID != "ctx1" {
		t.Fatalf("progress event = %#v", got[0])
	}
	mu.Unlock()
	// The guest answers its config and its secret; the secret's value
	// (s3cret) comes back redacted, as anything a plugin hands the host
	// does: the redaction shows the guest saw exactly that value.
	if res := mustCall(t, r, "settings", `{}`); res.Content != "hi|3|"+Redacted+"|" {
		t.Fatalf("settings = %q (the guest must see config and its secret, redacted in its answer, and no host environment)", res.Content)
	}
}

func TestHTTPThroughEgress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", r.URL.Path)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	eg := NewEgress(EgressConfig{})
	defer eg.Close()
	r := kitchen(t, Config{Egress: eg, Policy: Policy{AllowedHosts: []string{"127.0.0.1"}, AllowPrivateNetwork: true}}, func(m map[string]any) {
		caps(m)["allowedHosts"] = []string{"127.0.0.1"}
		caps(m)["allowPrivateNetwork"] = true
	})
	if res := mustCall(t, r, "fetch", `{"url":"`+srv.URL+`/x"}`); res.IsError || res.Content != "200 hello from /x" {
		t.Fatalf("fetch = %+v", res)
	}
	// not granted: another host
	res := mustCall(t, r, "fetch", `{"url":"http://localhost:`+strings.Split(host, ":")[1]+`/y"}`)
	if !res.IsError || !strings.Contains(res.Content, "localhost") {
		t.Fatalf("fetch of an unlisted host = %+v", res)
	}
	// the manifest asks for private network, the policy does not grant it
	r2 := kitchen(t, Config{Egress: eg, Policy: Policy{AllowedHosts: []string{"127.0.0.1"}}}, func(m map[string]any) {
		caps(m)["allowedHosts"] = []string{"127.0.0.1"}
		caps(m)["allowPrivateNetwork"] = true
	})
	if res := mustCall(t, r2, "fetch", `{"url":"`+srv.URL+`/z"}`); !res.IsError {
		t.Fatalf("fetch of loopback without the grant = %+v", res)
	}
}

// stubModel is the fake model of these tests.
type stubModel struct{ calls atomic.Int64 }

func (m *stubModel) Generate(ctx context.Context, req *loop.ModelRequest, onDelta func(loop.Delta)) (*loop.ModelResponse, error) {
	m.calls.Add(1)
	last := req.Messages[len(req.Messages)-1].Content
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "summary of (" + last + ")"}}, nil
}

// blockingTools is a toolset whose tool waits until its call is cancelled.
type blockingTools struct{ started chan struct{} }

func (b *blockingTools) Tools(ctx context.Context) ([]loop.ToolDefinition, error) {
	return []loop.ToolDefinition{{Name: "wait", Parameters: []byte(`{"type":"object"}`)}}, nil
}

func (b *blockingTools) Call(ctx context.Context, call loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	close(b.started)
	<-ctx.Done()
	return loop.ToolResult{}, ctx.Err()
}

func loadAgent(t *testing.T) *Registry {
	t.Helper()
	r := newRegistry(t, Config{})
	dir := t.TempDir()
	if _, err := r.Load(context.Background(), install(t, dir, "echo", guestWasm(t, "echo"), nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Load(context.Background(), install(t, dir, "researcher", guestWasm(t, "agent"), func(m map[string]any) {
		m["kind"] = "agent"
		caps(m)["hostFunctions"] = []string{"model_call", "tool_call"}
		caps(m)["callTimeout"] = "1h"
	})); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestAgentPluginUsesHostModelAndTools(t *testing.T) {
	r := loadAgent(t)
	model := &stubModel{}
	var events []loop.Event
	var mu sync.Mutex
	env := &loop.ToolEnv{ContextID: "c", TaskID: "t", Model: model, Emit: func(e loop.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}}
	pinned, release := r.PinToolset()
	defer release()
	env.Tools = pinned
	res, err := r.Call(context.Background(), loop.ToolCall{ID: "a1", Name: "researcher", Arguments: []byte(`{"prompt":"why"}`)}, env)
	if err != nil || res.IsError {
		t.Fatalf("agent = %+v, %v", res, err)
	}
	// the first lent tool is "add" (sorted), which refuses {"text":...}: the
	// schema check of the host's tool path ran for the agent's call too
	if !strings.Contains(res.Content, `invalid arguments for tool "add"`) || !strings.Contains(res.Content, "model said summary of (sum up:") {
		t.Fatalf("agent answer = %q", res.Content)
	}
	if model.calls.Load() != 1 {
		t.Fatalf("model calls = %d", model.calls.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) == 0 {
		t.Fatal("no subtask event")
	}
	st, ok := events[0].(*loop.SubtaskCreated)
	if !ok || st.SubtaskID != "t.a1" || st.AgentID != "researcher" || st.Prompt != "why" {
		t.Fatalf("first event = %#v", events[0])
	}
}

func TestCancelInterruptsGuestWaitingInHostFunction(t *testing.T) {
	r := loadAgent(t)
	tools := &blockingTools{started: make(chan struct{})}
	env := &loop.ToolEnv{ContextID: "c", TaskID: "t", Model: &stubModel{}, Tools: tools}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := r.Call(ctx, loop.ToolCall{ID: "a1", Name: "researcher", Arguments: []byte(`{"prompt":"p"}`)}, env)
		done <- err
	}()
	<-tools.started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v; want context.Canceled", err)
	}
	// the agent serves again
	res, err := r.Call(context.Background(), loop.ToolCall{ID: "a2", Name: "researcher", Arguments: []byte(`{"prompt":"q"}`)},
		&loop.ToolEnv{Model: &stubModel{}, Tools: r})
	if err != nil || res.IsError {
		t.Fatalf("after cancel: %+v, %v", res, err)
	}
}

func loadModel(t *testing.T) loop.Model {
	t.Helper()
	r := newRegistry(t, Config{})
	if _, err := r.Load(context.Background(), install(t, t.TempDir(), "mock", guestWasm(t, "model"), func(m map[string]any) {
		m["kind"] = "model"
		caps(m)["hostFunctions"] = []string{"emit"}
		caps(m)["callTimeout"] = "1h"
	})); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Model("nope"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("Model(nope): %v", err)
	}
	m, err := r.Model("mock")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func userReq(text string) *loop.ModelRequest {
	return &loop.ModelRequest{Messages: []loop.Message{{Role: loop.RoleUser, Content: text}}, Stream: true}
}

func TestModelPluginStreamsAndErrs(t *testing.T) {
	m := loadModel(t)
	var deltas []string
	resp, err := m.Generate(context.Background(), userReq("stream 3"), func(d loop.Delta) { deltas = append(deltas, d.Content) })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(deltas, "|") != "t0 |t1 |t2 " || resp.Message.Content != "t0 t1 t2 " || resp.FinishReason != loop.FinishStop {
		t.Fatalf("deltas %q, response %+v", deltas, resp)
	}
	_, err = m.Generate(context.Background(), userReq("flaky"), nil)
	var me *loop.ModelError
	if !errors.As(err, &me) || !me.Transient || me.Code != "rate_limit" || !loop.Transient(err) {
		t.Fatalf("flaky: %#v", err)
	}
	_, err = m.Generate(context.Background(), userReq("broken"), nil)
	if !errors.As(err, &me) || me.Transient || me.Code != "invalid_request" {
		t.Fatalf("broken: %#v", err)
	}
	pm, release := m.(loop.ModelPinner).PinModel()
	defer release()
	if resp, err := pm.Generate(context.Background(), userReq("hi"), nil); err != nil || resp.Message.Content != "echo: hi" {
		t.Fatalf("pinned: %+v, %v", resp, err)
	}
}

func TestCancelInterruptsStreamingModel(t *testing.T) {
	m := loadModel(t)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := m.Generate(ctx, userReq("sleep"), func(loop.Delta) { once.Do(func() { close(first) }) })
		done <- err
	}()
	<-first
	time.Sleep(50 * time.Millisecond) // let the guest go to sleep between chunks
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v; want context.Canceled", err)
	}
	if resp, err := m.Generate(context.Background(), userReq("again"), nil); err != nil || resp.Message.Content != "echo: again" {
		t.Fatalf("after cancel: %+v, %v", resp, err)
	}
}

// An agent plugin nests as deep as the loop allows sub-agents, and no deeper:
// one limit, loop.MaxSubAgentDepth.
func TestAgentPluginDepthLimit(t *testing.T) {
	r := loadAgent(t)
	pinned, release := r.PinToolset()
	defer release()
	call := loop.ToolCall{ID: "a1", Name: "researcher", Arguments: []byte(`{"prompt":"why"}`)}
	deepest := &loop.ToolEnv{ContextID: "c", TaskID: "t", Model: &stubModel{}, Tools: pinned, Depth: loop.MaxSubAgentDepth - 1}
	if res, err := r.Call(context.Background(), call, deepest); err != nil || res.IsError {
		t.Fatalf("agent at depth %d = %+v, %v; want it run", deepest.Depth, res, err)
	}
	tooDeep := &loop.ToolEnv{ContextID: "c", TaskID: "t", Model: &stubModel{}, Tools: pinned, Depth: loop.MaxSubAgentDepth}
	res, err := r.Call(context.Background(), call, tooDeep)
	want := fmt.Sprintf("sub-agents nest at most %d deep", loop.MaxSubAgentDepth)
	if err != nil || !res.IsError || !strings.Contains(res.Content, want) {
		t.Fatalf("agent at depth %d = %+v, %v; want an error result saying %q", tooDeep.Depth, res, err, want)
	}
}
