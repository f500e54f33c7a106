package plugins

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// ErrModuleLimit: a module declares more than the host admits (a limit of
// ModuleLimits); it was refused before it was compiled.
var ErrModuleLimit = errors.New("module over an admission limit")

// ModuleLimits bound what a module may declare, checked before it is
// compiled. wazero's compiler does not stop mid-function, and its time grows
// faster than linearly with some inputs (a long function with a loop, deep
// nesting, many locals): bounding each function bounds the work a compile
// that ran out of time still does before it notices (see
// Policy.CompileTimeout). A zero field means its default; a negative one, no
// limit. The defaults leave every example plugin of the repository (Go,
// Rust, C, AssemblyScript, WAT, Extism) several times of room.
type ModuleLimits struct {
	// ModuleBytes: size of the .wasm file (64 MiB).
	ModuleBytes int64
	// Functions: functions the module defines (100,000).
	Functions int64
	// FunctionBytes: size of one function's body (512 KiB).
	FunctionBytes int64
	// FunctionInstructions: instructions of one function (100,000).
	FunctionInstructions int64
	// FunctionBranches: blocks, loops, ifs, branches and bulk memory or
	// table instructions (each compiled to a loop, counted twice) of one
	// function (8,192).
	// The compiler's time grows with the square of these: 10,000 ifs in
	// one function took 14 s to compile, 20,000 over 20 s.
	FunctionBranches int64
	// Locals: locals one function declares (50,000).
	Locals int64
	// FunctionCompileCost: one function's locals squared times its
	// branches (1,000,000,000). The compiler's time and memory grow with
	// it: with each measure within its own limit, 5,000 locals across 8,000
	// branches in one function compiled for 108 s in 2.3 GB, 10,000 across
	// 200 for 16 s; at the former limit of 2,000,000,000, 500 locals
	// across 8,000 branches took 2.5-2.7 s of CPU, at this one 350 across
	// 8,160 take 1.5-1.8 s (BenchmarkCompileAtTheLimits). The example
	// plugins reach 290,000.
	FunctionCompileCost int64
	// Nesting: depth of blocks, loops and ifs in one function (2,500).
	Nesting int64
	// BrTableTargets: targets of one br_table (65,536).
	BrTableTargets int64
	// TableElements: the initial size of a table (1,000,000), allocated for
	// every instance.
	TableElements int64
	// Imports, Exports, Globals, Types, ElemSegments: entries of each
	// section (100,000 each); DataSegments (500,000: a Go module has tens
	// of thousands).
	Imports      int64
	Exports      int64
	Globals      int64
	Types        int64
	DataSegments int64
	ElemSegments int64
	// CustomBytes: the custom sections (names, debug information)
	// together (32 MiB).
	CustomBytes int64
}

// Defaults of ModuleLimits.
const (
	DefaultModuleBytes          = 64 << 20
	DefaultFunctions            = 100_000
	DefaultFunctionBytes        = 512 << 10
	DefaultFunctionInstructions = 100_000
	DefaultFunctionBranches     = 8_192
	DefaultLocals               = 50_000
	DefaultCompileCost          = 1_000_000_000
	DefaultDataSegments         = 500_000
	DefaultNesting              = 2_500
	DefaultBrTableTargets       = 65_536
	DefaultTableElements        = 1_000_000
	DefaultSectionEntries       = 100_000
	DefaultCustomBytes          = 32 << 20
	// MaxManifestBytes bounds plugin.json.
	MaxManifestBytes = 1 << 20
)

func limitOf(v, def int64) int64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		return int64(^uint64(0) >> 1)
	}
	return v
}

func (l ModuleLimits) withDefaults() ModuleLimits {
	return ModuleLimits{
		ModuleBytes:          limitOf(l.ModuleBytes, DefaultModuleBytes),
		Functions:            limitOf(l.Functions, DefaultFunctions),
		FunctionBytes:        limitOf(l.FunctionBytes, DefaultFunctionBytes),
		FunctionInstructions: limitOf(l.FunctionInstructions, DefaultFunctionInstructions),
		FunctionBranches:     limitOf(l.FunctionBranches, DefaultFunctionBranches),
		Locals:               limitOf(l.Locals, DefaultLocals),
		FunctionCompileCost:  limitOf(l.FunctionCompileCost, DefaultCompileCost),
		Nesting:              limitOf(l.Nesting, DefaultNesting),
		BrTableTargets:       limitOf(l.BrTableTargets, DefaultBrTableTargets),
		TableElements:        limitOf(l.TableElements, DefaultTableElements),
		Imports:              limitOf(l.Imports, DefaultSectionEntries),
		Exports:              limitOf(l.Exports, DefaultSectionEntries),
		Globals:              limitOf(l.Globals, DefaultSectionEntries),
		Types:                limitOf(l.Types, DefaultSectionEntries),
		DataSegments:         limitOf(l.DataSegments, DefaultDataSegments),
		ElemSegments:         limitOf(l.ElemSegments, DefaultSectionEntries),
		CustomBytes:          limitOf(l.CustomBytes, DefaultCustomBytes),
	}
}

// moduleStats is what admission measures of a module: for each section
// its entries, for the code the largest of each function's measures.
type moduleStats struct {
	bytes                                                    int64
	functions, imports, exports, globals, types, data, elems int64
	maxFunctionBytes, maxInstructions, maxLocals, maxNesting int64
	maxBrTable, maxTable, customBytes                        int64
	maxBranches                                              int64
	// maxCompileCost: the largest of one function's locals squared times
	// its branches.
	maxCompileCost int64
	// decoded is false when the code holds an instruction the decoder does
	// not know: the instruction, nesting and br_table measures then cover
	// only what came before it (the byte measures still hold).
	decoded bool
}

// admit refuses a module over a limit, naming the limit, its value and the
// module's. It does not validate the module (wazero does): it reads just
// enough to measure it, and a module it cannot read is left to wazero.
func admit(bin []byte, lim ModuleLimits) error { return admitStats(measure(bin), lim) }

// admitStats is admit of a module already measured.
func admitStats(s moduleStats, lim ModuleLimits) error {
	lim = lim.withDefaults()
	over := func(what string, have, max int64) error {
		if have > max {
			return fmt.Errorf("%s: %d, the limit is %d: %w", what, have, max, ErrModuleLimit)
		}
		return nil
	}
	return errors.Join(
		over("module size in bytes (moduleBytes)", s.bytes, lim.ModuleBytes),
		over("functions (functions)", s.functions, lim.Functions),
		over("largest function body in bytes (functionBytes)", s.maxFunctionBytes, lim.FunctionBytes),
		over("instructions of one function (functionInstructions)", s.maxInstructions, lim.FunctionInstructions),
		over("branches of one function (functionBranches)", s.maxBranches, lim.FunctionBranches),
		over("locals of one function (locals)", s.maxLocals, lim.Locals),
		over("locals squared times branches of one function (functionCompileCost)", s.maxCompileCost, lim.FunctionCompileCost),
		over("block nesting of one function (nesting)", s.maxNesting, lim.Nesting),
		over("targets of one br_table (brTableTargets)", s.maxBrTable, lim.BrTableTargets),
		over("initial elements of a table (tableElements)", s.maxTable, lim.TableElements),
		over("imports (imports)", s.imports, lim.Imports),
		over("exports (exports)", s.exports, lim.Exports),
		over("globals (globals)", s.globals, lim.Globals),
		over("types (types)", s.types, lim.Types),
		over("data segments (dataSegments)", s.data, lim.DataSegments),
		over("element segments (elemSegments)", s.elems, lim.ElemSegments),
		over("custom sections in bytes (customBytes)", s.customBytes, lim.CustomBytes),
	)
}

// measure reads a module's sections. It stops at the first thing it cannot
// read, keeping what it measured so far.
func measure(bin []byte) moduleStats {
	s := moduleStats{bytes: int64(len(bin)), decoded: true}
	if len(bin) < 8 {
		return s
	}
	r := &wreader{b: bin, pos: 8}
	count := func(body []byte) int64 {
		n, _ := (&wreader{b: body}).u32()
		return int64(n)
	}
	for r.pos < len(r.b) {
		id, err := r.byte()
		if err != nil {
			return s
		}
		n, err := r.u32()
		if err != nil {
			return s
		}
		body, err := r.take(int(n))
		if err != nil {
			return s
		}
		switch id {
		case secCustom:
			s.customBytes += int64(len(body))
		case 1:
			s.types = count(body)
		case secImport:
			s.imports = count(body)
			s.maxTable = max(s.maxTable, importedTableMin(body))
		case 3:
			s.functions = count(body)
		case 4:
			s.maxTable = max(s.maxTable, tableMin(body))
		case secGlobal:
			s.globals = count(body)
		case secExport:
			s.exports = count(body)
		case 9:
			s.elems = count(body)
		case 11:
			s.data = count(body)
		case secCode:
			measureCode(body, &s)
		}
	}
	return s
}

// readLimits reads a table's or memory's limits and returns the minimum.
func readLimits(r *wreader) (int64, bool) {
	flags, err := r.byte()
	if err != nil {
		return 0, false
	}
	var min int64
	var shift uint
	for i := 0; i < 10; i++ {
		c, err := r.byte()
		if err != nil {
			return 0, false
		}
		if shift < 63 {
			min |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			break
		}
	}
	if flags&1 != 0 {
		if r.leb(10) != nil {
			return 0, false
		}
	}
	return min, true
}

func tableMin(body []byte) int64 {
	r := &wreader{b: body}
	n, err := r.u32()
	if err != nil {
		return 0
	}
	var most int64
	for range n {
		t, err := r.byte()
		if err != nil {
			return most
		}
		if t == 0x40 { // a table with an initializer: 0x40 0x00 reftype limits expr
			if _, err := r.byte(); err != nil {
				return most
			}
			if _, err := r.byte(); err != nil {
				return most
			}
			min, _ := readLimits(r)
			return max(most, min) // the initializer is not read: stop here
		}
		min, ok := readLimits(r)
		if !ok {
			return most
		}
		most = max(most, min)
	}
	return most
}

func importedTableMin(body []byte) int64 {
	r := &wreader{b: body}
	n, err := r.u32()
	if err != nil {
		return 0
	}
	var most int64
	for range n {
		if _, err := r.name(); err != nil {
			return most
		}
		if _, err := r.name(); err != nil {
			return most
		}
		kind, err := r.byte()
		if err != nil {
			return most
		}
		switch kind {
		case 0x00:
			_, err = r.u32()
		case 0x01:
			if _, err = r.byte(); err == nil {
				min, ok := readLimits(r)
				if !ok {
					return most
				}
				most = max(most, min)
			}
		case 0x02:
			_, ok := readLimits(r)
			if !ok {
				return most
			}
		case 0x03:
			if err = r.valtype(); err == nil {
				_, err = r.byte()
			}
		case 0x04:
			if _, err = r.byte(); err == nil {
				_, err = r.u32()
			}
		default:
			return most
		}
		if err != nil {
			return most
		}
	}
	return most
}

// measureCode measures each function body: its size, locals, instructions,
// nesting and largest br_table.
func measureCode(body []byte, s *moduleStats) {
	r := &wreader{b: body}
	n, err := r.u32()
	if err != nil {
		return
	}
	s.functions = max(s.functions, int64(n))
	for range n {
		size, err := r.u32()
		if err != nil {
			return
		}
		code, err := r.take(int(size))
		if err != nil {
			s.maxFunctionBytes = max(s.maxFunctionBytes, int64(size))
			return
		}
		s.maxFunctionBytes = max(s.maxFunctionBytes, int64(len(code)))
		measureBody(code, s)
	}
}

func measureBody(code []byte, s *moduleStats) {
	r := &wreader{b: code}
	groups, err := r.u32()
	if err != nil {
		return
	}
	var locals int64
	for range groups {
		k, err := r.u32()
		if err != nil {
			return
		}
		locals += int64(k)
		if r.valtype() != nil {
			s.maxLocals = max(s.maxLocals, locals)
			return
		}
	}
	s.maxLocals = max(s.maxLocals, locals)
	if !s.decoded {
		return
	}
	var instrs, depth, branches int64
	defer func() {
		s.maxInstructions = max(s.maxInstructions, instrs)
		s.maxBranches = max(s.maxBranches, branches)
		s.maxCompileCost = max(s.maxCompileCost, compileCost(locals, branches))
	}()
	for r.pos < len(code) {
		op, _ := r.byte()
		instrs++
		switch op {
		case 0x02, 0x03, 0x04, 0x1f: // block, loop, if, try_table
			depth++
			s.maxNesting = max(s.maxNesting, depth)
			branches++
		case 0x0b:
			depth--
		case 0x05, 0x0c, 0x0d: // else, br, br_if
			branches++
		case 0x0e: // br_table
			save := r.pos
			if n, err := r.u32(); err == nil {
				s.maxBrTable = max(s.maxBrTable, int64(n)+1)
			}
			r.pos = save
			branches++
		case 0xfc: // bulk memory and table instructions: each a loop of its own
			save := r.pos
			if sub, err := r.u32(); err == nil && sub >= 8 && sub <= 17 {
				// a loop costs the compiler about what two blocks do: a
				// function of memory.fill took 1.6 times as long as one of
				// as many ifs (BenchmarkCompileAtTheLimits)
				branches += 2
			}
			r.pos = save
		}
		if err := skipImmediates(r, op, ^uint32(0)); err != nil {
			if errors.Is(err, errOpcode) {
				s.decoded = false
			}
			return
		}
	}
}

// readModule reads a plugin's .wasm: a regular file (not a FIFO, a device
// or a link to one), of at most limit bytes, read without blocking on a
// file that is not one.
func readModule(path string, limit int64) ([]byte, error) {
	return readRegular(path, limit, "module size in bytes (moduleBytes)")
}

// ReadRegular reads a file of a plugin folder the way the host does (a
// regular file of at most limit bytes, never blocking on a FIFO), for
// tools outside the host that handle plugin folders.
func ReadRegular(path string, limit int64) ([]byte, error) {
	return readRegular(path, limit, filepath.Base(path)+" size in bytes")
}

// readRegular reads a regular file of at most limit bytes. The file is
// opened without blocking (a FIFO would wait for a writer) and checked
// through the open descriptor, so a file swapped meanwhile is seen too.
func readRegular(path string, limit int64, what string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s: %d, the limit is %d: %w", what, fi.Size(), limit, ErrModuleLimit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit { // grew while read
		return nil, fmt.Errorf("%s: over %d, the limit: %w", what, limit, ErrModuleLimit)
	}
	return b, nil
}

// compileCost is locals² × branches, saturating instead of overflowing.
func compileCost(locals, branches int64) int64 {
	const most = int64(^uint64(0) >> 1)
	if locals <= 0 || branches <= 0 {
		return 0
	}
	sq := locals * locals
	if locals > 3_037_000_499 || sq > most/branches {
		return most
	}
	return sq * branches
}
