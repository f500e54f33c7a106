package plugins

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countCompiles counts the compiles started and the most running at once.
func countCompiles(t *testing.T) (started *atomic.Int64, most func() int64) {
	t.Helper()
	var mu sync.Mutex
	var running, peak int64
	started = &atomic.Int64{}
	compileHook = func() {
		started.Add(1)
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
	}
	compileEndHook = func() {
		mu.Lock()
		running--
		mu.Unlock()
	}
	t.Cleanup(func() { compileHook, compileEndHook = nil, nil })
	return started, func() int64 {
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}

// A module of one function with 60,000 memory.fill in a loop (660 KB; it
// compiled for minutes) is refused before it is compiled, naming the
// limit; the admin list shows it failed with that error.
func TestAdmissionRefusesABigCompile(t *testing.T) {
	started, _ := countCompiles(t)
	r := newRegistry(t, Config{CacheDir: t.TempDir()})
	src := installBytes(t, t.TempDir(), "bigcompile", wasmModule(2, [][]byte{fillLoopBody(60000)}))
	done := make(chan error, 1)
	go func() { _, err := r.Load(context.Background(), src); done <- err }()
	err := hangGuard(t, done, "loading a module that compiles for minutes")
	if !errors.Is(err, ErrModuleLimit) || !strings.Contains(err.Error(), "refused before compiling") ||
		!strings.Contains(err.Error(), "(functionBranches)") || !strings.Contains(err.Error(), "(functionInstructions)") {
		t.Fatalf("load = %v", err)
	}
	if n := started.Load(); n != 0 {
		t.Fatalf("%d compiles started for a refused module", n)
	}
	list := r.List()
	if len(list) != 1 || list[0].State != "failed" || !strings.Contains(list[0].LastError, "functionBranches") {
		t.Fatalf("list = %+v", list)
	}
}

// Each admission limit on a module built for it: deep nesting, a huge
// br_table, a table of 10M elements, many locals; each refused naming its
// limit, none compiled.
func TestAdmissionRefusesEachShape(t *testing.T) {
	started, _ := countCompiles(t)
	nest := []byte{0}
	for range 5000 {
		nest = append(nest, 0x02, 0x40)
	}
	for range 5000 {
		nest = append(nest, 0x0b)
	}
	nest = append(nest, 0x0b)
	brt := []byte{1, 1, 0x7f, 0x02, 0x40, 0x20, 0, 0x0e}
	brt = appendU32(brt, 100000)
	for range 100001 {
		brt = append(brt, 0)
	}
	brt = append(brt, 0x0b, 0x0b)
	locals := []byte{1}
	locals = appendU32(locals, 1_000_000)
	locals = append(locals, 0x7e, 0x0b)
	// many locals kept across many branches in one function: each within
	// its limit, locals² × branches not (it compiled for minutes)
	lb := appendU32([]byte{1}, 2000)
	lb = append(lb, 0x7f)
	for i := range 4000 {
		x, y, z := uint32(i%2000), uint32((i*7+1)%2000), uint32((i*13+2)%2000)
		lb = append(lb, 0x02, 0x40, 0x20, 0, 0x0d, 0, 0x20)
		lb = append(appendU32(append(appendU32(lb, x), 0x20), y), 0x6a, 0x21)
		lb = append(appendU32(lb, z), 0x0b)
	}
	lb = append(lb, 0x0b)
	table := wasmModule(1, [][]byte{{0, 0x0b}})
	// a table section (id 4) after the function section: 10M funcref
	table = append(table[:8+6+4], append(wasmSection(4, appendU32([]byte{1, 0x70, 0}, 10_000_000)), table[8+6+4:]...)...)
	cases := []struct {
		name, limit string
		wasm        []byte
	}{
		{"nest", "(nesting)", wasmModule(1, [][]byte{nest})},
		{"brtable", "(brTableTargets)", wasmModule(1, [][]byte{brt})},
		{"locals", "(locals)", wasmModule(1, [][]byte{locals})},
		{"locals-branches", "(functionCompileCost)", wasmModule(1, [][]byte{lb})},
		// within the former compile cost limit (2e9), over the present one:
		// 500 locals across 6,000 branches compiled for about 2 s of CPU
		{"locals-branches-1.5e9", "(functionCompileCost)", wasmModule(1, [][]byte{localsAcrossBlocks(500, 3000)})},
		// 4,100 memory.fill count 8,200 branches: each a loop, costing the
		// compiler about two blocks (8,190 took 4 s of CPU)
		{"fills", "(functionBranches)", wasmModule(2, [][]byte{fillLoopBody(4100)})},
		{"table", "(tableElements)", table},
	}
	r := newRegistry(t, Config{CacheDir: t.TempDir()})
	dir := t.TempDir()
	for _, c := range cases {
		_, err := r.Load(context.Background(), installBytes(t, dir, c.name, c.wasm))
		if !errors.Is(err, ErrModuleLimit) || !strings.Contains(err.Error(), c.limit) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if n := started.Load(); n != 0 {
		t.Fatalf("%d compiles started for refused modules", n)
	}
}

// A module within the admission limits that takes minutes to compile (a
// thousand functions, each long) is refused at the compile timeout, and the
// compiler stops soon after (at the end of the function it is on) instead
// of running on for minutes. Loading it again right away does not stack a
// second compile on the first: one compile of a plugin runs at a time.
func TestCompileTimeoutStopsTheCompiler(t *testing.T) {
	started, most := countCompiles(t)
	r := newRegistry(t, Config{CacheDir: t.TempDir(), Policy: Policy{CompileTimeout: time.Second}})
	src := installBytes(t, t.TempDir(), "slow", slowModule(300, 4000))
	for i := range 2 {
		done := make(chan error, 1)
		go func() { _, err := r.Load(context.Background(), src); done <- err }()
		err := hangGuard(t, done, "loading a module that compiles for minutes")
		if !errors.Is(err, ErrCompileTimeout) || !strings.Contains(err.Error(), "plugins.compileTimeout") {
			t.Fatalf("load %d = %v", i, err)
		}
	}
	if n := started.Load(); n != 2 {
		t.Fatalf("%d compiles started, want 2", n)
	}
	if m := most(); m != 1 {
		t.Fatalf("%d compiles of one plugin ran at once", m)
	}
	// The whole module compiles for minutes (a single function for a
	// fraction of a second): the compiler has stopped long before.
	waitFor(t, "the abandoned compile to stop", func() bool { return r.env.compiles.count() == 0 })
	if l := r.List(); len(l) != 1 || l[0].State != "failed" || !strings.Contains(l[0].LastError, "compileTimeout") {
		t.Fatalf("list = %+v", l)
	}
}

// Compiles of different plugins share Policy.MaxCompiles places: with one,
// a second plugin's compile waits for the first to stop, and then loads.
func TestCompilesAreBoundedInAll(t *testing.T) {
	_, most := countCompiles(t)
	r := newRegistry(t, Config{CacheDir: t.TempDir(), Policy: Policy{CompileTimeout: 5 * time.Second, MaxCompiles: 1}})
	dir := t.TempDir()
	slow := installBytes(t, dir, "slow", slowModule(300, 4000))
	good := install(t, dir, "wecho", fixtureWasm(t, "wecho"), nil)
	slowDone, goodDone := make(chan error, 1), make(chan error, 1)
	go func() { _, err := r.Load(context.Background(), slow); slowDone <- err }()
	go func() { _, err := r.Load(context.Background(), good); goodDone <- err }()
	if err := hangGuard(t, slowDone, "the slow load"); !errors.Is(err, ErrCompileTimeout) {
		t.Fatalf("slow = %v", err)
	}
	if err := hangGuard(t, goodDone, "a load sharing the one compile place"); err != nil {
		t.Fatalf("wecho = %v", err)
	}
	if m := most(); m != 1 {
		t.Fatalf("%d compiles ran at once with MaxCompiles 1", m)
	}
	if res := mustCall(t, r, "wecho", `{"text":"x"}`); res.Content != "echo" {
		t.Fatalf("wecho = %+v", res)
	}
}

// An Extism-ABI plugin is compiled twice: once by the host (for the ABI and
// import checks) and once by the Extism SDK, a cache read when the cache
// holds it and a full compile when it does not. The SDK's compile is held to
// the same timeout and slot: here it is made to hang (the compile hook
// blocks on its second call), and the load fails at plugins.compileTimeout
// instead of waiting for it.
//
// Nothing here depends on how fast the machine compiles: each compile reads
// the timeout when it starts, so the host's compile runs under a timeout as
// long as the hang guard, and its hook, which runs before the SDK's compile
// starts, shortens the timeout the SDK's compile then reads. Were the SDK's
// compile not bounded, the load would wait for the hung compile and the
// hang guard would fail the test.
func TestExtismSDKCompileIsBounded(t *testing.T) {
	dir := t.TempDir()
	src := install(t, dir, "xecho", guestWasm(t, "xecho"), func(m map[string]any) {
		caps(m)["hostFunctions"] = []string{"log"}
	})
	// A first load fills the shared cache: the host's compile below is a
	// cache read, well within the hang guard.
	warm := newRegistry(t, Config{})
	if _, err := warm.Load(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	const sdkTimeout = 200 * time.Millisecond
	r := newRegistry(t, Config{Policy: Policy{CompileTimeout: 10 * time.Minute}})
	var calls atomic.Int64
	unblock, sdkStarted := make(chan struct{}), make(chan struct{})
	compileHook = func() {
		switch calls.Add(1) {
		case 1: // the host's compile: written before the SDK's compile reads it
			r.env.policy.CompileTimeout = sdkTimeout
		case 2: // the SDK's compile hangs
			close(sdkStarted)
			<-unblock
		}
	}
	t.Cleanup(func() { compileHook = nil })
	defer close(unblock)
	done := make(chan error, 1)
	go func() { _, err := r.Load(context.Background(), src); done <- err }()
	err := hangGuard(t, done, "loading an Extism plugin whose SDK compile hangs")
	if !errors.Is(err, ErrCompileTimeout) || !strings.Contains(err.Error(), "within "+sdkTimeout.String()) {
		t.Fatalf("load = %v, want ErrCompileTimeout after %s", err, sdkTimeout)
	}
	// The timeout may end the load before the hung compile's goroutine has
	// reached its hook; it does reach it.
	hangGuard(t, sdkStarted, "the SDK's compile to start")
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d compiles started, want 2 (the host's and the SDK's)", n)
	}
}
