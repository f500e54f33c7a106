package plugins

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// crowdedGuard only fails fast when a load that should happen never does.
const crowdedGuard = 2 * time.Minute

// events collects a registry's events for a test to wait on.
type events chan Event

func (ev events) waitFor(t *testing.T, kind EventKind, name string) Event {
	t.Helper()
	deadline := time.After(crowdedGuard)
	for {
		select {
		case e := <-ev:
			if e.Kind == kind && e.Name == name {
				return e
			}
		case <-deadline:
			t.Fatalf("no %s event for %q within %s", kind, name, crowdedGuard)
		}
	}
}

// A plugin refused because the plugins serving left no room for it (the
// shared tools budget, a tool another plugin offers) loads by itself once
// one of them is unloaded; the refusal tells the operator so. One still
// crowded out after the change is refused again, and nothing loops.
func TestCrowdedOutPluginLoadsWhenRoomIsMade(t *testing.T) {
	ctx := context.Background()
	wasm := fixtureWasm(t, "wecho")
	ev := make(events, 256)
	t.Run("ToolsBudget", func(t *testing.T) {
		r := newRegistry(t, Config{Policy: Policy{Budgets: Budgets{MaxToolsTotal: 1}},
			OnEvent: ev.send})
		dir := t.TempDir()
		if _, err := r.Load(ctx, install(t, dir, "a", wasm, nil)); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"b", "c"} {
			_, err := r.Load(ctx, install(t, dir, name, wasm, nil))
			if !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), "loads by itself once another plugin is removed") {
				t.Fatalf("%s over the shared tools budget: %v, want ErrBudget saying it loads once room is made", name, err)
			}
		}
		if got := listed(r); !slices.Equal(got, []string{"a=serving", "b=failed", "c=failed"}) {
			t.Fatalf("listed %v", got)
		}
		drain(ev)
		if err := r.Unload(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		// b is loaded again first (the manifests in order) and takes the
		// room; c is refused again and stays listed as failed.
		ev.waitFor(t, EventLoaded, "b")
		f := ev.waitFor(t, EventFailed, "c")
		if !errors.Is(f.Err, ErrBudget) {
			t.Fatalf("c refused again for %v, want the budget", f.Err)
		}
		if got := listed(r); !slices.Equal(got, []string{"b=serving", "c=failed"}) {
			t.Fatalf("after a's unload: %v", got)
		}
		// and once b goes too, c loads
		if err := r.Unload(ctx, "b"); err != nil {
			t.Fatal(err)
		}
		ev.waitFor(t, EventLoaded, "c")
		if got := listed(r); !slices.Equal(got, []string{"c=serving"}) {
			t.Fatalf("after b's unload: %v", got)
		}
		defs, _ := r.Tools(ctx)
		if len(defs) != 1 {
			t.Fatalf("tools after c loaded: %+v", defs)
		}
		if res, err := r.Call(ctx, loop.ToolCall{ID: "1", Name: defs[0].Name, Arguments: []byte(`{"text":"hi"}`)}, nil); err != nil || res.IsError {
			t.Fatalf("the plugin loaded again does not serve its tool: %v %+v", err, res)
		}
	})
	t.Run("ToolOfferedTwice", func(t *testing.T) {
		drain(ev)
		r := newRegistry(t, Config{OnEvent: ev.send})
		dir := t.TempDir()
		if _, err := r.Load(ctx, install(t, dir, "a", wasm, nil)); err != nil {
			t.Fatal(err)
		}
		_, err := r.Load(ctx, install(t, dir, "b", wasm, nil))
		if !errors.Is(err, loop.ErrToolConflict) || !strings.Contains(err.Error(), "loads by itself once that plugin is removed") {
			t.Fatalf("a tool offered twice: %v, want ErrToolConflict saying it loads once the other goes", err)
		}
		drain(ev)
		if err := r.Unload(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		ev.waitFor(t, EventLoaded, "b")
		if got := listed(r); !slices.Equal(got, []string{"b=serving"}) {
			t.Fatalf("after a's unload: %v", got)
		}
	})
	t.Run("RemovedFolder", func(t *testing.T) {
		// the watcher sees the serving plugin's folder go: the same
		drain(ev)
		dir := t.TempDir()
		r := newRegistry(t, Config{Policy: Policy{Budgets: Budgets{MaxToolsTotal: 1}}, OnEvent: ev.send})
		w, err := NewWatcher(r, WatchConfig{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		install(t, dir, "a", wasm, nil)
		w.Scan(ctx)
		install(t, dir, "b", wasm, nil)
		w.Scan(ctx)
		if got := listed(r); !slices.Equal(got, []string{"a=serving", "b=failed"}) {
			t.Fatalf("listed %v", got)
		}
		drain(ev)
		if err := os.RemoveAll(filepath.Join(dir, "a")); err != nil {
			t.Fatal(err)
		}
		w.Scan(ctx)
		ev.waitFor(t, EventLoaded, "b")
		if got := listed(r); !slices.Equal(got, []string{"b=serving"}) {
			t.Fatalf("after a's folder went: %v", got)
		}
	})
}

// send never blocks the registry: the buffer holds far more than a test's
// events, and one dropped would fail the test at its guard.
func (ev events) send(e Event) {
	select {
	case ev <- e:
	default:
	}
}

func drain(ev events) {
	for {
		select {
		case <-ev:
		default:
			return
		}
	}
}
