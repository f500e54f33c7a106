package abitest

import (
	"context"
	"testing"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"

	"github.com/looopy-go/looopy/pdk"
)

// A small tool call per fixture, for the warm-call benchmark and for
// touching an instance's memory before measuring it.
var sampleCalls = map[string][2]string{
	"c-textstats":       {"word_count", `{"text":"the quick brown fox"}`},
	"rust-hash":         {"hash", `{"text":"the quick brown fox"}`},
	"as-slugify":        {"slugify", `{"text":"The Quick Brown Fox"}`},
	"wat-add":           {"add", `{"a":19,"b":23}`},
	"as-extism-reverse": {"reverse", `{"text":"the quick brown fox"}`},
}

func mustOpen(b *testing.B, f fixture, m *manifest, wasm []byte, cache wazero.CompilationCache) plugin {
	b.Helper()
	p, err := open(context.Background(), f, m, wasm, cache, nil)
	if err != nil {
		b.Fatalf("%s: %v", f.dir, err)
	}
	return p
}

func mustClose(b *testing.B, p plugin) {
	if err := p.close(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkColdStart compiles and instantiates each plugin from its bytes,
// without a compilation cache: what the first load of a plugin costs.
func BenchmarkColdStart(b *testing.B) {
	for _, f := range fixtures {
		b.Run(f.lang, func(b *testing.B) {
			m, wasm := load(b, f)
			for b.Loop() {
				mustClose(b, mustOpen(b, f, m, wasm, nil))
			}
			// After the loop: b.Loop's first call resets reported metrics.
			b.ReportMetric(float64(len(wasm))/1024, "KiB-wasm")
		})
	}
}

// BenchmarkColdStartCached is the same with wazero's compilation cache on
// disk, already filled: what loading costs after a restart of the host.
func BenchmarkColdStartCached(b *testing.B) {
	ctx := context.Background()
	for _, f := range fixtures {
		b.Run(f.lang, func(b *testing.B) {
			m, wasm := load(b, f)
			dir := b.TempDir()
			warm, err := wazero.NewCompilationCacheWithDir(dir)
			if err != nil {
				b.Fatal(err)
			}
			mustClose(b, mustOpen(b, f, m, wasm, warm))
			_ = warm.Close(ctx)
			for b.Loop() {
				cache, err := wazero.NewCompilationCacheWithDir(dir)
				if err != nil {
					b.Fatal(err)
				}
				mustClose(b, mustOpen(b, f, m, wasm, cache))
				_ = cache.Close(ctx)
			}
		})
	}
}

// BenchmarkInstantiate makes one more instance of an already compiled plugin
// (what growing a pool costs) and reports the linear memory of an instance
// that has answered describe and one tool call, in 64 KiB pages.
func BenchmarkInstantiate(b *testing.B) {
	ctx := context.Background()
	for _, f := range fixtures {
		b.Run(f.lang, func(b *testing.B) {
			m, wasm := load(b, f)
			p := mustOpen(b, f, m, wasm, nil)
			defer mustClose(b, p)
			if _, _, err := p.invoke(ctx, pdk.OpDescribe, []byte("{}")); err != nil {
				b.Fatal(err)
			}
			c := sampleCalls[f.dir]
			if st, out, err := p.invoke(ctx, pdk.OpToolCall, request(c[0], c[1])); err != nil || st != pdk.StatusOK {
				b.Fatalf("%s: status %d, %s, %v", c[0], st, out, err)
			}
			pages := p.pages()

			switch p := p.(type) {
			case *looopyPlugin:
				cm, err := p.rt.CompileModule(ctx, wasm) // the runtime's cache: no recompilation
				if err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					g, err := instantiate(ctx, p.rt, cm)
					if err != nil {
						b.Fatal(err)
					}
					_ = g.mod.Close(ctx)
				}
			case *extismPlugin:
				for b.Loop() {
					in, err := p.cp.Instance(ctx, extism.PluginInstanceConfig{})
					if err != nil {
						b.Fatal(err)
					}
					_ = in.Close(ctx)
				}
			}
			// After the loop: b.Loop's first call resets reported metrics.
			b.ReportMetric(float64(pages), "pages/instance")
		})
	}
}

// BenchmarkToolCall is a warm tool call on one instance through the ABI
// alone (no schema check, no pool): the guest's own cost plus the calling
// convention's.
func BenchmarkToolCall(b *testing.B) {
	ctx := context.Background()
	for _, f := range fixtures {
		b.Run(f.lang, func(b *testing.B) {
			m, wasm := load(b, f)
			p := mustOpen(b, f, m, wasm, nil)
			defer mustClose(b, p)
			c := sampleCalls[f.dir]
			in := request(c[0], c[1])
			for b.Loop() {
				if st, out, err := p.invoke(ctx, pdk.OpToolCall, in); err != nil || st != pdk.StatusOK {
					b.Fatalf("%s: status %d, %s, %v", c[0], st, out, err)
				}
			}
		})
	}
}
