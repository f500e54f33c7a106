package plugins

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

// hostFDs is how many descriptors this process holds open.
func hostFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

var heldRe = regexp.MustCompile(`^held (\d+)(, then: (.*))?$`)

// held parses the guest's answer to "hold": how many files it holds, and
// the error that stopped it ("" when none did).
func held(t *testing.T, out string) (int, string) {
	t.Helper()
	m := heldRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("hold answered %q", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n, m[3]
}

// A guest that opens files in its granted folder and never closes them is
// refused past its instance's budget (EMFILE, "too many open files") and
// past the host's, all instances together (ENFILE); the host's descriptors
// stay bounded; the files close when the guest closes them and when its
// instance goes (unload). Both ABIs.
// (An Extism guest gets EIO: the Extism SDK instantiates WASI itself, so its
// path_open cannot be wrapped to say which errno.)
func TestOpenFileBudget(t *testing.T) {
	for _, c := range []struct{ guest, emfile, enfile string }{
		{"escape", "Too many open files", "File table overflow"}, // Go's texts of EMFILE, ENFILE
		{"xescape", "I/O error", "I/O error"},
	} {
		t.Run(c.guest+"/instance", func(t *testing.T) {
			openFileBudget(t, c.guest, Budgets{OpenFilesPerInstance: 8}, 8, c.emfile)
		})
		t.Run(c.guest+"/host", func(t *testing.T) {
			openFileBudget(t, c.guest, Budgets{OpenFilesPerInstance: -1, OpenFilesTotal: 12}, 12, c.enfile)
		})
	}
}

func openFileBudget(t *testing.T, guest string, budgets Budgets, limit int, refusal string) {
	root, granted, _, _ := sandboxLayout(t)
	r := newRegistry(t, Config{Policy: Policy{PathRoots: []string{root}, Budgets: budgets}})
	pd := install(t, t.TempDir(), guest, guestWasm(t, guest), func(m map[string]any) {
		caps(m)["allowedPaths"] = []map[string]any{{"path": granted, "readOnly": true}}
		caps(m)["instances"] = 1
	})
	if _, err := r.Load(context.Background(), pd); err != nil {
		t.Fatal(err)
	}
	p, _ := r.Plugin(guest)
	file := filepath.Join(granted, "in.txt")
	do := func(op, n string) string {
		t.Helper()
		res, err := p.callTool(context.Background(), p.tools["fs"], call("fs", `{"op":"`+op+`","path":"`+file+`","text":"`+n+`"}`), &loop.ToolEnv{})
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		return res.Content
	}
	before := hostFDs(t)

	n, why := held(t, do("hold", "1000"))
	if n < 1 || n > limit || why == "" {
		t.Fatalf("the guest held %d files (budget %d), stopped by %q", n, limit, why)
	}
	if !strings.HasSuffix(why, ": "+refusal) {
		t.Errorf("past the budget the guest got %q, want %q", why, refusal)
	}
	if grown := hostFDs(t) - before; grown > limit {
		t.Errorf("the host's descriptors grew by %d, over the budget of %d", grown, limit)
	}
	// The instance keeps its files across calls, and gets no more.
	if n2, why2 := held(t, do("hold", "10")); n2 != n || why2 != why {
		t.Errorf("a second call held %d (%q), want %d (%q)", n2, why2, n, why)
	}
	// Closing frees the budget.
	if out := do("release", ""); out != "released "+strconv.Itoa(n) {
		t.Fatalf("release answered %q", out)
	}
	if n3, _ := held(t, do("hold", "1000")); n3 != n {
		t.Errorf("after closing its files the guest held %d, want %d again", n3, n)
	}
	// Unloading closes what the instance still holds.
	if err := r.Unload(context.Background(), guest); err != nil {
		t.Fatal(err)
	}
	if after := hostFDs(t); after > before {
		t.Errorf("after unloading the host holds %d descriptors, %d before the guest opened its files", after, before)
	}
}

// The host's budget never exceeds half the process's descriptor limit,
// whatever is configured (no limit included).
func TestOpenFilesTotalCappedByTheDescriptorLimit(t *testing.T) {
	for _, c := range []struct {
		configured int64
		fdLimit    uint64
		want       int64
	}{
		{1024, 1 << 20, 1024},
		{1024, 1024, 512},
		{budget(int64(-1), 0), 4096, 2048}, // "no limit"
		{1024, 1, 1},
	} {
		if got := capFilesLimit(c.configured, c.fdLimit); got != c.want {
			t.Errorf("capFilesLimit(%d, %d) = %d, want %d", c.configured, c.fdLimit, got, c.want)
		}
	}
}
