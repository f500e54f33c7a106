package plugins

import (
	"context"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/pdk"
)

// The request a tool call sends, as the host encodes it.
const echoRequest = `{"call":{"id":"c-echo","name":"echo","arguments":{"text":"hello, world"}},"contextId":"ctx","taskId":"task"}`

// BenchmarkToolCall compares a warm tool call through the host's whole tool
// path (schema check, pool, call, result) with a bare Extism Plugin.Call and a
// bare wazero call of the same kind of guest. The -wat variants use the
// smallest Looopy-ABI guest, to show what the host itself costs.
func BenchmarkToolCall(b *testing.B) {
	dir := b.TempDir()
	r := newRegistry(b, Config{})
	ctx := context.Background()
	for _, p := range []struct{ name, wasm string }{
		{"echo", guestWasm(b, "echo")}, {"wecho", fixtureWasm(b, "wecho")},
	} {
		if _, err := r.Load(ctx, install(b, dir, p.name, p.wasm, nil)); err != nil {
			b.Fatal(err)
		}
	}
	env := &loop.ToolEnv{ContextID: "ctx", TaskID: "task"}
	hostPath := func(tool, want string) func(b *testing.B) {
		return func(b *testing.B) {
			c := call(tool, `{"text":"hello, world"}`)
			b.ReportAllocs()
			loopCPU(b, func() {
				res, err := r.Call(ctx, c, env)
				if err != nil || res.IsError || res.Content != want {
					b.Fatal(res, err)
				}
			})
		}
	}
	b.Run("host", hostPath("echo", "hello, world"))
	b.Run("host-wat", hostPath("wecho", "echo"))

	b.Run("extism", func(b *testing.B) {
		bin, err := os.ReadFile(guestWasm(b, "xecho"))
		if err != nil {
			b.Fatal(err)
		}
		cp, err := extism.NewCompiledPlugin(ctx, extism.Manifest{Wasm: []extism.Wasm{extism.WasmData{Data: bin}}},
			extism.PluginConfig{EnableWasi: true, RuntimeConfig: wazero.NewRuntimeConfig().WithCloseOnContextDone(true).WithMemoryLimitPages(512)},
			extismFuncs{extism.NewHostFunctionWithStack("log", func(context.Context, *extism.CurrentPlugin, []uint64) {},
				[]extism.ValueType{extism.ValueTypeI64, extism.ValueTypeI64}, nil)}.withNamespace("looopy"))
		if err != nil {
			b.Fatal(err)
		}
		defer cp.Close(ctx)
		plug, err := cp.Instance(ctx, extism.PluginInstanceConfig{})
		if err != nil {
			b.Fatal(err)
		}
		defer plug.Close(ctx)
		in := []byte(strings.Replace(echoRequest, `"echo"`, `"xecho"`, 1))
		b.ReportAllocs()
		loopCPU(b, func() {
			_, out, err := plug.Call("call_tool", in)
			if err != nil || !strings.Contains(string(out), "hello, world") {
				b.Fatal(string(out), err)
			}
		})
	})

	bare := func(wasm string, want string) func(b *testing.B) {
		return func(b *testing.B) {
			bin, err := os.ReadFile(wasm)
			if err != nil {
				b.Fatal(err)
			}
			rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithMemoryLimitPages(512))
			defer rt.Close(ctx)
			wasi_snapshot_preview1.MustInstantiate(ctx, rt)
			mod, err := rt.InstantiateWithConfig(ctx, bin, wazero.NewModuleConfig().WithStartFunctions("_initialize").WithName("").WithSysNanotime().WithSysWalltime())
			if err != nil {
				b.Fatal(err)
			}
			alloc, fn, mem := mod.ExportedFunction(pdk.ExportAlloc), mod.ExportedFunction(pdk.ExportCall), mod.Memory()
			in := []byte(echoRequest)
			var stack [3]uint64
			b.ReportAllocs()
			loopCPU(b, func() {
				stack[0] = uint64(len(in))
				if err := alloc.CallWithStack(ctx, stack[:]); err != nil {
					b.Fatal(err)
				}
				ptr := uint32(stack[0])
				mem.Write(ptr, in)
				stack[0], stack[1], stack[2] = uint64(pdk.OpToolCall), uint64(ptr), uint64(len(in))
				if err := fn.CallWithStack(ctx, stack[:]); err != nil {
					b.Fatal(err)
				}
				out, _ := mem.Read(uint32(stack[0]>>32), uint32(stack[0]))
				if len(out) == 0 || out[0] != 0 || !strings.Contains(string(out), want) {
					b.Fatal(string(out))
				}
			})
		}
	}
	b.Run("wazero", bare(guestWasm(b, "echo"), `"hello, world"`))
	b.Run("wazero-wat", bare(fixtureWasm(b, "wecho"), `"echo"`))
}

type extismFuncs []extism.HostFunction

func (h extismFuncs) withNamespace(ns string) []extism.HostFunction {
	for i := range h {
		h[i].SetNamespace(ns)
	}
	return h
}

// BenchmarkColdStart measures loading a Go guest (read, verify, compile,
// instantiate, describe) into a fresh registry, without and with the
// compilation cache on disk.
func BenchmarkColdStart(b *testing.B) {
	wasm := guestWasm(b, "echo")
	dir := b.TempDir()
	pd := install(b, dir, "echo", wasm, nil)
	cache := b.TempDir()
	for _, c := range []struct{ name, cache string }{{"nocache", ""}, {"diskcache", cache}} {
		b.Run(c.name, func(b *testing.B) {
			if c.cache != "" { // warm the cache once
				r, _ := New(Config{CacheDir: c.cache})
				if _, err := r.Load(context.Background(), pd); err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
			for b.Loop() {
				r, err := New(Config{CacheDir: c.cache})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := r.Load(context.Background(), pd); err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
		})
	}
	b.Run("wat", func(b *testing.B) {
		pd := install(b, dir, "wecho", fixtureWasm(b, "wecho"), nil)
		for b.Loop() {
			r, _ := New(Config{})
			if _, err := r.Load(context.Background(), pd); err != nil {
				b.Fatal(err)
			}
			r.Close()
		}
	})
}

// BenchmarkInstance measures making one pooled instance of a loaded plugin
// (instantiate and a first describe), and reports what an instance holds: its
// guest's linear memory and the host heap it keeps, measured over 16 live
// instances.
func BenchmarkInstance(b *testing.B) {
	dir := b.TempDir()
	for _, g := range []struct{ name, wasm string }{{"go", guestWasm(b, "echo")}, {"wat", fixtureWasm(b, "wecho")}} {
		b.Run(g.name, func(b *testing.B) {
			r := newRegistry(b, Config{})
			if _, err := r.Load(context.Background(), install(b, dir, g.name, g.wasm, nil)); err != nil {
				b.Fatal(err)
			}
			p, _ := r.Plugin(g.name)
			newInst := func() instance {
				in, err := p.drv.newInstance(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				if _, err := in.call(context.Background(), pdk.OpDescribe, []byte("{}")); err != nil {
					b.Fatal(err)
				}
				return in
			}
			for b.Loop() {
				newInst().close()
			}
			b.StopTimer()
			const live = 16
			var ms0, ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			insts := make([]instance, live)
			var linear uint32
			for i := range insts {
				insts[i] = newInst()
				linear += insts[i].(*looopyInstance).mem.Size()
			}
			runtime.GC()
			runtime.ReadMemStats(&ms1)
			b.ReportMetric(float64(linear)/live/1024, "KiB-linear/instance")
			b.ReportMetric(float64(int64(ms1.HeapInuse)-int64(ms0.HeapInuse))/live/1024, "KiB-heap/instance")
			for _, in := range insts {
				in.close()
			}
		})
	}
}

// BenchmarkConcurrentCalls measures calls/s through the host's tool path
// with a pool of 4 instances and many callers.
func BenchmarkConcurrentCalls(b *testing.B) {
	r := newRegistry(b, Config{})
	if _, err := r.Load(context.Background(), install(b, b.TempDir(), "echo", guestWasm(b, "echo"), func(m map[string]any) {
		caps(m)["instances"] = 4
	})); err != nil {
		b.Fatal(err)
	}
	c := call("echo", `{"text":"hello, world"}`)
	env := &loop.ToolEnv{}
	b.SetParallelism(4)
	b.ReportAllocs()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := r.Call(context.Background(), c, env)
			if err != nil || res.Content != "hello, world" {
				b.Error(res, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
}

// BenchmarkHotReload measures the time from a changed .wasm on disk to the
// new version serving, through the watcher (its debounce included), with
// the compilation cache warm.
func BenchmarkHotReload(b *testing.B) {
	for _, g := range []struct{ name, a, b string }{
		{"go", guestWasm(b, "echo"), guestWasm(b, "echo2")},
		{"wat", fixtureWasm(b, "wecho"), fixtureWasm(b, "wecho")},
	} {
		b.Run(g.name, func(b *testing.B) {
			dir := b.TempDir()
			events := make(chan Event, 4)
			r := newRegistry(b, Config{CacheDir: b.TempDir(), OnEvent: func(ev Event) { events <- ev }})
			w, err := NewWatcher(r, WatchConfig{Dir: dir, Debounce: 20 * time.Millisecond, Rescan: -1})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); _ = w.Run(ctx) }()
			defer func() { cancel(); wg.Wait() }()
			// A watcher may see the new .wasm before the new manifest: that
			// state fails to load (the old version serves on) and the next
			// one loads.
			wait := func() {
				for ev := range events {
					if ev.Kind == EventLoaded {
						return
					}
				}
			}
			install(b, dir, "p", g.a, nil)
			wait()
			install(b, dir, "p", g.b, nil) // warm the cache for both
			wait()
			i := 0
			for b.Loop() {
				i++
				wasm := g.a
				if i%2 == 1 {
					wasm = g.b
				}
				install(b, dir, "p", wasm, func(m map[string]any) { m["version"] = "1.0." + string(rune('0'+i%10)) })
				wait()
			}
		})
	}
}

// cpuTime is the process's user and system CPU time. The benchmarks report
// it per op next to the wall time: on a shared machine the wall time also
// counts the time spent waiting for a core.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loopCPU runs body b.N times (via b.Loop) and reports CPU ns per op.
func loopCPU(b *testing.B, body func()) {
	c0 := cpuTime()
	n := 0
	for b.Loop() {
		body()
		n++
	}
	if n > 0 {
		b.ReportMetric(float64(cpuTime()-c0)/float64(n), "cpu-ns/op")
	}
}
