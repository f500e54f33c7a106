package plugins

import (
	"crypto/sha256"
	"errors"
	"os"
	"testing"
)

// A module's facts are worked out once and shared by later loads of the
// same bytes, and a later load under tighter limits is still refused:
// admission runs against each load's own limits.
func TestModuleFactsAreSharedAndAdmittedEachTime(t *testing.T) {
	bin, err := os.ReadFile(guestWasm(t, "echo"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(bin)
	f1, err := moduleFactsOf(sum, bin, ModuleLimits{})
	if err != nil {
		t.Fatal(err)
	}
	if f1.intr == nil || len(f1.code) <= len(bin) {
		t.Fatalf("the echo guest was not rewritten (why: %v)", f1.why)
	}
	f2, err := moduleFactsOf(sum, append([]byte(nil), bin...), ModuleLimits{})
	if err != nil || f2 != f1 {
		t.Fatalf("a second load of the same bytes worked them out again (%p, %p, %v)", f1, f2, err)
	}
	if _, err := moduleFactsOf(sum, bin, ModuleLimits{Functions: 1}); !errors.Is(err, ErrModuleLimit) {
		t.Fatalf("a known module under a limit of one function: %v, want ErrModuleLimit", err)
	}
	// A module refused is not kept: its bytes are not rewritten.
	other := append(append([]byte(nil), bin...), 0, 5, 1, 'x', 'y', 'y', 'y') // a custom section more
	osum := sha256.Sum256(other)
	if _, err := moduleFactsOf(osum, other, ModuleLimits{Functions: 1}); !errors.Is(err, ErrModuleLimit) {
		t.Fatalf("a new module under a limit of one function: %v", err)
	}
	moduleFactsMemo.Lock()
	_, kept := moduleFactsMemo.byHash[osum]
	moduleFactsMemo.Unlock()
	if kept {
		t.Fatal("the facts of a refused module were kept")
	}
}

// The memory the facts of loaded modules hold is a setting
// (plugins.moduleFactsBytes, SetModuleFactsBytes) and never grows past it:
// loading more distinct modules than fit drops the least recently used,
// a smaller bound drops what no longer fits at once, and a negative one
// keeps nothing.
func TestModuleFactsStayWithinTheirBound(t *testing.T) {
	bin, err := os.ReadFile(guestWasm(t, "echo"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { SetModuleFactsBytes(0) })
	// Distinct modules: the echo guest with a custom section more each.
	variant := func(i int) ([32]byte, []byte) {
		b := append(append([]byte(nil), bin...), 0, 3, 1, 'v', byte(i))
		return sha256.Sum256(b), b
	}
	sum, b := variant(0)
	f, err := moduleFactsOf(sum, b, ModuleLimits{})
	if err != nil {
		t.Fatal(err)
	}
	one := int64(cap(f.code))
	bound := 4*one + one/2 // four fit, not five
	SetModuleFactsBytes(bound)
	for i := range 12 {
		sum, b := variant(i)
		if _, err := moduleFactsOf(sum, b, ModuleLimits{}); err != nil {
			t.Fatal(err)
		}
		if held, max := ModuleFactsBytes(); held > bound || max != bound {
			t.Fatalf("after %d modules the facts hold %d bytes, bound %d (want at most %d)", i+1, held, max, bound)
		}
	}
	if held, _ := ModuleFactsBytes(); held < 4*one {
		t.Fatalf("the facts hold %d bytes, want the last four modules' %d", held, 4*one)
	}
	// The most recent are the ones kept.
	last, lb := variant(11)
	kept, _ := moduleFactsOf(last, lb, ModuleLimits{})
	again, _ := moduleFactsOf(last, lb, ModuleLimits{})
	if kept != again {
		t.Fatal("the most recent module's facts were not kept")
	}
	// A smaller bound drops at once what no longer fits.
	SetModuleFactsBytes(2 * one)
	if held, _ := ModuleFactsBytes(); held > 2*one {
		t.Fatalf("after lowering the bound to %d the facts hold %d", 2*one, held)
	}
	// Negative: nothing is kept.
	SetModuleFactsBytes(-1)
	if held, _ := ModuleFactsBytes(); held != 0 {
		t.Fatalf("with nothing to keep the facts hold %d", held)
	}
	f1, _ := moduleFactsOf(last, lb, ModuleLimits{})
	f2, _ := moduleFactsOf(last, lb, ModuleLimits{})
	if f1 == f2 {
		t.Fatal("with nothing to keep a module's facts were shared")
	}
	if held, _ := ModuleFactsBytes(); held != 0 {
		t.Fatalf("with nothing to keep the facts hold %d after loads", held)
	}
}
