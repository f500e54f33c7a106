package plugins

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every example plugin of the repository (Go, Rust, C, AssemblyScript,
// WAT, Extism) and every Go test guest passes admission with room: each
// measure is at most a quarter of its default limit. Run with -v to see
// the measures (they are what the defaults were chosen from).
func TestModuleLimitsAdmitEveryExampleWithRoom(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "examples", "plugins", "*", "*.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	goExamples := 0
	for _, p := range paths {
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "main.go")); err == nil {
			goExamples++
		}
	}
	if goExamples == 0 {
		t.Fatal("no Go example plugin built: run make plugins-go")
	}
	paths = append(paths, guestWasm(t, "echo"), guestWasm(t, "xecho"))
	if len(paths) < 10 {
		t.Fatalf("only %d modules found", len(paths))
	}
	lim := ModuleLimits{}.withDefaults()
	quarter := func(v int64) int64 { return v / 4 }
	for _, p := range paths {
		bin, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s := measure(bin)
		t.Logf("%-40s %+v", filepath.Base(p), s)
		if !s.decoded {
			t.Errorf("%s: the code holds an instruction admission cannot decode", p)
		}
		if err := admit(bin, ModuleLimits{}); err != nil {
			t.Errorf("%s refused: %v", p, err)
		}
		roomy := ModuleLimits{
			ModuleBytes: quarter(lim.ModuleBytes), Functions: quarter(lim.Functions),
			FunctionBytes: quarter(lim.FunctionBytes), FunctionInstructions: quarter(lim.FunctionInstructions),
			FunctionBranches: quarter(lim.FunctionBranches), Locals: quarter(lim.Locals),
			FunctionCompileCost: quarter(lim.FunctionCompileCost), Nesting: quarter(lim.Nesting), BrTableTargets: quarter(lim.BrTableTargets),
			TableElements: quarter(lim.TableElements), Imports: quarter(lim.Imports), Exports: quarter(lim.Exports),
			Globals: quarter(lim.Globals), Types: quarter(lim.Types), DataSegments: quarter(lim.DataSegments),
			ElemSegments: quarter(lim.ElemSegments), CustomBytes: quarter(lim.CustomBytes),
		}
		if err := admit(bin, roomy); err != nil {
			t.Errorf("%s is within 4x of a default limit: %v", p, err)
		}
	}
}

// Each limit refuses a module over it, naming the limit; the same module
// is admitted once the limit is raised (so the refusal is the limit's).
func TestModuleLimitsRefuseNamingTheLimit(t *testing.T) {
	bin, err := os.ReadFile(guestWasm(t, "echo"))
	if err != nil {
		t.Fatal(err)
	}
	s := measure(bin)
	cases := []struct {
		name string
		have int64
		set  func(*ModuleLimits, int64)
	}{
		{"moduleBytes", s.bytes, func(l *ModuleLimits, v int64) { l.ModuleBytes = v }},
		{"functions", s.functions, func(l *ModuleLimits, v int64) { l.Functions = v }},
		{"functionBytes", s.maxFunctionBytes, func(l *ModuleLimits, v int64) { l.FunctionBytes = v }},
		{"functionInstructions", s.maxInstructions, func(l *ModuleLimits, v int64) { l.FunctionInstructions = v }},
		{"functionBranches", s.maxBranches, func(l *ModuleLimits, v int64) { l.FunctionBranches = v }},
		{"locals", s.maxLocals, func(l *ModuleLimits, v int64) { l.Locals = v }},
		{"functionCompileCost", s.maxCompileCost, func(l *ModuleLimits, v int64) { l.FunctionCompileCost = v }},
		{"nesting", s.maxNesting, func(l *ModuleLimits, v int64) { l.Nesting = v }},
		{"brTableTargets", s.maxBrTable, func(l *ModuleLimits, v int64) { l.BrTableTargets = v }},
		{"tableElements", s.maxTable, func(l *ModuleLimits, v int64) { l.TableElements = v }},
		{"imports", s.imports, func(l *ModuleLimits, v int64) { l.Imports = v }},
		{"exports", s.exports, func(l *ModuleLimits, v int64) { l.Exports = v }},
		{"globals", s.globals, func(l *ModuleLimits, v int64) { l.Globals = v }},
		{"types", s.types, func(l *ModuleLimits, v int64) { l.Types = v }},
		{"dataSegments", s.data, func(l *ModuleLimits, v int64) { l.DataSegments = v }},
		{"elemSegments", s.elems, func(l *ModuleLimits, v int64) { l.ElemSegments = v }},
		{"customBytes", s.customBytes, func(l *ModuleLimits, v int64) { l.CustomBytes = v }},
	}
	tested := 0
	for _, c := range cases {
		if c.have <= 1 {
			// the module has at most one: a limit of zero is the default
			t.Logf("%s: the guest has at most one, not tested on it", c.name)
			continue
		}
		tested++
		var lim ModuleLimits
		c.set(&lim, c.have-1)
		err := admit(bin, lim)
		if err == nil || !errors.Is(err, ErrModuleLimit) || !strings.Contains(err.Error(), "("+c.name+")") {
			t.Errorf("%s at one under the module's measure: %v", c.name, err)
		}
	}
	if tested < 15 {
		t.Fatalf("only %d limits tested", tested)
	}
	if err := admit(bin, ModuleLimits{}); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}
