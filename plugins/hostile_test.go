package plugins

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// background keeps ordinary echo calls running until stop is called, and
// fails the test if any of them does not answer right.
func background(t *testing.T, r loop.Toolset, workers int) (stop func() int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ok atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				text := strings.Repeat("z", w+1) + string(rune('a'+i%26))
				res, err := r.Call(context.Background(), call("echo", `{"text":"`+text+`"}`), &loop.ToolEnv{})
				if err != nil || res.IsError || res.Content != text {
					t.Errorf("ordinary call during an attack: %+v, %v", res, err)
					return
				}
				ok.Add(1)
			}
		}()
	}
	return func() int64 {
		cancel()
		wg.Wait()
		return ok.Load()
	}
}

func TestHostileCallsAreContained(t *testing.T) {
	dir := t.TempDir()
	r := newRegistry(t, Config{})
	fast := func(m map[string]any) {
		caps(m)["callTimeout"] = "1s"
		caps(m)["instances"] = 6
	}
	// The Go guest serves the ordinary calls too: its timeout leaves them
	// room on a busy machine, and its spin is stopped by it all the same.
	slow := func(m map[string]any) {
		caps(m)["callTimeout"] = "10s"
		caps(m)["instances"] = 6
		caps(m)["outputLimit"] = 65536
	}
	if _, err := r.Load(context.Background(), install(t, dir, "echo", guestWasm(t, "echo"), slow)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"spin", "recurse", "trap", "grow", "bigout", "badstatus"} {
		edit := fast
		if name == "grow" {
			edit = slow // growing to the limit copies memory; slow under the race detector
		}
		if _, err := r.Load(context.Background(), install(t, dir, name, fixtureWasm(t, name), edit)); err != nil {
			t.Fatal(err)
		}
	}
	// Deep recursion ends either at the guest's stack limit (a trap) or, on
	// a slow machine, at the call timeout: both contain it.
	recursion := errors.Join(ErrTrap, ErrTimeout)
	cases := []struct {
		tool, args string
		is         error
		want       string // in the error
	}{
		{"spin", `{}`, ErrTimeout, "ran past its timeout of 10s"},
		{"spin_wat", `{}`, ErrTimeout, "ran past its timeout of 1s"},
		{"hog", `{}`, ErrTrap, "fatal error: out of memory"},
		{"grow_wat", `{}`, ErrTrap, "unreachable"},
		{"recurse", `{}`, recursion, `plugin "echo": tool call`},
		{"recurse_wat", `{}`, recursion, `plugin "recurse": tool call`},
		{"trap_wat", `{}`, ErrTrap, "unreachable"},
		{"big", `{"bytes": 200000}`, ErrOutputLimit, "over the plugin's limit of 65536"},
		{"bigout_wat", `{}`, ErrOutputLimit, "output of 2147483646 bytes"},
		{"badstatus_wat", `{}`, ErrTrap, "status byte 7"},
	}
	stop := background(t, r, 2)
	for _, c := range cases {
		t.Run(c.tool, func(t *testing.T) {
			res, err := r.Call(context.Background(), call(c.tool, c.args), &loop.ToolEnv{})
			if err == nil {
				t.Fatalf("no error; result %+v", res)
			}
			if !matches(err, c.is) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error = %v; want %v containing %q", err, c.is, c.want)
			}
			if !strings.Contains(err.Error(), "plugin ") {
				t.Fatalf("error does not name the plugin: %v", err)
			}
		})
	}
	if n := stop(); n == 0 {
		t.Fatal("no ordinary call completed during the attacks")
	}
	// every plugin still serves a normal call afterwards
	if res := mustCall(t, r, "echo", `{"text":"after"}`); res.Content != "after" {
		t.Fatalf("echo after attacks = %+v", res)
	}
	for _, in := range r.List() {
		if in.State != "serving" {
			t.Fatalf("%s: state %s", in.Name, in.State)
		}
	}
}

func TestLoadRefusals(t *testing.T) {
	dir := t.TempDir()
	r := newRegistry(t, Config{})
	echo := guestWasm(t, "echo")
	truncated := filepath.Join(t.TempDir(), "truncated.wasm")
	b, _ := os.ReadFile(echo)
	if err := os.WriteFile(truncated, b[:len(b)/3], 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, wasm string
		edit       func(m map[string]any)
		manifest   string // raw manifest instead
		want       []string
	}{
		{name: "noexports", wasm: fixtureWasm(t, "noexports"), want: []string{"noexports.wasm", "exports neither looopy_abi_v1 nor uses the Extism ABI"}},
		{name: "truncated", wasm: truncated, want: []string{"truncated.wasm", "compile"}},
		{name: "badhash", wasm: echo, edit: func(m map[string]any) { m["sha256"] = strings.Repeat("0", 64) },
			want: []string{"badhash.wasm", "sha256 is", "the manifest says 0000"}},
		{name: "ungranted", wasm: fixtureWasm(t, "ungranted"), want: []string{"ungranted.wasm", "looopy.kv_get, which was not granted"}},
		{name: "ungranted-policy", wasm: fixtureWasm(t, "ungranted"), edit: func(m map[string]any) {
			caps(m)["hostFunctions"] = []string{"kv_get"}
		}, want: []string{"looopy.kv_get, which was not granted"}},
		{name: "unknownimport", wasm: fixtureWasm(t, "unknownimport"), want: []string{"env.foo, which the host does not provide"}},
		{name: "unknownfield", wasm: echo, edit: func(m map[string]any) { m["colour"] = "red" },
			want: []string{"plugin.json", `unknown field "colour"`}},
		{name: "unknowncap", wasm: echo, edit: func(m map[string]any) { caps(m)["network"] = true },
			want: []string{`unknown field "network"`}},
		{name: "unknownfn", wasm: echo, edit: func(m map[string]any) { caps(m)["hostFunctions"] = []string{"exec"} },
			want: []string{`the host has no function "exec"`}},
		{name: "kindmismatch", wasm: echo, edit: func(m map[string]any) { m["kind"] = "model" },
			want: []string{`describe says kind "tool", the manifest "model"`}},
		{name: "toosmall", wasm: echo, edit: func(m map[string]any) { caps(m)["memoryPages"] = 8 },
			want: []string{"compile", "over limit of 8 pages"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var policy Policy
			if c.name == "ungranted-policy" {
				policy.HostFunctions = []string{"log"}
			}
			rr := r
			if policy.HostFunctions != nil {
				rr = newRegistry(t, Config{Policy: policy})
			}
			pd := install(t, dir, c.name, c.wasm, c.edit)
			_, err := rr.Load(context.Background(), pd)
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
			found := false
			for _, in := range rr.List() {
				if in.Name == c.name || strings.HasSuffix(in.Source, filepath.Join(c.name, ManifestFile)) {
					found = in.State == "failed" && in.LastError != ""
				}
			}
			if !found {
				t.Fatalf("List does not report the failure: %+v", rr.List())
			}
		})
	}
}

func TestCancelInterruptsGuest(t *testing.T) {
	dir := t.TempDir()
	r := newRegistry(t, Config{})
	slow := func(m map[string]any) { caps(m)["callTimeout"] = "1h" }
	if _, err := r.Load(context.Background(), install(t, dir, "echo", guestWasm(t, "echo"), slow)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Load(context.Background(), install(t, dir, "spin", fixtureWasm(t, "spin"), slow)); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"spin", "spin_wat"} {
		t.Run(tool, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := r.Call(ctx, call(tool, `{}`), &loop.ToolEnv{})
				done <- err
			}()
			// wait until the call runs in the guest, then cancel
			p, _ := r.Plugin(map[string]string{"spin": "echo", "spin_wat": "spin"}[tool])
			for p.calls.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond)
			cancel()
			err := <-done
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("error = %v; want context.Canceled", err)
			}
			if res := mustCall(t, r, "echo", `{"text":"still here"}`); res.Content != "still here" {
				t.Fatalf("echo = %+v", res)
			}
		})
	}
}

// matches is errors.Is against want, or against any error want joins.
func matches(err, want error) bool {
	if j, ok := want.(interface{ Unwrap() []error }); ok {
		for _, w := range j.Unwrap() {
			if errors.Is(err, w) {
				return true
			}
		}
		return false
	}
	return errors.Is(err, want)
}
