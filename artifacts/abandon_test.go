package artifacts

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
)

// An artifact left building when its task ended (or its process died)
// ends failed with the reason, and what it held is removed: its inline
// parts and its blob files. Finished artifacts and those still written
// are not touched. Before, it stayed building for ever, holding its parts.
func TestAbandonedArtifactsEndFailed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	blobs, err := OpenLocal(LocalConfig{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	d := NewMemory(blobs, Config{InlineMax: 1 << 10})
	small := bytes.Repeat([]byte("a"), 100)
	big := bytes.Repeat([]byte("b"), 4<<10) // a blob
	mk := func(task string, done bool) Info {
		t.Helper()
		info, err := d.Create(ctx, Spec{Kind: KindFile, TaskID: task, ContextID: "c", Binary: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range [][]byte{small, big} {
			if _, err := d.AppendChunk(ctx, info.ID, p, false); err != nil {
				t.Fatal(err)
			}
		}
		if done {
			if _, err := d.Complete(ctx, info.ID); err != nil {
				t.Fatal(err)
			}
		}
		return info
	}
	left := mk("t1", false)
	done := mk("t1", true)
	other := mk("t2", false)
	if n := len(blobFiles(t, dir)); n != 3 {
		t.Fatalf("%d blob files, want 3", n)
	}

	n, err := d.AbandonTask(ctx, "t1", "abandoned: its task ended while it was being written")
	if err != nil || n != 1 {
		t.Fatalf("abandon task t1: %d, %v; want 1", n, err)
	}
	got, err := d.Get(ctx, left.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != StatusFailed || got.Error != "abandoned: its task ended while it was being written" || got.Parts != 0 || got.Size != 0 {
		t.Fatalf("abandoned artifact: %s (%q), %d parts, %d bytes; want failed with the reason, nothing held", got.Status, got.Error, got.Parts, got.Size)
	}
	rc, _, err := d.Open(ctx, left.ID)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(rc); len(b) != 0 {
		t.Fatalf("abandoned artifact serves %d bytes", len(b))
	}
	rc.Close()
	if got, _ := d.Get(ctx, done.ID); got.Status != StatusComplete || got.Size != int64(len(small)+len(big)) {
		t.Fatalf("a complete artifact of the task: %s, %d bytes", got.Status, got.Size)
	}
	if got, _ := d.Get(ctx, other.ID); got.Status != StatusBuilding {
		t.Fatalf("another task's artifact: %s", got.Status)
	}
	if n := len(blobFiles(t, dir)); n != 2 {
		t.Fatalf("%d blob files after the abandon, want 2 (the complete one's, t2's)", n)
	}

	// The sweep asks which are dead.
	n, err = d.AbandonBuilding(ctx, func(i Info) bool { return i.TaskID == "t3" }, "x")
	if err != nil || n != 0 {
		t.Fatalf("sweep with no dead artifact: %d, %v", n, err)
	}
	n, err = d.AbandonBuilding(ctx, func(i Info) bool { return i.TaskID == "t2" }, "abandoned: the process writing it stopped")
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v; want 1", n, err)
	}
	if got, _ := d.Get(ctx, other.ID); got.Status != StatusFailed || got.Parts != 0 {
		t.Fatalf("t2's artifact after the sweep: %s, %d parts", got.Status, got.Parts)
	}
	if n := len(blobFiles(t, dir)); n != 1 {
		t.Fatalf("%d blob files after the sweep, want 1", n)
	}
	// A write to an abandoned artifact is refused.
	if _, err := d.AppendChunk(ctx, left.ID, small, false); err == nil {
		t.Fatal("a write to an abandoned artifact was taken")
	}
}

// A reader of an artifact that is ended failed (emptied) or deleted while
// it is read: one opened while the artifact was building ends where the
// parts end, without an error (its status said it was not whole; before,
// the error cut the HTTP download before its headers); one opened on a
// complete artifact gets an error, never a cut copy taken for the whole.
func TestReadWhileEmptied(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	blobs, err := OpenLocal(LocalConfig{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	d := NewMemory(blobs, Config{InlineMax: 1 << 10})
	small := bytes.Repeat([]byte("a"), 100)
	big := bytes.Repeat([]byte("b"), 4<<10) // a blob
	mk := func(task string) Info {
		t.Helper()
		info, err := d.Create(ctx, Spec{Kind: KindFile, TaskID: task, ContextID: "c", Binary: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range [][]byte{small, big} {
			if _, err := d.AppendChunk(ctx, info.ID, p, false); err != nil {
				t.Fatal(err)
			}
		}
		return info
	}
	// Building: the first part is read, then the artifact is abandoned.
	building := mk("t1")
	rc, info, err := d.Open(ctx, building.ID)
	if err != nil || info.Status != StatusBuilding {
		t.Fatalf("open: %s, %v", info.Status, err)
	}
	first := make([]byte, len(small))
	if _, err := io.ReadFull(rc, first); err != nil {
		t.Fatal(err)
	}
	if n, err := d.AbandonTask(ctx, "t1", "abandoned"); err != nil || n != 1 {
		t.Fatalf("abandon: %d, %v", n, err)
	}
	rest, err := io.ReadAll(rc)
	if err != nil || len(rest) != 0 {
		t.Fatalf("read of the rest of an emptied building artifact: %d bytes, %v; want the end, no error", len(rest), err)
	}
	rc.Close()

	// Complete: deleted between two parts.
	done := mk("t2")
	if _, err := d.Complete(ctx, done.ID); err != nil {
		t.Fatal(err)
	}
	rc, _, err = d.Open(ctx, done.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(rc, first); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(ctx, done.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(rc); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read of a complete artifact deleted while read: %v; want not found", err)
	}
	rc.Close()
}
