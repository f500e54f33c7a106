package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// closeWithin runs b.Close and fails the test if it has not returned within
// a generous guard (a hang is the defect under test).
func closeWithin(t *testing.T, b *Badger) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- b.Close() }()
	select {
	case err := <-done:
		return err
	case <-time.After(3 * time.Minute):
		t.Fatal("Close hangs")
		return nil
	}
}

// openWithWrite opens a store in a fresh folder and writes one value, so
// that closing has a memtable to flush.
func openWithWrite(t *testing.T, timeout time.Duration) (*Badger, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	b, err := Open(Options{Dir: dir, CloseTimeout: timeout, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.KVSet(context.Background(), "ns", "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	return b, dir
}

// TestCloseDataFolderGone: Badger retries a failing memtable flush forever;
// with its folder removed, Close must give up with ErrCloseStuck instead of
// hanging the host's shutdown.
func TestCloseDataFolderGone(t *testing.T) {
	b, dir := openWithWrite(t, -1) // no deadline: the folder check alone must end it
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	err := closeWithin(t, b)
	if !errors.Is(err, ErrCloseStuck) {
		t.Fatalf("Close with the data folder removed = %v, want ErrCloseStuck", err)
	}
	if err := b.KVSet(context.Background(), "ns", "k2", []byte("v")); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after Close = %v, want ErrClosed", err)
	}
}

// TestCloseDeadline: a folder that exists but cannot take the flush (here a
// file in its place) keeps Badger retrying; Close returns after
// CloseTimeout.
func TestCloseDeadline(t *testing.T) {
	b, dir := openWithWrite(t, 2*time.Second)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a folder"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := closeWithin(t, b)
	if !errors.Is(err, ErrCloseStuck) {
		t.Fatalf("Close with the data folder replaced by a file = %v, want ErrCloseStuck", err)
	}
}

// TestCloseClean: an ordinary close returns nil, and what was written is
// there on the next Open.
func TestCloseClean(t *testing.T) {
	b, dir := openWithWrite(t, 0)
	if err := closeWithin(t, b); err != nil {
		t.Fatalf("Close = %v", err)
	}
	b2, err := Open(Options{Dir: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	v, err := b2.KVGet(context.Background(), "ns", "k")
	if err != nil || string(v) != "v" {
		t.Fatalf("after reopen: %q, %v", v, err)
	}
}
