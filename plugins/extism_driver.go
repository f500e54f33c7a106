package plugins

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/loop/jsonlimit"
	"github.com/looopy-go/looopy/pdk"
)

// Exports of an Extism-ABI plugin, by operation.
var extismExports = map[pdk.Op]string{
	pdk.OpDescribe: "describe",
	pdk.OpToolCall: "call_tool",
	pdk.OpGenerate: "generate",
	pdk.OpRun:      "run",
}

func extismOpFor(k pdk.Kind) pdk.Op {
	switch k {
	case pdk.KindModel:
		return pdk.OpGenerate
	case pdk.KindAgent:
		return pdk.OpRun
	}
	return pdk.OpToolCall
}

// checkExtismExports checks that the plugin exports describe and the
// function of its kind.
func checkExtismExports(cm wazero.CompiledModule, kind pdk.Kind) error {
	fns := cm.ExportedFunctions()
	var missing []string
	for _, name := range []string{extismExports[pdk.OpDescribe], extismExports[extismOpFor(kind)]} {
		if _, ok := fns[name]; !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("an Extism-ABI %s plugin must export %s", kind, strings.Join(missing, " and "))
	}
	return nil
}

// The host functions Extism-ABI plugins may import from module "looopy",
// with Extism's offset-based memory:
//
//	log(level i64, msg i64)           level as in pdk.LogLevel, msg an Extism memory offset
//	emit(kind i64, data i64) -> i64   as the Looopy ABI's emit; 0, or -1 when cancelled
//	kv_get(key i64) -> i64            offset of the value, 0 when absent
//	kv_set(key i64, value i64)
//	kv_delete(key i64)
//	credential(req i64) -> i64        offset of {"credential": {...}} or {"error": {"code","message"}}
var extismHostFuncs = map[string]func() extism.HostFunction{
	pdk.HostLog: func() extism.HostFunction {
		return extism.NewHostFunctionWithStack(pdk.HostLog, func(ctx context.Context, cp *extism.CurrentPlugin, stack []uint64) {
			s := stateOf(ctx)
			msg, err := cp.ReadString(stack[1])
			if s == nil || err != nil {
				return
			}
			level := slog.LevelInfo
			switch pdk.LogLevel(int64(stack[0])) {
			case pdk.LevelDebug:
				level = slog.LevelDebug
			case pdk.LevelWarn:
				level = slog.LevelWarn
			case pdk.LevelError:
				level = slog.LevelError
			}
			msg = lastLine(msg, 16<<10)
			if !s.spendLog(ctx, len(msg)) {
				return
			}
			s.p.log.Log(ctx, level, msg)
		}, []extism.ValueType{extism.ValueTypeI64, extism.ValueTypeI64}, nil)
	},
	pdk.HostEmit: func() extism.HostFunction {
		return extism.NewHostFunctionWithStack(pdk.HostEmit, func(ctx context.Context, cp *extism.CurrentPlugin, stack []uint64) {
			s := stateOf(ctx)
			data, err := cp.ReadBytes(stack[1])
			if s == nil || err != nil || ctx.Err() != nil || jsonlimit.Check(data, jsonlimit.MaxDepth) != nil {
				stack[0] = extism.EncodeI64(-1)
				return
			}
			kind := pdk.EmitKind(int64(stack[0]))
			if s.spendEvent(len(data), kind != pdk.EmitDelta) != nil {
				stack[0] = extism.EncodeI64(-1)
				return
			}
			switch kind {
			case pdk.EmitDelta:
				var d pdk.Delta
				if json.Unmarshal(data, &d) == nil && s.onDelta != nil {
					s.onDelta(d)
				}
			case pdk.EmitProgress:
				var pr pdk.ToolProgress
				if json.Unmarshal(data, &pr) == nil && s.env != nil && s.env.Emit != nil {
					s.env.Emit(&loop.ToolProgress{Header: s.header(loop.KindToolProgress), ToolCallID: s.toolCallID,
						Progress: pr.Progress, Message: pr.Message, Metadata: pr.Metadata})
				}
			case pdk.EmitEvent:
				if ev, err := s.decodeEvent(data); err == nil && s.env != nil && s.env.Emit != nil {
					s.env.Emit(ev)
				}
			}
			stack[0] = 0
		}, []extism.ValueType{extism.ValueTypeI64, extism.ValueTypeI64}, []extism.ValueType{extism.ValueTypeI64})
	},
	pdk.HostKVGet: func() extism.HostFunction {
		return extism.NewHostFunctionWithStack(pdk.HostKVGet, func(ctx context.Context, cp *extism.CurrentPlugin, stack []uint64) {
			s := stateOf(ctx)
			key, err := cp.ReadString(stack[0])
			stack[0] = 0
			if s == nil || err != nil || s.p.kv == nil || len(key) > maxKVKey {
				return
			}
			v, err := s.p.kv.KVGet(ctx, s.p.Name(), key)
			if err != nil {
				if !errors.Is(err, loop.ErrNotFound) {
					s.p.log.Warn("kv get", "key", key, "err", err)
				}
				return
			}
			off, err := cp.WriteBytes(v)
			if err == nil {
				stack[0] = off
			}
		}, []extism.ValueType{extism.ValueTypeI64}, []extism.ValueType{extism.ValueTypeI64})
	},
	pdk.HostKVSet: func() extism.HostFunction {
		return extism.NewHostFunctionWithStack(pdk.HostKVSet, func(ctx context.Context, cp *extism.CurrentPlugin, stack []uint64) {
			s := stateOf(ctx)
			key, err1 := cp.ReadString(stack[0])
			val, err2 := cp.ReadBytes(stack[1])
			if s == nil || err1 != nil || err2 != nil || s.p.kv == nil || len(key) > maxKVKey || len(val) > maxKVValue {
				return
			}
			if err := s.kvSet(ctx, key, val); err != nil {
				s.p.log.Warn("kv set", "key", key, "err", err)
			}
		}, []extism.ValueType{extism.ValueTypeI64, extism.ValueTypeI64}, nil)
	},
	pdk.HostCredential: func() extism.HostFunction {
		return extism.NewHostFunctionWithStack(pdk.HostCredential, func(ctx context.Context, cp *extism.CurrentPlugin, stack []uint64) {
			s := stateOf(ctx)
			data, err := cp.ReadBytes(stack[0])
			stack[0] = 0
			if s == nil {
				return
			}
			var out []byte
			if err != nil || len(data) > maxHostPayload {
				out = extismError(pdk.Error{Code: pdk.CodeBadInput, Message: "credential: request unreadable or too large"})
			} else {
				out = extismCredential(ctx, s, data)
			}
			if off, err := cp.WriteBytes(out); err == nil {
				stack[0] = off
			}
		}, []extism.ValueType{extism.ValueTypeI64}, []extism.ValueType{extism.ValueTypeI64})
	},
	pdk.HostKVDelete: func() extism.HostFunction {
		return extism.NewHostFunctionWithStack(pdk.HostKVDelete, func(ctx context.Context, cp *extism.CurrentPlugin, stack []uint64) {
			s := stateOf(ctx)
			key, err := cp.ReadString(stack[0])
			if s == nil || err != nil || s.p.kv == nil {
				return
			}
			if err := s.kvDelete(ctx, key); err != nil && !errors.Is(err, loop.ErrNotFound) {
				s.p.log.Warn("kv delete", "key", key, "err", err)
			}
		}, []extism.ValueType{extism.ValueTypeI64}, nil)
	},
}

// extismCredential answers the credential host function of an Extism-ABI
// plugin: the same rules as the Looopy ABI's (credential), its answer in
// one envelope, {"credential": ...} or {"error": ...}, since Extism's
// offset-returning functions have no error channel of their own.
func extismCredential(ctx context.Context, s *callState, data []byte) []byte {
	out, err := credential(ctx, s, data)
	var re registerError
	switch {
	case errors.As(err, &re):
		var pe pdk.Error
		if json.Unmarshal(re, &pe) != nil {
			pe = pdk.Error{Code: pdk.CodeInternal, Message: string(re)}
		}
		return extismError(pe)
	case err != nil:
		return extismError(pdk.Error{Code: pdk.CodeBadInput, Message: "credential: " + err.Error()})
	}
	b, _ := json.Marshal(map[string]json.RawMessage{"credential": out})
	return b
}

func extismError(e pdk.Error) []byte {
	b, _ := json.Marshal(map[string]pdk.Error{"error": e})
	return b
}

// extismDriver runs a plugin built with an Extism PDK through the Extism Go
// SDK: compiled once, one extism.Plugin per pooled instance. Extism's own
// HTTP function stays closed (no allowed hosts): it follows redirects
// without checking them again.
type extismDriver struct {
	p        *Plugin
	compiled *extism.CompiledPlugin
}

func newExtismDriver(ctx context.Context, p *Plugin, bin []byte, cache wazero.CompilationCache) (*extismDriver, error) {
	g := p.grant
	man := extism.Manifest{
		Wasm:   []extism.Wasm{extism.WasmData{Data: bin, Name: "main"}},
		Memory: &extism.ManifestMemory{MaxPages: g.MemoryPages, MaxVarBytes: maxKVValue, MaxHttpResponseBytes: 0},
		Config: map[string]string{},
	}
	for k, v := range p.man.Config {
		if s, ok := v.(string); ok {
			man.Config[k] = s
		} else {
			b, _ := json.Marshal(v)
			man.Config[k] = string(b)
		}
	}
	for name, v := range g.Secrets {
		man.Config["secret:"+name] = v
	}
	// Folders are not given to Extism (its mounts follow links out of
	// them): each instance's module config mounts the confined roots.
	var funcs []extism.HostFunction
	for name, mk := range extismHostFuncs {
		if g.HostFunctions[name] {
			f := mk()
			f.SetNamespace(pdk.HostModule)
			funcs = append(funcs, f)
		}
	}
	cfg := extism.PluginConfig{
		EnableWasi: true,
		RuntimeConfig: wazero.NewRuntimeConfig().
			WithCloseOnContextDone(true).
			WithMemoryLimitPages(g.MemoryPages).
			WithCompilationCache(cache),
	}
	cp, err := extism.NewCompiledPlugin(ctx, man, cfg, funcs)
	if err != nil {
		return nil, fmt.Errorf("extism compile: %w", err)
	}
	return &extismDriver{p: p, compiled: cp}, nil
}

func (d *extismDriver) abi() string { return "extism" }

func (d *extismDriver) close(ctx context.Context) error { return d.compiled.Close(ctx) }

func (d *extismDriver) newInstance(ctx context.Context) (instance, error) {
	in := &extismInstance{
		st:     &callState{p: d.p},
		stdout: newGuestOutput(d.p.log, slog.LevelInfo, "stdout"),
		stderr: newGuestOutput(d.p.log, slog.LevelWarn, "stderr"),
	}
	mc := wazero.NewModuleConfig().
		WithSysWalltime().WithSysNanotime().WithNanosleep(in.sleep).
		WithRandSource(rand.Reader).
		WithStdout(in.stdout).WithStderr(in.stderr)
	if fs, files := d.p.mountFiles(); fs != nil {
		mc = mc.WithFSConfig(fs)
		in.st.files = files
	}
	plug, err := d.compiled.Instance(ctx, extism.PluginInstanceConfig{ModuleConfig: mc})
	if err != nil {
		return nil, fmt.Errorf("instantiate: %w", err)
	}
	plug.SetLogger(func(level extism.LogLevel, msg string) {
		d.p.log.Debug(msg, "source", "extism")
	})
	in.plug = plug
	return in, nil
}

type extismInstance struct {
	plug   *extism.Plugin
	st     *callState
	stdout *guestOutput
	stderr *guestOutput
	sleeper
}

func (in *extismInstance) state() *callState  { return in.st }
func (in *extismInstance) stderrTail() string { return in.stderr.lastLines() }

func (in *extismInstance) close() {
	_ = in.plug.Close(context.Background())
	in.stdout.endCall()
	in.stderr.endCall()
}

func (in *extismInstance) call(ctx context.Context, op pdk.Op, input []byte) ([]byte, error) {
	defer in.stdout.endCall()
	defer in.stderr.endCall()
	in.stderr.clearTail()
	name, ok := extismExports[op]
	if !ok || !in.plug.FunctionExists(name) {
		return nil, &pdk.Error{Code: pdk.CodeUnsupported, Message: "this plugin does not answer " + op.String()}
	}
	in.begin(ctx)
	defer in.end()
	ctx = context.WithValue(ctx, callStateKey{}, in.st)
	_, out, err := in.plug.CallWithContext(ctx, name, input)
	if err != nil {
		if ctx.Err() == nil {
			// The SDK returns the guest's own error as errors.New of the
			// message it set, with no value to match: the comparison
			// tells it from a trap (RATIONALE.md).
			if msg := in.plug.GetErrorWithContext(ctx); msg != "" && msg == err.Error() {
				return nil, decodeGuestError([]byte(msg))
			}
		}
		return nil, err
	}
	if limit := in.st.p.grant.OutputLimit; int64(len(out)) > limit {
		return nil, &limitError{size: int64(len(out)), limit: limit}
	}
	return out, nil
}

// memoryPages is the size of the instance's linear memory in 64 KiB pages.
func (in *extismInstance) memoryPages() int64 {
	mem := in.plug.Memory()
	if mem == nil {
		return 0
	}
	return int64(mem.Size() / 65536)
}
