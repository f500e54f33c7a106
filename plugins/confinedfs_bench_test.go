package plugins

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/looopy-go/looopy/loop"
)

// BenchmarkFileReadCall measures a file-reading tool call (the file-reader
// example's read_file of a 4 KiB file in a read-only grant) with the
// confined file system every grant gets, next to wazero's own directory
// mount that the host used before (which follows links out of the grant).
// It needs the example built: make plugins-go.
func BenchmarkFileReadCall(b *testing.B) {
	wasm := filepath.Join("..", "examples", "plugins", "file-reader", "file-reader.wasm")
	if _, err := os.Stat(wasm); err != nil {
		b.Fatalf("%v (build the Go example plugins first: make plugins-go)", err)
	}
	root := b.TempDir()
	granted := filepath.Join(root, "granted")
	if err := os.MkdirAll(filepath.Join(granted, "docs"), 0o755); err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat("0123456789abcdef", 256)
	if err := os.WriteFile(filepath.Join(granted, "docs", "notes.txt"), []byte(text), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"confined", "wazero-dirmount"} {
		b.Run(mode, func(b *testing.B) {
			if mode == "wazero-dirmount" {
				mountGrants = func(roots []*grantRoot, _ *openFiles) wazero.FSConfig {
					cfg := wazero.NewFSConfig()
					for _, r := range roots {
						cfg = cfg.WithReadOnlyDirMount(r.root.Name(), r.guest)
					}
					return cfg
				}
				defer func() { mountGrants = fsConfig }()
			}
			r := newRegistry(b, Config{Policy: Policy{PathRoots: []string{root}}})
			pd := install(b, b.TempDir(), "file-reader", wasm, func(m map[string]any) {
				caps(m)["allowedPaths"] = []map[string]any{{"path": granted, "readOnly": true}}
				m["config"] = map[string]any{"root": granted}
			})
			if _, err := r.Load(context.Background(), pd); err != nil {
				b.Fatal(err)
			}
			c := call("read_file", `{"path":"docs/notes.txt"}`)
			env := &loop.ToolEnv{ContextID: "ctx", TaskID: "task"}
			b.ReportAllocs()
			loopCPU(b, func() {
				res, err := r.Call(context.Background(), c, env)
				if err != nil || res.IsError || res.Content != text {
					b.Fatal(res.Content, err)
				}
			})
		})
	}
}
