package store_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// AppendStreams writes several streams in one commit, each continuing its
// own sequence (also after a plain Append, and after a reopen), keeps a
// stream's expiry, and refuses a call it cannot do whole.
func TestAppendStreams(t *testing.T) {
	dir := t.TempDir()
	b, err := store.Open(store.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ev := b.Events()
	if _, err := ev.Append(ctx, "task/a", []byte("a1")); err != nil {
		t.Fatal(err)
	}
	before := b.Commits()
	first, err := ev.AppendStreams(ctx, []loop.StreamAppend{
		{Stream: "task/a", Data: [][]byte{[]byte("a2"), []byte("a3")}},
		{Stream: "ctx/c", Data: [][]byte{[]byte("c1")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 2 || first[0] != 2 || first[1] != 1 {
		t.Fatalf("first seqs %v, want [2 1]", first)
	}
	if n := b.Commits() - before; n != 1 {
		t.Fatalf("%d commits, want 1", n)
	}
	for _, bad := range [][]loop.StreamAppend{
		nil,
		{{Stream: "task/a", Data: [][]byte{[]byte("x")}}, {Stream: "task/a", Data: [][]byte{[]byte("y")}}},
		{{Stream: "task/a", Data: [][]byte{[]byte("x")}}, {Stream: "ctx/c"}},
		{{Stream: "", Data: [][]byte{[]byte("x")}}},
	} {
		if _, err := ev.AppendStreams(ctx, bad); !errors.Is(err, loop.ErrInvalid) {
			t.Fatalf("AppendStreams(%v): %v, want ErrInvalid", bad, err)
		}
	}
	// Nothing of a refused call was written.
	if err := ev.Expire(ctx, "ctx/c", time.Hour); err != nil {
		t.Fatal(err)
	}
	if first, err = ev.AppendStreams(ctx, []loop.StreamAppend{
		{Stream: "ctx/c", Data: [][]byte{[]byte("c2")}},
		{Stream: "task/a", Data: [][]byte{[]byte("a4")}},
	}); err != nil || first[0] != 2 || first[1] != 4 {
		t.Fatalf("second AppendStreams: %v, %v; want [2 4]", first, err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b, err = store.Open(store.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	want := map[string][]string{"task/a": {"a1", "a2", "a3", "a4"}, "ctx/c": {"c1", "c2"}}
	for stream, w := range want {
		recs, err := b.Events().Read(ctx, stream, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for i, r := range recs {
			if r.Seq != uint64(i+1) {
				t.Fatalf("%s: record %d has seq %d", stream, i, r.Seq)
			}
			got = append(got, string(r.Data))
		}
		if !slices.Equal(got, w) {
			t.Fatalf("%s holds %v, want %v", stream, got, w)
		}
	}
	// The record appended to ctx/c after Expire canceled its expiry, in
	// the append's own write: its head has no deadline and the expiry
	// index no entry. task/a never expires. Records carry no TTL of their own.
	expiring := map[string]bool{}
	var swept []string
	if err := b.DB().View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := string(it.Item().Key())
			if strings.HasPrefix(k, "evtx/") {
				swept = append(swept, k[strings.LastIndexByte(k, '/')+1:])
			}
			expiring[k] = it.Item().ExpiresAt() > 0
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for k, exp := range map[string]bool{"evth/ctx%2Fc": false, "evth/task%2Fa": false,
		"evt/ctx%2Fc/00000000000000000001": false, "evt/ctx%2Fc/00000000000000000002": false, "evt/task%2Fa/00000000000000000004": false} {
		if got, ok := expiring[k]; !ok || got != exp {
			t.Fatalf("key %s: found %v, expires %v, want %v", k, ok, got, exp)
		}
	}
	if len(swept) != 0 {
		t.Fatalf("expiry index holds %v, want nothing", swept)
	}
}
