//go:build wasip1

// Command file-reader is a tool plugin that reads files and lists folders of
// one folder the manifest grants read-only (config "root"). Paths that leave
// the folder are refused here as well as by the sandbox.
package main

import (
	"context"
	"encoding/json"

	"github.com/looopy-go/looopy/pdk"
)

// ReadArgs are the arguments of read_file.
type ReadArgs struct {
	Path     string `json:"path" desc:"a file path relative to the granted folder"`
	MaxBytes int    `json:"maxBytes,omitempty" desc:"read at most this many bytes (default 262144)"`
}

// ListArgs are the arguments of list_dir.
type ListArgs struct {
	Path string `json:"path,omitempty" desc:"a folder relative to the granted folder; empty for the folder itself"`
}

func folder() Folder { return Folder{Root: pdk.Config("root")} }

func init() {
	pdk.Info("file-reader", "1.0.0")
	pdk.Tool("read_file", "Reads a text file of the granted folder.",
		func(_ context.Context, a ReadArgs) (pdk.ToolResult, error) {
			text, truncated, err := folder().ReadFile(a.Path, a.MaxBytes)
			if err != nil {
				return pdk.ToolResult{}, err
			}
			data, _ := json.Marshal(map[string]any{"path": a.Path, "bytes": len(text), "truncated": truncated})
			if truncated {
				text += "\n[truncated]"
			}
			return pdk.ToolResult{Content: text, Data: data}, nil
		}, pdk.Idempotent())
	pdk.Tool("list_dir", "Lists a folder of the granted folder: names, sizes, sub-folders with a trailing slash.",
		func(_ context.Context, a ListArgs) (pdk.ToolResult, error) {
			es, err := folder().ListDir(a.Path)
			if err != nil {
				return pdk.ToolResult{}, err
			}
			data, _ := json.Marshal(es)
			return pdk.ToolResult{Content: FormatListing(es), Data: data}, nil
		}, pdk.Idempotent())
}

func main() {}
