package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mountTmpfs mounts a tmpfs of size at dir (root only) for the test.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem (tmpfs) for the data folder needs root")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, b)
	}
	t.Cleanup(func() {
		if b, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, b)
		}
	})
}

// walBytes is the space Badger's write-ahead logs (.mem files) take.
func walBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	files, _ := filepath.Glob(filepath.Join(dir, "*.mem"))
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			n += allocated(fi)
		}
	}
	return n
}

// A disk filled by the store itself (a real tmpfs of 224 MiB) heals on its
// own once what filled it expires: past the floor where writes stop (half
// of minFreeBytes) the sweep of the expired event streams still deletes
// them (its writes only remove data), and the sweeper then gives their
// space back (memtables flushed, level 0 compacted, the value log files
// rewritten), until the store takes new work again. Before, the sweep's
// deletes were refused like any write, and even deletes that passed gave
// nothing back: their tombstones stayed in a memtable that never filled,
// over one value log file of 1 GiB that the value log GC never rewrites.
// The test also measures what a sweep's deletes write (the reserve for
// deletes below the floor, deleteReserve).
func TestFullDiskCleanupGivesSpaceBack(t *testing.T) {
	ctx := context.Background()
	mnt := filepath.Join(t.TempDir(), "small")
	mountTmpfs(t, mnt, "224m")
	dir := filepath.Join(mnt, "data")
	b, err := Open(Options{Dir: dir, Memory: 64 << 20, MinFreeBytes: 160 << 20, SweepInterval: -1, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })

	// Streams of 40 events of 70 KB (past the value threshold: in the
	// value log), each expiring a second after it is written, until the
	// store refuses a write.
	big := []byte(strings.Repeat("x", 70000))
	events := 0
	for s := 0; ; s++ {
		stream := fmt.Sprintf("task/%d", s)
		var err error
		for range 40 {
			if _, err = b.Events().Append(ctx, stream, big); err != nil {
				break
			}
			events++
		}
		if err != nil {
			if !errors.Is(err, ErrNoSpace) {
				t.Fatal(err)
			}
			break
		}
		if err := b.Events().Expire(ctx, stream, time.Second); err != nil {
			t.Fatal(err)
		}
		if s > 1000 {
			t.Fatal("the store never refused a write")
		}
	}
	full := b.Space()
	t.Logf("%d events written, then refused with %d MiB free", events, full.Free>>20)
	if err := b.Admit(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("new work with the disk full: %v, want ErrNoSpace", err)
	}
	time.Sleep(2100 * time.Millisecond) // past the streams' deadline (Unix seconds, rounded up)
	if b.Space().Free >= full.Free && b.Space().Free >= b.minFree/2 {
		t.Fatal("space came back without the cleanup")
	}

	// The sweep deletes past the floor.
	wal := walBytes(t, dir)
	n, err := b.SweepStreams(ctx)
	if err != nil {
		t.Fatalf("sweep of expired streams with the disk full: %v (%d keys deleted)", err, n)
	}
	if n < events/2 {
		t.Fatalf("the sweep deleted %d keys of %d events", n, events)
	}
	t.Logf("the sweep deleted %d keys: %d KiB of write-ahead log (%d bytes a key)", n, (walBytes(t, dir)-wal)>>10, (walBytes(t, dir)-wal)/int64(n))
	// Still refused: new data, until the space is back.
	if _, err := b.Events().Append(ctx, "new", big); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("new data past the floor after the sweep: %v, want ErrNoSpace", err)
	}

	// The sweeper's reclaim gives the space back: new work is taken.
	if !b.reclaimIfShort() {
		t.Fatal("no reclaim with the disk short of minFreeBytes")
	}
	after := b.Space()
	t.Logf("free: %d MiB full, %d MiB after the reclaim", full.Free>>20, after.Free>>20)
	if err := b.Admit(); err != nil {
		t.Fatalf("new work after the reclaim: %v", err)
	}
	if _, err := b.Events().Append(ctx, "new", big); err != nil {
		t.Fatalf("new data after the reclaim: %v", err)
	}
	if b.reclaimIfShort() {
		t.Fatal("a reclaim with the disk no longer short")
	}
}
