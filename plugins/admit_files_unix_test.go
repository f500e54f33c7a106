//go:build unix

package plugins

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A plugin folder whose .wasm is a FIFO nobody writes, a link to /dev/zero,
// or whose plugin.json is a FIFO or 2 MiB long: each load is refused at
// once with a clear error (none reads forever or blocks), and a memory
// whose minimum is 65,536 pages is refused at compile.
func TestHostileFilesAreRefused(t *testing.T) {
	dir := t.TempDir()
	r := newRegistry(t, Config{CacheDir: t.TempDir()})
	load := func(src string) error {
		done := make(chan error, 1)
		go func() { _, err := r.Load(context.Background(), src); done <- err }()
		return hangGuard(t, done, "loading "+src)
	}

	fifo := installBytes(t, dir, "fifo", wasmModule(1, [][]byte{{0, 0x0b}}))
	os.Remove(filepath.Join(dir, "fifo", "fifo.wasm"))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo", "fifo.wasm"), 0o644); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	if err := load(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO .wasm: %v", err)
	}

	zero := installBytes(t, dir, "zero", wasmModule(1, [][]byte{{0, 0x0b}}))
	os.Remove(filepath.Join(dir, "zero", "zero.wasm"))
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "zero", "zero.wasm")); err != nil {
		t.Fatal(err)
	}
	if err := load(zero); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a .wasm linked to /dev/zero: %v", err)
	}

	if err := os.MkdirAll(filepath.Join(dir, "mfifo"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "mfifo", ManifestFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := load(filepath.Join(dir, "mfifo", ManifestFile)); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO plugin.json: %v", err)
	}

	big := installBytes(t, dir, "big", wasmModule(1, [][]byte{{0, 0x0b}}))
	b, _ := os.ReadFile(big)
	padded := append(b[:len(b)-1], []byte(`,"description":"`+strings.Repeat("x", 2<<20)+`"}`)...)
	if err := os.WriteFile(big, padded, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := load(big); !errors.Is(err, ErrModuleLimit) || !strings.Contains(err.Error(), "manifest size") {
		t.Errorf("a 2 MiB plugin.json: %v", err)
	}

	if err := load(installBytes(t, dir, "hugemem", wasmModule(65536, [][]byte{{0, 0x0b}}))); err == nil || !strings.Contains(err.Error(), "memory") {
		t.Errorf("a memory of 65,536 pages at least: %v", err)
	}
	for _, p := range r.List() {
		if p.State != "failed" {
			t.Errorf("%s: %s", p.Name, p.State)
		}
	}
}
