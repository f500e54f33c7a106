package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runHostToExit starts the real binary with cfg and waits for it to exit
// (it must not start serving); it returns the exit code and the output.
func runHostToExit(t *testing.T, top string, cfg map[string]any) (int, string) {
	t.Helper()
	cb, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(top, "exit.json")
	if err := os.WriteFile(cfgPath, cb, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, sandboxHostBinary(t), "-config", cfgPath, "-log-format", "text")
	cmd.Dir = top
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the host did not exit within 3 minutes: it started on a disk it must refuse:\n%s", out)
	}
	if err == nil {
		t.Fatalf("the host exited 0, want a refusal:\n%s", out)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return ee.ExitCode(), string(out)
}

// fillTo writes a filler file on the filesystem of dir until left bytes
// are free; it returns the filler's path.
func fillTo(t *testing.T, dir string, left int64) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for n := free - left; n > 0; n -= int64(len(chunk)) {
		if n < int64(len(chunk)) {
			chunk = chunk[:n]
		}
		if _, err := f.Write(chunk); err != nil {
			t.Fatalf("filling the disk: %v", err)
		}
	}
	return path
}

// A host killed with its write-ahead log full of acknowledged work, on a
// disk that then filled up (a real tmpfs), used to die of SIGBUS at every
// start: opening Badger flushes that log into tables written through
// memory maps. Now the start is refused with a plain "filesystem is full"
// (not the advice for a damaged folder, which would have the operator
// move the data aside); a store.minFreeBytes too small to cover Badger's
// own writes is refused at start; and once space is made the host starts
// and every acknowledged task is there.
func TestBlackBoxStartOnAFullDisk(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	small := filepath.Join(top, "small")
	mountSmall(t, small, "96m")
	pluginDir := filepath.Join(top, "plugins")
	data := filepath.Join(small, "data")
	// 16 MiB memtables; no check while the log is filled, so the kill
	// leaves as much unflushed as the memtable holds.
	store := func(minFree int64) map[string]any {
		return map[string]any{"memoryBytes": 64 << 20, "minFreeBytes": minFree}
	}
	h := startSandboxHostWith(t, top, pluginDir, nil, map[string]any{"dataDir": data, "store": store(-1)})
	text := strings.Repeat("acknowledged ", 1500) // 19.5 KB
	var ids []string
	for range 30 {
		id, a := h.startTurn(t, "", text)
		if id == "" {
			t.Fatalf("a turn on an empty disk: %+v", a.Error)
		}
		ids = append(ids, id)
	}
	want := map[string]string{}
	h.waitFor(t, "the turns to complete", 2*time.Minute, func() bool {
		for _, id := range ids {
			st := h.taskState(t, "", id)
			if st != "TASK_STATE_COMPLETED" {
				return false
			}
			want[id] = st
		}
		return true
	})
	if err := syscall.Kill(h.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-h.exited
	mems, _ := filepath.Glob(filepath.Join(data, "*.mem"))
	if len(mems) == 0 {
		t.Fatal("no write-ahead log left by the kill: the test would not reach the flush at open")
	}

	// The disk fills: 256 KiB left, far less than the log's tables.
	filler := fillTo(t, small, 256<<10)
	base := func(minFree int64) map[string]any {
		return map[string]any{
			"addr": "127.0.0.1:0", "dataDir": data, "pluginDir": pluginDir,
			"plugins": map[string]any{"cacheDir": blackboxCache()},
			"store":   store(minFree),
		}
	}
	for _, minFree := range []int64{0, 160 << 20} {
		code, out := runHostToExit(t, top, base(minFree))
		if strings.Contains(out, "SIGBUS") || code == 2 {
			t.Fatalf("start on a full disk (minFreeBytes %d): exit %d, a crash:\n%s", minFree, code, out)
		}
		if !strings.Contains(out, "filesystem is full") || strings.Contains(out, "move it aside") {
			t.Fatalf("start on a full disk (minFreeBytes %d): exit %d, want the plain full-disk refusal:\n%s", minFree, code, out)
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}

	// A floor too low for Badger's own writes is refused, not taken.
	code, out := runHostToExit(t, top, base(16<<20))
	if !strings.Contains(out, "store.minFreeBytes 16 MiB is below the least") {
		t.Fatalf("minFreeBytes 16 MiB: exit %d, want it refused:\n%s", code, out)
	}

	// Space made: the host starts, and every acknowledged task is there.
	h2 := startSandboxHostWith(t, top, pluginDir, nil, map[string]any{"dataDir": data, "store": store(-1)})
	for id, st := range want {
		if got := h2.taskState(t, "", id); got != st {
			t.Errorf("task %s was %s before the kill, %q after the disk was freed", id, st, got)
		}
	}
}
