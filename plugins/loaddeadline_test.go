package plugins

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// hangGuard fails the test when ch does not deliver: a guard against a
// wedge, never a timing assertion (it is far above any load's time).
func hangGuard[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s: wedged", what)
	}
	var zero T
	return zero
}

// A guest that loops forever in its start section, its _initialize or its
// describe is refused once the load timeout passes, with an error that
// says which step, and the failure is listed.
func TestLoadTimeoutRefusesSpinningGuests(t *testing.T) {
	dir := t.TempDir()
	r := newRegistry(t, Config{Policy: Policy{LoadTimeout: 300 * time.Millisecond}})
	for _, c := range []struct{ name, step string }{
		{"startspin", "instantiate"}, {"initspin", "instantiate"}, {"describespin", "describe"},
	} {
		t.Run(c.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := r.Load(context.Background(), install(t, dir, c.name, fixtureWasm(t, c.name), nil))
				done <- err
			}()
			err := hangGuard(t, done, "load of "+c.name)
			if !errors.Is(err, ErrLoadTimeout) || !strings.Contains(err.Error(), c.step) || !strings.Contains(err.Error(), "300ms") {
				t.Fatalf("load error = %v; want %v in %s", err, ErrLoadTimeout, c.step)
			}
			found := false
			for _, in := range r.List() {
				if in.Name == c.name && in.State == "failed" && strings.Contains(in.LastError, "did not finish") {
					found = true
				}
			}
			if !found {
				t.Fatalf("the failure is not listed: %+v", r.List())
			}
		})
	}
}

// While a plugin's load spins (with a load timeout far away), other plugins
// load and serve, the spinning load is listed as loading, and closing the
// registry stops it: nothing waits for it. The shared compilation cache
// holds echo already (calls_test.go loads it earlier in the run): a cold
// compile of the Go guest under the race detector took minutes on a loaded
// machine, past the hang guard.
func TestSpinningLoadBlocksNothing(t *testing.T) {
	dir := t.TempDir()
	r, err := New(Config{CacheDir: testCacheDir, Logger: testLogger(t), Policy: Policy{LoadTimeout: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() }) // stops the spinning load if the test ends early
	spin := install(t, dir, "initspin", fixtureWasm(t, "initspin"), nil)
	done := make(chan error, 1)
	go func() {
		_, err := r.Load(context.Background(), spin)
		done <- err
	}()
	waitFor(t, "the spinning load to begin", func() bool { return len(r.Loading()) == 1 })

	loaded := make(chan error, 1)
	go func() {
		_, err := r.Load(context.Background(), install(t, dir, "echo", guestWasm(t, "echo"), nil))
		loaded <- err
	}()
	if err := hangGuard(t, loaded, "loading echo beside a spinning load"); err != nil {
		t.Fatal(err)
	}
	if res := mustCall(t, r, "echo", `{"text":"served"}`); res.Content != "served" {
		t.Fatalf("echo = %+v", res)
	}
	if l := r.Loading(); len(l) != 1 || !strings.HasSuffix(l[0], "initspin/"+ManifestFile) {
		t.Fatalf("loading = %v", l)
	}

	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	if err := hangGuard(t, closed, "closing the registry during a spinning load"); err != nil {
		t.Fatal(err)
	}
	if err := hangGuard(t, done, "the spinning load after close"); err == nil || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("spinning load after close = %v", err)
	}
}

// The watcher loads the other plugins of the folder while one spins, and
// stops when asked.
func TestWatcherNotWedgedBySpinningPlugin(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	loaded := map[string]bool{}
	r := newRegistry(t, Config{Policy: Policy{LoadTimeout: time.Hour}, OnEvent: func(ev Event) {
		mu.Lock()
		defer mu.Unlock()
		if ev.Kind == EventLoaded {
			loaded[ev.Name] = true
		}
	}})
	install(t, dir, "describespin", fixtureWasm(t, "describespin"), nil)
	install(t, dir, "echo", guestWasm(t, "echo"), nil)
	w, err := NewWatcher(r, WatchConfig{Dir: dir, Debounce: 20 * time.Millisecond, Rescan: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	waitFor(t, "echo to load beside the spinning plugin", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return loaded["echo"]
	})
	if res := mustCall(t, r, "echo", `{"text":"x"}`); res.Content != "x" {
		t.Fatalf("echo = %+v", res)
	}
	cancel()
	if err := hangGuard(t, stopped, "stopping the watcher during a spinning load"); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds; the deadline is a hang guard.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: wedged", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
