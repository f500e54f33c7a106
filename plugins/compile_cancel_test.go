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
// empty cache means the compile was skipped. The module is the small WAT
// echo: its size plays no part, and a Go guest compiles into an empty cache
// for minutes under the race detector.
func TestLoadCancelledBeforeCompile(t *testing.T) {
	cacheDir := t.TempDir()
	r := newRegistry(t, Config{CacheDir: cacheDir})
	src := install(t, t.TempDir(), "wecho", fixtureWasm(t, "wecho"), nil)

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
		if err == nil && d.Type().IsRegular() && d.Name() != lockFile { // compiled code, not the folder's lock
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A load cancelled while its module compiles (SIGINT during a host's first
// start) returns at once instead of waiting for the compiler, which does
// not look at the context; closing the registry then does not wait for the
// compile either, and the compile, when it ends, closes what it made and
// the caches. The module is the small WAT echo (the hook holds its compile
// as long as the test needs).
func TestLoadCancelledDuringCompileReturns(t *testing.T) {
	wasm := fixtureWasm(t, "wecho")
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	compileHook = func() {
		entered <- struct{}{}
		<-release
	}
	t.Cleanup(func() { compileHook = nil })
	r, err := New(Config{CacheDir: t.TempDir(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	src := install(t, t.TempDir(), "wecho", wasm, nil)
	ctx, cancel := context.WithCancel(context.Background())
	loaded := make(chan error, 1)
	go func() {
		_, err := r.Load(ctx, src)
		loaded <- err
	}()
	<-entered // the compile runs (held by the hook)
	cancel()
	err = hangGuard(t, loaded, "a load cancelled during its compile")
	if err == nil || !strings.Contains(err.Error(), "compile: load cancelled") || !errors.Is(err, context.Canceled) {
		t.Fatalf("load cancelled during its compile: %v", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	if err := hangGuard(t, closed, "closing the registry while an abandoned compile runs"); err != nil {
		t.Fatalf("close: %v", err)
	}
	if n := r.env.compiles.count(); n != 2 {
		t.Fatalf("%d compiles counted; want the abandoned one and what closes after it", n)
	}
	close(release)
	waitFor(t, "the abandoned compile to end", func() bool { return r.env.compiles.count() == 0 })
}
