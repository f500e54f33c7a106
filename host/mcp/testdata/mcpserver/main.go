// Command mcpserver is an MCP server over stdio for the tests of the MCP
// client: tools that answer, report progress, hang, crash, flood, and read
// the environment.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type textArgs struct {
	Text string `json:"text" jsonschema:"the text"`
}

type nameArgs struct {
	Name string `json:"name" jsonschema:"an environment variable"`
}

type sizeArgs struct {
	Bytes int `json:"bytes" jsonschema:"how many bytes to answer"`
}

type empty struct{}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func main() {
	s := mcp.NewServer(&mcp.Implementation{Name: "testserver", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "returns its text"},
		func(_ context.Context, _ *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, map[string]any, error) {
			return text("echo: " + a.Text), map[string]any{"text": a.Text, "pid": os.Getpid()}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "a tool error"},
		func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, any, error) {
			return nil, nil, fmt.Errorf("it failed on purpose")
		})
	mcp.AddTool(s, &mcp.Tool{Name: "progress", Description: "reports progress three times"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ empty) (*mcp.CallToolResult, any, error) {
			for i := 1; i <= 3; i++ {
				if tok := req.Params.GetProgressToken(); tok != nil {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
						ProgressToken: tok, Progress: float64(i), Total: 3, Message: fmt.Sprintf("step %d", i)})
				}
			}
			return text("done"), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "hang", Description: "never answers"},
		func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, any, error) {
			select {} // ignores cancellation too
		})
	mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "exits the process"},
		func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, any, error) {
			fmt.Fprintln(os.Stderr, "crashing on purpose")
			os.Exit(3)
			return nil, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "flood", Description: "answers many bytes"},
		func(_ context.Context, _ *mcp.CallToolRequest, a sizeArgs) (*mcp.CallToolResult, any, error) {
			return text(strings.Repeat("x", a.Bytes)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "getenv", Description: "reads an environment variable"},
		func(_ context.Context, _ *mcp.CallToolRequest, a nameArgs) (*mcp.CallToolResult, any, error) {
			v, ok := os.LookupEnv(a.Name)
			if !ok {
				return text("unset"), nil, nil
			}
			return text("set: " + v), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "secret_admin", Description: "a tool the tests deny"},
		func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, any, error) {
			return text("should never be called"), nil, nil
		})
	if os.Getenv("MCPSERVER_SLOW_START") != "" {
		time.Sleep(time.Hour) // never initializes
	}
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
