package mcp

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// hangCaller is a model that calls test_hang once, then ends.
type hangCaller struct{}

func (hangCaller) Generate(_ context.Context, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
	if last := req.Messages[len(req.Messages)-1]; last.Role == loop.RoleTool {
		return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "done"}}, nil
	}
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant,
		ToolCalls: []loop.ToolCall{{ID: "c1", Name: "test_hang", Arguments: []byte(`{}`)}}}}, nil
}

// In a turn, an MCP server's call is bounded by its own callTimeout, not
// by the loop's tool timeout: the loop's (30 s) cut a call before the
// server's (60 s by default) was reached, so that bound never applied and
// hung servers were never counted as hung (two timeouts in a row restart
// one).
func TestMCPCallTimeoutAppliesInATurn(t *testing.T) {
	ts := startToolset(t, ClientConfig{CallTimeout: 500 * time.Millisecond})
	l, err := loop.New(loop.Config{Model: hangCaller{}, Toolsets: []loop.Toolset{ts}, ToolTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	out := l.Run(context.Background(), loop.Turn{ContextID: "ctx", TaskID: "task-1",
		Messages: []loop.Message{{Role: loop.RoleUser, Content: "go"}}})
	var result string
	for _, m := range out.Messages {
		if m.Role == loop.RoleTool {
			result = m.Content
		}
	}
	if !strings.Contains(result, "no answer within 500ms") {
		t.Fatalf("the hanging MCP call ended %q; want the server's own call timeout", result)
	}
}
