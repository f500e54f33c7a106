//go:build wasip1

// Command echo is a tool plugin whose one tool returns its arguments; the
// benchmarks use it to measure the cost of a call through the host.
package main

import (
	"context"
	"encoding/json"

	"github.com/looopy-go/looopy/pdk"
)

func init() {
	pdk.Info("echo", "1.0.0")
	pdk.Tool("echo", "Returns its arguments unchanged.",
		func(_ context.Context, a Args) (pdk.ToolResult, error) { return Echo(a), nil },
		pdk.Idempotent(), pdk.WithSchema(json.RawMessage(schema)))
}

func main() {}
