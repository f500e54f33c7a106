package store

import (
	"context"
	"errors"
	"strconv"
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
	b, err := Open(Options{Dir: t.TempDir(), MinFreeBytes: 1 << 20})
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
