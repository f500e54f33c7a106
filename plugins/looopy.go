package plugins

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/looopy-go/looopy/pdk"
)

// instance is one instantiated guest. It serves one call at a time.
type instance interface {
	// call runs op on in. The output (without the status byte) stays valid
	// until the next call. A guest-reported error is a *pdk.Error and
	// leaves the instance healthy; any other error means it is broken.
	call(ctx context.Context, op pdk.Op, in []byte) ([]byte, error)
	state() *callState
	stderrTail() string
	close()
}

// driver makes instances of one compiled plugin version.
type driver interface {
	newInstance(ctx context.Context) (instance, error)
	abi() string
	close(ctx context.Context) error
}

const (
	wasiModule   = wasi_snapshot_preview1.ModuleName
	extismModule = "extism:host/env"
)

// abiOf tells which calling convention a compiled module speaks.
func abiOf(cm wazero.CompiledModule) (string, error) {
	for _, f := range cm.ImportedFunctions() {
		if mod, _, _ := f.Import(); mod == extismModule {
			return "extism", nil
		}
	}
	if _, ok := cm.ExportedFunctions()[pdk.ExportABIMarker]; ok {
		return "looopy", nil
	}
	return "", errors.New("exports neither looopy_abi_v1 nor uses the Extism ABI")
}

// checkImports refuses imports the host does not provide or the grant does
// not allow, naming each one.
func checkImports(cm wazero.CompiledModule, granted map[string]bool, extismABI bool) error {
	provided := hostFunctions()
	var errs []string
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		switch {
		case mod == wasiModule:
		case mod == extismModule && extismABI:
		case mod == pdk.HostModule:
			if extismABI {
				if _, ok := extismHostFuncs[name]; !ok {
					errs = append(errs, fmt.Sprintf("%s.%s, which the host does not provide to Extism-ABI plugins", mod, name))
				} else if !granted[name] {
					errs = append(errs, fmt.Sprintf("%s.%s, which was not granted (capabilities.hostFunctions and the host's policy)", mod, name))
				}
				continue
			}
			if _, ok := provided[name]; !ok {
				errs = append(errs, fmt.Sprintf("%s.%s, which the host does not provide", mod, name))
			} else if !granted[name] {
				errs = append(errs, fmt.Sprintf("%s.%s, which was not granted (capabilities.hostFunctions and the host's policy)", mod, name))
			}
		default:
			errs = append(errs, fmt.Sprintf("%s.%s, which the host does not provide", mod, name))
		}
	}
	for _, m := range cm.ImportedMemories() {
		mod, name, _ := m.Import()
		errs = append(errs, fmt.Sprintf("memory %s.%s, which the host does not provide", mod, name))
	}
	if len(errs) == 0 {
		return nil
	}
	sort.Strings(errs)
	return fmt.Errorf("imports %s", strings.Join(errs, "; "))
}

// looopyDriver runs a plugin of the Looopy ABI on its own wazero runtime
// (memory limit and close-on-context-done are per runtime), sharing the
// host's compilation cache.
type looopyDriver struct {
	p        *Plugin
	rt       wazero.Runtime
	compiled wazero.CompiledModule
	modCfg   wazero.ModuleConfig
	intr     *interruptible // nil: wazero's close-on-context-done stops the guest
}

func (d *looopyDriver) abi() string { return "looopy" }

func (d *looopyDriver) close(ctx context.Context) error { return d.rt.Close(ctx) }

func (d *looopyDriver) newInstance(ctx context.Context) (instance, error) {
	in := &looopyInstance{
		st:     &callState{p: d.p},
		stdout: newGuestOutput(d.p.log, slog.LevelInfo, "stdout"),
		stderr: newGuestOutput(d.p.log, slog.LevelWarn, "stderr"),
	}
	cfg := d.modCfg.WithStdout(in.stdout).WithStderr(in.stderr).WithName("").WithNanosleep(in.sleep)
	if fs, files := d.p.mountFiles(); fs != nil {
		cfg = cfg.WithFSConfig(fs)
		in.st.files = files
	}
	// _initialize (Go c-shared, WASI reactors) runs with the call state in
	// ctx so that a guest logging from init is heard.
	ictx := context.WithValue(ctx, callStateKey{}, in.st)
	mod, err := d.rt.InstantiateModule(ictx, d.compiled, cfg)
	if err != nil {
		if tail := in.stderr.lastLines(); tail != "" {
			return nil, fmt.Errorf("instantiate: %w (stderr: %s)", err, tail)
		}
		return nil, fmt.Errorf("instantiate: %w", err)
	}
	in.mod = mod
	in.mem = mod.Memory()
	in.alloc = mod.ExportedFunction(pdk.ExportAlloc)
	in.fn = mod.ExportedFunction(pdk.ExportCall)
	if in.mem == nil || in.alloc == nil || in.fn == nil {
		_ = mod.Close(ctx)
		return nil, errors.New("instantiate: module lost its exports")
	}
	if d.intr != nil {
		stop, ok := guestStopOf(mod)
		if !ok {
			_ = mod.Close(ctx)
			return nil, errors.New("instantiate: the interrupt globals are missing")
		}
		in.stop = stop
		if err := in.initialize(ictx, d.intr.hasStart); err != nil {
			_ = mod.Close(ctx)
			if tail := in.stderr.lastLines(); tail != "" {
				return nil, fmt.Errorf("instantiate: %w (stderr: %s)", err, tail)
			}
			return nil, fmt.Errorf("instantiate: %w", err)
		}
	}
	return in, nil
}

// checkLooopyExports checks the exports and their signatures.
func checkLooopyExports(cm wazero.CompiledModule) error {
	var errs []string
	fns := cm.ExportedFunctions()
	_, start := fns["_start"]
	if _, init := fns["_initialize"]; start && !init {
		// A WASI command, not a reactor: its exports trap until _start has
		// run main (for Go: runtime.notInitialized). The usual cause is a Go
		// plugin built without -buildmode=c-shared.
		return errors.New("the module is a WASI command (it exports _start, not _initialize), so its exports cannot be called: " +
			"build a Go plugin with -buildmode=c-shared (GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o plugin.wasm .; " +
			"`looopy plugin build` does), or a C plugin with -mexec-model=reactor")
	}
	want := map[string][2][]api.ValueType{
		pdk.ExportAlloc: {{i32}, {i32}},
		pdk.ExportCall:  {{i32, i32, i32}, {i64}},
	}
	for name, sig := range want {
		f, ok := fns[name]
		if !ok {
			errs = append(errs, "does not export "+name)
			continue
		}
		if !sameTypes(f.ParamTypes(), sig[0]) || !sameTypes(f.ResultTypes(), sig[1]) {
			errs = append(errs, fmt.Sprintf("export %s has signature %v -> %v, want %v -> %v",
				name, typeNames(f.ParamTypes()), typeNames(f.ResultTypes()), typeNames(sig[0]), typeNames(sig[1])))
		}
	}
	if _, ok := cm.ExportedMemories()["memory"]; !ok {
		errs = append(errs, "does not export its memory as \"memory\"")
	}
	if len(errs) == 0 {
		return nil
	}
	sort.Strings(errs)
	return errors.New(strings.Join(errs, "; "))
}

func sameTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func typeNames(ts []api.ValueType) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = api.ValueTypeName(t)
	}
	return out
}

type looopyInstance struct {
	mod    api.Module
	stop   *guestStop // stops the guest (nil: wazero's checks do)
	mem    api.Memory
	alloc  api.Function
	fn     api.Function
	st     *callState
	stdout *guestOutput
	stderr *guestOutput
	stack  [3]uint64
	sleeper
}

func (in *looopyInstance) state() *callState  { return in.st }
func (in *looopyInstance) stderrTail() string { return in.stderr.lastLines() }

func (in *looopyInstance) close() {
	_ = in.mod.Close(context.Background())
	in.stdout.endCall()
	in.stderr.endCall()
}

// initialize runs what a module runs before its first call, the former
// start section and then _initialize, with the interrupt armed.
func (in *looopyInstance) initialize(ctx context.Context, hasStart bool) (err error) {
	in.begin(ctx)
	defer in.end()
	disarm := in.stop.arm(ctx)
	defer func() {
		if !disarm() && err == nil {
			err = context.Cause(ctx)
		}
	}()
	for _, name := range []string{startExport, "_initialize"} {
		if name == startExport && !hasStart {
			continue
		}
		if f := in.mod.ExportedFunction(name); f != nil {
			if _, err := f.Call(ctx); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return nil
}

func (in *looopyInstance) call(ctx context.Context, op pdk.Op, input []byte) (out []byte, err error) {
	defer in.stdout.endCall()
	defer in.stderr.endCall()
	in.stderr.clearTail()
	in.begin(ctx)
	defer in.end()
	if in.stop != nil {
		disarm := in.stop.arm(ctx)
		defer func() {
			if !disarm() && (err == nil || isGuestError(err)) {
				// The guest finished (an answer, or an error of its own)
				// as its context ended: it may already be marked to stop,
				// so it must not serve again.
				out, err = nil, context.Cause(ctx)
			}
		}()
	}
	if c := guestClockOf(ctx); c != nil {
		defer c.start()()
	}
	ctx = context.WithValue(ctx, callStateKey{}, in.st)
	stack := in.stack[:]
	var ptr uint32
	if len(input) > 0 {
		stack[0] = api.EncodeI32(int32(len(input)))
		if err := in.alloc.CallWithStack(ctx, stack); err != nil {
			return nil, fmt.Errorf("looopy_alloc: %w", err)
		}
		ptr = api.DecodeU32(stack[0])
		if !in.mem.Write(ptr, input) {
			return nil, fmt.Errorf("looopy_alloc returned %d, out of memory bounds for %d bytes", ptr, len(input))
		}
	}
	stack[0], stack[1], stack[2] = api.EncodeI32(int32(op)), api.EncodeU32(ptr), api.EncodeI32(int32(len(input)))
	if err := in.fn.CallWithStack(ctx, stack); err != nil {
		return nil, err
	}
	outPtr, outLen := uint32(stack[0]>>32), uint32(stack[0])
	if outLen == 0 {
		return nil, errors.New("empty output")
	}
	limit := in.st.p.grant.OutputLimit
	if int64(outLen)-1 > limit {
		return nil, &limitError{size: int64(outLen) - 1, limit: limit}
	}
	out, ok := in.mem.Read(outPtr, outLen)
	if !ok {
		return nil, fmt.Errorf("output at %d (%d bytes) out of memory bounds", outPtr, outLen)
	}
	switch out[0] {
	case pdk.StatusOK:
		return out[1:], nil
	case pdk.StatusError:
		return nil, decodeGuestError(out[1:])
	}
	return nil, fmt.Errorf("output status byte %d, want 0 or 1", out[0])
}

// limitError is an output over the plugin's limit.
type limitError struct{ size, limit int64 }

func (e *limitError) Error() string {
	return fmt.Sprintf("output of %d bytes is over the plugin's limit of %d", e.size, e.limit)
}

func (e *limitError) Is(target error) bool { return target == ErrOutputLimit }

// sleeper is an instance's WASI sleep: it ends early when the call is
// cancelled, so a guest sleeping between streamed chunks stops at once.
// begin, end and sleep all run on the goroutine of the call.
type sleeper struct{ done <-chan struct{} }

func (s *sleeper) begin(ctx context.Context) { s.done = ctx.Done() }
func (s *sleeper) end()                      { s.done = nil }

func (s *sleeper) sleep(ns int64) {
	if ns <= 0 {
		return
	}
	t := time.NewTimer(time.Duration(ns))
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.done:
	}
}

// wasiInstantiate instantiates WASI in rt, its path_open answering EMFILE
// or ENFILE when the instance's open files are at their budget (wazero's
// file system interface knows neither errno: the refusal reaches wazero as
// EIO, and the wrapper puts the right one back).
func wasiInstantiate(ctx context.Context, rt wazero.Runtime) (api.Closer, error) {
	// The stock path_open, taken from a compiled copy of the module.
	probe := rt.NewHostModuleBuilder(wasi_snapshot_preview1.ModuleName)
	wasi_snapshot_preview1.NewFunctionExporter().ExportFunctions(probe)
	cm, err := probe.Compile(ctx)
	if err != nil {
		return nil, err
	}
	def := cm.ExportedFunctions()["path_open"]
	var orig api.GoModuleFunction
	if def != nil {
		orig, _ = def.GoFunction().(api.GoModuleFunction)
	}
	params, results, names := def.ParamTypes(), def.ResultTypes(), def.ParamNames()
	_ = cm.Close(ctx)
	if orig == nil {
		return nil, errors.New("wasi: path_open is not a Go function")
	}
	b := rt.NewHostModuleBuilder(wasi_snapshot_preview1.ModuleName)
	wasi_snapshot_preview1.NewFunctionExporter().ExportFunctions(b)
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
		files := filesOf(ctx)
		if files != nil {
			files.refused.Store(0)
		}
		orig.Call(ctx, mod, stack)
		if files != nil && stack[0] == wasiEIO {
			if errno := files.refused.Swap(0); errno != 0 {
				stack[0] = uint64(errno)
			}
		}
	}), params, results).WithParameterNames(names...).Export("path_open")
	return b.Instantiate(ctx)
}

// filesOf is the open-file count of the instance whose call runs in ctx.
func filesOf(ctx context.Context) *openFiles {
	if st := stateOf(ctx); st != nil {
		return st.files
	}
	return nil
}

// memoryPages is the size of the instance's linear memory in 64 KiB pages.
func (in *looopyInstance) memoryPages() int64 {
	if in.mem == nil {
		return 0
	}
	return int64(in.mem.Size() / 65536)
}
