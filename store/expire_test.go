package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// expiries returns the expiry of each record of a stream and of its head.
func expiries(t *testing.T, b *Badger, stream string) (records []uint64, head uint64) {
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

func wantExpiring(t *testing.T, b *Badger, stream string, n int) {
	t.Helper()
	recs, head := expiries(t, b, stream)
	if len(recs) != n {
		t.Fatalf("%s: %d records, want %d", stream, len(recs), n)
	}
	if head == 0 {
		t.Fatalf("%s: head has no expiry", stream)
	}
	for i, e := range recs {
		if e != head {
			t.Fatalf("%s: record %d expires at %d, the head at %d", stream, i+1, e, head)
		}
	}
}

// TestExpireShortStreamsShareCommit: the expiries of short streams queued
// together with appends are made durable by one transaction, and every
// record of each stream carries the expiry.
func TestExpireShortStreamsShareCommit(t *testing.T) {
	b, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	const streams = 16
	for i := range streams {
		for j := range 3 {
			if _, err := b.Events().Append(ctx, fmt.Sprint("s-", i), []byte(fmt.Sprint(j))); err != nil {
				t.Fatal(err)
			}
		}
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
	deadline := time.Now().Add(10 * time.Second)
	for len(b.ops) < 2*streams {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d writes queued", len(b.ops), 2*streams)
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
	for i := range streams {
		wantExpiring(t, b, fmt.Sprint("s-", i), 3)
	}
	// A record appended after the expiry goes with the stream.
	if _, err := b.Events().Append(ctx, "s-0", []byte("late")); err != nil {
		t.Fatal(err)
	}
	wantExpiring(t, b, "s-0", 4)
}

// TestExpireLongStream: a stream longer than a shared batch takes is
// rewritten alone, and all of it expires.
func TestExpireLongStream(t *testing.T) {
	b, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	n := expireInBatch + 50
	recs := make([][]byte, n)
	for i := range recs {
		recs[i] = []byte(fmt.Sprint(i))
	}
	if _, err := b.Events().Append(ctx, "long", recs...); err != nil {
		t.Fatal(err)
	}
	if err := b.Events().Expire(ctx, "long", time.Hour); err != nil {
		t.Fatal(err)
	}
	wantExpiring(t, b, "long", n)
	got, err := b.Events().Read(ctx, "long", 0, 0)
	if err != nil || len(got) != n {
		t.Fatalf("Read after expiry: %d records, %v; want %d", len(got), err, n)
	}
}

// TestExpireStreamOfLargeRecords: a stream whose records together are far
// larger than one Badger transaction holds (a flood of large deltas) still
// expires, long or short: it is rewritten in transactions bounded by bytes,
// not only by count.
func TestExpireStreamOfLargeRecords(t *testing.T) {
	// A small memtable makes Badger's transaction bound small (about
	// 150 KiB), so a few MiB of records are far past it.
	b, err := Open(Options{Dir: t.TempDir(), Tune: func(o badger.Options) badger.Options {
		return o.WithMemTableSize(1 << 20)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	rec := make([]byte, 2048)
	for i := range rec {
		rec[i] = 'a' + byte(i%26)
	}
	for _, s := range []struct {
		name string
		n    int
	}{{"short-big", expireInBatch / 2}, {"long-big", 1200}} {
		for range s.n {
			if _, err := b.Events().Append(ctx, s.name, rec); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Events().Expire(ctx, s.name, time.Hour); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		wantExpiring(t, b, s.name, s.n)
	}
}
