package artifacts

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("source broke")
	}
	k := min(len(p), f.n)
	for i := range k {
		p[i] = 'x'
	}
	f.n -= k
	return k, nil
}

func TestLocalBlobsAtomic(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenLocal(LocalConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Put(ctxb, "art-1/a", strings.NewReader("first")); err != nil {
		t.Fatal(err)
	}
	// A Put that fails halfway leaves the old object and no temporary file.
	if _, err := l.Put(ctxb, "art-1/a", &failingReader{n: 100000}); err == nil || !strings.Contains(err.Error(), "source broke") {
		t.Fatalf("failing put: %v", err)
	}
	rc, err := l.Get(ctxb, "art-1/a")
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, rc); string(b) != "first" {
		t.Fatalf("object after a failed put: %q", b)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "art-1"))
	if len(entries) != 1 {
		t.Fatalf("folder holds %d entries, want only the object", len(entries))
	}
	// A cancelled Put writes nothing.
	ctx, cancel := context.WithCancel(ctxb)
	cancel()
	if _, err := l.Put(ctx, "art-1/b", strings.NewReader("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled put: %v", err)
	}
	if _, err := l.Get(ctxb, "art-1/b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("object of a cancelled put: %v", err)
	}
	for _, bad := range []string{"../x", "a/../../x", "/abs", "", "a//b", "a/./b"} {
		if _, err := l.Put(ctxb, bad, strings.NewReader("x")); err == nil {
			t.Fatalf("key %q accepted", bad)
		}
		if _, err := l.Get(ctxb, bad); err == nil || errors.Is(err, ErrNotFound) {
			t.Fatalf("get of key %q: %v", bad, err)
		}
	}
	if err := l.Delete(ctxb, "art-1/a"); err != nil {
		t.Fatal(err)
	}
	if err := l.Delete(ctxb, "art-1/a"); err != nil {
		t.Fatalf("deleting a missing object: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "art-1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("empty artifact folder kept: %v", err)
	}
	if _, err := OpenLocal(LocalConfig{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no folder: %v", err)
	}
}

func TestOpenDefaults(t *testing.T) {
	if _, err := Open(nil, nil, Config{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("nil db: %v", err)
	}
	mem, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	s, err := Open(mem, nil, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Blobs().(*MemoryBlobs); !ok {
		t.Fatalf("in-memory Badger got blobs %T", s.Blobs())
	}
	dir := t.TempDir()
	s, err = Open(mem, nil, Config{BlobDir: dir + "/blobs", InlineMax: 4})
	if err != nil {
		t.Fatal(err)
	}
	f := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t", ContextID: "c"}))
	must[Info](t)(s.AppendChunk(ctxb, f.ID, []byte("spilled"), true))
	if n := len(blobFiles(t, dir+"/blobs")); n != 1 {
		t.Fatalf("%d blob files in BlobDir", n)
	}
	// A large inline limit is lowered to what one Badger transaction holds.
	small, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil).WithMemTableSize(1 << 20).WithValueThreshold(150 << 10))
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	s, err = Open(small, nil, Config{InlineMax: 140 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if s.inlineMax > small.MaxBatchSize()/2 {
		t.Fatalf("inline limit %d over half the batch size %d", s.inlineMax, small.MaxBatchSize())
	}
	f = must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t", ContextID: "c", Binary: true}))
	must[Info](t)(s.AppendChunk(ctxb, f.ID, make([]byte, 140<<10), true))
	rc, _, err := s.Open(ctxb, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := io.Copy(io.Discard, rc); n != 140<<10 {
		t.Fatalf("read %d", n)
	}
}
