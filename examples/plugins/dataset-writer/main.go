//go:build wasip1

// Command dataset-writer is a tool plugin that writes a generated dataset
// (make_dataset) or binary file (make_file) artifact to the task through
// the artifact_write host function.
package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/looopy-go/looopy/pdk"
)

// MakeArgs are the arguments of make_dataset.
type MakeArgs struct {
	Name string `json:"name" desc:"the dataset's name"`
	Rows int    `json:"rows" desc:"how many rows to generate (1 to 100000)"`
}

func init() {
	pdk.Info("dataset-writer", "1.0.0")
	pdk.Tool("make_dataset", "Generates a dataset (columns id, label, square, even) and stores it as an artifact of the task; returns the artifact id.",
		func(ctx context.Context, a MakeArgs) (pdk.ToolResult, error) {
			write := func(w *pdk.ArtifactWrite) (string, error) { return pdk.WriteArtifact(ctx, w) }
			progress := func(done, total int) {
				_ = pdk.Progress(ctx, float64(done)/float64(total), fmt.Sprintf("%d of %d rows", done, total))
			}
			id, err := Write(a.Name, a.Rows, write, progress)
			if err != nil {
				return pdk.ToolResult{}, err
			}
			data, _ := json.Marshal(map[string]any{"artifactId": id, "rows": a.Rows})
			return pdk.ToolResult{Content: fmt.Sprintf("dataset %q with %d rows written as artifact %s", a.Name, a.Rows, id), Data: data}, nil
		})
}

// FileArgs are the arguments of make_file.
type FileArgs struct {
	Name  string `json:"name" desc:"the file's name"`
	Bytes int    `json:"bytes" desc:"how many bytes to generate (1 to 1048576)"`
}

func init() {
	pdk.Tool("make_file", "Generates a binary file (every byte value, in a fixed pattern) and stores it as a file artifact of the task; returns the artifact id.",
		func(ctx context.Context, a FileArgs) (pdk.ToolResult, error) {
			id, err := WriteFile(a.Name, a.Bytes, func(w *pdk.ArtifactWrite) (string, error) { return pdk.WriteArtifact(ctx, w) })
			if err != nil {
				return pdk.ToolResult{}, err
			}
			data, _ := json.Marshal(map[string]any{"artifactId": id, "bytes": a.Bytes})
			return pdk.ToolResult{Content: fmt.Sprintf("file %q with %d bytes written as artifact %s", a.Name, a.Bytes, id), Data: data}, nil
		})
}

func main() {}
