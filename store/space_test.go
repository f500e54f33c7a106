package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// refuseAfter makes b's disk look roomy for n more measures of its free
// space, then full; it returns the count of measures taken.
func refuseAfter(b *Badger, n int64) *atomic.Int64 {
	var asked atomic.Int64
	b.statFree = func(string) (int64, error) {
		if asked.Add(1) <= n {
			return 1 << 40, nil
		}
		return 0, nil
	}
	return &asked
}

// Every write the store makes asks its disk first, not only each group
// commit: an operation the commit goroutine runs alone (replacing a
// history, deleting one, moving the deadline of an event stream written
// before the expiry index) writes in
// transactions of its own, and each of them is refused past the floor, so
// no write reaches Badger's mapped files on a nearly full disk. Reads go
// on; once space returns the writes are taken.
func TestEveryWriteAsksTheDisk(t *testing.T) {
	ctx := context.Background()
	b, err := Open(Options{Dir: t.TempDir(), Memory: 64 << 20, MinFreeBytes: leastMinFree(MinMemTable)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	var msgs []loop.Message
	for i := range 20 {
		msgs = append(msgs, loop.Message{Role: loop.RoleUser, Content: "m" + strconv.Itoa(i)})
	}
	if err := b.Append(ctx, "c", msgs...); err != nil {
		t.Fatal(err)
	}
	// A stream written before the expiry index (each record with its
	// Badger TTL): moving its deadline later rewrites its records in
	// transactions of their own.
	legacyStream(t, b, "s", 300, expirySeconds(time.Now().Add(time.Hour)))
	refusedBefore := b.RefusedWrites()

	// The disk fills after one measure: the group commit's check (or,
	// for an operation taken into a batch already checked, its own first
	// transaction) passes, and the operation's next transaction asks
	// again and is refused. Without the check of each transaction the
	// operation would write on, and succeed.
	for _, c := range []struct {
		name  string
		write func() error
	}{
		{"replace", func() error { return b.Replace(ctx, "c", msgs[:1]) }},
		{"expire", func() error { return b.Events().Expire(ctx, "s", 2*time.Hour) }},
		{"delete", func() error { return b.Delete(ctx, "c") }},
	} {
		asked := refuseAfter(b, 1)
		if err := c.write(); !errors.Is(err, ErrNoSpace) {
			t.Fatalf("%s with the disk full after its first check: %v, want ErrNoSpace", c.name, err)
		}
		if n := asked.Load(); n < 2 {
			t.Fatalf("%s asked the disk %d times", c.name, n)
		}
	}
	if n := b.RefusedWrites() - refusedBefore; n != 3 {
		t.Fatalf("%d refused writes counted, want 3", n)
	}
	// Reads go on.
	if _, err := b.Recent(ctx, "c", 100); err != nil {
		t.Fatalf("a read with the disk full: %v", err)
	}
	if _, err := b.Events().Read(ctx, "s", 0, 10); err != nil {
		t.Fatalf("a read with the disk full: %v", err)
	}

	// Space returns.
	b.statFree = freeSpace
	if err := b.Replace(ctx, "c", msgs[:1]); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Recent(ctx, "c", 100); err != nil || len(got) != 1 {
		t.Fatalf("history after space returned: %d messages, %v; want 1", len(got), err)
	}
}

// Open refuses a store.minFreeBytes below Badger's own writes after the
// last accepted one (a SIGBUS at every start after a kill -9 near the
// floor), and a filesystem with less free space than opening writes (the
// tables of the write-ahead log it flushes): ErrNoSpace, nothing opened.
// With the check off (-1) neither applies.
func TestOpenRefusesWhatBadgerCannotWrite(t *testing.T) {
	mt := int64(MinMemTable) // the memtable of a 64 MiB budget
	if _, err := Open(Options{Dir: t.TempDir(), Memory: 64 << 20, MinFreeBytes: 16 << 20}); !errors.Is(err, loop.ErrInvalid) ||
		!strings.Contains(err.Error(), "store.minFreeBytes 16 MiB is below the least") {
		t.Fatalf("minFreeBytes of one memtable: %v, want refused", err)
	}
	b, err := Open(Options{Dir: t.TempDir(), Memory: 64 << 20, MinFreeBytes: leastMinFree(mt)})
	if err != nil {
		t.Fatalf("minFreeBytes at the least: %v", err)
	}
	_ = b.Close()

	defer func(f func(string) (int64, error)) { openStatFree = f }(openStatFree)
	dir := filepath.Join(t.TempDir(), "new", "data") // not there yet: its parent is measured
	openStatFree = func(string) (int64, error) { return mt - 1, nil }
	if _, err := Open(Options{Dir: dir, Memory: 64 << 20}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("open with less free than a memtable: %v, want ErrNoSpace", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "MANIFEST")); err == nil {
		t.Fatal("a refused open created the database")
	}
	b, err = Open(Options{Dir: dir, Memory: 64 << 20, MinFreeBytes: -1})
	if err != nil {
		t.Fatalf("open with the check off: %v", err)
	}
	_ = b.Close()
	// A write-ahead log to flush raises what opening needs.
	if err := os.WriteFile(filepath.Join(dir, "00009.mem"), make([]byte, 3<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := openNeeds(dir, mt); got < mt+3<<20 {
		t.Fatalf("open needs %d bytes with a 3 MiB log, want at least %d", got, mt+3<<20)
	}
	openStatFree = func(string) (int64, error) { return mt + 1<<20, nil }
	if err := checkOpenSpace(dir, mt, openStatFree); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("room for a memtable but not for the log's tables: %v, want ErrNoSpace", err)
	}
	openStatFree = func(string) (int64, error) { return mt + 4<<20, nil }
	if err := checkOpenSpace(dir, mt, openStatFree); err != nil {
		t.Fatalf("room for both: %v", err)
	}
}

// Below the floor where writes stop (half of minFreeBytes), the store's
// cleanup still deletes (conversation expiry, its durable index entries
// and emptied heads) while the reserve for deletes lasts (down to 3/8 of
// minFreeBytes), and new data is refused; below the reserve the cleanup is
// refused too. Before, every write was refused at the floor, so a full
// disk could never free itself.
func TestCleanupDeletesPassBelowTheFloor(t *testing.T) {
	ctx := context.Background()
	minFree := 2 * leastMinFree(MinMemTable)
	b, err := Open(Options{Dir: t.TempDir(), Memory: 64 << 20, MinFreeBytes: minFree, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	for c, at := range map[string]time.Time{"c1": time.Now(), "c2": time.Now(), "c3": time.Now().Add(2 * time.Hour)} {
		if err := b.SaveAgent(ctx, loop.AgentMetadata{ContextID: c, CreatedAt: at}); err != nil {
			t.Fatal(err)
		}
		if err := b.Append(ctx, c, loop.Message{Role: loop.RoleUser, Content: "hi"}); err != nil {
			t.Fatal(err)
		}
	}
	later := time.Now().Add(time.Hour) // c1 and c2 idle before it, c3 not

	b.statFree = func(string) (int64, error) { return minFree/2 - 1, nil } // past the floor
	if err := b.Append(ctx, "c1", loop.Message{Role: loop.RoleUser, Content: "more"}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("new data past the floor: %v, want ErrNoSpace", err)
	}
	if err := b.Writable(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Writable past the floor: %v", err)
	}
	if err := b.Deletable(); err != nil {
		t.Fatalf("Deletable past the floor, inside the reserve: %v", err)
	}
	gone, err := b.ExpireConversations(ctx, later)
	if err != nil || len(gone) != 2 {
		t.Fatalf("expiry past the floor: %v deleted, %v; want c1 and c2", gone, err)
	}
	if n, err := b.Count(ctx, "c1"); err != nil || n != 0 {
		t.Fatalf("c1 after its expiry: %d messages, %v", n, err)
	}

	b.statFree = func(string) (int64, error) { return minFree/2 - deleteReserve(minFree) - 1, nil } // the reserve used up
	if err := b.Deletable(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Deletable below the reserve: %v, want ErrNoSpace", err)
	}
	if gone, err := b.ExpireConversations(ctx, later.Add(2*time.Hour)); !errors.Is(err, ErrNoSpace) || len(gone) != 0 {
		t.Fatalf("expiry below the reserve: %v deleted, %v; want ErrNoSpace", gone, err)
	}
}

// The cap on the data folder (MaxBytes) lifts as soon as the space comes
// back: a folder at its cap because of a file that is then removed takes
// new work at the next Admit, not once the size sampled every spaceEvery
// has caught up. Before, Admit read that sample and refused for up to a
// second (plus the walk of the folder) after the space came back.
func TestCapLiftsAtOnce(t *testing.T) {
	dir := t.TempDir()
	b, err := Open(Options{Dir: dir, Memory: 64 << 20, MinFreeBytes: -1, MaxBytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if err := b.Admit(); err != nil {
		t.Fatalf("an empty store under its cap: %v", err)
	}
	filler := filepath.Join(dir, "operator-file")
	if err := os.WriteFile(filler, make([]byte, 40<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); b.Admit() == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) { // a hang guard
			t.Fatal("the cap never refused with the folder past it")
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := b.Admit(); err != nil {
		t.Fatalf("the first Admit once the space came back: %v", err)
	}
}
