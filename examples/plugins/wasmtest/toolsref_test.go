package wasmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

// A model guest keeps the tool set of its instance (pdk.FeatureToolsRef):
// the host sends the tools once, then only their name. The OpenAI adapter
// must still put every tool, whole, in every request it makes, also when the
// set changes between calls and back.
func TestToolSetsReachTheModelServerEveryCall(t *testing.T) {
	fake := &fakeOpenAI{release: make(chan struct{})}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	defer close(fake.release)
	p := install(t, t.TempDir(), "openai", func(man map[string]any) {
		loopbackGrant(man)
		man["config"] = map[string]any{"baseUrl": srv.URL + "/v1", "model": "test-model"}
		man["secrets"] = map[string]any{"apiKey": "TEST_OPENAI_KEY"}
		man["capabilities"].(map[string]any)["instances"] = 1 // every call on the same instance
	})
	m, err := netRegistry(t, p).Model("openai")
	if err != nil {
		t.Fatal(err)
	}
	calc := loop.ToolDefinition{Name: "calc", Description: "adds", Parameters: json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string"}}}`)}
	echo := loop.ToolDefinition{Name: "echo", Parameters: json.RawMessage(`{"type":"object"}`)}
	sets := [][]loop.ToolDefinition{{calc, echo}, {calc, echo}, {echo}, nil, {calc, echo}, {calc, echo}}
	for i, tools := range sets {
		if _, err := m.Generate(context.Background(), &loop.ModelRequest{
			Messages: []loop.Message{{Role: loop.RoleUser, Content: "hello"}}, Tools: tools,
		}, nil); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.bodies) != len(sets) {
		t.Fatalf("%d requests reached the server, want %d", len(fake.bodies), len(sets))
	}
	for i, tools := range sets {
		var got []string
		sent, _ := fake.bodies[i]["tools"].([]any)
		for _, tl := range sent {
			fn, _ := tl.(map[string]any)["function"].(map[string]any)
			name, _ := fn["name"].(string)
			if name == "calc" && fn["parameters"] == nil {
				t.Errorf("call %d: calc sent without its schema: %v", i, tl)
			}
			got = append(got, name)
		}
		var want []string
		for _, tl := range tools {
			want = append(want, tl.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("call %d: the server got tools %v, want %v", i, got, want)
		}
	}
}

// A model guest keeps the conversation of its instance
// (pdk.FeatureHistoryRef): the host sends only what is new. The OpenAI
// adapter must still send the whole conversation in every request it makes,
// also after an earlier message changed and after a window dropped the
// oldest ones.
func TestConversationReachesTheModelServerWhole(t *testing.T) {
	fake := &fakeOpenAI{release: make(chan struct{})}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	defer close(fake.release)
	p := install(t, t.TempDir(), "openai", func(man map[string]any) {
		loopbackGrant(man)
		man["config"] = map[string]any{"baseUrl": srv.URL + "/v1", "model": "test-model"}
		man["secrets"] = map[string]any{"apiKey": "TEST_OPENAI_KEY"}
		man["capabilities"].(map[string]any)["instances"] = 1 // every call on the same instance
	})
	m, err := netRegistry(t, p).Model("openai")
	if err != nil {
		t.Fatal(err)
	}
	msgs := []loop.Message{{Role: loop.RoleSystem, Content: "be brief"}}
	var sent [][]loop.Message
	call := func() {
		t.Helper()
		msgs = append(msgs, loop.Message{Role: loop.RoleUser, Content: fmt.Sprintf("question %d", len(sent))})
		resp, err := m.Generate(context.Background(), &loop.ModelRequest{Messages: msgs}, nil)
		if err != nil {
			t.Fatalf("call %d: %v", len(sent), err)
		}
		sent = append(sent, slices.Clone(msgs))
		msgs = append(msgs, resp.Message)
	}
	call()
	call()
	call()
	msgs[1].Content = "question 0, edited"
	call()
	msgs = append(msgs[:1:1], msgs[4:]...) // the system prompt and a window
	call()
	msgs = msgs[2:]
	call()

	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.bodies) != len(sent) {
		t.Fatalf("%d requests reached the server, want %d", len(fake.bodies), len(sent))
	}
	for i, want := range sent {
		got, _ := fake.bodies[i]["messages"].([]any)
		if len(got) != len(want) {
			t.Fatalf("call %d: the server got %d messages, want %d: %v", i, len(got), len(want), got)
		}
		for j, g := range got {
			gm, _ := g.(map[string]any)
			if gm["role"] != string(want[j].Role) || gm["content"] != want[j].Content {
				t.Errorf("call %d, message %d: the server got %v, want %s %q", i, j, gm, want[j].Role, want[j].Content)
			}
		}
	}
}
