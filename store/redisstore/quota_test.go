package redisstore_test

import (
	"context"
	"sync"
	"testing"

	"github.com/looopy-go/looopy/store/redisstore/redistest"
)

// A namespace's usage follows every write and delete, from any handle;
// KVSetWithin refuses a write past the quota and writes nothing then;
// concurrent writers from two handles never pass the quota together.
func TestKVUsageAndQuota(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := openAt(t, srv, "q:")
	b := openAt(t, srv, "q:")
	ctx := context.Background()
	usage := func(wantKeys, wantBytes int64) {
		t.Helper()
		k, n, err := b.KVUsage(ctx, "ns")
		if err != nil || k != wantKeys || n != wantBytes {
			t.Fatalf("usage = %d keys, %d bytes, %v; want %d, %d", k, n, err, wantKeys, wantBytes)
		}
	}
	usage(0, 0)
	if err := a.KVSet(ctx, "ns", "x", []byte("12345")); err != nil {
		t.Fatal(err)
	}
	if err := a.KVSet(ctx, "ns", "y", []byte("1")); err != nil {
		t.Fatal(err)
	}
	usage(2, 6)
	if err := b.KVSet(ctx, "ns", "x", []byte("12")); err != nil { // overwrite: fewer bytes, same keys
		t.Fatal(err)
	}
	usage(2, 3)
	if err := b.KVDelete(ctx, "ns", "y"); err != nil {
		t.Fatal(err)
	}
	if err := b.KVDelete(ctx, "ns", "y"); err != nil { // absent: no change
		t.Fatal(err)
	}
	usage(1, 2)
	if err := a.KVSet(ctx, "other", "z", []byte("123")); err != nil { // another namespace
		t.Fatal(err)
	}
	usage(1, 2)
	if over, err := a.KVSetWithin(ctx, "ns", "new", []byte("1"), 1, 100); err != nil || over != "keys" {
		t.Fatalf("past the key quota: %q, %v; want keys", over, err)
	}
	if over, err := a.KVSetWithin(ctx, "ns", "x", []byte("123456"), 1, 5); err != nil || over != "bytes" {
		t.Fatalf("past the byte quota: %q, %v; want bytes", over, err)
	}
	usage(1, 2)
	if v, _ := b.KVGet(ctx, "ns", "x"); string(v) != "12" {
		t.Fatalf("a refused write changed the value to %q", v)
	}
	// 40 writers of new keys, half on each handle, against a quota of 10
	// keys: exactly 9 more fit.
	var wg sync.WaitGroup
	var mu sync.Mutex
	written := 0
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			over, err := s.KVSetWithin(ctx, "ns", "k"+string(rune('A'+i)), []byte("v"), 10, 1000)
			if err != nil {
				t.Error(err)
				return
			}
			if over == "" {
				mu.Lock()
				written++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if written != 9 {
		t.Fatalf("%d concurrent writes passed a quota with room for 9", written)
	}
	usage(10, 11)
}

// Counters added from two handles add up.
func TestCountersAddUp(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := openAt(t, srv, "c:")
	b := openAt(t, srv, "c:")
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			if _, err := s.AddCounters(ctx, "usage", "alice", map[string]int64{"calls": 1, "tokens": 10}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got, err := b.Counters(ctx, "usage", "alice")
	if err != nil || got["calls"] != 20 || got["tokens"] != 200 {
		t.Fatalf("counters = %v, %v; want 20 calls, 200 tokens", got, err)
	}
	if none, err := a.Counters(ctx, "usage", "bob"); err != nil || len(none) != 0 {
		t.Fatalf("counters of another key = %v, %v; want none", none, err)
	}
}
