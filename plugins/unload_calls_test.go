package plugins

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// spinningCall starts a call of a tool that spins, and returns once the
// call has begun; the error arrives on the channel.
func spinningCall(t *testing.T, r *Registry, plugin, tool string) <-chan error {
	t.Helper()
	p, ok := r.Plugin(plugin)
	if !ok {
		t.Fatalf("%s not loaded", plugin)
	}
	before := p.calls.Load()
	done := make(chan error, 1)
	go func() {
		_, err := r.Call(context.Background(), call(tool, `{}`), &loop.ToolEnv{})
		done <- err
	}()
	waitFor(t, "the call to begin", func() bool { return p.calls.Load() > before })
	return done
}

// Unloading a plugin stops its calls in flight at once, with "plugin
// unloaded", though their call timeout is 10 minutes; a turn that pinned
// the plugin gets the same error from a later call.
func TestUnloadStopsCallsInFlight(t *testing.T) {
	dir := t.TempDir()
	r := newRegistry(t, Config{Policy: Policy{MaxCallTimeout: 10 * time.Minute}})
	long := func(m map[string]any) { caps(m)["callTimeout"] = "10m" }
	for _, c := range []struct{ plugin, wasm, tool string }{
		{"echo", guestWasm(t, "echo"), "spin"},
		{"spin", fixtureWasm(t, "spin"), "spin_wat"},
	} {
		t.Run(c.plugin, func(t *testing.T) {
			if _, err := r.Load(context.Background(), install(t, dir, c.plugin, c.wasm, long)); err != nil {
				t.Fatal(err)
			}
			pinned, release := r.PinToolset()
			defer release()
			done := spinningCall(t, r, c.plugin, c.tool)
			if err := r.Unload(context.Background(), c.plugin); err != nil {
				t.Fatal(err)
			}
			err := hangGuard(t, done, "a spinning call of an unloaded plugin (its timeout is 10m)")
			if !errors.Is(err, ErrUnloaded) || errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "stopped: plugin unloaded") {
				t.Fatalf("call = %v", err)
			}
			_, err = pinned.Call(context.Background(), call(c.tool, `{}`), &loop.ToolEnv{})
			if !errors.Is(err, ErrUnloaded) {
				t.Fatalf("a pinned turn's call after the unload = %v", err)
			}
		})
	}
}

// A replaced version's call in flight may finish within ReplacedGrace;
// one that spins stops then, saying it was replaced, long before its call
// timeout of 10 minutes. The new version serves meanwhile.
func TestReplacedVersionsCallsStopAfterAGrace(t *testing.T) {
	dir := t.TempDir()
	r := newRegistry(t, Config{Policy: Policy{MaxCallTimeout: 10 * time.Minute}})
	version := func(v string) func(m map[string]any) {
		return func(m map[string]any) { caps(m)["callTimeout"] = "10m"; m["version"] = v }
	}
	src := install(t, dir, "spin", fixtureWasm(t, "spin"), version("1.0.0"))
	if _, err := r.Load(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	done := spinningCall(t, r, "spin", "spin_wat")
	install(t, dir, "spin", fixtureWasm(t, "spin"), version("2.0.0"))
	if _, err := r.Load(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	if p, _ := r.Plugin("spin"); p.Version() != "2.0.0" {
		t.Fatalf("serving %s", p.Version())
	}
	err := hangGuard(t, done, "a spinning call of a replaced version (its timeout is 10m)")
	if !errors.Is(err, ErrUnloaded) || !strings.Contains(err.Error(), "replaced by version 2.0.0") {
		t.Fatalf("call = %v", err)
	}
}
