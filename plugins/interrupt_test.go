package plugins

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/looopy-go/looopy/loop"
)

// repoGuests are the .wasm files built from this repository's sources: the
// example plugins (Go, C, Rust, AssemblyScript, WAT) and the hostile WAT
// fixtures.
func repoGuests(t testing.TB) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"../examples/plugins/*/*.wasm", "testdata/wat/*.wasm"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 10 {
		t.Fatalf("found %d guests; build them first (make plugins)", len(files))
	}
	return files
}

// checkedFunctions decodes a rewritten code section and counts the
// function entries and loop headers that are followed by the fuel check.
func checkedFunctions(t *testing.T, bin []byte) (entries, loops, unchecked int) {
	t.Helper()
	r := &wreader{b: bin, pos: 8}
	var globals, fuel uint32
	var code []byte
	for r.pos < len(r.b) {
		id, _ := r.byte()
		n, _ := r.u32()
		body, err := r.take(int(n))
		if err != nil {
			t.Fatal(err)
		}
		switch id {
		case secImport:
			g, _, _, err := importedGlobals(body)
			if err != nil {
				t.Fatal(err)
			}
			globals += g
		case secGlobal:
			g, _ := (&wreader{b: body}).u32()
			globals += g
		case secCode:
			code = body
		}
	}
	fuel = globals - 2
	prefix := appendU32([]byte{0x23}, fuel)
	cr := &wreader{b: code}
	count, _ := cr.u32()
	for range count {
		size, _ := cr.u32()
		fn, _ := cr.take(int(size))
		fr := &wreader{b: fn}
		groups, _ := fr.u32()
		for range groups {
			fr.u32()
			fr.valtype()
		}
		if bytes.HasPrefix(fn[fr.pos:], prefix) {
			entries++
		} else {
			unchecked++
		}
		for fr.pos < len(fn) {
			op, _ := fr.byte()
			if err := skipImmediates(fr, op, globals); err != nil {
				t.Fatalf("rewritten code does not decode: %v", err)
			}
			if op == 0x03 {
				if bytes.HasPrefix(fn[fr.pos:], prefix) {
					loops++
				} else {
					unchecked++
				}
			}
		}
	}
	return entries, loops, unchecked
}

// Every guest built in this repository is rewritten (or, for an Extism
// guest, left to the Extism SDK), the rewrite compiles, and every function
// entry and loop header carries the check.
func TestInterruptRewritesEveryRepoGuest(t *testing.T) {
	ctx := context.Background()
	// The interpreter validates a module as the compiler does, at a
	// fraction of the cost; the compiled rewrite runs in every other test.
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	rewritten := 0
	for _, f := range repoGuests(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			bin, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			in, err := addInterrupt(bin)
			if errors.Is(err, errSkip) {
				if !bytes.Contains(bin, []byte(extismImportModule)) {
					t.Fatal("skipped, but does not import Extism's host module")
				}
				return
			}
			if err != nil {
				t.Fatalf("not rewritten: %v", err)
			}
			rewritten++
			if _, err := rt.CompileModule(ctx, in.bin); err != nil {
				t.Fatalf("rewrite does not compile: %v", err)
			}
			entries, loops, unchecked := checkedFunctions(t, in.bin)
			if unchecked != 0 || entries == 0 {
				t.Fatalf("%d function entries and %d loops checked, %d not", entries, loops, unchecked)
			}
			// A rewritten module fed to the rewriter again is refused: it
			// exports the reserved names.
			if _, err := addInterrupt(in.bin); !errors.Is(err, errReservedExport) {
				t.Fatalf("rewriting a rewrite: %v; want errReservedExport", err)
			}
		})
	}
	if rewritten < 8 {
		t.Fatalf("only %d guests rewritten", rewritten)
	}
}

// A module that names a global it does not have would, once the host adds
// its globals, be able to write the stop flag: it is refused, as is one
// that exports a reserved name. A module the rewriter cannot read is
// compiled as it came, under wazero's checks, and still stopped.
func TestInterruptRewriteRefusals(t *testing.T) {
	wat := func(t *testing.T, src string) string {
		t.Helper()
		dir := t.TempDir()
		in, out := filepath.Join(dir, "m.wat"), filepath.Join(dir, "m.wasm")
		if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if b, err := exec.Command("wat2wasm", "--no-check", "-o", out, in).CombinedOutput(); err != nil {
			t.Fatalf("wat2wasm: %v\n%s", err, b)
		}
		return out
	}
	if _, err := exec.LookPath("wat2wasm"); err != nil {
		t.Fatal("wat2wasm (Debian's wabt) is needed to build the fixtures")
	}
	r := newRegistry(t, Config{})
	dir := t.TempDir()
	abi := `(func (export "looopy_abi_v1")) (func (export "looopy_alloc") (param i32) (result i32) (i32.const 1024))`
	cases := []struct{ name, src, want string }{
		{"foreign-global", `(module (memory (export "memory") 1) ` + abi + `
			(func (export "looopy_call") (param i32 i32 i32) (result i64) (global.set 1 (i32.const 0)) (i64.const 0)))`,
			"refers to a global index it does not define"},
		{"reserved-export", `(module (memory (export "memory") 1) ` + abi + `
			(global (export "looopy:fuel") (mut i32) (i32.const 1))
			(func (export "looopy_call") (param i32 i32 i32) (result i64) (i64.const 0)))`,
			`exports a name starting with "looopy:"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.Load(context.Background(), install(t, dir, c.name, wat(t, c.src), nil))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("load: %v; want an error containing %q", err, c.want)
			}
		})
	}
}

// A guest that spins between two exits to Go would hold its thread through
// a stop-the-world, and stop the whole host with it: the fuel check's exit
// lets the collector run while a rewritten guest spins, and a cancel still
// stops it.
func TestSpinningGuestDoesNotStopTheCollector(t *testing.T) {
	dir := t.TempDir()
	r := newRegistry(t, Config{})
	slow := func(m map[string]any) { caps(m)["callTimeout"] = "1h" }
	for _, name := range []string{"echo", "spin"} {
		wasm := fixtureWasm(t, "spin")
		if name == "echo" {
			wasm = guestWasm(t, "echo")
		}
		p, err := r.Load(context.Background(), install(t, dir, name, wasm, slow))
		if err != nil {
			t.Fatal(err)
		}
		if pl, _ := r.Plugin(p.Name); pl.stopper != "fuel" {
			t.Fatalf("%s is stopped by %q; want the fuel checks", name, pl.stopper)
		}
	}
	for _, tool := range []string{"spin", "spin_wat"} {
		t.Run(tool, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := r.Call(ctx, call(tool, `{}`), &loop.ToolEnv{})
				done <- err
			}()
			p, _ := r.Plugin(map[string]string{"spin": "echo", "spin_wat": "spin"}[tool])
			for p.calls.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond)
			gc := make(chan struct{})
			go func() {
				for range 3 {
					runtime.GC() // each stops the world: every thread must come out
				}
				close(gc)
			}()
			select {
			case <-gc:
			case err := <-done:
				t.Fatalf("the spin ended by itself: %v", err)
			case <-time.After(2 * time.Minute):
				t.Fatal("the collector is still waiting for the spinning guest's thread")
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("error = %v; want context.Canceled", err)
			}
		})
	}
}

// FuzzAddInterrupt: whatever the bytes, the rewriter returns an error or a
// module; when wazero takes the input, it takes the rewrite too.
func FuzzAddInterrupt(f *testing.F) {
	for _, file := range []string{"testdata/wat/spin.wasm", "testdata/wat/startspin.wasm", "testdata/wat/wecho.wasm", "testdata/wat/recurse.wasm"} {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	ctx := context.Background()
	// The interpreter validates a module as the compiler does, at a
	// fraction of the cost; the compiled rewrite runs in every other test.
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	f.Fuzz(func(t *testing.T, bin []byte) {
		in, err := addInterrupt(bin)
		if err != nil {
			return
		}
		orig, oerr := rt.CompileModule(ctx, bin)
		if oerr != nil {
			return
		}
		_ = orig.Close(ctx)
		cm, err := rt.CompileModule(ctx, in.bin)
		if err != nil {
			t.Fatalf("wazero takes the module but not its rewrite: %v", err)
		}
		_ = cm.Close(ctx)
	})
}
