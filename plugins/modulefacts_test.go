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
