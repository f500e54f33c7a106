package artifacts

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
)

var errFull = errors.New("storage full (test)")

// Config.Writable is asked before every write: a refused record write
// changes nothing, a blob refused before it starts or half-way through
// leaves no file behind and no part recorded, reads go on, and writes are
// taken again once the check passes.
func TestWritesAskWritableFirst(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	blobs, err := OpenLocal(LocalConfig{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	// allow is how many more checks pass (-1: all).
	var allow, asked atomic.Int64
	allow.Store(-1)
	check := func() error {
		asked.Add(1)
		if n := allow.Load(); n >= 0 {
			if n == 0 {
				return errFull
			}
			allow.Add(-1)
		}
		return nil
	}
	d := NewMemory(blobs, Config{InlineMax: 1 << 10, Writable: check})
	info, err := d.Create(ctx, Spec{Kind: KindFile, TaskID: "t1", ContextID: "c1", Name: "f", Binary: true})
	if err != nil {
		t.Fatal(err)
	}
	small := bytes.Repeat([]byte("a"), 100)
	if _, err := d.AppendChunk(ctx, info.ID, small, false); err != nil {
		t.Fatal(err)
	}
	if asked.Load() == 0 {
		t.Fatal("writes did not ask Writable")
	}

	// Refused outright: a record write, then a blob.
	allow.Store(0)
	if _, err := d.AppendChunk(ctx, info.ID, small, false); !errors.Is(err, errFull) {
		t.Fatalf("inline append with writes refused: %v", err)
	}
	if _, err := d.Create(ctx, Spec{Kind: KindFile, TaskID: "t1", ContextID: "c1", Name: "g"}); !errors.Is(err, errFull) {
		t.Fatalf("create with writes refused: %v", err)
	}
	big := bytes.Repeat([]byte("b"), 3*BlobCheckEvery+5)
	if _, err := d.AppendChunk(ctx, info.ID, big, false); !errors.Is(err, errFull) {
		t.Fatalf("blob append with writes refused: %v", err)
	}
	// Refused half-way through the blob: the record's first transaction
	// (it finds the part too large to keep inline), the check before the
	// blob and the one after its first MiB pass, the next refuses.
	allow.Store(3)
	if _, err := d.AppendChunk(ctx, info.ID, big, false); !errors.Is(err, errFull) {
		t.Fatalf("blob append refused half-way: %v", err)
	}
	if files := blobFiles(t, dir); len(files) != 0 {
		t.Fatalf("refused blob writes left files: %v", files)
	}

	// Reads go on, and show only what was taken.
	got, err := d.Get(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Parts != 1 || got.Size != int64(len(small)) {
		t.Fatalf("after refused writes: %d parts, %d bytes; want 1, %d", got.Parts, got.Size, len(small))
	}
	rc, _, err := d.Open(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(b, small) {
		t.Fatalf("read %d bytes after refused writes, want %d", len(b), len(small))
	}

	// Writes taken again.
	allow.Store(-1)
	if _, err := d.AppendChunk(ctx, info.ID, big, true); err != nil {
		t.Fatal(err)
	}
	if files := blobFiles(t, dir); len(files) != 1 {
		t.Fatalf("after an accepted blob write: files %v, want one", files)
	}
}
