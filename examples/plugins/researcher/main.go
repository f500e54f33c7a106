//go:build wasip1

// Command researcher is an agent plugin: a sub-agent the parent's model calls
// as the tool "researcher" with {"prompt": ...}. It answers by calling the
// host's model and the tools the host lends it, through the host's own loop
// machinery. Config: maxRounds (model calls per run, default 5).
package main

import (
	"context"
	"strconv"

	"github.com/looopy-go/looopy/pdk"
)

func init() {
	pdk.Info("researcher", "1.0.0")
	pdk.Agent(nil, run)
}

func run(ctx context.Context, req *pdk.AgentRequest) (*pdk.AgentResponse, error) {
	rounds, _ := strconv.Atoi(pdk.Config("maxRounds"))
	return Research(req, Env{
		Model: func(r *pdk.ModelRequest) (*pdk.ModelResponse, error) { return pdk.CallModel(ctx, r) },
		Tool:  func(c pdk.ToolCall) (*pdk.ToolResult, error) { return pdk.CallTool(ctx, c) },
		Progress: func(msg string) {
			_ = pdk.Progress(ctx, 0, msg)
		},
	}, rounds)
}

func main() {}
