package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

func waitEvent(t *testing.T, events <-chan Event, kind EventKind) Event {
	t.Helper()
	// A hang guard, not a timing assertion: loading a Go guest compiles it,
	// which under the race detector on a loaded machine takes minutes.
	deadline := time.After(5 * time.Minute)
	for {
		select {
		case ev := <-events:
			if ev.Kind == kind {
				return ev
			}
			t.Logf("event %s %s %s %v", ev.Kind, ev.Name, ev.Version, ev.Err)
		case <-deadline:
			t.Fatalf("no %s event", kind)
		}
	}
}

func TestHotReload(t *testing.T) {
	dir := t.TempDir()
	events := make(chan Event, 16)
	r := newRegistry(t, Config{OnEvent: func(ev Event) { events <- ev }})
	w, err := NewWatcher(r, WatchConfig{Dir: dir, Debounce: 50 * time.Millisecond, Rescan: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = w.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()

	// a new plugin appears
	install(t, dir, "echo", guestWasm(t, "echo"), nil)
	if ev := waitEvent(t, events, EventLoaded); ev.Name != "echo" || ev.Version != "1.0.0" {
		t.Fatalf("loaded %+v", ev)
	}
	if res := mustCall(t, r, "echo", `{"text":"a"}`); res.Content != "a" {
		t.Fatalf("v1 echo = %+v", res)
	}
	// a running turn pins version 1
	pinned, release := r.PinToolset()
	v1, _ := r.Plugin("echo")

	// the .wasm changes on disk: version 2 replaces version 1
	install(t, dir, "echo", guestWasm(t, "echo2"), func(m map[string]any) { m["version"] = "2.0.0" })
	if ev := waitEvent(t, events, EventLoaded); ev.Version != "2.0.0" || ev.Previous != "1.0.0" {
		t.Fatalf("loaded %+v", ev)
	}
	if res := mustCall(t, r, "echo", `{"text":"b"}`); res.Content != "v2 b" {
		t.Fatalf("after reload, echo = %+v", res)
	}
	if res := mustCall(t, pinned, "echo", `{"text":"c"}`); res.Content != "c" {
		t.Fatalf("the pinned turn should keep version 1: %+v", res)
	}
	defs, _ := r.Tools(context.Background())
	if len(defs) != 1 || defs[0].Name != "echo" {
		t.Fatalf("tools after reload = %+v", defs)
	}
	release()
	if !v1.closed {
		t.Fatal("version 1 not closed after the last pin let go")
	}

	// a broken version: the old one keeps serving, the failure is reported
	bad := filepath.Join(t.TempDir(), "bad.wasm")
	b, _ := os.ReadFile(guestWasm(t, "echo2"))
	if err := os.WriteFile(bad, b[:1000], 0o644); err != nil {
		t.Fatal(err)
	}
	install(t, dir, "echo", bad, func(m map[string]any) { m["version"] = "3.0.0" })
	// the watcher may first see the new .wasm beside the old manifest (a
	// digest mismatch), then both: wait for the compile failure
	for {
		ev := waitEvent(t, events, EventFailed)
		if ev.Name != "echo" || ev.Err == nil {
			t.Fatalf("failed %+v", ev)
		}
		if strings.Contains(ev.Err.Error(), "compile") {
			break
		}
		if !strings.Contains(ev.Err.Error(), "sha256 is") {
			t.Fatalf("failed %+v", ev)
		}
	}
	if res := mustCall(t, r, "echo", `{"text":"d"}`); res.Content != "v2 d" {
		t.Fatalf("after a broken reload, echo = %+v", res)
	}
	list := r.List()
	if len(list) != 1 || list[0].Version != "2.0.0" || list[0].Health != "degraded" || !strings.Contains(list[0].LastError, "compile") {
		t.Fatalf("list = %+v", list)
	}

	// removal unloads at once
	pinned, release = r.PinToolset()
	v2, _ := r.Plugin("echo")
	if err := os.RemoveAll(filepath.Join(dir, "echo")); err != nil {
		t.Fatal(err)
	}
	if ev := waitEvent(t, events, EventUnloaded); ev.Name != "echo" {
		t.Fatalf("unloaded %+v", ev)
	}
	if defs, _ := r.Tools(context.Background()); len(defs) != 0 {
		t.Fatalf("tools after removal = %+v", defs)
	}
	if _, err := r.Call(context.Background(), call("echo", `{"text":"e"}`), &loop.ToolEnv{}); err == nil {
		t.Fatal("a removed tool answered")
	}
	// the operator removed it: a turn that pinned it is refused too (a
	// replaced version, above, keeps serving its pinned turns)
	if _, err := pinned.Call(context.Background(), call("echo", `{"text":"f"}`), &loop.ToolEnv{}); !errors.Is(err, ErrUnloaded) {
		t.Fatalf("the pinned turn's call after removal = %v", err)
	}
	release()
	if !v2.closed {
		t.Fatal("version 2 not closed after removal and release")
	}
}

func TestAdminLoadUnload(t *testing.T) {
	dir := t.TempDir()
	r := newRegistry(t, Config{})
	pd := install(t, dir, "echo", guestWasm(t, "echo"), nil)
	if _, err := r.Load(context.Background(), pd); err != nil {
		t.Fatal(err)
	}
	// another plugin offering a tool of the same name is refused
	other := install(t, dir, "other", guestWasm(t, "echo2"), nil)
	if _, err := r.Load(context.Background(), other); err == nil || !strings.Contains(err.Error(), `tool "echo" is already offered by plugin "echo"`) {
		t.Fatalf("conflict: %v", err)
	}
	if err := r.Unload(context.Background(), "echo"); err != nil {
		t.Fatal(err)
	}
	if err := r.Unload(context.Background(), "nope"); err == nil {
		t.Fatal("unloading an unknown plugin succeeded")
	}
	if _, err := r.Load(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(r.List())
	if !strings.Contains(string(b), `"name":"other"`) {
		t.Fatalf("list = %s", b)
	}
}

// A plugin copied in slowly (a plain cp of a large .wasm) is read once its
// files are left alone, not half-way: no failure is reported for it.
func TestWatcherWaitsForACopyToSettle(t *testing.T) {
	dir := t.TempDir()
	events := make(chan Event, 16)
	r := newRegistry(t, Config{OnEvent: func(ev Event) { events <- ev }})
	w, err := NewWatcher(r, WatchConfig{Dir: dir, Settle: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	wasm, err := os.ReadFile(guestWasm(t, "echo"))
	if err != nil {
		t.Fatal(err)
	}
	pd := install(t, dir, "echo", guestWasm(t, "echo"), nil)
	// The copy is half-way: the manifest is there, the .wasm half written.
	half := filepath.Join(pd, "echo.wasm")
	if err := os.WriteFile(half, wasm[:len(wasm)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	w.scan(context.Background(), true)
	if got := r.List(); len(got) != 0 {
		t.Fatalf("a plugin still being written was read: %+v", got)
	}
	select {
	case ev := <-events:
		t.Fatalf("event for a plugin still being written: %+v", ev)
	default:
	}
	if !w.isUnsettled() {
		t.Error("the watcher does not know to look again")
	}
	// The copy ends; once the files are older than Settle the plugin loads.
	if err := os.WriteFile(half, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	w.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	w.scan(context.Background(), true)
	if ev := waitEvent(t, events, EventLoaded); ev.Name != "echo" {
		t.Fatalf("loaded %+v", ev)
	}
	if w.isUnsettled() {
		t.Error("still unsettled after the load")
	}
}

// While one hot-loaded plugin compiles for minutes, a plugin dropped into
// the folder beside it loads: the watcher never waits for a load. Removing
// the slow plugin's folder then cancels its load, and nothing of it serves.
func TestWatcherLoadsBesideASlowCompile(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	loaded := map[string]bool{}
	r := newRegistry(t, Config{Policy: Policy{CompileTimeout: time.Hour}, OnEvent: func(ev Event) {
		mu.Lock()
		defer mu.Unlock()
		if ev.Kind == EventLoaded {
			loaded[ev.Name] = true
		}
	}})
	w, err := NewWatcher(r, WatchConfig{Dir: dir, Debounce: 20 * time.Millisecond, Rescan: -1, Settle: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := hangGuard(t, stopped, "stopping the watcher"); err != nil {
			t.Error(err)
		}
	}()

	slow := installBytes(t, dir, "slow", slowModule(300, 4000))
	waitFor(t, "the slow plugin's load to start", func() bool { return slices.Contains(r.Loading(), slow) })
	install(t, dir, "echo", guestWasm(t, "echo"), nil)
	waitFor(t, "echo to load beside the slow compile", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return loaded["echo"]
	})
	if !slices.Contains(r.Loading(), slow) {
		t.Fatal("the slow plugin's load ended before echo loaded: the test proves nothing")
	}
	if res := mustCall(t, r, "echo", `{"text":"x"}`); res.Content != "x" {
		t.Fatalf("echo = %+v", res)
	}
	if err := os.RemoveAll(filepath.Dir(slow)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the removed plugin's load to be cancelled", func() bool { return len(r.Loading()) == 0 })
	if _, ok := r.Plugin("slow"); ok {
		t.Fatal("the removed slow plugin serves")
	}
}
