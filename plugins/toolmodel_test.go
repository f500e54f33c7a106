package plugins

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

// askerModel answers a turn's first call with a call of ask_model, the
// tool's calls ("from the tool") with 100 tokens each, and the turn's
// call after the tool with its result.
type askerModel struct{}

func (askerModel) Generate(_ context.Context, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
	last := req.Messages[len(req.Messages)-1]
	switch {
	case last.Content == "from the tool":
		return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "ok"}, Usage: loop.Usage{TotalTokens: 100}}, nil
	case last.Role == loop.RoleTool:
		return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "done: " + last.Content}}, nil
	}
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant,
		ToolCalls: []loop.ToolCall{{ID: "c1", Name: "ask_model", Arguments: json.RawMessage(`{"times":5}`)}}}}, nil
}

// A tool plugin granted model_call (real Wasm) asks the model lent to its
// call five times in a turn whose principal may use 250 tokens: each call
// is the turn's, reserved before it runs and counted, so three run and the
// fourth is refused before it reaches the model. Before, the plugin got
// the turn's model itself: all five ran and the turn counted none of them.
func TestToolPluginModelCallsCountAgainstTheBudget(t *testing.T) {
	r := newRegistry(t, Config{})
	if _, err := r.Load(context.Background(), install(t, t.TempDir(), "asker", guestWasm(t, "asker"), func(m map[string]any) {
		caps(m)["hostFunctions"] = []string{"model_call"}
	})); err != nil {
		t.Fatal(err)
	}
	const limit = 250
	var mu sync.Mutex
	var used int
	l, err := loop.New(loop.Config{Model: askerModel{}, Toolsets: []loop.Toolset{r},
		Budget: func(_ context.Context, _ *loop.Turn, u loop.TurnUsage) error {
			mu.Lock()
			defer mu.Unlock()
			used = u.TotalTokens
			if !u.Final && u.TotalTokens >= limit {
				return fmt.Errorf("token limit of %d reached", limit)
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	out := l.Run(context.Background(), loop.Turn{ContextID: "ctx", TaskID: "task-1",
		Messages: []loop.Message{{Role: loop.RoleUser, Content: "go"}}})
	mu.Lock()
	defer mu.Unlock()
	var result string
	for _, m := range out.Messages {
		if m.Role == loop.RoleTool {
			result = m.Content
		}
	}
	if out.Usage.TotalTokens != 300 || used != 300 || !strings.HasPrefix(result, "3 calls, then:") ||
		!strings.Contains(result, "token limit of 250") {
		t.Fatalf("turn usage %d (budget saw %d), tool said %q: want three calls counted, the fourth refused", out.Usage.TotalTokens, used, result)
	}
}
