package host

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/artifacts"
	"github.com/looopy-go/looopy/store"
)

// Artifacts live in the host's Badger database (one database, one value-log
// GC, values from store.ValueThreshold in the value log); those an earlier version kept in
// a database of their own under <data>/artifacts are moved in at start,
// blobs included.
func TestArtifactsShareTheHostDatabase(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()

	// The earlier layout: a separate Badger in <data>/artifacts.
	oldDB, err := badger.Open(badger.DefaultOptions(filepath.Join(dataDir, "artifacts")).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	oldArts, err := artifacts.Open(oldDB, nil, artifacts.Config{})
	if err != nil {
		t.Fatal(err)
	}
	small := []byte("hello, artifact")
	big := bytes.Repeat([]byte("0123456789abcdef"), (2<<20)/16) // over the inline size: a blob
	info, err := oldArts.Create(ctx, artifacts.Spec{Kind: artifacts.KindFile, Binary: true, TaskID: "t", ContextID: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oldArts.AppendChunk(ctx, info.ID, small, false); err != nil {
		t.Fatal(err)
	}
	if _, err := oldArts.AppendChunk(ctx, info.ID, big, true); err != nil {
		t.Fatal(err)
	}
	_ = oldArts.Close()
	if err := oldDB.Close(); err != nil {
		t.Fatal(err)
	}

	m := &Main{log: slog.New(slog.DiscardHandler)}
	t.Cleanup(func() { _ = m.closeAll() })
	b, _, arts, _, err := m.openBackend(ctx, Config{}, dataDir)
	if err != nil {
		t.Fatal(err)
	}
	rc, _, err := arts.Open(ctx, info.ID)
	if err != nil {
		t.Fatalf("the earlier version's artifact: %v", err)
	}
	got, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil || !bytes.Equal(got, append(append([]byte{}, small...), big...)) {
		t.Fatalf("the earlier version's artifact reads back %d bytes, %v", len(got), err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "artifacts", "MANIFEST")); !os.IsNotExist(err) {
		t.Fatalf("the old artifact database is still there: %v", err)
	}

	// One database: the artifact's record is in the store's Badger, which
	// keeps values from store.ValueThreshold (an artifact's full chunk)
	// in its value log.
	db := b.(*store.Badger).DB()
	if vt := db.Opts().ValueThreshold; vt != store.ValueThreshold {
		t.Fatalf("value threshold %d, want %d", vt, store.ValueThreshold)
	}
	err = db.View(func(txn *badger.Txn) error {
		_, err := txn.Get([]byte("art/" + info.ID + "/meta"))
		return err
	})
	if err != nil {
		t.Fatalf("the artifact's record is not in the host's database: %v", err)
	}
}
