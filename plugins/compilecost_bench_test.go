package plugins

import (
	"context"
	"fmt"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
)

// localsAcrossBlocks is one function declaring locals i32 locals and
// running blocks blocks, each a br_if out of it and an add of two locals
// into a third (two branches a block): the shape whose compile grows with
// locals squared times branches (ModuleLimits.FunctionCompileCost).
func localsAcrossBlocks(locals, blocks int) []byte {
	b := appendU32([]byte{1}, uint32(locals))
	b = append(b, 0x7f)
	for i := range blocks {
		x, y, z := uint32(i%locals), uint32((i*7+1)%locals), uint32((i*13+2)%locals)
		b = append(b, 0x02, 0x40, 0x20, 0, 0x0d, 0, 0x20)
		b = append(appendU32(append(appendU32(b, x), 0x20), y), 0x6a, 0x21)
		b = append(appendU32(b, z), 0x0b)
	}
	return append(b, 0x0b)
}

// BenchmarkCompileAtTheLimits: what loading the worst modules the default
// ModuleLimits admit costs, step by step: measure (the admission pass),
// the rewrite that adds the interrupt checks, and wazero's compile of the
// rewritten module (what a load compiles) and of the module as it came.
// Each module is one function at a limit: as many ifs, or memory.fill in a
// loop, as FunctionBranches admits, and locals kept across blocks at the
// FunctionCompileCost limit for three locals counts. cpu-ms/op is the
// process's CPU time (both compile workers), steadier than ns/op on a
// shared machine.
//
//	go test -run '^$' -bench CompileAtTheLimits -benchtime 1x ./plugins/
func BenchmarkCompileAtTheLimits(b *testing.B) {
	lim := ModuleLimits{}.withDefaults()
	shapes := []struct {
		name string
		body []byte
	}{
		{fmt.Sprintf("ifs=%d", lim.FunctionBranches-2), ifsBody(int(lim.FunctionBranches - 2))},
		{fmt.Sprintf("fills=%d", (lim.FunctionBranches-2)/2), fillLoopBody(int(lim.FunctionBranches-2) / 2)},
	}
	for _, locals := range []int64{350, 700, 1400} {
		blocks := min(lim.FunctionCompileCost/locals/locals, lim.FunctionBranches) / 2
		shapes = append(shapes, struct {
			name string
			body []byte
		}{fmt.Sprintf("locals=%d,blocks=%d", locals, blocks), localsAcrossBlocks(int(locals), int(blocks))})
	}
	for _, s := range shapes {
		bin := wasmModule(1, [][]byte{s.body})
		if err := admit(bin, lim); err != nil {
			b.Fatalf("%s: %v", s.name, err)
		}
		run := func(name string, f func()) {
			b.Run(s.name+"/"+name, func(b *testing.B) {
				cpu := cpuTime()
				for b.Loop() {
					f()
				}
				b.ReportMetric(float64((cpuTime()-cpu).Milliseconds())/float64(b.N), "cpu-ms/op")
			})
		}
		run("measure", func() { measure(bin) })
		run("rewrite", func() {
			if _, _, why := interruptibleCode(bin); why != nil {
				b.Fatal(why)
			}
		})
		code, _, _ := interruptibleCode(bin)
		for _, c := range []struct {
			name string
			code []byte
		}{{"compile-rewritten", code}, {"compile-as-is", bin}} {
			run(c.name, func() {
				ctx := experimental.WithCompilationWorkers(context.Background(), compileWorkers)
				rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
				defer rt.Close(ctx)
				if _, err := rt.CompileModule(ctx, c.code); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
