package artifacts

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

var errFull = errors.New("storage full (test)")

// Config.Writable is asked before every write: a refused record write
// changes nothing, a blob refused before it starts or half-way through
// leaves no file behind and no part recorded, and reads go on. The
// artifact a refused write was for ends failed, with the reason (left
// building, it waited forever for writes that could not be taken), and
// its Writer sends that end to the client; writes are taken again once the
// check passes.
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
	var events []loop.Event
	w := NewWriter(d, Scope{TaskID: "t1", ContextID: "c1"}, func(e loop.Event) { events = append(events, e) })
	small := bytes.Repeat([]byte("a"), 100)
	big := bytes.Repeat([]byte("b"), 3*BlobCheckEvery+5)
	// fresh makes an artifact holding small, with writes allowed.
	fresh := func() Info {
		t.Helper()
		allow.Store(-1)
		info, err := w.Create(ctx, Spec{Kind: KindFile, Name: "f", Binary: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.AppendChunk(ctx, info.ID, small, false); err != nil {
			t.Fatal(err)
		}
		return info
	}
	// failedWith checks that the artifact ended failed by the refusal,
	// holding only small, with its end sent.
	failedWith := func(what string, info Info, err error) {
		t.Helper()
		if !errors.Is(err, errFull) || !errors.Is(err, ErrFailed) {
			t.Fatalf("%s: %v; want the refusal, the artifact failed", what, err)
		}
		got, gerr := d.Get(ctx, info.ID)
		if gerr != nil {
			t.Fatal(gerr)
		}
		if got.Status != StatusFailed || !strings.Contains(got.Error, errFull.Error()) ||
			got.Parts != 1 || got.Size != int64(len(small)) {
			t.Fatalf("%s: artifact %s (%q), %d parts, %d bytes; want failed with the reason, 1 part of %d bytes",
				what, got.Status, got.Error, got.Parts, got.Size, len(small))
		}
		last, ok := events[len(events)-1].(*loop.FileWrite)
		if !ok || last.ArtifactID != info.ID || !last.Complete || !strings.Contains(last.Error, errFull.Error()) {
			t.Fatalf("%s: last event %+v; want the artifact's end with the reason", what, events[len(events)-1])
		}
		if files := blobFiles(t, dir); len(files) != 0 {
			t.Fatalf("%s: refused blob writes left files: %v", what, files)
		}
		rc, _, err := d.Open(ctx, info.ID)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(b, small) {
			t.Fatalf("%s: read %d bytes after the refused write, want %d", what, len(b), len(small))
		}
	}
	// Refused outright: a record write, then a blob.
	info := fresh()
	if asked.Load() == 0 {
		t.Fatal("writes did not ask Writable")
	}
	allow.Store(0)
	_, err = w.AppendChunk(ctx, info.ID, small, false)
	failedWith("an inline append with writes refused", info, err)
	if _, err := w.Create(ctx, Spec{Kind: KindFile, Name: "g"}); !errors.Is(err, errFull) {
		t.Fatalf("create with writes refused: %v", err)
	}
	info = fresh()
	allow.Store(0)
	_, err = w.AppendChunk(ctx, info.ID, big, false)
	failedWith("a blob append with writes refused", info, err)
	// Refused half-way through the blob: the record's first transaction
	// (it finds the part too large to keep inline), the check before the
	// blob and the one after its first MiB pass, the next refuses.
	info = fresh()
	allow.Store(3)
	_, err = w.AppendChunk(ctx, info.ID, big, false)
	failedWith("a blob append refused half-way", info, err)

	// A write refused for what it asks (not the storage) leaves the
	// artifact building.
	info = fresh()
	if _, err := w.ReplaceChunk(ctx, info.ID, 5, small); !errors.Is(err, ErrPartRange) {
		t.Fatalf("replace of a missing part: %v", err)
	}
	if got, _ := d.Get(ctx, info.ID); got.Status != StatusBuilding {
		t.Fatalf("a request refused for itself left the artifact %s", got.Status)
	}

	// Writes taken again.
	if _, err := w.AppendChunk(ctx, info.ID, big, true); err != nil {
		t.Fatal(err)
	}
	if files := blobFiles(t, dir); len(files) != 1 {
		t.Fatalf("after an accepted blob write: files %v, want one", files)
	}
}

// The sweep of expired artifacts asks Config.Deletable, not Writable: past
// the floor where the store refuses writes, its deletes (the record marked
// as being deleted, its parts, its index keys) still pass while the
// store's reserve for deletes lasts, so a full disk can free itself. A
// delete asked by a client or a tool still asks Writable, and with
// Deletable refusing too the sweep removes nothing.
func TestSweepAsksDeletable(t *testing.T) {
	ctx := context.Background()
	clk := &clock{now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	var full, deletesFull atomic.Bool
	d := NewMemory(nil, Config{InlineMax: 10, Now: clk.Now,
		Writable: func() error {
			if full.Load() {
				return errFull
			}
			return nil
		},
		Deletable: func() error {
			if deletesFull.Load() {
				return errFull
			}
			return nil
		}})
	var ids []string
	for range 3 {
		f, err := d.Create(ctx, Spec{Kind: KindFile, TaskID: "old", ContextID: "c"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.AppendChunk(ctx, f.ID, []byte("this is over ten bytes"), true); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, f.ID)
	}
	if err := d.ExpireTask(ctx, "old", time.Hour); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Hour)
	full.Store(true)

	if err := d.Delete(ctx, ids[0]); !errors.Is(err, errFull) {
		t.Fatalf("a client's delete past the floor: %v, want refused", err)
	}
	deletesFull.Store(true)
	if n, err := d.Sweep(ctx); !errors.Is(err, errFull) || n != 0 {
		t.Fatalf("sweep with the reserve used up: %d removed, %v; want refused", n, err)
	}
	deletesFull.Store(false)
	if n, err := d.Sweep(ctx); err != nil || n != 3 {
		t.Fatalf("sweep past the floor: %d removed, %v; want 3", n, err)
	}
	var left int
	_ = d.kv.view(func(tx kvTxn) error {
		return tx.keys([]byte("art"), func([]byte) error { left++; return nil })
	})
	if left != 0 {
		t.Fatalf("%d keys left after the sweep", left)
	}
}
