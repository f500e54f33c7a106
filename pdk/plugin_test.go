//go:build !wasip1

package pdk

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type greetArgs struct {
	Name string `json:"name" desc:"who to greet"`
}

// The guest SDK compiles natively, and a registered tool runs in-process
// through the same decoding and result conversion as in the host.
func TestCallLocalRunsARegisteredTool(t *testing.T) {
	Tool("test_greet", "greets", func(_ context.Context, a greetArgs) (string, error) {
		if a.Name == "" {
			return "", errors.New("name is empty")
		}
		return "Hello, " + a.Name + "!", nil
	})
	res, err := CallLocal(context.Background(), "test_greet", json.RawMessage(`{"name":"Ada"}`))
	if err != nil || res.IsError || res.Content != "Hello, Ada!" {
		t.Fatalf("greet: %+v, %v", res, err)
	}
	if res, _ := CallLocal(context.Background(), "test_greet", json.RawMessage(`{}`)); !res.IsError || res.Content != "name is empty" {
		t.Errorf("a tool's error: %+v", res)
	}
	if res, _ := CallLocal(context.Background(), "test_greet", json.RawMessage(`{"name":3}`)); !res.IsError || !strings.Contains(res.Content, "invalid arguments") {
		t.Errorf("bad arguments: %+v", res)
	}
	if _, err := CallLocal(context.Background(), "nope", nil); err == nil {
		t.Error("an unknown tool ran")
	}
	var found bool
	for _, d := range Tools() {
		if d.Name == "test_greet" && strings.Contains(string(d.Parameters), `"name"`) {
			found = true
		}
	}
	if !found {
		t.Errorf("Tools() = %+v", Tools())
	}
	if _, _, err := KVGet("k"); !errors.Is(err, ErrNoHost) {
		t.Errorf("KVGet outside the host: %v, want ErrNoHost", err)
	}
}
