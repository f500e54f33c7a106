package wasmtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/plugins"
)

// loopbackGrant lets a plugin reach the test server on 127.0.0.1.
func loopbackGrant(man map[string]any) {
	c := capabilities(man)
	c["allowedHosts"] = []any{"127.0.0.1"}
	c["allowPrivateNetwork"] = true
}

func netRegistry(t *testing.T, dirs ...string) *plugins.Registry {
	t.Helper()
	egress := plugins.NewEgress(plugins.EgressConfig{})
	t.Cleanup(func() { egress.Close() })
	return load(t, plugins.Config{
		Policy: plugins.Policy{AllowedHosts: []string{"127.0.0.1"}, AllowPrivateNetwork: true, Secrets: []string{"TEST_OPENAI_KEY"}},
		Egress: egress,
		LookupEnv: func(k string) (string, bool) {
			return map[string]string{"TEST_OPENAI_KEY": "sk-test"}[k], k == "TEST_OPENAI_KEY"
		},
	}, dirs...)
}

// fakeOpenAI answers chat completions from the adapter's recorded streams:
// "tools" gets tool calls, "RATE" a 429, "STALL" one chunk and then nothing.
type fakeOpenAI struct {
	mu      sync.Mutex
	bodies  []map[string]any
	auth    []string
	release chan struct{}
}

func (f *fakeOpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.mu.Unlock()
	if r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	switch {
	case strings.Contains(string(b), "RATE"):
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"message":"slow down","type":"requests"}}`)
	case strings.Contains(string(b), "STALL"):
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"first\"}}]}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-f.release:
		case <-r.Context().Done():
		}
	default:
		name := "text.sse"
		if strings.Contains(string(b), "tools") {
			name = "tools.sse"
		}
		stream, err := os.ReadFile(filepath.Join(examples, "openai", "testdata", name))
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(stream)
	}
}

func TestWasmOpenAIAdapter(t *testing.T) {
	fake := &fakeOpenAI{release: make(chan struct{})}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	defer close(fake.release)
	p := install(t, t.TempDir(), "openai", func(man map[string]any) {
		loopbackGrant(man)
		man["config"] = map[string]any{"baseUrl": srv.URL + "/v1", "model": "test-model"}
		man["secrets"] = map[string]any{"apiKey": "TEST_OPENAI_KEY"}
	})
	r := netRegistry(t, p)
	m, err := r.Model("openai")
	if err != nil {
		t.Fatal(err)
	}

	var deltas []string
	resp, err := m.Generate(context.Background(), &loop.ModelRequest{Stream: true, Messages: []loop.Message{{Role: loop.RoleUser, Content: "hello"}}},
		func(d loop.Delta) { deltas = append(deltas, d.Content) })
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "Hello, wörld!" || strings.Join(deltas, "") != "Hello, wörld!" || resp.Usage.TotalTokens != 16 {
		t.Errorf("text answer %+v, deltas %q", resp, deltas)
	}
	if fake.auth[0] != "Bearer sk-test" || fake.bodies[0]["model"] != "test-model" || fake.bodies[0]["stream"] != true {
		t.Errorf("request: auth %q body %v", fake.auth[0], fake.bodies[0])
	}

	resp, err = m.Generate(context.Background(), &loop.ModelRequest{
		Messages: []loop.Message{{Role: loop.RoleUser, Content: "use tools"}},
		Tools:    []loop.ToolDefinition{{Name: "calc", Parameters: json.RawMessage(`{"type":"object"}`)}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Message.ToolCalls) != 2 || resp.FinishReason != loop.FinishToolCalls || string(resp.Message.ToolCalls[0].Arguments) != `{"expression":"2+2"}` {
		t.Errorf("tool answer %+v", resp)
	}
	if tools, _ := fake.bodies[1]["tools"].([]any); len(tools) != 1 {
		t.Errorf("tools sent: %v", fake.bodies[1]["tools"])
	}

	_, err = m.Generate(context.Background(), &loop.ModelRequest{Messages: []loop.Message{{Role: loop.RoleUser, Content: "RATE"}}}, nil)
	var me *loop.ModelError
	if !errors.As(err, &me) || !me.Transient || me.Code != "rate_limit" || !strings.Contains(me.Message, "slow down") {
		t.Errorf("429: %#v", err)
	}

	// Cancelling a call whose stream stalls interrupts the guest.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = m.Generate(ctx, &loop.ModelRequest{Messages: []loop.Message{{Role: loop.RoleUser, Content: "STALL"}}},
		func(d loop.Delta) { cancel() })
	// The host reports the cancel itself, or the guest's read ended by it;
	// either way the call returns, and without a retryable error.
	if !errors.Is(err, context.Canceled) && !(errors.As(err, &me) && me.Code == "canceled" && !me.Transient) {
		t.Errorf("stalled stream after cancel: %#v, want a cancellation", err)
	}
}

func TestWasmHTTPFetch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/page":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprint(w, strings.Repeat("abcdefghij", 100))
		case "/image":
			w.Header().Set("Content-Type", "image/png")
			w.Write([]byte{0x89, 'P', 'N', 'G'})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	p := install(t, t.TempDir(), "http-fetch", loopbackGrant)
	r := netRegistry(t, p)

	res := call(t, r, nil, "1", "fetch", fmt.Sprintf(`{"url":%q,"maxBytes":25}`, srv.URL+"/page"))
	if res.IsError || res.Content != "HTTP 200 (text/plain; charset=utf-8)\n\nabcdefghijabcdefghijabcde\n[truncated]" {
		t.Errorf("page: %+v", res)
	}
	if res := call(t, r, nil, "2", "fetch", fmt.Sprintf(`{"url":%q}`, srv.URL+"/missing")); !res.IsError || !strings.HasPrefix(res.Content, "HTTP 404") {
		t.Errorf("404: %+v", res)
	}
	if res := call(t, r, nil, "3", "fetch", fmt.Sprintf(`{"url":%q}`, srv.URL+"/image")); strings.Contains(res.Content, "PNG") || !strings.Contains(res.Content, "not shown") {
		t.Errorf("image: %+v", res)
	}
	if res := call(t, r, nil, "4", "fetch", `{"url":"http://example.org/"}`); !res.IsError || !strings.Contains(res.Content, "not in the plugin's allowed hosts") {
		t.Errorf("forbidden host: %+v", res)
	}
	if res := call(t, r, nil, "5", "fetch", `{"url":"file:///etc/passwd"}`); !res.IsError || !strings.Contains(res.Content, "only http and https") {
		t.Errorf("file URL: %+v", res)
	}
}

func TestWasmResearcherUsesTheHostsModelAndTools(t *testing.T) {
	r := registry(t, plugins.Config{}, "researcher", "scripted-model", "echo")
	m, err := r.Model("scripted-model")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	kinds := map[loop.EventKind]int{}
	env := &loop.ToolEnv{ContextID: "ctx", TaskID: "task", Model: m, Tools: r, Emit: func(e loop.Event) {
		mu.Lock()
		defer mu.Unlock()
		kinds[e.Head().Kind]++
	}}
	res := call(t, r, env, "c1", "researcher", `{"prompt":"wasm sandboxes"}`)
	want := `My notes on wasm sandboxes, through the echo tool: {"text":"notes on wasm sandboxes"}.`
	if res.IsError || !strings.Contains(res.Content, want) {
		t.Errorf("researcher: %+v, want it to contain %q", res, want)
	}
	if kinds[loop.KindSubtaskCreated] != 1 || kinds[loop.KindToolProgress] == 0 {
		t.Errorf("events %v: want a subtask-created and tool progress", kinds)
	}
}
