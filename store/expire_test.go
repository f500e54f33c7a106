package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
)

// openSweepless opens a store in dir whose sweeper never runs on its own:
// the tests call SweepStreams.
func openSweepless(t *testing.T, dir string, tune func(badger.Options) badger.Options) *Badger {
	t.Helper()
	b, err := Open(Options{Dir: dir, SweepInterval: -1, Tune: tune})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// rawKeys counts the keys under prefix as Badger holds them (records
// hidden by a Badger TTL are not counted; deleted ones are not either).
func rawKeys(t *testing.T, b *Badger, prefix string) int {
	t.Helper()
	n := 0
	err := b.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// recordTTLs returns the Badger expiry of each record of a stream and of
// its head (0: none).
func recordTTLs(t *testing.T, b *Badger, stream string) (records []uint64, head uint64) {
	t.Helper()
	prefix := evtPrefix(stream)
	err := b.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			records = append(records, it.Item().ExpiresAt())
		}
		item, err := txn.Get(evtHeadKey(stream))
		if err != nil {
			return err
		}
		head = item.ExpiresAt()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return records, head
}

func appendN(t *testing.T, b *Badger, stream string, n int) {
	t.Helper()
	recs := make([][]byte, n)
	for i := range recs {
		recs[i] = []byte(stream + "-" + strconv.Itoa(i+1))
	}
	for len(recs) > 0 {
		k := min(len(recs), 500)
		if _, err := b.Events().Append(context.Background(), stream, recs[:k]...); err != nil {
			t.Fatal(err)
		}
		recs = recs[k:]
	}
}

func wantStream(t *testing.T, b *Badger, stream string, want ...string) {
	t.Helper()
	wantStreamAt(t, b, stream, 1, uint64(len(want)), want...)
}

// wantStreamAt: the records of stream are want, from seq first on, and its
// last seq is last (an expired stream keeps it).
func wantStreamAt(t *testing.T, b *Badger, stream string, first, last uint64, want ...string) {
	t.Helper()
	ctx := context.Background()
	got, err := b.Events().Read(ctx, stream, 0, 0)
	if err != nil {
		t.Fatalf("read %s: %v", stream, err)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", stream, len(got), len(want))
	}
	for i, r := range got {
		if string(r.Data) != want[i] || r.Seq != first+uint64(i) {
			t.Fatalf("%s: record %d = %d %q, want %d %q", stream, i, r.Seq, r.Data, first+uint64(i), want[i])
		}
	}
	if got, err := b.Events().Last(ctx, stream); err != nil || got != last {
		t.Fatalf("%s: Last = %d, %v; want %d", stream, got, err, last)
	}
}

// rawHead returns a stream's head as stored.
func rawHead(t *testing.T, b *Badger, stream string) head {
	t.Helper()
	var h head
	err := b.db.View(func(txn *badger.Txn) error {
		var err error
		h, _, err = readHead(txn, evtHeadKey(stream))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestExpireIsOneSmallWrite: the expiry of a long stream writes its head
// and one index entry, in one commit shared with the writes queued with
// it; its records are not rewritten (they carry no TTL of their own).
func TestExpireIsOneSmallWrite(t *testing.T) {
	b := openSweepless(t, t.TempDir(), nil)
	ctx := context.Background()
	appendN(t, b, "long", 3000)
	commits, muts := b.Commits(), b.Mutations()
	lo := expirySeconds(time.Now().Add(time.Hour))
	if err := b.Events().Expire(ctx, "long", time.Hour); err != nil {
		t.Fatal(err)
	}
	hi := expirySeconds(time.Now().Add(time.Hour))
	if n := b.Commits() - commits; n != 1 {
		t.Fatalf("Expire of 3000 records took %d commits, want 1", n)
	}
	if n := b.Mutations() - muts; n != 2 {
		t.Fatalf("Expire of 3000 records wrote %d keys, want 2 (head and index entry)", n)
	}
	recs, headTTL := recordTTLs(t, b, "long")
	if h := rawHead(t, b, "long"); len(recs) != 3000 || headTTL != 0 || h.b < lo || h.b > hi {
		t.Fatalf("%d records, head deadline %d, head Badger TTL %d (the head outlives the records: none)", len(recs), h.b, headTTL)
	}
	for i, e := range recs {
		if e != 0 {
			t.Fatalf("record %d was given a TTL (%d)", i+1, e)
		}
	}
	if n := rawKeys(t, b, pfxEvtSweep); n != 1 {
		t.Fatalf("%d expiry index entries, want 1", n)
	}
	// Moving the deadline replaces the entry: one entry per stream.
	muts = b.Mutations()
	if err := b.Events().Expire(ctx, "long", 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if n := b.Mutations() - muts; n != 3 {
		t.Fatalf("a second Expire wrote %d keys, want 3 (head, entry, the old entry's removal)", n)
	}
	if n := rawKeys(t, b, pfxEvtSweep); n != 1 {
		t.Fatalf("%d expiry index entries after the deadline moved, want 1", n)
	}
	if got, err := b.Events().Read(ctx, "long", 2990, 0); err != nil || len(got) != 10 {
		t.Fatalf("Read of an expiring stream: %d records, %v", len(got), err)
	}
}

// TestExpiriesShareCommit: expiries of many streams queued together with
// appends are made durable by one transaction.

// laterLen is how many writes are queued to ride with the next batch.
func (b *Badger) laterLen() int {
	b.laterMu.Lock()
	defer b.laterMu.Unlock()
	return len(b.later)
}

func TestExpiriesShareCommit(t *testing.T) {
	b := openSweepless(t, t.TempDir(), nil)
	ctx := context.Background()
	const streams = 16
	for i := range streams {
		appendN(t, b, fmt.Sprint("s-", i), 100)
	}
	release := make(chan struct{})
	started := make(chan struct{})
	blocker := make(chan error, 1)
	go func() {
		blocker <- b.write(ctx, &writeOp{run: func() error {
			close(started)
			<-release
			return nil
		}})
	}()
	<-started
	var wg sync.WaitGroup
	errs := make(chan error, 2*streams)
	for i := range streams {
		wg.Add(2)
		go func() {
			defer wg.Done()
			errs <- b.Events().Expire(ctx, fmt.Sprint("s-", i), time.Hour)
		}()
		go func() {
			defer wg.Done()
			_, err := b.Events().Append(ctx, fmt.Sprint("other-", i), []byte("e"))
			errs <- err
		}()
	}
	// The appends wait in the queue of writes, the expiries in the queue
	// of those that ride with the next batch (writeLater).
	deadline := time.Now().Add(time.Minute)
	for len(b.ops) < streams || b.laterLen() < streams {
		if time.Now().After(deadline) {
			t.Fatalf("only %d appends and %d expiries of %d queued", len(b.ops), b.laterLen(), streams)
		}
		time.Sleep(time.Millisecond)
	}
	before := b.commits.Load()
	close(release)
	if err := <-blocker; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := b.commits.Load() - before; n != 1 {
		t.Fatalf("%d expiries and %d appends took %d commits, want 1", streams, streams, n)
	}
	if n := rawKeys(t, b, pfxEvtSweep); n != streams {
		t.Fatalf("%d expiry index entries, want %d", n, streams)
	}
}

// TestSweepDeletesExpiredStreams: once a stream's deadline has passed its
// records are gone for readers at once, they stay in Badger until the
// sweep, and the sweep deletes them all (records, index entry), many
// streams per write, and nothing of the streams that live on. The head
// stays with the stream's last seq.
func TestSweepDeletesExpiredStreams(t *testing.T) {
	b := openSweepless(t, t.TempDir(), nil)
	ctx := context.Background()
	for i := range 8 {
		appendN(t, b, fmt.Sprint("now-", i), 300)
	}
	appendN(t, b, "soon", 50)
	appendN(t, b, "later", 40)
	if n := rawKeys(t, b, pfxEvt+"soon/"); n != 50 {
		t.Fatal(n)
	}
	appendN(t, b, "kept", 30)
	for i := range 8 {
		if err := b.Events().Expire(ctx, fmt.Sprint("now-", i), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Events().Expire(ctx, "later", time.Hour); err != nil {
		t.Fatal(err)
	}
	wantStreamAt(t, b, "now-3", 0, 300)
	if n := rawKeys(t, b, pfxEvt+"now-3/"); n != 300 {
		t.Fatalf("before the sweep: %d records of an expired stream in Badger, want 300 (the test would prove nothing)", n)
	}
	commits := b.Commits()
	n, err := b.SweepStreams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 8*300 {
		t.Fatalf("the sweep deleted %d keys, want %d", n, 8*300)
	}
	if c := b.Commits() - commits; c != 3 { // 2,400 keys in writes of at most sweepChunk (1024)
		t.Fatalf("the sweep took %d commits, want 3", c)
	}
	for i := range 8 {
		if n := rawKeys(t, b, pfxEvt+fmt.Sprint("now-", i)+"/"); n != 0 {
			t.Fatalf("now-%d: %d records left after the sweep", i, n)
		}
	}
	// "later" (1 h) waits for its deadline; "soon" (1 s) is swept
	// once its deadline passed.
	if n := rawKeys(t, b, pfxEvtSweep); n != 1 {
		t.Fatalf("%d expiry index entries left, want 1", n)
	}
	if err := b.Events().Expire(ctx, "soon", time.Second); err != nil {
		t.Fatal(err)
	}
	guard := time.Now().Add(30 * time.Second)
	for rawKeys(t, b, pfxEvt+"soon/") != 0 {
		if time.Now().After(guard) {
			t.Fatal("a stream of ttl 1s not swept after 30s")
		}
		time.Sleep(200 * time.Millisecond)
		if _, err := b.SweepStreams(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wantStreamAt(t, b, "soon", 0, 50)
	if h := rawHead(t, b, "soon"); h != (head{a: 50, c: 50}) {
		t.Fatalf("the head of a swept stream is %+v, want its last seq 50 kept as its floor", h)
	}
	if n := rawKeys(t, b, pfxEvt+"later/"); n != 40 {
		t.Fatalf("a stream expiring in an hour has %d records, want 40", n)
	}
	want := make([]string, 30)
	for i := range want {
		want[i] = "kept-" + strconv.Itoa(i+1)
	}
	wantStream(t, b, "kept", want...)
	if n := rawKeys(t, b, pfxEvtSweep); n != 1 {
		t.Fatalf("%d expiry index entries left, want 1 (later's)", n)
	}
}

// TestSweepSparesStreamAppendedAgain: a stream appended to after it
// expired continues after its last seq; the sweep deletes the old records
// and none of the new.
func TestSweepSparesStreamAppendedAgain(t *testing.T) {
	b := openSweepless(t, t.TempDir(), nil)
	ctx := context.Background()
	appendN(t, b, "s", 10)
	if err := b.Events().Expire(ctx, "s", 0); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"new-1", "new-2", "new-3"} {
		if _, err := b.Events().Append(ctx, "s", []byte(r)); err != nil {
			t.Fatal(err)
		}
	}
	wantStreamAt(t, b, "s", 11, 13, "new-1", "new-2", "new-3")
	if n, err := b.SweepStreams(ctx); err != nil || n != 10 {
		t.Fatalf("sweep deleted %d keys, %v; want the 10 old records", n, err)
	}
	wantStreamAt(t, b, "s", 11, 13, "new-1", "new-2", "new-3")
	if n := rawKeys(t, b, pfxEvt+"s/"); n != 3 {
		t.Fatalf("%d records in Badger, want 3", n)
	}
	if _, err := b.Events().Append(ctx, "s", []byte("new-4")); err != nil {
		t.Fatal(err)
	}
	wantStreamAt(t, b, "s", 11, 14, "new-1", "new-2", "new-3", "new-4")

	// Past a deadline and appended to before the sweep: the append keeps
	// the index entry, and the sweep deletes what lay below.
	if err := b.Events().Expire(ctx, "s", time.Second); err != nil {
		t.Fatal(err)
	}
	guard := time.Now().Add(30 * time.Second)
	for rawHead(t, b, "s").live(nowSeconds()).c != 14 {
		if time.Now().After(guard) {
			t.Fatal("a stream of ttl 1s not past its deadline after 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := b.Events().Append(ctx, "s", []byte("after")); err != nil {
		t.Fatal(err)
	}
	wantStreamAt(t, b, "s", 15, 15, "after")
	if n, err := b.SweepStreams(ctx); err != nil || n != 4 {
		t.Fatalf("sweep deleted %d keys, %v; want the 4 records below the floor", n, err)
	}
	wantStreamAt(t, b, "s", 15, 15, "after")
	if n := rawKeys(t, b, pfxEvtSweep); n != 0 {
		t.Fatalf("%d expiry index entries left, want 0", n)
	}
}

// TestSweepSparesLegacyStreamStartedAgain: a store of an earlier version
// started a stream again at seq 1 over its old records once its head had
// expired; the sweep deletes only the old ones beyond the new end.
func TestSweepSparesLegacyStreamStartedAgain(t *testing.T) {
	b := openSweepless(t, t.TempDir(), nil)
	ctx := context.Background()
	prefix := evtPrefix("s")
	err := b.db.Update(func(txn *badger.Txn) error {
		for i := 1; i <= 10; i++ {
			v := "old-" + strconv.Itoa(i)
			if i <= 3 {
				v = "new-" + strconv.Itoa(i)
			}
			if err := txn.Set(msgKey(prefix, uint64(i)), []byte(v)); err != nil {
				return err
			}
		}
		if err := txn.Set(evtHeadKey("s"), head{a: 3}.encode()); err != nil {
			return err
		}
		return txn.Set(sweepKey(nowSeconds()-1, "s"), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	wantStream(t, b, "s", "new-1", "new-2", "new-3")
	if n, err := b.SweepStreams(ctx); err != nil || n != 7 {
		t.Fatalf("sweep deleted %d keys, %v; want the 7 old records beyond the new end", n, err)
	}
	wantStream(t, b, "s", "new-1", "new-2", "new-3")
	if n := rawKeys(t, b, pfxEvt+"s/"); n != 3 {
		t.Fatalf("%d records in Badger, want 3", n)
	}
}

// TestExpireOfLegacyStream: a store written before the expiry index gave
// each record of an expiring stream the stream's Badger TTL. Such a
// stream still reads; moving its deadline later clears its records' TTLs
// (they would otherwise vanish before the head); a shorter deadline is
// the head's alone; and it disappears when its old TTLs pass.
func TestExpireOfLegacyStream(t *testing.T) {
	b := openSweepless(t, t.TempDir(), nil)
	ctx := context.Background()
	in := time.Now().Add(time.Hour)
	legacyStream(t, b, "extended", 20, expirySeconds(in))
	legacyStream(t, b, "shortened", 20, expirySeconds(in))
	want := make([]string, 20)
	for i := range want {
		want[i] = "extended-" + strconv.Itoa(i+1)
	}
	wantStream(t, b, "extended", want...)
	if err := b.Events().Expire(ctx, "extended", 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	recs, head := recordTTLs(t, b, "extended")
	if head < expirySeconds(in.Add(time.Hour))-1 {
		t.Fatalf("head expires at %d, want about %d", head, expirySeconds(in.Add(time.Hour)))
	}
	for i, e := range recs {
		if e != 0 {
			t.Fatalf("record %d still expires at %d, before its head (%d)", i+1, e, head)
		}
	}
	wantStream(t, b, "extended", want...)
	if err := b.Events().Expire(ctx, "shortened", time.Minute); err != nil {
		t.Fatal(err)
	}
	recs, head = recordTTLs(t, b, "shortened")
	if head > expirySeconds(time.Now().Add(time.Minute)) || recs[0] != expirySeconds(in) {
		t.Fatalf("shortened: head %d, first record %d", head, recs[0])
	}
	if n := rawKeys(t, b, pfxEvtSweep); n != 2 {
		t.Fatalf("%d expiry index entries, want 2", n)
	}

	// A legacy stream whose TTLs pass is gone, records and head.
	legacyStream(t, b, "old", 5, expirySeconds(time.Now().Add(time.Second)))
	guard := time.Now().Add(30 * time.Second)
	for rawKeys(t, b, pfxEvt+"old/") != 0 {
		if time.Now().After(guard) {
			t.Fatal("a legacy stream of ttl 1s still has records after 30s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	wantStream(t, b, "old")
	if f, err := b.Events().Append(ctx, "old", []byte("again")); err != nil || f != 1 {
		t.Fatalf("append after a legacy stream expired: seq %d, %v", f, err)
	}
}

// legacyStream writes a stream as the store did before the expiry index:
// n records and the head all with the Badger TTL expiresAt.
func legacyStream(t *testing.T, b *Badger, stream string, n int, expiresAt uint64) {
	t.Helper()
	prefix := evtPrefix(stream)
	err := b.db.Update(func(txn *badger.Txn) error {
		for i := 1; i <= n; i++ {
			e := &badger.Entry{Key: msgKey(prefix, uint64(i)), Value: []byte(stream + "-" + strconv.Itoa(i)), ExpiresAt: expiresAt}
			if err := txn.SetEntry(e); err != nil {
				return err
			}
		}
		return txn.SetEntry(&badger.Entry{Key: evtHeadKey(stream), Value: head{a: uint64(n), b: expiresAt}.encode(), ExpiresAt: expiresAt})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestExpireLegacyStreamOfLargeRecords: the records' TTLs of a legacy
// stream far larger than one Badger transaction holds are cleared in
// transactions bounded by bytes, not only by count.
func TestExpireLegacyStreamOfLargeRecords(t *testing.T) {
	// A small memtable makes Badger's transaction bound small (about
	// 150 KiB), so a few MiB of records are far past it.
	b := openSweepless(t, t.TempDir(), func(o badger.Options) badger.Options {
		return o.WithMemTableSize(1 << 20)
	})
	rec := make([]byte, 2048)
	for i := range rec {
		rec[i] = 'a' + byte(i%26)
	}
	at := expirySeconds(time.Now().Add(time.Hour))
	prefix := evtPrefix("big")
	for i := 1; i <= 1200; i++ {
		err := b.db.Update(func(txn *badger.Txn) error {
			return txn.SetEntry(&badger.Entry{Key: msgKey(prefix, uint64(i)), Value: rec, ExpiresAt: at})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := b.db.Update(func(txn *badger.Txn) error {
		return txn.SetEntry(&badger.Entry{Key: evtHeadKey("big"), Value: head{a: 1200, b: at}.encode(), ExpiresAt: at})
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Events().Expire(context.Background(), "big", 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	recs, _ := recordTTLs(t, b, "big")
	if len(recs) != 1200 {
		t.Fatalf("%d records, want 1200", len(recs))
	}
	for i, e := range recs {
		if e != 0 {
			t.Fatalf("record %d kept its TTL", i+1)
		}
	}
}

const sweepCrashEnv = "LOOOPY_STORE_SWEEP_CRASH"

// TestSweepKilledMidway: a process killed (SIGKILL) between two writes of
// a sweep leaves an expired stream's records invisible (no record of it
// reads, an append continues after its last seq), and the next store to
// open the folder finishes the sweep from the durable index, sparing what
// was appended since.
func TestSweepKilledMidway(t *testing.T) {
	if dir := os.Getenv(sweepCrashEnv); dir != "" {
		sweepAndDie(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestSweepKilledMidway$", "-test.count=1")
	cmd.Env = append(os.Environ(), sweepCrashEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child was to die of SIGKILL mid-sweep: %v\n%s", err, out)
	}
	b := openSweepless(t, dir, nil)
	left := rawKeys(t, b, pfxEvt+"long/")
	if left == 0 || left >= 1000 {
		t.Fatalf("%d of 1000 records left after the kill: the kill did not fall mid-sweep", left)
	}
	wantStreamAt(t, b, "long", 0, 1000)
	if n := rawKeys(t, b, pfxEvtSweep); n != 1 {
		t.Fatalf("%d expiry index entries after the kill, want 1", n)
	}
	if f, err := b.Events().Append(context.Background(), "long", []byte("again")); err != nil || f != 1001 {
		t.Fatalf("append to the half-swept stream: seq %d, %v; want 1001", f, err)
	}
	if _, err := b.SweepStreams(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantStreamAt(t, b, "long", 1001, 1001, "again")
	if n := rawKeys(t, b, pfxEvt+"long/"); n != 1 {
		t.Fatalf("%d records after the sweep resumed, want 1", n)
	}
	if n := rawKeys(t, b, pfxEvtSweep); n != 0 {
		t.Fatalf("%d expiry index entries after the sweep, want 0", n)
	}
	wantStream(t, b, "other", "other-1", "other-2")
}

// sweepAndDie is the child of TestSweepKilledMidway: a stream of 1000
// records expired, a sweep in writes of 100 keys, SIGKILL after the
// second.
func sweepAndDie(dir string) {
	b, err := Open(Options{Dir: dir, SweepInterval: -1})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	recs := make([][]byte, 1000)
	for i := range recs {
		recs[i] = []byte("long-" + strconv.Itoa(i+1))
	}
	if _, err := b.Events().Append(ctx, "long", recs...); err != nil {
		panic(err)
	}
	if _, err := b.Events().Append(ctx, "other", []byte("other-1"), []byte("other-2")); err != nil {
		panic(err)
	}
	if err := b.Events().Expire(ctx, "long", 0); err != nil {
		panic(err)
	}
	sweepChunk = 100
	writes := 0
	sweepWrote = func() {
		if writes++; writes == 2 {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	_, _ = b.SweepStreams(ctx)
	panic("the sweep finished without being killed")
}

// The conformance tests' Expire runs on a store whose sweeper runs too;
// this one runs the shared test with a sweep between every step a reader
// could see, through the loop.EventLog alone.
func TestExpireThenSweepKeepsContract(t *testing.T) {
	b := openSweepless(t, t.TempDir(), nil)
	ctx := context.Background()
	var l loop.EventLog = b.Events()
	if _, err := l.Append(ctx, "c", []byte("a"), []byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := l.Expire(ctx, "c", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SweepStreams(ctx); err != nil {
		t.Fatal(err)
	}
	if f, err := l.Append(ctx, "c", []byte("x")); err != nil || f != 3 {
		t.Fatalf("append after expiry and sweep: %d, %v; want 3", f, err)
	}
	if err := l.Expire(ctx, "c", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, "c", []byte("y")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SweepStreams(ctx); err != nil {
		t.Fatal(err)
	}
	wantStreamAt(t, b, "c", 3, 4, "x", "y")
}

// TestHubFollowsALegacyStreamStartedAgain: a stream of a store written
// before the head outlived the records (its head carries a Badger TTL)
// starts again at seq 1 once the head expired. A Hub subscriber past the
// new end is told (sse.ErrExpired), never left waiting for ids that now
// name other events.
func TestHubFollowsALegacyStreamStartedAgain(t *testing.T) {
	b := openSweepless(t, t.TempDir(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const stream = "ctx/legacy"
	at := expirySeconds(time.Now().Add(2 * time.Second))
	prefix := evtPrefix(stream)
	ev := func(i int) loop.Event {
		return &loop.ContentDelta{Header: loop.Header{Kind: loop.KindContentDelta, ContextID: "legacy", TaskID: "t"}, Delta: strconv.Itoa(i), Index: i}
	}
	err := b.db.Update(func(txn *badger.Txn) error {
		for i := 1; i <= 3; i++ {
			data, err := loop.EncodeEvent(ev(i))
			if err != nil {
				return err
			}
			if err := txn.SetEntry(&badger.Entry{Key: msgKey(prefix, uint64(i)), Value: data, ExpiresAt: at}); err != nil {
				return err
			}
		}
		return txn.SetEntry(&badger.Entry{Key: evtHeadKey(stream), Value: head{a: 3, b: at}.encode(), ExpiresAt: at})
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := sse.New(sse.Config{Log: b.Events()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	sub, err := h.Subscribe(ctx, stream, 0, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for want := uint64(1); want <= 3; want++ {
		if it, err := sub.Next(ctx); err != nil || it.ID != want {
			t.Fatalf("Next: %d, %v; want %d", it.ID, err, want)
		}
	}
	guard := time.Now().Add(30 * time.Second)
	for {
		last, err := b.Events().Last(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		if last == 0 {
			break
		}
		if time.Now().After(guard) {
			t.Fatal("the legacy head did not expire in 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	id, err := h.Publish(ctx, stream, ev(4))
	if err != nil || id != 1 {
		t.Fatalf("Publish to the legacy stream after its head expired: id %d, %v; want 1 (the test would prove nothing)", id, err)
	}
	if it, ok, err := sub.TryNext(ctx); !errors.Is(err, sse.ErrExpired) {
		t.Fatalf("subscriber at 3 after the log went back to 1: %d, %v, %v; want sse.ErrExpired", it.ID, ok, err)
	}
}
