package plugins

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tetratelabs/wazero/api"
)

// A guest is stopped mid-call (cancel, call timeout, unload) by one of two
// means.
//
// wazero's WithCloseOnContextDone compiles, into every loop header, an exit
// from the guest's machine code to Go, where wazero checks whether the module
// was closed. The exit is what makes it correct: machine code cannot be
// preempted, so a guest that never left it would hold its thread through
// every stop-the-world of the garbage collector, and the whole host would
// stop with it. It is also costly for code that loops a lot: a Go guest's
// functions are loops around a jump table, and the scripted model ran 3 to 4
// times slower with it (docs/PERFORMANCE.md, "Stopping a guest").
//
// addInterrupt rewrites a module to do the same work less often. It adds two
// mutable i32 globals, a countdown (fuel) and a stop flag (interrupt), and at
// the entry of every function and the header of every loop it inserts
//
//	fuel = fuel - 1
//	if fuel <= 0 {
//	    memory.grow 0        ;; an exit to Go: the scheduler and the GC get the thread
//	    fuel = fuelPerExit
//	    if interrupt { unreachable }
//	}
//
// which costs a few instructions and, once per fuelPerExit loop iterations
// or calls, one exit. The host sets interrupt (and zeroes fuel) when the
// call's context ends; the guest traps at its next exit, and the instance
// is discarded. A start section becomes an export (startExport) the host
// calls once the interrupt is armed, so that no guest code runs before it
// can be stopped.
//
// The rewriter decodes every instruction (it must: the opcodes it looks for
// also occur as immediates). An opcode it does not know, a module without a
// memory, or anything else it cannot account for leaves the module as it is:
// the host then compiles it with WithCloseOnContextDone, slower and just as
// safe. A module whose code names a global index past its own (which the
// added globals would make valid, and writable by the guest) is refused.
const (
	interruptExport = "looopy:interrupt"
	fuelExport      = "looopy:fuel"
	startExport     = "looopy:start"
	reservedPrefix  = "looopy:"
	// fuelPerExit is how many loop iterations and calls a guest runs between
	// two exits to Go: a few to a few hundred microseconds of guest code, the
	// longest a stop-the-world waits for it and a stop request goes unseen.
	fuelPerExit = 4096
)

// errReservedExport is a module that exports a name the rewriter uses.
var errReservedExport = errors.New("exports a name starting with \"" + reservedPrefix + "\", which the host reserves")

// errForeignGlobal is a module whose code names a global it does not have.
var errForeignGlobal = errors.New("refers to a global index it does not define")

// interruptible is the result of addInterrupt.
type interruptible struct {
	bin      []byte // the rewritten module
	hasStart bool   // the module had a start section, now exported as startExport
}

// wasm section ids and their required order.
const (
	secCustom    = 0
	secImport    = 2
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secCode      = 10
	secDataCount = 12
	secTag       = 13
)

var sectionRank = map[byte]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 13: 6, 6: 7, 7: 8, 8: 9, 9: 10, 12: 11, 10: 12, 11: 13}

// extismImportModule marks a guest of the Extism ABI: it runs on the Extism
// SDK's own runtime and is never rewritten.
const extismImportModule = "extism:host/env"

// errSkip says the module is left as it is, for a reason that is not a fault.
var errSkip = errors.New("not rewritten")

func addInterrupt(bin []byte) (*interruptible, error) {
	if len(bin) < 8 || string(bin[:4]) != "\x00asm" || string(bin[4:8]) != "\x01\x00\x00\x00" {
		return nil, errors.New("not a WebAssembly 1.0 core module")
	}
	type section struct {
		id   byte
		body []byte
	}
	var secs []section
	r := &wreader{b: bin, pos: 8}
	last := 0
	for r.pos < len(r.b) {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		n, err := r.u32()
		if err != nil {
			return nil, err
		}
		body, err := r.take(int(n))
		if err != nil {
			return nil, err
		}
		if id != secCustom {
			rank, ok := sectionRank[id]
			if !ok {
				return nil, fmt.Errorf("unknown section id %d", id)
			}
			if rank <= last {
				return nil, fmt.Errorf("section id %d out of order", id)
			}
			last = rank
		}
		secs = append(secs, section{id, body})
	}

	// Count the globals the code may name, and see whose guest this is.
	globals, memories := uint32(0), uint32(0)
	for _, s := range secs {
		switch s.id {
		case secImport:
			n, mems, extism, err := importedGlobals(s.body)
			if err != nil {
				return nil, fmt.Errorf("import section: %w", err)
			}
			if extism {
				return nil, errSkip
			}
			globals += n
			memories += mems
		case secMemory:
			sr := &wreader{b: s.body}
			n, err := sr.u32()
			if err != nil {
				return nil, fmt.Errorf("memory section: %w", err)
			}
			memories += n
		case secGlobal:
			sr := &wreader{b: s.body}
			n, err := sr.u32()
			if err != nil {
				return nil, fmt.Errorf("global section: %w", err)
			}
			globals += n
		}
	}
	if memories == 0 {
		return nil, errors.New("no memory to exit through")
	}
	fuel, intr := globals, globals+1 // indexes of the added globals

	out := make([]byte, 0, len(bin)+len(bin)/16)
	out = append(out, bin[:8]...)
	emit := func(id byte, body []byte) {
		out = append(out, id)
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	newGlobals := append([]byte{0x7f, 0x01, 0x41}, appendS32(nil, fuelPerExit)...) // (mut i32) (i32.const fuelPerExit)
	newGlobals = append(newGlobals, 0x0b, 0x7f, 0x01, 0x41, 0x00, 0x0b)            // (mut i32) (i32.const 0)
	var startFn uint32
	hasStart := false
	for _, s := range secs {
		if s.id == secStart {
			sr := &wreader{b: s.body}
			f, err := sr.u32()
			if err != nil {
				return nil, fmt.Errorf("start section: %w", err)
			}
			startFn, hasStart = f, true
		}
	}
	ourExports := func() []byte {
		b := appendName(nil, interruptExport)
		b = append(b, 0x03)
		b = appendU32(b, intr)
		b = appendName(b, fuelExport)
		b = append(b, 0x03)
		b = appendU32(b, fuel)
		if hasStart {
			b = appendName(b, startExport)
			b = append(b, 0x00)
			b = appendU32(b, startFn)
		}
		return b
	}
	nOurs := uint32(2)
	if hasStart {
		nOurs = 3
	}
	doneGlobal, doneExport := false, false
	// fill emits the global and export sections a module without them
	// needs, before the first section that must follow them.
	fill := func(beforeRank int) {
		if !doneGlobal && beforeRank > sectionRank[secGlobal] {
			body := appendU32(nil, 2)
			emit(secGlobal, append(body, newGlobals...))
			doneGlobal = true
		}
		if !doneExport && beforeRank > sectionRank[secExport] {
			emit(secExport, append(appendU32(nil, nOurs), ourExports()...))
			doneExport = true
		}
	}
	for _, s := range secs {
		if s.id != secCustom {
			fill(sectionRank[s.id])
		}
		switch s.id {
		case secCustom:
			// DWARF names code offsets, which the rewrite moves.
			nr := &wreader{b: s.body}
			if name, err := nr.name(); err == nil && strings.HasPrefix(name, ".debug") {
				continue
			}
			emit(s.id, s.body)
		case secGlobal:
			sr := &wreader{b: s.body}
			n, _ := sr.u32()
			body := appendU32(nil, n+2)
			body = append(body, s.body[sr.pos:]...)
			emit(secGlobal, append(body, newGlobals...))
			doneGlobal = true
		case secExport:
			body, err := extendExports(s.body, nOurs, ourExports())
			if err != nil {
				return nil, err
			}
			emit(secExport, body)
			doneExport = true
		case secStart:
			// Called by the host as startExport, once the interrupt is armed.
		case secCode:
			body, err := instrumentCode(s.body, fuel, intr)
			if err != nil {
				return nil, fmt.Errorf("code section: %w", err)
			}
			emit(secCode, body)
		default:
			emit(s.id, s.body)
		}
	}
	fill(1 << 30)
	return &interruptible{bin: out, hasStart: hasStart}, nil
}

// importedGlobals counts the globals and memories a module imports, and
// says whether it imports from Extism's host module.
func importedGlobals(body []byte) (n, mems uint32, extism bool, err error) {
	r := &wreader{b: body}
	count, err := r.u32()
	if err != nil {
		return 0, 0, false, err
	}
	for range count {
		mod, err := r.name()
		if err != nil {
			return 0, 0, false, err
		}
		if mod == extismImportModule {
			extism = true
		}
		if _, err := r.name(); err != nil {
			return 0, 0, false, err
		}
		kind, err := r.byte()
		if err != nil {
			return 0, 0, false, err
		}
		switch kind {
		case 0x00: // function: type index
			_, err = r.u32()
		case 0x01: // table: reftype, limits
			var rt byte
			if rt, err = r.byte(); err == nil {
				if rt != 0x70 && rt != 0x6f {
					return 0, 0, false, fmt.Errorf("table of type 0x%02x", rt)
				}
				err = r.limits()
			}
		case 0x02: // memory: limits
			err = r.limits()
			mems++
		case 0x03: // global: valtype, mutability
			if err = r.valtype(); err == nil {
				_, err = r.byte()
			}
			n++
		case 0x04: // tag: attribute, type index
			if _, err = r.byte(); err == nil {
				_, err = r.u32()
			}
		default:
			return 0, 0, false, fmt.Errorf("import kind 0x%02x", kind)
		}
		if err != nil {
			return 0, 0, false, err
		}
	}
	return n, mems, extism, nil
}

// extendExports appends the host's exports, refusing a module that already
// uses a reserved name.
func extendExports(body []byte, nOurs uint32, ours []byte) ([]byte, error) {
	r := &wreader{b: body}
	n, err := r.u32()
	if err != nil {
		return nil, fmt.Errorf("export section: %w", err)
	}
	entries := r.pos
	for range n {
		name, err := r.name()
		if err != nil {
			return nil, fmt.Errorf("export section: %w", err)
		}
		if strings.HasPrefix(name, reservedPrefix) {
			return nil, fmt.Errorf("%w: %q", errReservedExport, name)
		}
		if _, err := r.byte(); err != nil {
			return nil, fmt.Errorf("export section: %w", err)
		}
		if _, err := r.u32(); err != nil {
			return nil, fmt.Errorf("export section: %w", err)
		}
	}
	if r.pos != len(body) {
		return nil, errors.New("export section: trailing bytes")
	}
	out := appendU32(nil, n+nOurs)
	out = append(out, body[entries:]...)
	return append(out, ours...), nil
}

// instrumentCode inserts the fuel check at the entry of every function body
// and after every loop's block type.
func instrumentCode(body []byte, fuel, intr uint32) ([]byte, error) {
	g := func(b []byte, op byte, idx uint32) []byte { return appendU32(append(b, op), idx) }
	var check []byte
	check = g(check, 0x23, fuel)                        // global.get fuel
	check = append(check, 0x41, 0x01, 0x6b)             // i32.const 1; i32.sub
	check = g(check, 0x24, fuel)                        // global.set fuel
	check = g(check, 0x23, fuel)                        // global.get fuel
	check = append(check, 0x41, 0x00, 0x4c)             // i32.const 0; i32.le_s
	check = append(check, 0x04, 0x40)                   // if
	check = append(check, 0x41, 0x00, 0x40, 0x00, 0x1a) // i32.const 0; memory.grow 0; drop
	check = append(append(check, 0x41), appendS32(nil, fuelPerExit)...)
	check = g(check, 0x24, fuel)                  // global.set fuel
	check = g(check, 0x23, intr)                  // global.get interrupt
	check = append(check, 0x04, 0x40, 0x00, 0x0b) // if unreachable end
	check = append(check, 0x0b)                   // end

	r := &wreader{b: body}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := appendU32(make([]byte, 0, len(body)+len(body)/8), n)
	var fn []byte
	for i := range n {
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		code, err := r.take(int(size))
		if err != nil {
			return nil, err
		}
		fn, err = instrumentBody(fn[:0], code, check, fuel)
		if err != nil {
			return nil, fmt.Errorf("function %d: %w", i, err)
		}
		out = appendU32(out, uint32(len(fn)))
		out = append(out, fn...)
	}
	if r.pos != len(body) {
		return nil, errors.New("trailing bytes")
	}
	return out, nil
}

func instrumentBody(out, code, check []byte, firstAdded uint32) ([]byte, error) {
	r := &wreader{b: code}
	groups, err := r.u32()
	if err != nil {
		return nil, err
	}
	for range groups {
		if _, err := r.u32(); err != nil {
			return nil, err
		}
		if err := r.valtype(); err != nil {
			return nil, err
		}
	}
	out = append(out, code[:r.pos]...)
	out = append(out, check...)
	for r.pos < len(code) {
		start := r.pos
		op, _ := r.byte()
		if err := skipImmediates(r, op, firstAdded); err != nil {
			return nil, fmt.Errorf("opcode 0x%02x at %d: %w", op, start, err)
		}
		out = append(out, code[start:r.pos]...)
		if op == 0x03 { // loop: the check runs on every iteration
			out = append(out, check...)
		}
	}
	if len(code) == 0 || code[len(code)-1] != 0x0b {
		return nil, errors.New("body does not end with end")
	}
	return out, nil
}

var errOpcode = errors.New("opcode the rewriter does not know")

// skipImmediates moves r past the immediates of op.
func skipImmediates(r *wreader, op byte, firstAdded uint32) error {
	switch {
	case op == 0x00, op == 0x01, op == 0x05, op == 0x0a, op == 0x0b, op == 0x0f, op == 0x1a, op == 0x1b,
		op >= 0x45 && op <= 0xc4, op == 0xd1:
		return nil
	case op == 0x02, op == 0x03, op == 0x04: // block, loop, if
		return r.blocktype()
	case op == 0x08, op == 0x0c, op == 0x0d, op == 0x10, op == 0x12, op == 0xd2,
		op >= 0x20 && op <= 0x22, op == 0x25, op == 0x26:
		_, err := r.u32()
		return err
	case op == 0x23, op == 0x24: // global.get, global.set
		g, err := r.u32()
		if err == nil && g >= firstAdded {
			return errForeignGlobal
		}
		return err
	case op == 0x11, op == 0x13: // call_indirect, return_call_indirect
		if _, err := r.u32(); err != nil {
			return err
		}
		_, err := r.u32()
		return err
	case op == 0x0e: // br_table
		n, err := r.u32()
		if err != nil {
			return err
		}
		for range n + 1 {
			if _, err := r.u32(); err != nil {
				return err
			}
		}
		return nil
	case op == 0x1c: // select with types
		n, err := r.u32()
		if err != nil {
			return err
		}
		for range n {
			if err := r.valtype(); err != nil {
				return err
			}
		}
		return nil
	case op == 0x1f: // try_table
		if err := r.blocktype(); err != nil {
			return err
		}
		n, err := r.u32()
		if err != nil {
			return err
		}
		for range n {
			kind, err := r.byte()
			if err != nil {
				return err
			}
			switch kind {
			case 0x00, 0x01: // catch, catch_ref: tag, label
				if _, err := r.u32(); err != nil {
					return err
				}
				fallthrough
			case 0x02, 0x03: // catch_all, catch_all_ref: label
				if _, err := r.u32(); err != nil {
					return err
				}
			default:
				return fmt.Errorf("catch kind 0x%02x", kind)
			}
		}
		return nil
	case op >= 0x28 && op <= 0x3e: // loads and stores
		return r.memarg()
	case op == 0x3f, op == 0x40: // memory.size, memory.grow
		_, err := r.u32()
		return err
	case op == 0x41:
		return r.leb(5)
	case op == 0x42:
		return r.leb(10)
	case op == 0x43:
		_, err := r.take(4)
		return err
	case op == 0x44:
		_, err := r.take(8)
		return err
	case op == 0xd0: // ref.null heaptype
		t, err := r.byte()
		if err == nil && t != 0x70 && t != 0x6f {
			return fmt.Errorf("ref.null of heap type 0x%02x", t)
		}
		return err
	case op == 0xfc:
		sub, err := r.u32()
		if err != nil {
			return err
		}
		imms := map[uint32]int{8: 2, 9: 1, 10: 2, 11: 1, 12: 2, 13: 1, 14: 2, 15: 1, 16: 1, 17: 1}
		k, ok := imms[sub]
		if sub > 17 {
			return errOpcode
		}
		if !ok {
			return nil // 0-7: saturating truncations
		}
		for range k {
			if _, err := r.u32(); err != nil {
				return err
			}
		}
		return nil
	case op == 0xfd: // SIMD
		sub, err := r.u32()
		if err != nil {
			return err
		}
		switch {
		case sub <= 11, sub == 92, sub == 93:
			return r.memarg()
		case sub == 12, sub == 13:
			_, err := r.take(16)
			return err
		case sub >= 21 && sub <= 34:
			_, err := r.byte()
			return err
		case sub >= 84 && sub <= 91:
			if err := r.memarg(); err != nil {
				return err
			}
			_, err := r.byte()
			return err
		case sub <= 0x113:
			return nil
		}
		return errOpcode
	case op == 0xfe: // threads
		sub, err := r.u32()
		if err != nil {
			return err
		}
		switch {
		case sub == 0x03:
			_, err := r.byte()
			return err
		case sub <= 0x02, sub >= 0x10 && sub <= 0x4e:
			return r.memarg()
		}
		return errOpcode
	}
	return errOpcode
}

// wreader reads the wasm binary encoding.
type wreader struct {
	b   []byte
	pos int
}

var errShort = errors.New("unexpected end")

func (r *wreader) byte() (byte, error) {
	if r.pos >= len(r.b) {
		return 0, errShort
	}
	c := r.b[r.pos]
	r.pos++
	return c, nil
}

func (r *wreader) take(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.pos {
		return nil, errShort
	}
	b := r.b[r.pos : r.pos+n]
	r.pos += n
	return b, nil
}

// leb skips a LEB128 number of at most max bytes.
func (r *wreader) leb(max int) error {
	for i := 0; i < max; i++ {
		c, err := r.byte()
		if err != nil {
			return err
		}
		if c&0x80 == 0 {
			return nil
		}
	}
	return errors.New("LEB128 number too long")
}

func (r *wreader) u32() (uint32, error) {
	var v uint32
	for i := 0; i < 5; i++ {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if i == 4 && c > 0x0f {
			return 0, errors.New("u32 out of range")
		}
		v |= uint32(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, errors.New("u32 too long")
}

func (r *wreader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	b, err := r.take(int(n))
	return string(b), err
}

// valtype accepts the number, vector and plain reference types.
func (r *wreader) valtype() error {
	t, err := r.byte()
	if err != nil {
		return err
	}
	switch t {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		return nil
	}
	return fmt.Errorf("value type 0x%02x", t)
}

// blocktype is empty, a value type, or a type index (s33).
func (r *wreader) blocktype() error {
	if r.pos >= len(r.b) {
		return errShort
	}
	switch c := r.b[r.pos]; {
	case c == 0x40:
		r.pos++
		return nil
	case c&0xc0 == 0x40: // a one-byte negative: a value type
		return r.valtype()
	}
	return r.leb(5)
}

func (r *wreader) memarg() error {
	align, err := r.u32()
	if err != nil {
		return err
	}
	if align&0x40 != 0 { // multi-memory: a memory index follows
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return r.leb(10)
}

func (r *wreader) limits() error {
	flags, err := r.byte()
	if err != nil {
		return err
	}
	if flags > 0x07 {
		return fmt.Errorf("limits flags 0x%02x", flags)
	}
	if err := r.leb(10); err != nil {
		return err
	}
	if flags&1 != 0 {
		return r.leb(10)
	}
	return nil
}

func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// appendS32 encodes a non-negative signed LEB128 number.
func appendS32(b []byte, v int32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 && c&0x40 == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendName(b []byte, s string) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}

// interruptibleCode returns the module to compile and, when it is the
// rewritten one, what the rewrite added; nil means the module is compiled as
// it is and wazero's checks stop it. why says what kept it from the rewrite.
func interruptibleCode(bin []byte) (code []byte, intr *interruptible, why error) {
	intr, err := addInterrupt(bin)
	switch {
	case err == nil:
		return intr.bin, intr, nil
	case errors.Is(err, errReservedExport), errors.Is(err, errForeignGlobal):
		return nil, nil, err
	}
	return bin, nil, err
}

// guestStop is an instance's pair of added globals.
type guestStop struct {
	interrupt, fuel api.MutableGlobal
	// stop is s.stopNow, made once per instance: arming it on every call
	// makes no closure.
	stop func()
}

func guestStopOf(mod api.Module) (*guestStop, bool) {
	i, ok1 := mod.ExportedGlobal(interruptExport).(api.MutableGlobal)
	f, ok2 := mod.ExportedGlobal(fuelExport).(api.MutableGlobal)
	s := &guestStop{interrupt: i, fuel: f}
	s.stop = s.stopNow
	return s, ok1 && ok2
}

// stopNow tells the guest to stop at its next check.
func (s *guestStop) stopNow() {
	s.interrupt.Set(1)
	s.fuel.Set(0) // the next check exits (unless the guest's own store lands after it)
}

// arm stops the guest when ctx ends, until the returned function is called;
// that function reports whether the call it guarded finished first (false:
// the guest may have been told to stop, and the instance must go).
func (s *guestStop) arm(ctx context.Context) (disarm func() bool) {
	if ctx.Done() == nil {
		return alwaysFirst
	}
	return context.AfterFunc(ctx, s.stop)
}

func alwaysFirst() bool { return true }
