package host

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/looopy-go/looopy/artifacts"
)

// BenchmarkArtifactReadAsHostRuns streams a 64 MiB file artifact (64 KiB
// chunks) from the artifact store exactly as the host opens it (Badger
// backend, data on disk), to compare with the artifacts package's own
// benchmarks (docs/PERFORMANCE.md).
func BenchmarkArtifactReadAsHostRuns(b *testing.B) {
	ctx := context.Background()
	// The folder first: cleanups run last-registered first, and Badger
	// retries a memtable flush into a removed folder forever.
	dir := b.TempDir()
	m := &Main{log: slog.New(slog.DiscardHandler)}
	b.Cleanup(func() { _ = m.closeAll() })
	_, _, arts, _, err := m.openBackend(ctx, Config{}, dir)
	if err != nil {
		b.Fatal(err)
	}
	const total = 64 << 20
	chunk := make([]byte, 64<<10)
	info, err := arts.Create(ctx, artifacts.Spec{Kind: artifacts.KindFile, Binary: true, TaskID: "t", ContextID: "c"})
	if err != nil {
		b.Fatal(err)
	}
	for i := range total / len(chunk) {
		chunk[0] = byte(i)
		if _, err := arts.AppendChunk(ctx, info.ID, chunk, false); err != nil {
			b.Fatal(err)
		}
	}
	buf := make([]byte, 64<<10)
	b.SetBytes(total)
	b.ReportAllocs()
	for b.Loop() {
		rc, _, err := arts.Open(ctx, info.ID)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{rc}, buf)
		_ = rc.Close()
		if err != nil || n != total {
			b.Fatalf("read %d: %v", n, err)
		}
	}
}
