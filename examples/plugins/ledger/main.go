//go:build wasip1

// Command ledger is a tool plugin that appends one line per call to
// ledger.log in a folder the manifest grants read-write. It is not
// idempotent: each execution leaves a line, which is how the crash tests
// count executions.
package main

import (
	"context"

	"github.com/looopy-go/looopy/pdk"
)

// AppendArgs are the arguments of ledger_append.
type AppendArgs struct {
	Entry string `json:"entry" desc:"the text of the ledger line"`
}

func init() {
	pdk.Info("ledger", "1.0.0")
	pdk.Tool("ledger_append", "Appends an entry to the ledger, one line per call. Not idempotent: every call adds a line.",
		func(ctx context.Context, a AppendArgs) (string, error) {
			id := pdk.Meta(ctx).ToolCallID
			if err := Append(pdk.Config("dir"), id, a.Entry); err != nil {
				return "", err
			}
			return "recorded " + a.Entry + " (call " + id + ")", nil
		})
}

func main() {}
