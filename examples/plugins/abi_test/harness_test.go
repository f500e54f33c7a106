package abitest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/looopy-go/looopy/pdk"
)

// fixture is one example plugin folder under examples/plugins.
type fixture struct {
	dir  string // folder and plugin name
	lang string // benchmark label
	abi  string // "looopy" or "extism"
}

var fixtures = []fixture{
	{dir: "c-textstats", lang: "c", abi: "looopy"},
	{dir: "rust-hash", lang: "rust", abi: "looopy"},
	{dir: "as-slugify", lang: "assemblyscript", abi: "looopy"},
	{dir: "wat-add", lang: "wat", abi: "looopy"},
	{dir: "as-extism-reverse", lang: "assemblyscript-extism", abi: "extism"},
}

// manifest is the part of plugin.json these examples use, decoded strictly.
type manifest struct {
	Name         string `json:"name"`
	Version      string `json:"version"`
	Kind         string `json:"kind"`
	Wasm         string `json:"wasm"`
	SHA256       string `json:"sha256"`
	Description  string `json:"description"`
	Capabilities struct {
		MemoryPages   uint32   `json:"memoryPages"`
		HostFunctions []string `json:"hostFunctions"`
	} `json:"capabilities"`
}

// load reads a fixture's manifest and .wasm, checking the digest.
func load(tb testing.TB, f fixture) (*manifest, []byte) {
	tb.Helper()
	dir := filepath.Join("..", f.dir)
	raw, err := os.ReadFile(filepath.Join(dir, "plugin.json"))
	if err != nil {
		tb.Fatalf("%s: %v", f.dir, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var m manifest
	if err := dec.Decode(&m); err != nil {
		tb.Fatalf("%s/plugin.json: %v", f.dir, err)
	}
	wasm, err := os.ReadFile(filepath.Join(dir, m.Wasm))
	if err != nil {
		tb.Fatalf("%s: %v", f.dir, err)
	}
	sum := sha256.Sum256(wasm)
	if got := hex.EncodeToString(sum[:]); got != m.SHA256 {
		tb.Fatalf("%s/plugin.json: sha256 %s, but %s has %s (rebuild with scripts/build-plugins.sh)", f.dir, m.SHA256, m.Wasm, got)
	}
	return &m, wasm
}

// logSink records the lines guests send to looopy.log.
type logSink struct {
	mu    sync.Mutex
	lines []logLine
}

type logLine struct {
	level int32
	text  string
}

func (s *logSink) add(level int32, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, logLine{level, text})
}

func (s *logSink) all() []logLine {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]logLine(nil), s.lines...)
}

// newRuntime makes a runtime the way the host does: guests can be
// interrupted and their memory is capped at the manifest's limit. It
// provides module looopy with the log host function.
func newRuntime(ctx context.Context, pages uint32, cache wazero.CompilationCache, logs *logSink) (wazero.Runtime, error) {
	cfg := wazero.NewRuntimeConfig().WithCloseOnContextDone(true).WithMemoryLimitPages(pages)
	if cache != nil {
		cfg = cfg.WithCompilationCache(cache)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	_, err := rt.NewHostModuleBuilder(pdk.HostModule).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
			level, ptr, n := api.DecodeI32(stack[0]), api.DecodeU32(stack[1]), api.DecodeU32(stack[2])
			b, ok := mod.Memory().Read(ptr, n)
			if !ok {
				panic(fmt.Errorf("looopy.log: %d bytes at %d are outside the guest's memory", n, ptr))
			}
			if logs != nil {
				logs.add(level, string(b))
			}
		}), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}, nil).
		Export(pdk.HostLog).
		Instantiate(ctx)
	if err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("host module: %w", err)
	}
	return rt, nil
}

// guest is one instance of a Looopy-ABI plugin.
type guest struct {
	mod         api.Module
	alloc, call api.Function
}

// instantiate makes an instance of cm and runs its _initialize, if any.
func instantiate(ctx context.Context, rt wazero.Runtime, cm wazero.CompiledModule) (*guest, error) {
	mod, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		return nil, fmt.Errorf("instantiate: %w", err)
	}
	if init := mod.ExportedFunction("_initialize"); init != nil {
		if _, err := init.Call(ctx); err != nil {
			_ = mod.Close(ctx)
			return nil, fmt.Errorf("_initialize: %w", err)
		}
	}
	g := &guest{
		mod:   mod,
		alloc: mod.ExportedFunction(pdk.ExportAlloc),
		call:  mod.ExportedFunction(pdk.ExportCall),
	}
	if g.alloc == nil || g.call == nil || mod.Memory() == nil {
		_ = mod.Close(ctx)
		return nil, errors.New("instantiate: missing looopy_alloc, looopy_call or memory")
	}
	return g, nil
}

// do runs op on input and returns the status byte and the rest of the
// output (a copy).
func (g *guest) do(ctx context.Context, op pdk.Op, input []byte) (byte, []byte, error) {
	res, err := g.alloc.Call(ctx, uint64(len(input)))
	if err != nil {
		return 0, nil, fmt.Errorf("looopy_alloc: %w", err)
	}
	ptr := api.DecodeU32(res[0])
	if ptr == 0 && len(input) > 0 {
		return 0, nil, errors.New("looopy_alloc returned 0")
	}
	if !g.mod.Memory().Write(ptr, input) {
		return 0, nil, fmt.Errorf("looopy_alloc returned %d, outside the memory", ptr)
	}
	res, err = g.call.Call(ctx, uint64(uint32(op)), uint64(ptr), uint64(len(input)))
	if err != nil {
		return 0, nil, fmt.Errorf("looopy_call: %w", err)
	}
	outPtr, outLen := uint32(res[0]>>32), uint32(res[0])
	if outLen == 0 {
		return 0, nil, errors.New("looopy_call: empty output")
	}
	out, ok := g.mod.Memory().Read(outPtr, outLen)
	if !ok {
		return 0, nil, fmt.Errorf("looopy_call: output %d+%d is outside the memory", outPtr, outLen)
	}
	return out[0], bytes.Clone(out[1:]), nil
}

// pages is the size of the instance's linear memory in 64 KiB pages.
func (g *guest) pages() uint32 { return g.mod.Memory().Size() / 65536 }

// plugin answers describe and tool calls, whichever ABI the module speaks.
type plugin interface {
	// invoke runs op: the status byte and the JSON.
	invoke(ctx context.Context, op pdk.Op, input []byte) (byte, []byte, error)
	pages() uint32
	close(ctx context.Context) error
}

type looopyPlugin struct {
	rt wazero.Runtime
	g  *guest
}

func (p *looopyPlugin) invoke(ctx context.Context, op pdk.Op, in []byte) (byte, []byte, error) {
	return p.g.do(ctx, op, in)
}
func (p *looopyPlugin) pages() uint32                   { return p.g.pages() }
func (p *looopyPlugin) close(ctx context.Context) error { return p.rt.Close(ctx) }

// extismPlugin runs an Extism-ABI module: describe and call_tool exports,
// output without a status byte, errors through Extism's error mechanism.
type extismPlugin struct {
	cp *extism.CompiledPlugin
	p  *extism.Plugin
}

var extismExports = map[pdk.Op]string{pdk.OpDescribe: "describe", pdk.OpToolCall: "call_tool"}

func (p *extismPlugin) invoke(ctx context.Context, op pdk.Op, in []byte) (byte, []byte, error) {
	name, ok := extismExports[op]
	if !ok || !p.p.FunctionExists(name) {
		e, _ := json.Marshal(pdk.Error{Code: pdk.CodeUnsupported, Message: fmt.Sprintf("no export for %s", op)})
		return pdk.StatusError, e, nil
	}
	rc, out, err := p.p.CallWithContext(ctx, name, in)
	if rc != 0 {
		if err == nil {
			return 0, nil, fmt.Errorf("%s returned %d without an error", name, rc)
		}
		// A guest error is the pdk.Error JSON it set; anything else failed.
		var pe pdk.Error
		if jerr := json.Unmarshal([]byte(err.Error()), &pe); jerr != nil || pe.Message == "" {
			return 0, nil, fmt.Errorf("%s: %w", name, err)
		}
		return pdk.StatusError, []byte(err.Error()), nil
	}
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", name, err)
	}
	return pdk.StatusOK, out, nil
}
func (p *extismPlugin) pages() uint32 { return p.p.Memory().Size() / 65536 }
func (p *extismPlugin) close(ctx context.Context) error {
	return errors.Join(p.p.Close(ctx), p.cp.Close(ctx))
}

// open compiles and instantiates a fixture.
func open(ctx context.Context, f fixture, m *manifest, wasm []byte, cache wazero.CompilationCache, logs *logSink) (plugin, error) {
	pages := m.Capabilities.MemoryPages
	if pages == 0 {
		pages = 256
	}
	if f.abi == "extism" {
		rc := wazero.NewRuntimeConfig().WithCloseOnContextDone(true)
		if cache != nil {
			rc = rc.WithCompilationCache(cache)
		}
		// looopy.log the Extism way: (level i64, offset of an Extism
		// memory block i64).
		logFn := extism.NewHostFunctionWithStack(pdk.HostLog, func(ctx context.Context, p *extism.CurrentPlugin, stack []uint64) {
			msg, err := p.ReadString(stack[1])
			if err != nil {
				panic(fmt.Errorf("looopy.log: %w", err))
			}
			if logs != nil {
				logs.add(int32(stack[0]), msg)
			}
		}, []extism.ValueType{extism.ValueTypeI64, extism.ValueTypeI64}, nil)
		logFn.SetNamespace(pdk.HostModule)
		cp, err := extism.NewCompiledPlugin(ctx, extism.Manifest{
			Wasm:   []extism.Wasm{extism.WasmData{Data: wasm, Name: f.dir}},
			Memory: &extism.ManifestMemory{MaxPages: pages},
		}, extism.PluginConfig{RuntimeConfig: rc}, []extism.HostFunction{logFn})
		if err != nil {
			return nil, fmt.Errorf("extism compile: %w", err)
		}
		p, err := cp.Instance(ctx, extism.PluginInstanceConfig{})
		if err != nil {
			_ = cp.Close(ctx)
			return nil, fmt.Errorf("extism instance: %w", err)
		}
		return &extismPlugin{cp: cp, p: p}, nil
	}
	rt, err := newRuntime(ctx, pages, cache, logs)
	if err != nil {
		return nil, err
	}
	cm, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("compile: %w", err)
	}
	g, err := instantiate(ctx, rt, cm)
	if err != nil {
		_ = rt.Close(ctx)
		return nil, err
	}
	return &looopyPlugin{rt: rt, g: g}, nil
}

// start loads and opens a fixture for a test, closed at its end.
func start(t *testing.T, f fixture) (plugin, *manifest, *logSink) {
	t.Helper()
	m, wasm := load(t, f)
	logs := &logSink{}
	ctx := context.Background()
	p, err := open(ctx, f, m, wasm, nil, logs)
	if err != nil {
		t.Fatalf("%s: %v", f.dir, err)
	}
	t.Cleanup(func() {
		if err := p.close(ctx); err != nil {
			t.Errorf("%s: close: %v", f.dir, err)
		}
	})
	return p, m, logs
}

func fixtureNamed(t *testing.T, dir string) fixture {
	t.Helper()
	for _, f := range fixtures {
		if f.dir == dir {
			return f
		}
	}
	t.Fatalf("no fixture %s", dir)
	return fixture{}
}

// request encodes a tool call of name with arguments args (a JSON object).
func request(name, args string) []byte {
	b, err := json.Marshal(pdk.ToolCallRequest{
		Call:      pdk.ToolCall{ID: "call-1", Name: name, Arguments: json.RawMessage(args)},
		ContextID: "ctx-1",
		TaskID:    "task-1",
	})
	if err != nil {
		panic(err)
	}
	return b
}

// callTool runs a tool and decodes its result strictly; a status other than
// ok fails the test.
func callTool(t *testing.T, p plugin, name, args string) pdk.ToolResult {
	t.Helper()
	status, out, err := p.invoke(context.Background(), pdk.OpToolCall, request(name, args))
	if err != nil {
		t.Fatalf("%s(%.200s): %v", name, args, err)
	}
	if status != pdk.StatusOK {
		t.Fatalf("%s(%.200s): status %d: %.200s", name, args, status, out)
	}
	var r pdk.ToolResult
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("%s(%.200s): result %.200s: %v", name, args, out, err)
	}
	return r
}

// callError runs op and expects a pdk.Error with code.
func callError(t *testing.T, p plugin, op pdk.Op, input []byte, code string) pdk.Error {
	t.Helper()
	status, out, err := p.invoke(context.Background(), op, input)
	if err != nil {
		t.Fatalf("%s %s: %v", op, input, err)
	}
	if status != pdk.StatusError {
		t.Fatalf("%s %s: status %d (%s), want an error with code %s", op, input, status, out, code)
	}
	var e pdk.Error
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("%s %s: error %s: %v", op, input, out, err)
	}
	if e.Code != code || e.Message == "" {
		t.Fatalf("%s %s: error %+v, want code %s and a message", op, input, e, code)
	}
	return e
}
