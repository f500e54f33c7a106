package artifacts_test

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/looopy-go/looopy/artifacts"
	"github.com/looopy-go/looopy/loop"
)

// A tool (or a plugin through Writer.ApplyJSON) builds a dataset; each
// write is announced as a dataset-write event. The host serves the
// artifact with Export, as GET /artifacts/{id}?format=csv does.
func Example() {
	ctx := context.Background()
	store := artifacts.NewMemory(nil, artifacts.Config{})
	emit := func(e loop.Event) {
		if dw, ok := e.(*loop.DatasetWrite); ok {
			fmt.Printf("event %s index=%d rows=%d complete=%v\n", dw.Kind, dw.Index, len(dw.Rows), dw.Complete)
		}
	}
	w := artifacts.NewWriter(store, artifacts.Scope{ContextID: "ctx-1", TaskID: "task-1", Owner: "alice"}, emit)

	info, err := w.Create(ctx, artifacts.Spec{ID: "sales-1", Kind: artifacts.KindDataset, Name: "sales", Schema: &loop.DatasetSchema{
		Columns: []loop.DatasetColumn{{Name: "region", Type: "string"}, {Name: "total", Type: "number"}}}})
	if err != nil {
		panic(err)
	}
	if _, err := w.AppendRows(ctx, info.ID, []artifacts.Row{{"region": "north", "total": 12.5}}, false); err != nil {
		panic(err)
	}
	_, err = w.AppendRows(ctx, info.ID, []artifacts.Row{{"region": "south", "total": "n/a"}}, true)
	fmt.Println("refused:", err)
	if _, err := w.ApplyJSON(ctx, []byte(`{"op":"append","artifactId":"`+info.ID+`","csv":"region,total\nsouth,3\n","last":true}`)); err != nil {
		panic(err)
	}

	// The host's handler: look up, check the reader, stream.
	rc, mime, got, err := artifacts.Export(ctx, store, info.ID, artifacts.FormatCSV)
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	fmt.Println(mime, got.Status, got.ReadableBy("alice"), got.ReadableBy("bob"))
	_, _ = io.Copy(os.Stdout, rc)
	// Output:
	// event dataset-write index=0 rows=1 complete=false
	// refused: append rows to artifact "sales-1": row 0 (dataset row 1): column "total": want a number, got "n/a"
	// event dataset-write index=1 rows=1 complete=true
	// text/csv; charset=utf-8 complete true false
	// region,total
	// north,12.5
	// south,3
}
