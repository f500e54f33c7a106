package plugins

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// A load cancelled before its module compiles (a host stopped while it
// starts) fails naming the cancellation and compiles nothing: the compile
// cache stays empty. The same load with a live context fills it, so an
// empty cache means the compile was skipped.
func TestLoadCancelledBeforeCompile(t *testing.T) {
	wasm := guestWasm(t, "echo")
	cacheDir := t.TempDir()
	r := newRegistry(t, Config{CacheDir: cacheDir})
	src := install(t, t.TempDir(), "echo", wasm, nil)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := r.Load(ctx, src)
	if err == nil || !strings.Contains(err.Error(), "compile: load cancelled") || !errors.Is(err, context.Canceled) {
		t.Fatalf("load with a cancelled context: %v", err)
	}
	if n := cachedFiles(t, cacheDir); n != 0 {
		t.Fatalf("a cancelled load compiled: %d files in the compile cache", n)
	}

	if _, err := r.Load(context.Background(), src); err != nil {
		t.Fatalf("load: %v", err)
	}
	if n := cachedFiles(t, cacheDir); n == 0 {
		t.Fatal("a load left nothing in the compile cache: the check above proves nothing")
	}
}

func cachedFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
