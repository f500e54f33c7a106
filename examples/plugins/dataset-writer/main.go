//go:build wasip1

// Command dataset-writer is a tool plugin that writes a generated dataset
// artifact to the task through the artifact_write host function.
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

func main() {}
